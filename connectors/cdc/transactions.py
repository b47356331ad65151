"""Debezium's transaction metadata (``provide.transaction.metadata``).

With it on, a transaction's events are framed by a ``BEGIN`` and an ``END`` event on
``<topic.prefix>.transaction`` (the ``END`` one counting the events per table), and each event's
``transaction`` block says where it stands in its transaction. A transaction without captured
events gets neither. The database source says what identifies a transaction (PostgreSQL:
``<txId>:<LSN>``) when one begins; the events go to its :class:`ChangeBuffer` in stream order.
"""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import Schema, SourceRecord, Type
from sluice.connectors.cdc.emitter import ChangeBuffer

TX_KEY_SCHEMA = Schema.struct([("id", Schema(Type.STRING))], name="io.debezium.connector.common.TransactionMetadataKey")
TX_VALUE_SCHEMA = Schema.struct(
    [
        ("status", Schema(Type.STRING)),
        ("id", Schema(Type.STRING)),
        ("event_count", Schema(Type.INT64, optional=True)),
        (
            "data_collections",
            Schema.array(
                Schema.struct(
                    [("data_collection", Schema(Type.STRING)), ("event_count", Schema(Type.INT64))],
                    name="event.collection",
                ),
                optional=True,
            ),
        ),
        ("ts_ms", Schema(Type.INT64)),
    ],
    name="io.debezium.connector.common.TransactionMetadataValue",
)


class TransactionMetadata:
    """The transaction being decoded, counted for its metadata events. Thread: the task thread."""

    def __init__(self, topic: str, buffer: ChangeBuffer) -> None:
        self.topic = topic
        self.buffer = buffer
        self.id = ""
        self.ts_ms = 0
        self.events = 0
        self.collections: dict[str, int] = {}

    def begin(self, tx_id: str, ts_ms: int) -> None:
        """A transaction begins: nothing is emitted until its first captured event."""
        self.id = tx_id
        self.ts_ms = ts_ms
        self.events = 0
        self.collections = {}

    def block(self, collection: str) -> dict[str, Any]:
        """The ``transaction`` block of the next event of ``collection`` (``schema.table``); the
        transaction's ``BEGIN`` event goes first."""
        if not self.events:
            self._record("BEGIN")
        self.events += 1
        count = self.collections.get(collection, 0) + 1
        self.collections[collection] = count
        return {"id": self.id, "total_order": self.events, "data_collection_order": count}

    def end(self) -> None:
        """The transaction committed: its ``END`` event, if it had captured events."""
        if self.events:
            self._record("END")

    def _record(self, status: str) -> None:
        buffer = self.buffer
        if buffer.encoded:  # serialized records first, in their own batch
            buffer.outbox.append(buffer.take_encoded())
        end = status == "END"
        value = {
            "status": status,
            "id": self.id,
            "event_count": self.events if end else None,
            "data_collections": [{"data_collection": c, "event_count": n} for c, n in self.collections.items()]
            if end
            else None,
            "ts_ms": self.ts_ms,
        }
        buffer.records.append(
            SourceRecord(
                self.topic,
                value,
                TX_VALUE_SCHEMA,
                {"id": self.id},
                TX_KEY_SCHEMA,
                None,
                None,
                None,
                buffer.partition,
                buffer.batch_offset,
            )  # fmt: skip
        )
