"""The schemas of the events a CDC task emits besides row changes: Debezium's transaction
metadata (``<prefix>.transaction``) and heartbeats (``__debezium-heartbeat.<prefix>``)."""

from __future__ import annotations

from sluice.connectors.api import Schema, Type

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
HEARTBEAT_KEY_SCHEMA = Schema.struct(
    [("serverName", Schema(Type.STRING))], name="io.debezium.connector.common.ServerNameKey"
)
HEARTBEAT_VALUE_SCHEMA = Schema.struct([("ts_ms", Schema(Type.INT64))], name="io.debezium.connector.common.Heartbeat")
