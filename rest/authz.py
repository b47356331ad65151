"""Authorization: roles per connector-name pattern, enforced from one route table.

Every route of the app has exactly one entry in :data:`ACCESS_RULES`, keyed by its method and path
template, naming the :class:`Permission` it needs and, for connector routes, the path parameter
that holds the connector's name. :class:`AccessControlMiddleware` matches each request against the
app's routes the way the router will, looks the rule up and refuses before any route code runs.
A route without a rule is refused for everyone, so a new route cannot ship open by accident (the
role test in ``tests/unit/rest/test_authorization.py`` walks ``app.routes`` and fails first).

Roles (``rest.auth.roles``, format in :mod:`sluice.rest.settings`):

``viewer``
    every ``GET`` of the connectors its pattern matches;
``operator``
    viewer, plus pause, resume, stop, restart (connector and tasks), offsets ``PATCH``/``DELETE``
    and topics reset;
``admin``
    everything: create, config ``PUT``/``PATCH``, delete, and the worker-wide writes.

A grant may also scope what an admin's connectors reach (``principal:admin:pattern;topics=a|b;groups=c``):
the caller's :class:`~sluice.worker.config.connector_scope.ConnectorScope` (:meth:`AccessPolicy.connector_scope`)
is stamped into every config it writes (:func:`stamp_scope`) and enforced by the worker. A grant on
a narrower pattern than ``*`` reaches no topic unless ``topics=`` names some (``topics=*`` for all);
only an admin on ``*`` without ``topics=`` is unrestricted (every topic, and client overrides that
point at another cluster).

Routes without a connector in the path (plugins, loggers, backfills, ``/``, the OpenAPI document
and its viewers) need the role granted on pattern ``*``, except :attr:`Permission.LIST` routes
(``GET /``, ``/connectors``, ``/connector-plugins``, ``/auth/whoami``), which any grant opens; ``GET /connectors``
then lists only the connectors the caller may view. ``POST /connectors`` carries the name in its
body, so it needs ``admin`` on ``*``; an admin of a narrower pattern creates with
``PUT /connectors/{name}/config``.
"""

from __future__ import annotations

import enum
import fnmatch
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.connectors.api import ConfigError
from sluice.rest.audit import ANONYMOUS, AuditTrail, is_audited
from sluice.rest.authn import Authenticator
from sluice.rest.errors import error_response
from sluice.worker.config.connector_scope import SCOPE_KEYS, ConnectorScope

log = logging.getLogger(__name__)

ROLES_KEY = "rest.auth.roles"
#: The pattern that makes a grant worker-wide.
EVERY_CONNECTOR = "*"
#: Internal requests between workers carry the cluster's HMAC signature here (verified by the herder).
SIGNATURE_HEADER = "x-connect-authorization"


class Permission(enum.Enum):
    """What a route needs; see the module docstring for which role grants which."""

    OPEN = "open"  #: no credentials at all: load balancers probe /health; the console shell (/ui) holds no data
    LIST = "list"  #: any grant of any role
    VIEW = "view"
    OPERATE = "operate"
    ADMIN = "admin"
    INTERNAL = "internal"  #: worker-to-worker, signed; no user role opens it


class Role(enum.Enum):
    """A role of ``rest.auth.roles``; each includes the permissions of the ones before it."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def permissions(self) -> frozenset[Permission]:
        return _ROLE_PERMISSIONS[self]


_ROLE_PERMISSIONS = {
    Role.VIEWER: frozenset({Permission.VIEW}),
    Role.OPERATOR: frozenset({Permission.VIEW, Permission.OPERATE}),
    Role.ADMIN: frozenset({Permission.VIEW, Permission.OPERATE, Permission.ADMIN}),
}
#: The least role that holds a permission, for the 403 message.
_LEAST_ROLE = {Permission.VIEW: Role.VIEWER, Permission.OPERATE: Role.OPERATOR, Permission.ADMIN: Role.ADMIN}


@dataclass(frozen=True)
class Rule:
    """What one route needs: a permission, on the connector named by path parameter ``connector``
    (``None``: a worker-wide route)."""

    permission: Permission
    connector: str | None = None


def _on_connector(permission: Permission) -> Rule:
    return Rule(permission, connector="name")


_VIEW = Rule(Permission.VIEW)
_ADMIN = Rule(Permission.ADMIN)
_LIST = Rule(Permission.LIST)

#: (method, route path template) → rule, for every route the app serves. ``HEAD`` uses the ``GET`` rule.
ACCESS_RULES: Mapping[tuple[str, str], Rule] = {
    ("GET", "/health"): Rule(Permission.OPEN),
    ("GET", "/metrics"): _VIEW,
    ("GET", "/cluster"): _VIEW,
    ("GET", "/cluster/metrics"): _VIEW,
    ("GET", "/"): _LIST,
    ("GET", "/openapi.json"): _VIEW,
    ("GET", "/docs"): _VIEW,
    ("GET", "/docs/oauth2-redirect"): _VIEW,
    ("GET", "/redoc"): _VIEW,
    # the web console's static files (no data: every figure it shows comes from the routes here)
    ("GET", "/ui"): Rule(Permission.OPEN),
    ("GET", "/ui/"): Rule(Permission.OPEN),
    ("GET", "/ui/{asset}"): Rule(Permission.OPEN),
    ("GET", "/auth/whoami"): _LIST,
    # connectors
    ("GET", "/connectors"): _LIST,
    ("POST", "/connectors"): _ADMIN,
    ("GET", "/connectors/{name}"): _on_connector(Permission.VIEW),
    ("DELETE", "/connectors/{name}"): _on_connector(Permission.ADMIN),
    ("GET", "/connectors/{name}/config"): _on_connector(Permission.VIEW),
    ("GET", "/connectors/{name}/metrics/history"): _on_connector(Permission.VIEW),
    ("PUT", "/connectors/{name}/config"): _on_connector(Permission.ADMIN),
    ("PATCH", "/connectors/{name}/config"): _on_connector(Permission.ADMIN),
    ("GET", "/connectors/{name}/status"): _on_connector(Permission.VIEW),
    ("GET", "/connectors/{name}/tasks"): _on_connector(Permission.VIEW),
    ("POST", "/connectors/{name}/tasks"): Rule(Permission.INTERNAL, connector="name"),
    ("GET", "/connectors/{name}/tasks/{task}/status"): _on_connector(Permission.VIEW),
    ("POST", "/connectors/{name}/tasks/{task}/restart"): _on_connector(Permission.OPERATE),
    ("POST", "/connectors/{name}/restart"): _on_connector(Permission.OPERATE),
    ("PUT", "/connectors/{name}/pause"): _on_connector(Permission.OPERATE),
    ("PUT", "/connectors/{name}/resume"): _on_connector(Permission.OPERATE),
    ("PUT", "/connectors/{name}/stop"): _on_connector(Permission.OPERATE),
    ("PUT", "/connectors/{name}/fence"): _on_connector(Permission.OPERATE),
    ("GET", "/connectors/{name}/topics"): _on_connector(Permission.VIEW),
    ("PUT", "/connectors/{name}/topics/reset"): _on_connector(Permission.OPERATE),
    ("GET", "/connectors/{name}/offsets"): _on_connector(Permission.VIEW),
    ("PATCH", "/connectors/{name}/offsets"): _on_connector(Permission.OPERATE),
    ("DELETE", "/connectors/{name}/offsets"): _on_connector(Permission.OPERATE),
    # dead letter queues: records are data, hence the operator role for reading them too
    ("GET", "/connectors/{name}/dlq"): _on_connector(Permission.OPERATE),
    ("POST", "/connectors/{name}/dlq/redrive"): _on_connector(Permission.OPERATE),
    ("POST", "/connectors/{name}/tap"): _on_connector(Permission.OPERATE),
    # plugins
    ("GET", "/connector-plugins"): _LIST,
    ("GET", "/connector-plugins/{plugin}/config"): _VIEW,
    ("PUT", "/connector-plugins/{plugin}/config/validate"): _ADMIN,
    # loggers ({name} is a logger here, not a connector)
    ("GET", "/admin/loggers"): _VIEW,
    ("GET", "/admin/loggers/{name}"): _VIEW,
    ("PUT", "/admin/loggers/{name}"): _ADMIN,
    # backfills
    ("GET", "/backfills"): _VIEW,
    ("POST", "/backfills"): _ADMIN,
    ("GET", "/backfills/kinds"): _VIEW,
    ("POST", "/backfills/validate"): _ADMIN,
    ("GET", "/backfills/{job_id}"): _VIEW,
    ("DELETE", "/backfills/{job_id}"): _ADMIN,
    ("POST", "/backfills/{job_id}/run"): _ADMIN,
}


@dataclass(frozen=True)
class Grant:
    """One ``principal:role[:pattern][;topics=…][;groups=…]`` entry of ``rest.auth.roles``.

    ``topics`` (``None``: not given) are globs of the topics the principal's connectors may read and
    write; ``groups`` globs of consumer groups they may join besides their own ``connect-<name>``.
    """

    principal: str
    role: Role
    pattern: str = EVERY_CONNECTOR
    topics: tuple[str, ...] | None = None
    groups: tuple[str, ...] = ()

    @property
    def unrestricted(self) -> bool:
        """An admin on every connector without a topic list: the cluster admin."""
        return self.role is Role.ADMIN and self.pattern == EVERY_CONNECTOR and self.topics is None

    @property
    def granted_topics(self) -> tuple[str, ...]:
        """The topic globs of this grant: the listed ones, or every topic on ``*`` and none on a narrower pattern."""
        if self.topics is not None:
            return self.topics
        return ("*",) if self.pattern == EVERY_CONNECTOR else ()

    def allows(self, permission: Permission, connector: str | None) -> bool:
        if permission not in self.role.permissions:
            return False
        if connector is None:  # worker-wide: only a grant on every connector reaches it
            return self.pattern == EVERY_CONNECTOR
        return fnmatch.fnmatchcase(connector, self.pattern)


_SCOPE_ATTRIBUTES = ("topics", "groups")


def _parse_scope(entry: str, attributes: list[str]) -> dict[str, tuple[str, ...]]:
    """``topics=a|b`` and ``groups=c`` of one grant."""
    found: dict[str, tuple[str, ...]] = {}
    for attribute in attributes:
        name, sep, value = attribute.partition("=")
        name = name.strip().lower()
        if not sep or name not in _SCOPE_ATTRIBUTES or name in found:
            raise ConfigError(
                f"{ROLES_KEY}: {attribute.strip()!r} in {entry!r} is not a scope; after the pattern a grant takes "
                "';topics=glob|glob' and ';groups=glob|glob', each at most once",
                key=ROLES_KEY,
            )
        globs = tuple(g.strip() for g in value.split("|") if g.strip())
        if name == "topics" and not globs:
            raise ConfigError(
                f"{ROLES_KEY}: topics= in {entry!r} lists no topic (use topics=* for every topic)", key=ROLES_KEY
            )
        found[name] = globs
    return found


def parse_grants(text: str) -> tuple[Grant, ...]:
    """The grants of a ``rest.auth.roles`` value; :class:`ConfigError` names the key and the bad entry."""
    grants = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        head, *attributes = entry.split(";")
        principal, _, rest = head.partition(":")
        role_name, sep, pattern = rest.partition(":")
        principal, role_name, pattern = principal.strip(), role_name.strip(), pattern.strip()
        if not principal or not role_name or (sep and not pattern):
            raise ConfigError(
                f"{ROLES_KEY} entries must look like principal:role[:pattern], got {entry!r}", key=ROLES_KEY
            )
        try:
            role = Role(role_name.lower())
        except ValueError:
            known = ", ".join(r.value for r in Role)
            raise ConfigError(
                f"{ROLES_KEY}: unknown role {role_name!r} in {entry!r} (roles: {known})", key=ROLES_KEY
            ) from None
        scope = _parse_scope(entry, attributes)
        if scope and role is not Role.ADMIN:
            raise ConfigError(
                f"{ROLES_KEY}: {entry!r} scopes topics or groups on a {role.value} grant; only an admin writes "
                "connector configs, so only an admin grant takes topics= and groups=",
                key=ROLES_KEY,
            )
        grants.append(Grant(principal, role, pattern or EVERY_CONNECTOR, scope.get("topics"), scope.get("groups", ())))
    return tuple(grants)


class AccessPolicy:
    """Who may do what. ``grants=None`` lets every principal do everything: the API without
    ``rest.auth.roles``, or without authentication at all."""

    def __init__(self, grants: Sequence[Grant] | None = None) -> None:
        self.grants = None if grants is None else tuple(grants)
        self._by_principal: dict[str, list[Grant]] = {}
        for grant in self.grants or ():
            self._by_principal.setdefault(grant.principal, []).append(grant)

    @classmethod
    def from_worker_config(cls, raw: Mapping[str, Any], *, auth_enabled: bool) -> AccessPolicy:
        """Reads ``rest.auth.roles`` (unset or blank: no roles, every authenticated principal is admin)."""
        text = str(raw.get(ROLES_KEY) or "").strip()
        grants = parse_grants(text) if text else None  # parsed even when unused: a typo is still an error
        if grants is not None and not auth_enabled:
            log.warning("%s is set but no authentication is configured: every request has every role", ROLES_KEY)
            return cls()
        return cls(grants)

    def allows(self, principal: str | None, permission: Permission, connector: str | None = None) -> bool:
        """Whether ``principal`` holds ``permission`` on ``connector`` (``None``: worker-wide)."""
        if permission is Permission.OPEN:
            return True
        if permission is Permission.INTERNAL:
            return False  # only a signed request opens it, whoever the caller is
        if self.grants is None:
            return True
        grants = self._by_principal.get(principal or "", [])
        if permission is Permission.LIST:
            return bool(grants)
        return any(grant.allows(permission, connector) for grant in grants)

    def grants_of(self, principal: str | None) -> tuple[Grant, ...]:
        """The grants of ``principal``; without roles, one admin grant on every connector."""
        if self.grants is None:
            return (Grant(principal or "", Role.ADMIN),)
        return tuple(self._by_principal.get(principal or "", ()))

    def connector_scope(self, principal: str | None, connector: str) -> ConnectorScope:
        """What a connector ``principal`` writes may reach: the union of its admin grants whose
        pattern matches ``connector`` (unrestricted when one is :attr:`Grant.unrestricted`, or
        without roles)."""
        if self.grants is None:
            return ConnectorScope()
        matching = [
            g
            for g in self._by_principal.get(principal or "", [])
            if g.role is Role.ADMIN and fnmatch.fnmatchcase(connector, g.pattern)
        ]
        groups = tuple(dict.fromkeys(glob for g in matching for glob in g.groups))
        if any(g.unrestricted for g in matching):
            return ConnectorScope(None, groups)
        return ConnectorScope(tuple(dict.fromkeys(glob for g in matching for glob in g.granted_topics)), groups)

    def visible(self, principal: str | None, connectors: Iterable[str]) -> list[str]:
        """The connectors among ``connectors`` that ``principal`` may view, in their order."""
        return [name for name in connectors if self.allows(principal, Permission.VIEW, name)]


def effective_routes(routes: Sequence[BaseRoute]) -> list[Any]:
    """The routes the router dispatches to, in its order, each with ``path``, ``methods`` and ``matches``.

    Newer FastAPI keeps an included router as one nested entry of ``app.routes`` whose ``matches``
    tells neither the path template nor the parameters; ``iter_route_contexts`` yields the routes
    inside it. Older FastAPI (the project allows them) has no such function and a flat list.
    """
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    return list(flatten(routes)) if flatten is not None else list(routes)


def visible_connectors(request: Request, connectors: Iterable[str]) -> list[str]:
    """``connectors`` filtered to those the caller of ``request`` may view (``GET /connectors``).

    Without the middleware's principal on ``request.state`` nothing is shown (fail closed), unless
    the policy is open to all.
    """
    policy: AccessPolicy = getattr(request.app.state, "access_policy", AccessPolicy())
    return policy.visible(getattr(request.state, "principal", None), connectors)


def stamp_scope(request: Request, connector: str, config: Mapping[str, Any], *, patch: bool = False) -> dict[str, Any]:
    """``config`` with the caller's scope for ``connector`` in the worker's scope keys, whatever the
    body said there: the worker enforces what the grant allows, not what the caller claims. For a
    merge-patch (``patch=True``) an unrestricted caller's ``None`` values delete stale keys."""
    policy: AccessPolicy = getattr(request.app.state, "access_policy", AccessPolicy())
    scope = policy.connector_scope(getattr(request.state, "principal", None), connector)
    out = {k: v for k, v in config.items() if k not in SCOPE_KEYS}
    for key, value in scope.stamp().items():
        if value is not None or patch:
            out[key] = value
    return out


@dataclass(frozen=True)
class _Target:
    """The route a request will reach: its template, rule and connector name."""

    method: str
    template: str
    rule: Rule | None
    connector: str | None


class AccessControlMiddleware:
    """Authenticates, authorizes by :data:`ACCESS_RULES` and audits every HTTP request, ahead of routing.

    The caller's principal goes onto ``request.state.principal`` for routes that filter by it. A
    route may put the connector it acted on into ``request.state.connector`` when the name is not
    in the path (``POST /connectors``), for the audit record.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[BaseRoute],
        authenticator: Authenticator,
        auth_enabled: bool,
        policy: AccessPolicy,
        audit: AuditTrail,
    ) -> None:
        self.app = app
        # The router's own list: routes added after the app was built are matched too.
        self.routes = routes
        self.auth_enabled = auth_enabled
        self.authenticator = authenticator
        self.policy = policy
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        target = self._target(scope)
        principal = self.authenticator.principal(scope) if self.auth_enabled else None
        state = scope.setdefault("state", {})
        state["principal"] = principal
        refusal = self._refusal(scope, target, principal)
        if refusal is not None:
            refused, message = refusal
            headers = self.authenticator.challenge_headers(scope) if refused == 401 else None
            await error_response(refused, message, headers)(scope, receive, send)
            self._audit(scope, principal, target, refused)
            return

        status: int | None = None

        async def send_and_remember(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_remember)
        except Exception:
            # The server's error middleware (outside this one) answers 500; record that here.
            self._audit(scope, principal, target, 500 if status is None else status)
            raise
        self._audit(scope, principal, target, status)

    def _target(self, scope: Scope) -> _Target | None:
        # The router's own matching, in its order: the first full match is the route that runs.
        # A partial match (right path, wrong method) only produces 405, so it needs no rule.
        for route in effective_routes(self.routes):
            match, child = route.matches(scope)
            if match is Match.FULL:
                template = getattr(route, "path", "")
                method = "GET" if scope["method"] == "HEAD" else scope["method"]
                rule = ACCESS_RULES.get((method, template))
                connector = None
                if rule is not None and rule.connector is not None:
                    value = child.get("path_params", {}).get(rule.connector)
                    connector = str(value) if value is not None else None
                return _Target(method, template, rule, connector)
        return None

    def _refusal(self, scope: Scope, target: _Target | None, principal: str | None) -> tuple[int, str] | None:
        """``(status, message)`` when the request must not reach the app, else ``None``."""
        unauthenticated = self.auth_enabled and principal is None
        if target is None:  # the router answers 404, 405 or a redirect; no route code runs
            return (401, self.authenticator.refusal_message()) if unauthenticated else None
        rule = target.rule
        if rule is None:
            return 403, f"No access rule for {target.method} {target.template}: refused for everyone"
        if rule.permission is Permission.OPEN:
            return None
        if rule.permission is Permission.INTERNAL:
            # Worker-to-worker requests keep their signature and accept nothing else; the herder
            # verifies it (answering alike for every name). An open API leaves that check to the herder too.
            if SIGNATURE_HEADER in Headers(scope=scope) or not self.auth_enabled:
                return None
            if unauthenticated:
                return 401, self.authenticator.refusal_message()
            return (
                403,
                f"{target.method} {target.template} is internal to the worker cluster: only signed worker requests are accepted",
            )
        if unauthenticated:
            return 401, self.authenticator.refusal_message()
        if self.policy.allows(principal, rule.permission, target.connector):
            return None
        return 403, _forbidden_message(principal, rule, target.connector)

    def _audit(self, scope: Scope, principal: str | None, target: _Target | None, status: int | None) -> None:
        method = scope["method"]
        if not is_audited(method, status):
            return
        connector = scope.get("state", {}).get("connector") or (target.connector if target else None)
        client = scope.get("client")
        self.audit.record(
            principal=principal,
            client=str(client[0]) if client else None,
            method=method,
            path=scope["path"],
            connector=connector,
            status=status,
        )


def _forbidden_message(principal: str | None, rule: Rule, connector: str | None) -> str:
    who = principal or ANONYMOUS
    if rule.permission is Permission.LIST:
        return f"Forbidden: {who} has no role on this worker"
    role = _LEAST_ROLE[rule.permission].value
    where = f"connector {connector}" if connector is not None else f"every connector (pattern {EVERY_CONNECTOR})"
    return f"Forbidden: {who} needs the {role} role on {where}"
