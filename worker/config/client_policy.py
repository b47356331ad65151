"""What a connector config may set on the Kafka clients the worker builds for it.

A connector config comes from whoever may call the REST API; the Kafka clients built from it run
inside the worker. Kafka Connect's history (CVE-2023-25194: a JNDI login module through
``sasl.jaas.config``; CVE-2025-27817: OAuth URLs that read local files and reach internal hosts)
shows that a client setting is code execution, a file read or a request to another host in
disguise. Two layers decide:

1. **The deny-list** (:func:`~sluice.connectors.api.client_keys.denied_reason`) applies under every policy, to every key a connector
   config hands to a client: ``producer.override.*``, ``consumer.override.*``, ``admin.override.*``
   (which also reach the dead-letter-queue producer), and a backfill job's ``producer``/``consumer``
   options. It refuses keys that load code (``plugin.library.paths``, ``ssl.engine.location``,
   ``ssl.providers``, ``*.class(es)``), run commands (``sasl.kerberos.kinit.cmd``), name local files
   (``*.location``, ``*.file``, ``sasl.kerberos.keytab``) or make the client fetch URLs
   (``*.url``, ``sasl.oauthbearer.metadata.authentication.type``), and JAAS configs other than the
   plain, SCRAM and OAUTHBEARER login modules. The same keys in the worker's own configuration
   (``producer.*``, ``consumer.*``, ``admin.*``) are the operator's and are not checked.
2. **The override policy** (worker key ``connector.client.config.override.policy``) decides which of
   the remaining keys a connector may override: ``Allowlist`` (the default: the keys listed in
   ``connector.client.config.override.allowlist``, by default :data:`DEFAULT_ALLOWLIST`, harmless
   tuning keys), ``All`` (any; Kafka Connect's default), ``None`` (none), ``Principal``
   (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``), Connect's class names for
   these, or the Python path of a :class:`ClientOverridePolicy` subclass.
3. **Cluster keys** (:func:`is_cluster_key`: ``bootstrap.servers`` and every security setting) choose
   which cluster a client talks to and how it proves who it is. A client whose overrides set one
   inherits none of the worker's security settings (:mod:`sluice.worker.execution.clients`), so the worker's
   credentials never reach a server the caller chose; and such an override needs either a policy
   that names the key (``Allowlist`` listing it, ``Principal``) or a connector created by an
   unrestricted admin (:class:`~sluice.worker.config.connector_scope.ConnectorScope`): under ``All`` a
   scoped admin cannot point clients elsewhere.
4. **Client identities**: ``consumer.override.group.id`` and ``producer.override.transactional.id``
   stay in the connector's namespace (``connect-<name>[-…]``) under every policy
   (:func:`~sluice.worker.config.connector_scope.check_client_ids`).

Both refuse with a :class:`~connectors.api.ConfigError` naming the full connector key and why, at
validate and create time (HTTP 400), and again when a task's client is built, so a policy made
stricter after a connector was created still holds.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError
from sluice.connectors.api.client_keys import check_denied, denied_reason
from sluice.worker.config.connector_scope import ConnectorScope, check_client_ids

#: Connector-config prefixes whose keys go to a Kafka client, and the client each one reaches.
OVERRIDE_PREFIXES: Mapping[str, str] = {
    "producer.override.": "producer",
    "consumer.override.": "consumer",
    "admin.override.": "admin",
}

POLICY_KEY = "connector.client.config.override.policy"
ALLOWLIST_KEY = "connector.client.config.override.allowlist"
#: The policy when the worker names none. Kafka Connect's default is ``All``; Sluice's REST callers
#: are untrusted (SECURITY.md), so a connector may only tune its clients unless the operator says more.
DEFAULT_POLICY = "Allowlist"
#: Keys that change how much, how fast and how safely a client batches, fetches and acknowledges,
#: never where it connects, who it claims to be, or which files and code it uses.
DEFAULT_ALLOWLIST: frozenset[str] = frozenset(
    {
        # producer
        "acks",
        "batch.size",
        "batch.num.messages",
        "buffer.memory",
        "compression.type",
        "compression.level",
        "delivery.timeout.ms",
        "enable.idempotence",
        "linger.ms",
        "max.in.flight.requests.per.connection",
        "max.request.size",
        "partitioner",
        "queue.buffering.max.kbytes",
        "queue.buffering.max.messages",
        "queue.buffering.max.ms",
        "retries",
        "retry.backoff.ms",
        "request.timeout.ms",
        # consumer
        "auto.offset.reset",
        "fetch.max.bytes",
        "fetch.max.wait.ms",
        "fetch.min.bytes",
        "heartbeat.interval.ms",
        "isolation.level",
        "max.partition.fetch.bytes",
        "max.poll.interval.ms",
        "max.poll.records",
        "session.timeout.ms",
    }
)

#: Keys that choose the cluster a client connects to, besides every security setting.
_BOOTSTRAP_KEYS = frozenset({"bootstrap.servers", "metadata.broker.list"})
_SECURITY_KEYS = frozenset({"security.protocol", "enable.ssl.certificate.verification"})


def is_security_key(key: str) -> bool:
    """Whether ``key`` says how a client authenticates or protects its connection (and so may hold
    or expose a credential): ``security.protocol``, ``sasl.*``, ``ssl.*``."""
    key = key.strip().lower()
    return key in _SECURITY_KEYS or key.startswith(("sasl.", "ssl."))


def is_cluster_key(key: str) -> bool:
    """Whether ``key`` chooses which cluster a client talks to or how it proves who it is."""
    return key.strip().lower() in _BOOTSTRAP_KEYS or is_security_key(key)


def client_overrides(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"producer": {...}, "consumer": {...}, "admin": {...}}``: the client keys a connector config sets."""
    found: dict[str, dict[str, Any]] = {what: {} for what in OVERRIDE_PREFIXES.values()}
    for key, value in config.items():
        for prefix, what in OVERRIDE_PREFIXES.items():
            if key.startswith(prefix):
                found[what][key[len(prefix) :]] = value
    return found


class ClientOverridePolicy(abc.ABC):
    """Decides which client overrides a connector may set (beyond the deny-list, which always holds).

    The worker creates one instance when it starts and calls :meth:`check` from the herder's and
    the task runners' threads; implementations must be thread-safe (keep no mutable state).
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def refused(self, what: str, overrides: Mapping[str, Any]) -> list[str]:
        """The keys of ``overrides`` (for client ``what``: producer, consumer or admin) this policy refuses."""

    def explain(self) -> str:
        """One sentence on what the policy allows, for the error message."""
        return f"the worker's {POLICY_KEY}={self.name} refuses it"

    def names(self, key: str) -> bool:
        """Whether the operator allowed ``key`` by name (an allowlist entry), which lets a scoped
        admin's connector set a cluster key; a policy that allows every key names none."""
        return False

    def check(self, what: str, overrides: Mapping[str, Any], scope: ConnectorScope | None = None) -> None:
        """Raise :class:`ConfigError` naming the first refused key: deny-list first, then the
        policy, then a cluster key a scoped connector (``scope.restricted``) may not set."""
        prefix = f"{what}.override."
        check_denied(overrides, prefix)
        refused = self.refused(what, overrides)
        if refused:
            raise ConfigError(f"{prefix}{refused[0]} is not allowed: {self.explain()}", key=f"{prefix}{refused[0]}")
        if scope is not None and scope.restricted:
            for key in sorted(overrides):
                if is_cluster_key(key) and not self.names(key):
                    raise ConfigError(
                        f"{prefix}{key} is not allowed: pointing a client at another cluster or changing how it "
                        "authenticates needs the admin role on every connector (*) without a topic scope, or a worker "
                        f"policy that names the key ({POLICY_KEY}=Allowlist with {key} in {ALLOWLIST_KEY})",
                        key=f"{prefix}{key}",
                    )

    def check_config(self, config: Mapping[str, Any]) -> None:
        """:meth:`check` for every client a connector config reaches, with the scope stamped into
        it, and the connector's consumer group and transactional id kept in its namespace."""
        scope = ConnectorScope.of(config)
        found = client_overrides(config)
        for what, overrides in found.items():
            if overrides:
                self.check(what, overrides, scope)
        check_client_ids(str(config.get("name") or ""), found, scope)


class AllOverridePolicy(ClientOverridePolicy):
    """Any key that is not on the deny-list (Connect's ``All``)."""

    name = "All"

    def refused(self, what: str, overrides: Mapping[str, Any]) -> list[str]:
        return []


class NoneOverridePolicy(ClientOverridePolicy):
    """No overrides at all (Connect's ``None``)."""

    name = "None"

    def refused(self, what: str, overrides: Mapping[str, Any]) -> list[str]:
        return sorted(overrides)

    def explain(self) -> str:
        return f"the worker's {POLICY_KEY}=None forbids every producer/consumer/admin override"


class PrincipalOverridePolicy(ClientOverridePolicy):
    """Only the keys that choose the client's identity (Connect's ``Principal``)."""

    name = "Principal"
    ALLOWED: ClassVar[frozenset[str]] = frozenset({"security.protocol", "sasl.mechanism", "sasl.jaas.config"})

    def refused(self, what: str, overrides: Mapping[str, Any]) -> list[str]:
        return sorted(set(overrides) - self.ALLOWED)

    def names(self, key: str) -> bool:
        return key in self.ALLOWED

    def explain(self) -> str:
        return f"the worker's {POLICY_KEY}=Principal allows only {', '.join(sorted(self.ALLOWED))}"


class AllowlistOverridePolicy(ClientOverridePolicy):
    """Only the keys the operator listed in ``connector.client.config.override.allowlist``."""

    name = "Allowlist"

    def __init__(self, allowed: frozenset[str]) -> None:
        self.allowed = allowed

    def refused(self, what: str, overrides: Mapping[str, Any]) -> list[str]:
        return sorted(set(overrides) - self.allowed)

    def names(self, key: str) -> bool:
        return key in self.allowed

    def explain(self) -> str:
        listed = ", ".join(sorted(self.allowed)) or "nothing"
        return f"the worker's {ALLOWLIST_KEY} allows only {listed}"


_CONNECT_PACKAGE = "org.apache.kafka.connect.connector.policy."
_BUILTIN: Mapping[str, type[ClientOverridePolicy]] = {
    "All": AllOverridePolicy,
    "None": NoneOverridePolicy,
    "Principal": PrincipalOverridePolicy,
    f"{_CONNECT_PACKAGE}AllConnectorClientConfigOverridePolicy": AllOverridePolicy,
    f"{_CONNECT_PACKAGE}NoneConnectorClientConfigOverridePolicy": NoneOverridePolicy,
    f"{_CONNECT_PACKAGE}PrincipalConnectorClientConfigOverridePolicy": PrincipalOverridePolicy,
}
_ALLOWLIST_NAMES = ("Allowlist", f"{_CONNECT_PACKAGE}AllowlistConnectorClientConfigOverridePolicy")


def override_policy(worker_config: Mapping[str, Any]) -> ClientOverridePolicy:
    """The policy a worker's raw configuration names; :class:`ConfigError` names a bad worker key."""
    name = str(worker_config.get(POLICY_KEY) or DEFAULT_POLICY).strip()
    if name in _BUILTIN:
        return _BUILTIN[name]()
    if name in _ALLOWLIST_NAMES:
        listed = worker_config.get(ALLOWLIST_KEY)
        if listed is None:
            allowed = DEFAULT_ALLOWLIST
        else:  # set, even empty: the operator's list (empty allows nothing)
            allowed = frozenset(k.strip() for k in str(listed).split(",") if k.strip())
        for key in sorted(allowed):
            reason = denied_reason(key)
            if reason is not None:
                raise ConfigError(
                    f"{ALLOWLIST_KEY} lists {key}, which no connector may set: it {reason}", key=ALLOWLIST_KEY
                )
        return AllowlistOverridePolicy(allowed)
    # The operator's own policy class: worker configuration is trusted, a connector config never gets here.
    module_name, _, class_name = name.rpartition(".")
    policy_cls: Any = None
    if module_name:
        try:
            policy_cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            policy_cls = None
    if not (isinstance(policy_cls, type) and issubclass(policy_cls, ClientOverridePolicy)):
        raise ConfigError(
            f"{POLICY_KEY}={name} is not a known policy: use Allowlist (with {ALLOWLIST_KEY}), All, None, Principal "
            "or the Python path of a worker.config.client_policy.ClientOverridePolicy subclass",
            key=POLICY_KEY,
        )
    return policy_cls()  # type: ignore[no-any-return]
