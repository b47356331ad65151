"""Source topics created with the partitions and settings a connector asks for (KIP-158).

A source connector's ``topic.creation.*`` keys, as Kafka Connect defines them:

* ``topic.creation.groups``: comma-separated names of groups besides ``default``;
* ``topic.creation.<group>.include`` / ``.exclude``: comma-separated regular expressions that
  must match a whole topic name; a topic the exclude list matches is never the group's;
* ``topic.creation.<group>.partitions`` and ``.replication.factor``: a positive number, or -1 for
  the broker's default; a group other than ``default`` inherits them from ``default``;
* any other ``topic.creation.<group>.<name>`` (``cleanup.policy``, ``retention.ms``, …) is a topic
  config of the topics the group creates.

``topic.creation.default.partitions`` and ``.replication.factor`` are required once any key is
set. A topic belongs to the first listed group whose include matches and exclude does not, else
to ``default``. The worker creates it when a task is about to write to it for the first time and
it does not exist; an existing topic is left as it is. Without any ``topic.creation.*`` key (or
with the worker's ``topic.creation.enable=false``) nothing is created here and the broker's own
``auto.create.topics.enable`` decides, as in Connect.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.connectors.api import ConfigError, ConnectError

log = logging.getLogger(__name__)

PREFIX = "topic.creation."
GROUPS_KEY = PREFIX + "groups"
DEFAULT_GROUP = "default"
_INCLUDE, _EXCLUDE, _PARTITIONS, _REPLICATION = "include", "exclude", "partitions", "replication.factor"

#: How long one metadata or create call may take before the task fails with a clear error.
ADMIN_TIMEOUT_S = 30.0

_warned: set[str] = set()  # keys of no group, already logged


@dataclass(frozen=True)
class TopicCreationGroup:
    """How the topics of one group are created."""

    name: str
    partitions: int  # -1: the broker's num.partitions
    replication_factor: int  # -1: the broker's default.replication.factor
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    include: re.Pattern[str] | None = None  # None: every topic (the default group)
    exclude: re.Pattern[str] | None = None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to this group (exclude wins over include)."""
        if self.exclude is not None and self.exclude.fullmatch(topic):
            return False
        return self.include is None or self.include.fullmatch(topic) is not None

    def new_topic(self, topic: str) -> NewTopic:
        return NewTopic(topic, num_partitions=self.partitions, replication_factor=self.replication_factor, config=dict(self.topic_configs))


@dataclass(frozen=True)
class TopicCreationConfig:
    """A connector's groups, ``default`` last."""

    groups: tuple[TopicCreationGroup, ...]

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> TopicCreationConfig | None:
        """The groups of a connector config; ``None`` when it sets no ``topic.creation.*`` key.

        Raises :class:`ConfigError` naming the key when a value is not a valid number or regular
        expression, or when a required ``default`` key is missing.
        """
        raw = {k: v for k, v in config.items() if k.startswith(PREFIX)}
        if not raw:
            return None
        names = [g.strip() for g in str(raw.get(GROUPS_KEY) or "").split(",") if g.strip()]
        names = list(dict.fromkeys(n for n in names if n != DEFAULT_GROUP))
        default_prefix = f"{PREFIX}{DEFAULT_GROUP}."
        for key in (_INCLUDE, _EXCLUDE):
            if default_prefix + key in raw:
                raise ConfigError(
                    f"{default_prefix}{key} cannot be set: the default group takes every topic no other group takes",
                    key=default_prefix + key,
                )
        default_partitions = _count(raw, default_prefix + _PARTITIONS, None)
        default_replication = _count(raw, default_prefix + _REPLICATION, None)
        groups = [
            TopicCreationGroup(
                name,
                _count(raw, f"{PREFIX}{name}.{_PARTITIONS}", default_partitions),
                _count(raw, f"{PREFIX}{name}.{_REPLICATION}", default_replication),
                _topic_configs(raw, f"{PREFIX}{name}."),
                _patterns(raw, f"{PREFIX}{name}.{_INCLUDE}") or re.compile(r"(?!)"),  # no include: no topic
                _patterns(raw, f"{PREFIX}{name}.{_EXCLUDE}"),
            )
            for name in names
        ]
        groups.append(
            TopicCreationGroup(DEFAULT_GROUP, default_partitions, default_replication, _topic_configs(raw, default_prefix))
        )
        known = (GROUPS_KEY, *(f"{PREFIX}{g.name}." for g in groups))
        for key in raw:
            # Connect ignores such a key silently; a stale or misspelt group deserves one line
            # (once: every validate and every task start parses these keys again).
            if not key.startswith(known) and key not in _warned:
                _warned.add(key)
                log.warning("%s belongs to no group listed in %s; it is not used", key, GROUPS_KEY)
        return cls(tuple(groups))

    def group_for(self, topic: str) -> TopicCreationGroup:
        """The first group that takes ``topic``; ``default`` takes the rest."""
        for group in self.groups:
            if group.matches(topic):
                return group
        return self.groups[-1]


def has_topic_creation_keys(config: Mapping[str, Any]) -> bool:
    return any(k.startswith(PREFIX) for k in config)


class TopicCreator:
    """Creates each topic a source task writes to, once, before its first record (KIP-158).

    Called on the task's thread. ``ensure`` costs a set lookup for a topic seen before; the first
    time it reads the cluster's topic list (so an existing topic is never touched) and creates the
    topic with its group's settings when it is missing.
    """

    def __init__(self, config: TopicCreationConfig, admin_config: Mapping[str, Any]) -> None:
        self.config = config
        self._admin_config = dict(admin_config)
        self._admin: AdminClient | None = None
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, topic: str) -> None:
        """Make sure ``topic`` exists; raises :class:`ConnectError` when it cannot be created."""
        if topic in self._known:
            return
        with self._lock:
            if topic not in self._known:
                self._create_if_missing(topic)
                self._known.add(topic)

    def close(self) -> None:
        """Release the admin client (its task stopped): it goes now, on the caller's thread, rather
        than reconnecting for as long as something holds this object and then going wherever the
        garbage collector happens to run. A later :meth:`ensure` would create another."""
        with self._lock:
            self._admin = None

    def _create_if_missing(self, topic: str) -> None:
        if self._admin is None:
            self._admin = AdminClient(self._admin_config)
        admin = self._admin
        try:
            existing = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
        except KafkaException as exc:
            raise ConnectError(f"Could not list topics before creating {topic!r}: {exc.args[0].str()}") from exc
        found = existing.get(topic)
        if found is not None and found.error is None:
            log.debug("Topic %s exists; topic.creation leaves it as it is", topic)
            return
        group = self.config.group_for(topic)
        futures = admin.create_topics([group.new_topic(topic)], operation_timeout=ADMIN_TIMEOUT_S)
        # exception(), not result(): raised, the future's exception would get a traceback holding this
        # frame (the AdminClient, and the future holding the exception: a reference cycle), and the
        # garbage collector may destroy the client on a librdkafka thread, where rd_kafka_destroy()
        # aborts the process.
        failure = futures[topic].exception(timeout=ADMIN_TIMEOUT_S * 2)
        if failure is not None:
            error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another task or client was first
            reason = error.str() if isinstance(error, KafkaError) else str(failure)
            raise ConnectError(f"Could not create topic {topic!r} of topic.creation group {group.name!r}: {reason}") from failure
        log.info(
            "Created topic %s (topic.creation group %s: %s partitions, replication factor %s%s)",
            topic,
            group.name,
            _broker_default(group.partitions),
            _broker_default(group.replication_factor),
            "".join(f", {k}={v}" for k, v in sorted(group.topic_configs.items())),
        )


def _broker_default(value: int) -> str:
    return "broker default" if value == -1 else str(value)


def _count(raw: Mapping[str, Any], key: str, inherited: int | None) -> int:
    value = raw.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if inherited is None:
            raise ConfigError(
                f"Missing required configuration {key}: it is required once any topic.creation.* key is set "
                "(a positive number, or -1 for the broker's default)",
                key=key,
            )
        return inherited
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or not (number == -1 or number >= 1):
        raise ConfigError(
            f"Invalid value {value!r} for configuration {key}: must be a positive number, or -1 for the broker's default",
            key=key,
        )
    return number


def _patterns(raw: Mapping[str, Any], key: str) -> re.Pattern[str] | None:
    """The comma-separated regular expressions under ``key`` as one pattern (any of them)."""
    value = raw.get(key)
    items = value if isinstance(value, list) else str(value or "").split(",")
    parts = [str(p).strip() for p in items if str(p).strip()]
    if not parts:
        return None
    for part in parts:
        try:
            re.compile(part)
        except re.error as exc:
            raise ConfigError(f"Invalid value {part!r} for configuration {key}: not a valid regular expression: {exc}", key=key) from None
    return re.compile("|".join(f"(?:{p})" for p in parts))


def _topic_configs(raw: Mapping[str, Any], prefix: str) -> dict[str, str]:
    own = (_INCLUDE, _EXCLUDE, _PARTITIONS, _REPLICATION)
    return {k[len(prefix) :]: _text(v) for k, v in raw.items() if k.startswith(prefix) and k[len(prefix) :] not in own}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
