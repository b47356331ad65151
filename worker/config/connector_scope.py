"""What data a connector may reach: the topics and consumer groups its creator was granted.

A REST principal's grant (``rest.auth.roles``, parsed in :mod:`sluice.rest.authz`) names connector
names and, for a scoped admin, topics and consumer groups. The REST layer stamps the caller's scope
into the connector config it stores (:data:`SCOPE_TOPICS_KEY`, :data:`SCOPE_GROUPS_KEY`), replacing
whatever the request body said, so every worker that later builds the connector's tasks enforces the
same scope without knowing who created it. Checks here run:

* at validate/create (:func:`check_config_scope`): a sink's ``topics`` and ``topics.regex``, the
  dead-letter-queue topic, a source's literal target keys (``topic``, ``topic.prefix``) and the
  topics routing transforms produce, where the config makes them knowable;
* when a source task first sends to a topic (:class:`TopicScope`), so a route that only data
  decides (a RegexRouter with groups, a TimestampRouter, a connector's own choice) is held too;
* for every connector, scoped or not: ``group.id`` and ``transactional.id`` overrides stay in the
  connector's own namespace (:func:`own_namespace`), so one connector cannot join another's
  consumer group or fence its producer.

A config without the keys was stored by an unrestricted caller (an admin on every connector without
a topic list, an API without roles, or the operator's own files): it may reach every topic.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import ConfigError, ConnectError, Transformation
from sluice.transforms.routing import RegexRouter, TimestampRouter

#: Comma-separated topic globs the connector may read and write; absent: every topic.
SCOPE_TOPICS_KEY = "sluice.scope.topics"
#: Comma-separated consumer-group globs the connector may join besides its own namespace.
SCOPE_GROUPS_KEY = "sluice.scope.groups"
SCOPE_KEYS = (SCOPE_TOPICS_KEY, SCOPE_GROUPS_KEY)

EVERY_TOPIC = "*"
_GLOB_CHARS = frozenset("*?[")
# Characters a regex and a Kafka topic name both read literally.
_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_QUANTIFIERS = frozenset("?*+{")


def _split(value: Any) -> tuple[str, ...]:
    return tuple(part.strip() for part in str(value or "").split(",") if part.strip())


@dataclass(frozen=True)
class ConnectorScope:
    """The topics (``None``: every topic, and the authority to point clients at other clusters)
    and extra consumer groups a connector's creator was granted."""

    topics: tuple[str, ...] | None = None
    groups: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        """Whether the creator lacked the unrestricted admin role (admin on ``*`` without ``topics=``)."""
        return self.topics is not None

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ConnectorScope:
        """The scope stamped into a stored connector config."""
        topics = _split(config[SCOPE_TOPICS_KEY]) if SCOPE_TOPICS_KEY in config else None
        return cls(topics, _split(config.get(SCOPE_GROUPS_KEY)))

    def stamp(self) -> dict[str, str | None]:
        """The scope as config keys; ``None`` deletes a key (a merge-patch drops it)."""
        return {
            SCOPE_TOPICS_KEY: ",".join(self.topics) if self.topics is not None else None,
            SCOPE_GROUPS_KEY: ",".join(self.groups) if self.groups else None,
        }

    def allows_topic(self, topic: str) -> bool:
        return self.topics is None or any(fnmatch.fnmatchcase(topic, glob) for glob in self.topics)

    def covers_prefix(self, prefix: str) -> bool:
        """Whether every topic starting with ``prefix`` is in scope (a glob ``Q*`` with ``prefix`` starting with ``Q``)."""
        if self.topics is None:
            return True
        for glob in self.topics:
            head = _literal_prefix_glob(glob)
            if head is not None and prefix.startswith(head):
                return True
        return False

    def may_reach_prefix(self, prefix: str) -> bool:
        """Whether some topic starting with ``prefix`` could be in scope (else it is provably outside)."""
        if self.topics is None:
            return True
        for glob in self.topics:
            literal = _glob_literal_start(glob)
            if prefix.startswith(literal) or literal.startswith(prefix):
                return True
        return False

    def describe(self) -> str:
        return "every topic" if self.topics is None else (", ".join(self.topics) or "no topics")

    def check_topic(self, topic: str, key: str, what: str) -> None:
        if not self.allows_topic(topic):
            raise ConfigError(
                f"{key}: {what} {topic!r} is outside the topics this connector may reach ({self.describe()})", key=key
            )


def _literal_prefix_glob(glob: str) -> str | None:
    """``Q`` for a glob ``Q*`` whose ``Q`` is literal (every name starting with ``Q`` matches), else ``None``."""
    if not glob.endswith("*"):
        return None
    head = glob[:-1]
    return None if _GLOB_CHARS & set(head) else head


def _glob_literal_start(glob: str) -> str:
    for i, ch in enumerate(glob):
        if ch in _GLOB_CHARS:
            return glob[:i]
    return glob


def regex_literal_prefix(regex: str) -> str:
    """The text every topic ``regex`` matches must start with (``""`` when nothing is certain).

    Read conservatively: the scan stops at the first character that is not plainly literal, a
    quantifier takes back the character before it, and an alternation outside any group makes the
    prefix empty (``a.*|b`` matches ``b``). It holds for a full match and for a match anchored
    at the start, the two ways Kafka clients apply ``topics.regex``.
    """
    depth = 0
    in_class = False
    i = 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            return ""
        i += 1
    literal: list[str] = []
    i = 1 if regex.startswith("^") else 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\" and i + 1 < len(regex) and regex[i + 1] in ".-_":
            literal.append(regex[i + 1])
            i += 2
            continue
        if ch in _QUANTIFIERS:
            if literal:
                literal.pop()
            break
        if ch not in _LITERAL:
            break
        literal.append(ch)
        i += 1
    return "".join(literal)


def replacement_literal_prefix(replacement: str, markers: Iterable[str] = ("$",)) -> tuple[str, bool]:
    """``(prefix, literal)``: the text before the first reference in a router's replacement, and
    whether the whole replacement is literal (no reference at all)."""
    cut = min((i for i in (replacement.find(m) for m in markers) if i >= 0), default=-1)
    if cut < 0:
        return replacement, True
    return replacement[:cut], False


def own_namespace(connector: str, value: str) -> bool:
    """Whether a ``group.id``/``transactional.id`` belongs to connector ``connector``: ``connect-<name>``
    itself or ``connect-<name>-…``."""
    own = f"connect-{connector}"
    return value == own or value.startswith(f"{own}-")


def effective_group(config: Mapping[str, Any]) -> str:
    """The consumer group a sink connector's tasks join and its offsets live in.

    The override counts only inside the connector's namespace or its granted groups, which a
    create checks; a config stored before that check existed falls back to ``connect-<name>``, so
    offsets are never read or moved in another connector's group.
    """
    name = str(config.get("name") or "")
    own = f"connect-{name}"
    override = str(config.get("consumer.override.group.id") or "").strip()
    if override and (own_namespace(name, override) or _in_groups(ConnectorScope.of(config), override)):
        return override
    return own


def _in_groups(scope: ConnectorScope, group: str) -> bool:
    return any(fnmatch.fnmatchcase(group, glob) for glob in scope.groups)


def check_client_ids(name: str, overrides: Mapping[str, Mapping[str, Any]], scope: ConnectorScope) -> None:
    """Refuse a ``consumer.override.group.id`` or ``producer.override.transactional.id`` outside the
    connector's namespace (``connect-<name>[-…]``) and the groups its creator was granted."""
    for what, key in (("consumer", "group.id"), ("producer", "transactional.id")):
        value = overrides.get(what, {}).get(key)
        if value is None:
            continue
        text = str(value).strip()
        if own_namespace(name, text) or (what == "consumer" and _in_groups(scope, text)):
            continue
        granted = (
            f" or a group granted to its creator ({', '.join(scope.groups)})"
            if what == "consumer" and scope.groups
            else ""
        )
        raise ConfigError(
            f"{what}.override.{key}={text} is not allowed: a connector's {key} must be connect-{name} or start with "
            f"connect-{name}-{granted}, so it cannot take over another connector's or application's {'consumer group' if what == 'consumer' else 'transactions'}",
            key=f"{what}.override.{key}",
        )


def check_group_unique(name: str, config: Mapping[str, Any], others: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a sink whose consumer group another connector already uses (``payments`` may not
    take ``connect-payments-sink``, the group of connector ``payments-sink``)."""
    group = effective_group(config)
    for other, other_config in others.items():
        if other == name:
            continue
        if group in (effective_group(other_config), f"connect-{other}"):
            raise ConfigError(
                f"consumer.override.group.id={group} is not allowed: it is the consumer group of connector {other}",
                key="consumer.override.group.id",
            )


@dataclass(frozen=True)
class TopicsUsed:
    """What a connector config says about the topics it reads and writes, for :func:`check_config_scope`."""

    is_source: bool
    topics: tuple[str, ...] = ()  #: a sink's ``topics``
    topics_regex: str | None = None  #: a sink's ``topics.regex``
    dlq_topic: str = ""
    transforms: tuple[tuple[str, Transformation], ...] = ()  #: (alias, configured transform)


#: Keys naming a source's target topic literally (FileStreamSource ``topic``), or a prefix of every
#: target (the JDBC source's and the CDC source's ``topic.prefix``).
SOURCE_TOPIC_KEYS = ("topic",)
SOURCE_PREFIX_KEYS = ("topic.prefix",)


def check_offsets_topic(
    topic: str, worker_offsets_topic: str | None, worker_topics: Mapping[str, str], scope: ConnectorScope
) -> None:
    """Refuse an ``offsets.storage.topic`` a connector may not keep its offsets in: one of Kafka's
    internal topics, a topic the worker writes its own records to (its configs, statuses, audit
    trail: offset records there would corrupt them), or, for a scoped connector, a topic outside its
    scope. The worker's offsets topic is always allowed: it is where the offsets go anyway."""
    key = "offsets.storage.topic"
    if topic == worker_offsets_topic:
        return
    if topic.startswith("__"):
        raise ConfigError(f"{key}: {topic!r} is an internal topic of Kafka's, not an offsets topic", key=key)
    if topic in worker_topics:
        raise ConfigError(
            f"{key}: {topic!r} is the worker's {worker_topics[topic]}; a connector keeps its offsets in a topic "
            "of their own or in the worker's offset.storage.topic",
            key=key,
        )
    scope.check_topic(topic, key, "offsets topic")


def check_config_scope(used: TopicsUsed, config: Mapping[str, Any], scope: ConnectorScope) -> None:
    """Refuse, naming the key, a connector config that reads or writes a topic outside ``scope``.

    What a sink consumes must be provably inside (its tasks are not checked per record): each of
    ``topics``, and ``topics.regex`` only when its literal prefix lies under a ``prefix*`` grant.
    What a source writes is checked again per topic at run time (:class:`TopicScope`), so here a
    target is refused when it is provably outside: a literal topic or DLQ topic not in scope, a
    prefix or a router's output that no granted topic could start with.
    """
    if not scope.restricted:
        return
    for topic in used.topics:
        scope.check_topic(topic, "topics", "topic")
    if used.topics_regex is not None:
        prefix = regex_literal_prefix(used.topics_regex)
        if not scope.covers_prefix(prefix):
            raise ConfigError(
                f"topics.regex: {used.topics_regex!r} may match topics outside those this connector may reach "
                f"({scope.describe()}); a scoped connector's regex must start with a literal prefix that a granted "
                "pattern such as 'orders-*' covers (e.g. 'orders-.*'), or list its topics",
                key="topics.regex",
            )
    if used.dlq_topic:
        scope.check_topic(used.dlq_topic, "errors.deadletterqueue.topic.name", "dead letter queue topic")
    if used.is_source:
        for key in SOURCE_TOPIC_KEYS:
            value = str(config.get(key) or "").strip()
            if value:
                scope.check_topic(value, key, "topic")
        for key in SOURCE_PREFIX_KEYS:
            value = str(config.get(key) or "").strip()
            if value and not scope.may_reach_prefix(value):
                raise ConfigError(
                    f"{key}: topics starting with {value!r} are outside the topics this connector may reach ({scope.describe()})",
                    key=key,
                )
    for alias, transform in used.transforms:
        _check_router(alias, transform, used, config, scope)


def _check_router(
    alias: str, transform: Transformation, used: TopicsUsed, config: Mapping[str, Any], scope: ConnectorScope
) -> None:
    prefix = f"transforms.{alias}."
    if isinstance(transform, RegexRouter):
        key = f"{prefix}replacement"
        if used.topics and not used.is_source:  # a sink's topics are known: route each exactly
            for topic in used.topics:
                scope.check_topic(transform.route(topic), key, f"transform {alias} routes {topic!r} to topic")
            return
        head, literal = replacement_literal_prefix(str(config.get(key) or ""), ("$", "\\"))
    elif isinstance(transform, TimestampRouter):
        key = f"{prefix}topic.format"
        head, literal = replacement_literal_prefix(str(config.get(key) or "${topic}-${timestamp}"), ("${",))
    else:
        return  # other transforms that route are held at run time (TopicScope)
    if literal:
        scope.check_topic(head, key, f"transform {alias} routes records to topic")
    elif not scope.may_reach_prefix(head):
        raise ConfigError(
            f"{key}: transform {alias} routes records to topics starting with {head!r}, outside the topics this "
            f"connector may reach ({scope.describe()})",
            key=key,
        )


class TopicScope:
    """Held by a source runner: refuses the first record to a topic outside the connector's scope.

    Called once per topic a task sends to (before the topic is created or counted as used), so it
    costs nothing per record.
    """

    def __init__(self, scope: ConnectorScope) -> None:
        self.scope = scope

    def check(self, topic: str) -> None:
        if not self.scope.allows_topic(topic):
            raise ConnectError(
                f"A record was routed to topic {topic!r}, outside the topics this connector may write "
                f"({self.scope.describe()}); it was not sent. Change the connector's routing, or ask an admin "
                "whose grant covers that topic to recreate it"
            )
