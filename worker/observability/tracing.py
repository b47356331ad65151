"""OpenTelemetry traces of task batches, exported with OTLP over HTTP (the ``otel`` extra).

One trace per batch, never per record: a source batch is a ``sluice.source.batch`` span with the
children ``poll``, ``convert`` and ``produce``; a sink batch a ``sluice.sink.batch`` span with
``consume``, ``convert``, ``put`` and, when the offsets were committed after it (on the commit
interval, before another batch), ``commit``.
The root span carries the batch's topic-partitions, first and last offsets and record count.

Tracing is on when the worker's ``tracing.otlp.endpoint`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Otherwise a runner
holds ``None`` instead of a :class:`BatchTracer` (one attribute check per batch) and no
``opentelemetry`` module is ever imported. The runner measures its steps with ``time.time_ns()``
and hands the marks over once the batch is done, so the spans are built after the fact.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.connectors.api import SourceRecordBatch
from sluice.worker.status import ConnectorTaskId

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"

#: A step of a batch: its span name, when it ended (ns since the epoch) and its own attributes.
Step = tuple[str, int, Mapping[str, Any] | None]

_provider_lock = threading.Lock()
_provider: Any = None


def configure(endpoint: str | None) -> None:
    """Export to ``endpoint`` (the worker's ``tracing.otlp.endpoint``). Put in the environment, so
    the exporter and the task processes spawned from here see it too."""
    if endpoint:
        os.environ[ENDPOINT_ENV] = endpoint


def enabled() -> bool:
    """Whether an OTLP endpoint is configured in this process."""
    return bool(os.environ.get(TRACES_ENDPOINT_ENV) or os.environ.get(ENDPOINT_ENV))


def batch_tracer(task_id: ConnectorTaskId, kind: str) -> BatchTracer | None:
    """The tracer of a task's batches, or ``None`` when tracing is off."""
    if not enabled():
        return None
    return BatchTracer(task_id, kind)


def _tracer_provider() -> Any:
    """The process's one provider, made on first use: a batch span processor in front of the
    OTLP/HTTP exporter (which reads the endpoint and its other settings from ``OTEL_*``)."""
    global _provider
    with _provider_lock:
        if _provider is None:
            # Here, not at the top: the otel extra is optional and stays unimported while tracing is off.
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor
            except ImportError as exc:
                raise RuntimeError(
                    "tracing is configured (tracing.otlp.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) but OpenTelemetry "
                    "is not installed: pip install 'sluice[otel]'"
                ) from exc
            service = os.environ.get("OTEL_SERVICE_NAME") or "sluice"
            provider = TracerProvider(resource=Resource.create({"service.name": service}))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _provider = provider
        return _provider


class BatchTracer:
    """Builds one task's batch traces from the marks its runner took."""

    def __init__(self, task_id: ConnectorTaskId, kind: str) -> None:
        # Here, not at the top: see _tracer_provider.
        from opentelemetry import trace

        self._trace = trace
        self._provider = _tracer_provider()
        self._tracer = self._provider.get_tracer("sluice.worker.runners")
        self._root = f"sluice.{kind}.batch"
        self._base = {"sluice.connector": task_id.connector, "sluice.task": task_id.task, "messaging.system": "kafka"}
        self._last_batch: Any = None  # the context of the last batch's root span (None: a root commit span)

    def record(self, start_ns: int, steps: Sequence[Step], attributes: Mapping[str, Any]) -> None:
        """One batch's trace: the root span from ``start_ns`` to the last step's end, each step from
        the end of the one before it."""
        tracer = self._tracer
        root = tracer.start_span(self._root, start_time=start_ns, attributes={**self._base, **attributes})
        parent = self._trace.set_span_in_context(root)
        begun = start_ns
        for name, ended, own in steps:
            tracer.start_span(name, context=parent, start_time=begun, attributes=own).end(end_time=ended)
            begun = ended
        root.end(end_time=begun)
        self._last_batch = parent

    def commit(self, start_ns: int, end_ns: int, attributes: Mapping[str, Any]) -> None:
        """A ``commit`` span in the trace of the last batch recorded: the batch whose offsets it
        commits, with the ones before it (a commit follows its batches on an interval, so it may
        end after the batch's root span did)."""
        span = self._tracer.start_span("commit", context=self._last_batch, start_time=start_ns, attributes=attributes)
        span.end(end_time=end_ns)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Export what is buffered (a task stopping: its process may end next)."""
        self._provider.force_flush(int(timeout_s * 1000))


def source_attributes(polled: Any, records: int, topics: Sequence[str]) -> dict[str, Any]:
    """A source batch's attributes: its topics, source partition and first/last source offsets.

    A :class:`SourceRecordBatch` is asked for its last offset only: its other offsets may be
    computed on demand, record by record."""
    attributes: dict[str, Any] = {"messaging.batch.message_count": records, "sluice.topics": sorted(set(topics))}
    if isinstance(polled, SourceRecordBatch):
        first, last, partition = None, polled.last_offset, polled.source_partition
    else:
        first, last, partition = polled[0].source_offset, polled[-1].source_offset, polled[-1].source_partition
    if partition is not None:
        attributes["sluice.source.partition"] = _json(partition)
    if first is not None:
        attributes["sluice.source.offset.first"] = _json(first)
    if last is not None:
        attributes["sluice.source.offset.last"] = _json(last)
    return attributes


def sink_attributes(messages: Sequence[Any], consumed: Mapping[Any, int], partitions: int) -> dict[str, Any]:
    """A sink batch's attributes: ``topic-partition`` names with the first and last offset of each
    (same order). First offsets come from the batch's head, scanned until every one of the task's
    ``partitions`` was seen (one step with one partition); last ones from ``consumed``, the next
    offset of each partition once the batch is tracked."""
    first: dict[tuple[str, int], int] = {}
    for m in messages:
        tp = (m.topic(), m.partition())
        if tp not in first:
            first[tp] = m.offset()
            if len(first) >= partitions:
                break
    names, firsts, lasts = [], [], []
    for tp, tp_first in sorted(first.items()):
        names.append(f"{tp[0]}-{tp[1]}")
        firsts.append(tp_first)
        lasts.append(next((o - 1 for k, o in consumed.items() if (k.topic, k.partition) == tp), tp_first))
    return {
        "messaging.batch.message_count": len(messages),
        "sluice.topic_partitions": names,
        "sluice.offset.first": firsts,
        "sluice.offset.last": lasts,
    }


def commit_attributes(committed: Sequence[Any]) -> dict[str, Any]:
    """The committed offsets (Kafka ``TopicPartition`` objects) of a ``commit`` span."""
    return {
        "sluice.topic_partitions": [f"{tp.topic}-{tp.partition}" for tp in committed],
        "sluice.offset.committed": [tp.offset for tp in committed],
    }


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
