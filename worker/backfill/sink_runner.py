"""A sink connector's task run in-process over records a Spark job read — no consumer group at all.

This is how a topic range is reprocessed into a sink (and exported to S3 with the S3 sink's layout)
without touching the live connector: Spark's Kafka data source reads the range in the JVM, one
Spark partition per Kafka partition in offset order; each partition's rows arrive here as Arrow
batches (in a Spark Python worker), are converted with the connector's own converters (into the
batches the worker's sink runner builds, :class:`~sluice.worker.runners.sink_batches.SinkBatchBuilder`)
and transforms, and handed to a task of the connector. Nothing commits offsets anywhere.

The order of calls matches the worker's sink runner: ``start`` → ``open`` → ``put``… →
``flush`` / ``pre_commit`` → ``close`` → ``stop``, with ``end_of_input`` before the last flush:
a range ends, so the task writes what it held back for more records. Transforms run per record,
as in the stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from sluice.connectors.api import ConnectError, LocalFiles, SinkRecordBatch, SinkTask, TopicPartition
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.execution.transform_chain import build_chain
from sluice.worker.runners.sink_batches import ReadColumns, SinkBatchBuilder
from sluice.worker.worker import Worker

log = logging.getLogger(__name__)


class _Context:
    """The :class:`~connectors.api.SinkTaskContext` of an in-process backfill task."""

    def __init__(self, name: str, partitions: set[TopicPartition], local_files: LocalFiles) -> None:
        self._name = name
        self._assignment = partitions
        self._local_files = local_files

    @property
    def connector_name(self) -> str:
        return self._name

    @property
    def task_id(self) -> int:
        return 0

    @property
    def local_files(self) -> LocalFiles:
        return self._local_files

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def pause(self, *partitions: TopicPartition) -> None:
        """Back-pressure has nothing to pause: the next put simply comes later."""

    def resume(self, *partitions: TopicPartition) -> None:
        """See :meth:`pause`."""

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        raise ConnectError("a backfill cannot rewind: its records come from a fixed range")

    def request_commit(self) -> None:
        """There is nothing to commit; flushes happen at the end of each Spark partition."""

    @property
    def errant_record_reporter(self) -> None:
        return None


class InProcessSink:
    """One task of the sink connector ``config`` (a ``POST /connectors`` config) over given records."""

    def __init__(self, name: str, config: Mapping[str, Any], bootstrap_servers: str) -> None:
        worker = Worker(
            WorkerConfig.from_mapping({"bootstrap.servers": bootstrap_servers}), PluginRegistry([]), MemoryOffsetStore()
        )
        validated = worker.validate(dict(config))
        resolved = worker.resolve(validated.raw)
        self._batches = SinkBatchBuilder(*worker._converters(validated.common, resolved))
        self._chain = build_chain(resolved, worker.plugins)
        connector = validated.connector_class()
        connector.start(validated.own)
        try:
            task_config = connector.task_configs(1)[0]
        finally:
            connector.stop()
        self.task: SinkTask = cast(SinkTask, connector.task_class())
        self._task_config = worker.resolve(task_config)
        self._name = name
        self._local_files = worker.path_grant  # what the config was validated against
        self._started = False
        self.rows = 0
        self.bytes = 0

    def start(self, partitions: Iterable[TopicPartition]) -> None:
        tps = sorted(set(partitions))
        self.task.start(self._task_config, _Context(self._name, set(tps), self._local_files))
        self._started = True
        self.task.open(tps)
        self._tps = tps

    def put_columns(
        self,
        topic: str,
        partitions: Sequence[int],
        offsets: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None],
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None],
    ) -> None:
        """Convert one batch of raw records (one topic) and put it."""
        consumed = ReadColumns(partitions, offsets, timestamps, headers)
        batch = self._batches.build(topic, list(keys), list(values), consumed)
        if self._chain is None:
            self.task.put(batch)
        else:
            for part in SinkRecordBatch.group([r for r in self._chain(list(batch)) if r is not None]):
                self.task.put(part)
        self.rows += len(values)
        self.bytes += sum(len(v) for v in values if v is not None) + sum(len(k) for k in keys if k is not None)

    def finish(self, next_offsets: Mapping[TopicPartition, int]) -> None:
        """Flush what the task holds and close it (as a runner stopping after its last poll)."""
        self.task.end_of_input(dict(next_offsets))
        self.task.flush(dict(next_offsets))
        self.task.pre_commit(dict(next_offsets))
        self.task.close(self._tps)
        self.stop()

    def stop(self) -> None:
        if self._started:
            self._started = False
            try:
                self.task.stop()
            except Exception:
                log.warning("Stopping the backfill sink task failed", exc_info=True)
        if self._chain is not None:
            self._chain.close()


def sink_partition_function(name: str, config: Mapping[str, Any], bootstrap_servers: str) -> Any:
    """The ``mapInArrow`` function that feeds one Spark partition's records to a fresh sink task.

    Input columns: topic, partition, offset, key, value, timestamp_ms, headers. Output: one row
    with the partition's record and byte counts.
    """
    config = dict(config)

    def run(batches: Iterable[Any]) -> Iterable[Any]:
        import pyarrow as pa

        sink: InProcessSink | None = None
        last: dict[TopicPartition, int] = {}
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                cols = batch.to_pydict()
                topics = cols["topic"]
                if sink is None:
                    sink = InProcessSink(name, config, bootstrap_servers)
                    sink.start({TopicPartition(t, p) for t, p in zip(topics, cols["partition"])})
                start = 0
                n = len(topics)
                while start < n:  # one put per run of equal topics
                    end = start + 1
                    while end < n and topics[end] == topics[start]:
                        end += 1
                    sl = slice(start, end)
                    headers = [[(h["key"], h["value"]) for h in hs] if hs else None for hs in cols["headers"][sl]]
                    sink.put_columns(
                        topics[start],
                        cols["partition"][sl],
                        cols["offset"][sl],
                        cols["key"][sl],
                        cols["value"][sl],
                        cols["timestamp_ms"][sl],
                        headers,
                    )
                    start = end
                for t, p, o in zip(topics, cols["partition"], cols["offset"]):
                    last[TopicPartition(t, p)] = o + 1
            if sink is not None:
                sink.finish(last)
        except BaseException:
            if sink is not None:
                sink.stop()
            raise
        rows = sink.rows if sink else 0
        size = sink.bytes if sink else 0
        yield pa.RecordBatch.from_pydict({"rows": [rows], "bytes": [size]})

    return run
