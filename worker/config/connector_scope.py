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
a topic list, an API without roles, or the operator's own files): it may reach every topic but the
reserved ones.

No connector, scoped or not, reads or writes a reserved topic (:class:`ReservedTopics`): the
worker's own (configs, statuses, offsets, Sluice's records, the audit trail), which other workers
trust and which hold stored configs with their literal secrets, and Kafka's internal topics
(:data:`KAFKA_INTERNAL_TOPICS`). They are refused at validate/create (:func:`check_reserved_topics`), when a source
task first sends to a topic (:class:`TopicScope`), and kept out of a ``topics.regex`` subscription
by the consumer's ``topic.blacklist`` (:meth:`ReservedTopics.blacklist`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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


DLQ_TOPIC_KEY = "errors.deadletterqueue.topic.name"

#: Kafka's own internal topics (group offsets, transactions, share-group state, the KRaft metadata
#: log). Only these: other software names ordinary topics with ``__`` too (Debezium's heartbeat
#: topics are ``__debezium-heartbeat.<prefix>``), and a CDC source must be able to write those.
KAFKA_INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata")
#: What each of the worker's topic keys holds, for messages.
_WORKER_TOPIC_WHAT = {
    "config.storage.topic": "config topic",
    "offset.storage.topic": "offsets topic",
    "status.storage.topic": "status topic",
    "sluice.storage.topic": "Sluice storage topic",
    "rest.audit.topic": "audit topic",
}
# Characters a topic name and a librdkafka (POSIX extended) regex both read literally.
_BLACKLIST_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class ReservedTopics:
    """The topics no connector reads or writes, whoever created it and whatever its grant.

    The worker's own topics (``worker``: ``{topic: worker key}``) are trusted by every worker of the
    cluster and hold what the REST API hides: a sink reading the config topic would copy every
    stored connector config, literal passwords included, to a file or table; a source writing to
    it would forge connector configs, task configs or session keys. Kafka's internal topics
    (:data:`KAFKA_INTERNAL_TOPICS`) hold other applications' group offsets and transactions.
    """

    worker: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, worker_topics: Mapping[str, str], offsets_topic: str | None) -> ReservedTopics:
        """The worker's topics (``WorkerConfig.worker_topics()``) and its offsets topic, if any."""
        topics = dict(worker_topics)
        if offsets_topic:
            topics.setdefault(offsets_topic, "offset.storage.topic")
        return cls(topics)

    def why(self, topic: str) -> str | None:
        """Why ``topic`` is reserved (``"is the worker's config topic (config.storage.topic)"``), or ``None``."""
        key = self.worker.get(topic)
        if key is not None:
            return f"is the worker's {_WORKER_TOPIC_WHAT.get(key, key)} ({key})"
        if topic in KAFKA_INTERNAL_TOPICS:
            return "is an internal topic of Kafka's"
        return None

    def check(self, topic: str, key: str, where: str = "") -> None:
        """Refuse ``topic`` named by ``key`` when it is reserved (``where`` says how it is reached)."""
        why = self.why(topic)
        if why is not None:
            raise ConfigError(f"{key}: {topic!r} {why}{where}; {_refusal(topic)}", key=key)

    def check_regex(self, regex: str, key: str = "topics.regex") -> None:
        """Refuse a ``topics.regex`` that fully matches one of the worker's topics or of
        :data:`KAFKA_INTERNAL_TOPICS`."""
        try:
            compiled = re.compile(regex)
        except re.error:
            return  # refused as an invalid regular expression where the config is parsed
        for topic in (*self.worker, *KAFKA_INTERNAL_TOPICS):
            if compiled.fullmatch(topic):
                raise ConfigError(
                    f"{key}: {regex!r} matches {topic!r}, which {self.why(topic)}; {_refusal(topic)}", key=key
                )

    def blacklist(self, existing: str | None = None) -> str:
        """A librdkafka ``topic.blacklist`` hiding every reserved topic from a consumer (appended to
        ``existing``): a ``topics.regex`` subscription then never picks one up, even one created
        after the connector or missing from the list :meth:`check_regex` tries."""
        names = sorted({*KAFKA_INTERNAL_TOPICS, *self.worker})
        patterns = [f"^{_blacklist_literal(topic)}$" for topic in names if "," not in topic]
        return ",".join([existing, *patterns] if existing else patterns)


def _refusal(topic: str) -> str:
    owner = "Kafka's" if topic in KAFKA_INTERNAL_TOPICS else "the worker's"
    return f"no connector may read or write {owner} internal topics"


def _blacklist_literal(topic: str) -> str:
    """``topic`` as a POSIX extended regex matching exactly it (``.`` becomes ``[.]``)."""
    return "".join(ch if ch in _BLACKLIST_LITERAL else f"[{ch}]" for ch in topic)


def check_reserved_topics(used: TopicsUsed, config: Mapping[str, Any], reserved: ReservedTopics) -> None:
    """Refuse, naming the key, a connector config of any creator that names a reserved topic where
    the config makes it knowable: a sink's ``topics`` entry, a ``topics.regex`` matching one, the
    dead-letter-queue topic, a source's literal ``topic``, a router's literal output (a sink's
    routes exactly). Routes only data decides are refused at run time (:class:`TopicScope`)."""
    for topic in used.topics:
        reserved.check(topic, "topics")
    if used.topics_regex is not None:
        reserved.check_regex(used.topics_regex)
    if used.dlq_topic:
        reserved.check(used.dlq_topic, DLQ_TOPIC_KEY)
    if used.is_source:
        for key in SOURCE_TOPIC_KEYS:
            value = str(config.get(key) or "").strip()
            if value:
                reserved.check(value, key)
    for alias, transform in used.transforms:
        for key, topic in _literal_routes(alias, transform, used, config):
            reserved.check(topic, key, f", where transform {alias} routes records")


@dataclass(frozen=True)
class _Route:
    """What a routing transform's config says of its output: ``exact`` (input → output) for a sink
    whose topics are listed, else the literal ``head`` every output starts with (``literal``: the
    output is exactly ``head``)."""

    key: str
    exact: tuple[tuple[str, str], ...] = ()
    head: str = ""
    literal: bool = False


def _route_of(alias: str, transform: Transformation, used: TopicsUsed, config: Mapping[str, Any]) -> _Route | None:
    """``None`` for a transform that does not route, or routes only as data decides (held at run time)."""
    prefix = f"transforms.{alias}."
    if isinstance(transform, RegexRouter):
        key = f"{prefix}replacement"
        if used.topics and not used.is_source:  # a sink's topics are known: route each exactly
            return _Route(key, exact=tuple((topic, transform.route(topic)) for topic in used.topics))
        head, literal = replacement_literal_prefix(str(config.get(key) or ""), ("$", "\\"))
    elif isinstance(transform, TimestampRouter):
        key = f"{prefix}topic.format"
        head, literal = replacement_literal_prefix(str(config.get(key) or "${topic}-${timestamp}"), ("${",))
    else:
        return None
    return _Route(key, head=head, literal=literal)


def _literal_routes(
    alias: str, transform: Transformation, used: TopicsUsed, config: Mapping[str, Any]
) -> Iterator[tuple[str, str]]:
    """``(key, topic)`` for each topic a routing transform certainly produces from the config alone."""
    route = _route_of(alias, transform, used, config)
    if route is None:
        return
    yield from ((route.key, output) for _, output in route.exact)
    if route.literal and route.head:
        yield route.key, route.head


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
        scope.check_topic(used.dlq_topic, DLQ_TOPIC_KEY, "dead letter queue topic")
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
    route = _route_of(alias, transform, used, config)
    if route is None:
        return  # other transforms that route are held at run time (TopicScope)
    if route.exact:
        for topic, output in route.exact:
            scope.check_topic(output, route.key, f"transform {alias} routes {topic!r} to topic")
    elif route.literal:
        scope.check_topic(route.head, route.key, f"transform {alias} routes records to topic")
    elif not scope.may_reach_prefix(route.head):
        raise ConfigError(
            f"{route.key}: transform {alias} routes records to topics starting with {route.head!r}, outside the "
            f"topics this connector may reach ({scope.describe()})",
            key=route.key,
        )


class TopicScope:
    """Held by a source runner: refuses the first record to a reserved topic (every connector) or
    to a topic outside the connector's scope.

    Called once per topic a task sends to (before the topic is created or counted as used), so it
    costs nothing per record.
    """

    def __init__(self, scope: ConnectorScope, reserved: ReservedTopics | None = None) -> None:
        self.scope = scope
        self.reserved = reserved if reserved is not None else ReservedTopics()

    def check(self, topic: str) -> None:
        why = self.reserved.why(topic)
        if why is not None:
            raise ConnectError(
                f"A record was routed to topic {topic!r}, which {why}; it was not sent: {_refusal(topic)}. "
                "Change the connector's routing (its topic, topic.prefix or transforms)"
            )
        if not self.scope.allows_topic(topic):
            raise ConnectError(
                f"A record was routed to topic {topic!r}, outside the topics this connector may write "
                f"({self.scope.describe()}); it was not sent. Change the connector's routing, or ask an admin "
                "whose grant covers that topic to recreate it"
            )
