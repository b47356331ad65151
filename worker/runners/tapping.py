"""What the live tap (:mod:`~worker.observability.tap`) shows of a runner's batch: a source's
records as they go to Kafka, decoded again by the connector's converters; a sink's as its task
gets them. Called once per batch; it costs a dict lookup while nobody taps."""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import Converter, SinkRecordBatch
from sluice.worker.observability.tap import TAPS, Tapped, headers_of, jsonable, raw_value
from sluice.worker.runners.source_errors import Outgoing
from sluice.worker.status import ConnectorTaskId


def tap_source(task_id: ConnectorTaskId, out: Outgoing, key_converter: Converter, value_converter: Converter) -> None:
    """Offer a source batch the producer took to whoever taps the connector."""
    if TAPS.watching(task_id.connector):
        TAPS.offer(task_id.connector, task_id.task, lambda n: _source_rows(out, key_converter, value_converter, n))


def tap_sink(task_id: ConnectorTaskId, batch: SinkRecordBatch) -> None:
    """Offer a sink batch, before its task's ``put``, to whoever taps the connector."""
    if TAPS.watching(task_id.connector):
        TAPS.offer(task_id.connector, task_id.task, lambda n: _sink_rows(batch, n))


def _decoded(converter: Converter, topic: str, data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return jsonable(converter.to_connect_data(topic, data).value)
    except Exception:  # noqa: BLE001 - shown as it is then
        return raw_value(data)


def _source_rows(out: Outgoing, key_converter: Converter, value_converter: Converter, n: int) -> list[Tapped]:
    rows: list[Tapped] = []
    for i in range(min(n, len(out.values))):
        topic = out.topic if out.topic is not None else (out.topics or [""])[i]
        options = (out.options[i] if out.options is not None else None) or {}
        rows.append(
            {
                "topic": topic,
                "timestamp": options.get("timestamp"),
                "key": _decoded(key_converter, topic, out.keys[i]) if out.keys is not None else None,
                "value": _decoded(value_converter, topic, out.values[i]),
                "headers": headers_of(options.get("headers")),
            }
        )
    return rows


def _shown(value: Any) -> Any:
    return raw_value(bytes(value)) if isinstance(value, bytes | bytearray | memoryview) else jsonable(value)


def _sink_rows(batch: SinkRecordBatch, n: int) -> list[Tapped]:
    rows: list[Tapped] = []
    for i in range(min(n, len(batch))):
        record = batch[i]
        rows.append(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.kafka_offset,
                "timestamp": record.timestamp,
                "key": _shown(record.key),
                "value": _shown(record.value),
                "headers": headers_of(record.headers),
            }
        )
    return rows
