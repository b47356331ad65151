"""Source offsets in ``offset.storage.topic``: the store of distributed workers.

Records are exactly Kafka Connect's: key ``["<connector>",{<partition>}]``, value the offset's
JSON, a tombstone to delete, keys spread over the topic's partitions with Connect's murmur2
partitioner. Every worker reads the whole topic into memory at start and follows it, so when a
task moves to another worker the new owner sees the offsets the old one committed — the herder
calls :meth:`KafkaOffsetStore.read_to_end` before it starts a source task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sluice.offsets.base import (
    JsonMap,
    OffsetStoreError,
    encode_offset,
    offset_key,
    parse_offset_key,
    partition_identity,
)
from sluice.offsets.kafka_log import KafkaLog
from sluice.offsets.memory import MemoryOffsetStore


class KafkaOffsetStore(MemoryOffsetStore):
    """An :class:`~offsets.base.OffsetStore` backed by a compacted topic; ``put`` returns once Kafka has the records."""

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        *,
        client_id: str,
        producer_overrides: Mapping[str, Any] | None = None,
        consumer_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        #: connector → identities of the partitions whose last record in the topic is a tombstone.
        self._deleted: dict[str, set[bytes]] = {}
        self._log = KafkaLog(
            topic,
            bootstrap_servers,
            self._apply,
            client_id=f"{client_id}-offsets",
            producer_overrides=producer_overrides,
            consumer_overrides=consumer_overrides,
        )

    def start(self) -> None:
        try:
            self._log.start()
        except Exception as exc:
            raise OffsetStoreError(f"Cannot read source offsets from topic {self.topic}: {exc}") from exc

    def stop(self) -> None:
        self._log.stop()

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Wait until every offset committed anywhere before this call is in memory."""
        try:
            self._log.read_to_end(timeout)
        except Exception as exc:
            raise OffsetStoreError(f"Cannot catch up with source offsets in topic {self.topic}: {exc}") from exc

    def put(self, connector: str, offsets: Sequence[tuple[JsonMap, JsonMap | None]]) -> None:
        records = [
            (offset_key(connector, partition), None if offset is None else encode_offset(offset))
            for partition, offset in offsets
        ]
        if not records:
            return
        try:
            self._log.send_all(records)
        except Exception as exc:
            raise OffsetStoreError(f"Cannot write source offsets of {connector} to topic {self.topic}: {exc}") from exc
        super().put(connector, offsets)
        self._note_deleted(connector, [(partition_identity(p), o is None) for p, o in offsets])

    def knows(self, connector: str, partitions: Sequence[JsonMap]) -> list[bool]:
        """Whether the topic holds a record of each partition: an offset, or a tombstone (it was
        deleted here; as far as this process has read or written the topic)."""
        identities = [partition_identity(p) for p in partitions]
        with self._lock:
            entries = self._data.get(connector) or {}
            deleted = self._deleted.get(connector) or set()
            return [i in entries or i in deleted for i in identities]

    def _note_deleted(self, connector: str, changes: Sequence[tuple[bytes, bool]]) -> None:
        with self._lock:
            deleted = self._deleted.setdefault(connector, set())
            for identity, tombstone in changes:
                if tombstone:
                    deleted.add(identity)
                else:
                    deleted.discard(identity)
            if not deleted:
                del self._deleted[connector]

    def delete(self, connector: str) -> None:
        entries = self.all(connector)
        if entries:
            try:
                self._log.send_all([(offset_key(connector, partition), None) for partition, _ in entries])
            except Exception as exc:
                raise OffsetStoreError(
                    f"Cannot reset source offsets of {connector} in topic {self.topic}: {exc}"
                ) from exc
        super().delete(connector)
        self._note_deleted(connector, [(partition_identity(partition), True) for partition, _ in entries])

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        """A record from the topic (any worker's): apply it to the in-memory map."""
        if key is None:
            return
        try:
            connector, partition = parse_offset_key(key)
        except ValueError:
            return  # not an offset record (Connect skips these too)
        identity = partition_identity(partition)
        with self._lock:
            entries = self._data.setdefault(connector, {})
            deleted = self._deleted.setdefault(connector, set())
            if value is None:
                entries.pop(identity, None)
                deleted.add(identity)
            else:
                old = entries.get(identity)
                entries[identity] = (key if old is None else old[0], bytes(value))
                deleted.discard(identity)
            if not entries:
                del self._data[connector]
            if not deleted:
                del self._deleted[connector]
