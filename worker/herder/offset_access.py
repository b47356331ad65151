"""Reading, altering and resetting a connector's offsets (KIP-875), for sources and sinks.

Source offsets live in the worker's :class:`~offsets.OffsetStore`; sink offsets are the committed
offsets of the consumer group ``connect-<connector>``, read and written with the Kafka admin API.
The JSON shapes are Connect's: ``{"partition": {...}, "offset": {...}}`` with sink partitions
spelled ``{"kafka_topic", "kafka_partition"}`` and sink offsets ``{"kafka_offset"}``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from sluice.connectors.api import ConnectError, TopicPartition
from sluice.offsets import OffsetStore
from sluice.worker.herder.api import BadRequest, Conflict

ADMIN_TIMEOUT_S = 30.0
#: How long an offsets change waits for the consumer group to empty: a stopped sink's consumers may
#: still be leaving it for a moment (the broker refuses to change a group that has members). Short:
#: the REST request waits meanwhile, and a member that does not leave by itself (a killed task's,
#: until the group's session timeout) is better reported at once.
GROUP_LEAVE_WAIT_S = 1.0
#: The broker's answers for a group that still has members (an admin offsets commit to a live group
#: is refused as from an unknown member).
_GROUP_BUSY = (KafkaError.NON_EMPTY_GROUP, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS)

#: One requested change: the partition and its new offset (``None`` resets it).
OffsetChange = tuple[dict[str, Any], dict[str, Any] | None]

#: Kafka's limits: partitions are int32, offsets int64; topic names as Kafka's ``Topic.validate`` allows them.
MAX_PARTITION = 2**31 - 1
MAX_LONG = 2**63 - 1
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _check_storable(value: Any, where: str) -> None:
    """Refuse numbers no offset store can hold (Connect's offsets are Java longs and doubles)."""
    if isinstance(value, Mapping):
        for item in value.values():
            _check_storable(item, where)
    elif isinstance(value, list):
        for item in value:
            _check_storable(item, where)
    elif isinstance(value, int) and not isinstance(value, bool) and not -MAX_LONG - 1 <= value <= MAX_LONG:
        raise BadRequest(f"{where} holds the integer {value}, outside the 64-bit range offsets allow")
    elif isinstance(value, float) and not math.isfinite(value):
        raise BadRequest(f"{where} holds {value}, but offsets may only hold finite numbers")


def parse_changes(entries: Sequence[Mapping[str, Any]]) -> list[OffsetChange]:
    """Check the body of ``PATCH /connectors/{c}/offsets`` and return its (partition, offset) pairs."""
    if not entries:
        raise BadRequest("Partitions / offsets need to be provided for an alter offsets request")
    changes: list[OffsetChange] = []
    for entry in entries:
        partition, offset = entry.get("partition"), entry.get("offset")
        if not isinstance(partition, Mapping):
            raise BadRequest("The partition of every offset entry must be a JSON object (source partitions may not be null)")
        if offset is not None and not isinstance(offset, Mapping):
            raise BadRequest(f"The offset of partition {dict(partition)!r} must be a JSON object or null")
        _check_storable(partition, "A partition")
        _check_storable(offset, f"The offset of partition {dict(partition)!r}")
        changes.append((dict(partition), dict(offset) if offset is not None else None))
    return changes


def sink_changes(changes: Sequence[OffsetChange]) -> dict[TopicPartition, int | None]:
    """Sink offsets as ``{TopicPartition: offset or None}``, refusing any other shape with Connect's words."""
    result: dict[TopicPartition, int | None] = {}
    for partition, offset in changes:
        topic, number = partition.get("kafka_topic"), partition.get("kafka_partition")
        if not isinstance(topic, str) or not topic or number is None:
            raise BadRequest(
                "The partition for a sink connector offset must contain the keys 'kafka_topic' and 'kafka_partition'"
            )
        if topic in (".", "..") or not _LEGAL_TOPIC.fullmatch(topic):
            raise BadRequest(
                f"Invalid topic name {topic!r}: Kafka topic names are 1 to 249 ASCII letters, digits, '.', '_' and '-'"
            )
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_PARTITION:
            raise BadRequest(f"Kafka partitions must be valid non-negative integers, got {number!r}")
        value: int | None = None
        if offset is not None:
            if "kafka_offset" not in offset:
                raise BadRequest("The offset for a sink connector should either be null or contain the key 'kafka_offset'")
            value = offset["kafka_offset"]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LONG:
                raise BadRequest(f"Kafka offsets must be valid non-negative integers, got {value!r}")
        result[TopicPartition(topic, number)] = value
    return result


class SourceOffsets:
    """A source connector's offsets in the worker's offset store."""

    def __init__(self, store: OffsetStore) -> None:
        self._store = store

    def get(self, connector: str) -> list[dict[str, Any]]:
        return [{"partition": dict(p), "offset": dict(o)} for p, o in self._store.all(connector)]

    def alter(self, connector: str, changes: Sequence[OffsetChange]) -> None:
        self._store.put(connector, list(changes))

    def reset(self, connector: str) -> None:
        self._store.delete(connector)


class SinkOffsets:
    """A sink connector's offsets: the committed offsets of its consumer group."""

    def __init__(self, admin_config: Mapping[str, Any]) -> None:
        self._admin_config = dict(admin_config)

    def _admin(self) -> AdminClient:
        return AdminClient(self._admin_config)

    # Each future is read with exception() before result(): raised, its exception would get a
    # traceback holding the calling frame (the AdminClient, and the future holding the exception: a
    # reference cycle), and the garbage collector may destroy the client on a librdkafka thread, where
    # rd_kafka_destroy() aborts the process. Never raised, the exception holds no frame, and the
    # client goes when the method returns, on the caller's thread.

    def get(self, group: str) -> list[dict[str, Any]]:
        admin = self._admin()
        try:
            future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        except KafkaException as exc:
            raise ConnectError(f"Failed to read the offsets of consumer group {group}: {_text(exc)}") from exc
        failure = future.exception(timeout=ADMIN_TIMEOUT_S)
        if failure is not None:
            if _is(failure, KafkaError.GROUP_ID_NOT_FOUND):
                return []
            raise ConnectError(f"Failed to read the offsets of consumer group {group}: {_text(failure)}") from failure
        result = future.result()
        entries = [
            {"partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition}, "offset": {"kafka_offset": tp.offset}}
            for tp in result.topic_partitions or []
            if tp.offset >= 0
        ]
        return sorted(entries, key=lambda e: (e["partition"]["kafka_topic"], e["partition"]["kafka_partition"]))

    def alter(self, group: str, changes: Mapping[TopicPartition, int | None]) -> None:
        admin = self._admin()
        resets = [tp for tp, offset in changes.items() if offset is None]
        # The admin API of librdkafka's Python binding cannot delete one partition's committed
        # offset, so a reset moves it to the log start: what auto.offset.reset=earliest (the sink
        # consumer's default) would read after a real deletion.
        earliest = self._earliest(admin, resets) if resets else {}
        targets = [
            KafkaTopicPartition(tp.topic, tp.partition, earliest[tp] if offset is None else offset)
            for tp, offset in changes.items()
        ]
        _change_group(
            group, "alter", lambda: admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, targets)])[group]
        )

    def reset(self, group: str) -> None:
        admin = self._admin()
        _change_group(
            group,
            "reset",
            lambda: admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group],
            done_if=KafkaError.GROUP_ID_NOT_FOUND,
        )

    def _earliest(self, admin: AdminClient, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        request = {KafkaTopicPartition(tp.topic, tp.partition): OffsetSpec.earliest() for tp in partitions}
        try:
            futures = admin.list_offsets(request, request_timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            raise BadRequest(f"Cannot reset the offsets of {list(map(str, partitions))}: {_text(exc)}") from exc
        earliest: dict[TopicPartition, int] = {}
        for ktp, future in futures.items():
            failure = future.exception(timeout=ADMIN_TIMEOUT_S)
            if failure is not None:
                raise BadRequest(f"Cannot reset the offsets of {list(map(str, partitions))}: {_text(failure)}") from failure
            earliest[TopicPartition(ktp.topic, ktp.partition)] = future.result().offset
        return earliest


def _change_group(group: str, verb: str, request: Callable[[], Any], done_if: int | None = None) -> None:
    """Run an admin ``request`` that changes ``group``'s offsets (its future's outcome; ``done_if``: an
    error code that counts as done), again while the broker says the group still has members, up
    to :data:`GROUP_LEAVE_WAIT_S`; then a 409 for a group that kept its members, which the caller
    can fix (stop what consumes with the connector's group), a 500 for any other failure."""
    deadline = time.monotonic() + GROUP_LEAVE_WAIT_S
    while True:
        try:
            future = request()
        except KafkaException as exc:
            raise ConnectError(f"Failed to {verb} the offsets of consumer group {group}: {_text(exc)}") from exc
        failure = future.exception(timeout=ADMIN_TIMEOUT_S)
        if failure is None or (done_if is not None and _is(failure, done_if)):
            return
        if not any(_is(failure, code) for code in _GROUP_BUSY):
            raise ConnectError(f"Failed to {verb} the offsets of consumer group {group}: {_text(failure)}") from failure
        if time.monotonic() >= deadline:
            raise Conflict(
                f"Cannot {verb} the offsets of consumer group {group}: it still has active members after "
                f"{GROUP_LEAVE_WAIT_S:.0f} s ({_text(failure)}). The connector's tasks may not have stopped "
                "completely yet (a task whose process was killed stays a member until the group's "
                "session.timeout.ms passes), or another client consumes with this group; try again once the "
                "group is empty."
            ) from failure
        time.sleep(0.5)


def _is(exc: BaseException, code: int) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() == code


def _text(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)
