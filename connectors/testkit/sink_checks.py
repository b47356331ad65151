"""The standard checks of a sink connector."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any, ClassVar

from sluice.connectors.api import (
    INT64_SCHEMA,
    STRING_SCHEMA,
    DataError,
    Schema,
    SinkConnector,
    SinkRecord,
    SinkRecordBatch,
    TopicPartition,
    UnwritableRecordError,
)
from sluice.connectors.testkit.common import ConnectorChecks
from sluice.connectors.testkit.harness import SinkTaskHarness, runtime_task_configs

#: The value schema of :meth:`SinkConnectorChecks.make_record`'s default records.
KIT_VALUE_SCHEMA = Schema.struct([("id", INT64_SCHEMA), ("name", STRING_SCHEMA)], name="sluice.testkit.Item")


class SinkConnectorChecks(ConnectorChecks):
    """Subclass it in a test module (``class TestMySink(SinkConnectorChecks)``) and fill the hooks:

    * :attr:`connector_class`, :meth:`valid_config` (with ``topics``), optionally :meth:`invalid_configs`;
    * :meth:`read_written`: the identities of what the external system holds now;
    * optionally :meth:`make_record` and :meth:`written_identity`, when the default records (a
      struct ``{"id": n, "name": "item n"}`` keyed ``"n"``) do not suit the sink.

    The checks: ``validate`` accepts the valid configuration and names the key of each invalid one;
    the connector starts and its task configurations start and stop tasks; records handed to
    ``put`` as the runtime's :class:`SinkRecordBatch` are readable once ``pre_commit`` returned their offsets, and
    ``pre_commit`` never returns a partition or an offset beyond what it was given; and, with
    :meth:`unwritable_record`, a bad record among good ones is refused (``UnwritableRecordError`` or
    ``DataError``) or reported through the errant record reporter, alone, and the good ones are
    written once each.

    Configure the sink so that everything it is handed becomes durable within
    :attr:`commit_timeout_s` of ``pre_commit`` calls (e.g. a ``flush.size`` that divides
    :attr:`records_per_partition`).
    """

    connector_class: ClassVar[type[SinkConnector]]
    #: How long ``pre_commit`` may take, over repeated calls, to commit everything put.
    commit_timeout_s: ClassVar[float] = 30.0
    #: Records per partition in each ``put`` (two partitions, two puts per check).
    records_per_partition: ClassVar[int] = 3

    # -- hooks ------------------------------------------------------------------------------------

    def read_written(self) -> Collection[Hashable]:
        """The identities (see :meth:`written_identity`) of everything the sink wrote so far,
        read the way a user would check (rows of the table, lines of the file, objects, documents)."""
        raise NotImplementedError(f"{type(self).__name__} must define read_written()")

    def make_record(self, topic: str, partition: int, offset: int, n: int) -> SinkRecord:
        """Record number ``n`` (unique in the test) at ``offset`` of ``topic``/``partition``."""
        return SinkRecord(
            topic,
            partition,
            offset,
            value={"id": n, "name": f"item {n}"},
            value_schema=KIT_VALUE_SCHEMA,
            key=str(n),
            key_schema=STRING_SCHEMA,
            timestamp=1_700_000_000_000 + n,
        )

    def written_identity(self, record: SinkRecord) -> Hashable:
        """How :meth:`read_written` will show ``record`` once written. Default: ``value["id"]``."""
        value = record.value
        return value["id"] if isinstance(value, dict) else value

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.unwritable_record is SinkConnectorChecks.unwritable_record:
            # A sink that can write any record has no unwritable-record check: it is not collected
            # (rather than collected and skipped, which would read as a check that could not run).
            cls.test_an_unwritable_record_is_refused_or_reported_alone = None  # type: ignore[assignment,method-assign]

    def unwritable_record(self, topic: str, partition: int, offset: int) -> SinkRecord | None:
        """A record at ``offset`` the sink cannot write (bad data, not a transient failure). A sink
        that can write anything leaves this alone: its unwritable-record check does not exist."""
        return None

    def sink_topic(self) -> str:
        """The topic the records are for: the first of the valid configuration's ``topics``."""
        topics = self.valid_config().get("topics")
        if isinstance(topics, str):
            topics = [t.strip() for t in topics.split(",") if t.strip()]
        assert topics, "valid_config() of a sink must name its topics (or override sink_topic())"
        return str(topics[0])

    # -- helpers ----------------------------------------------------------------------------------

    def sink_harness(self, partitions: Sequence[TopicPartition], *, max_tasks: int = 1, task: int = 0) -> SinkTaskHarness:
        """A started harness (``start``, then ``open(partitions)``) for task ``task`` of the valid configuration."""
        configs = runtime_task_configs(self.connector_class, self.valid_config(), max_tasks)
        return SinkTaskHarness(self.connector_class.task_class, configs[task], partitions, task_id=task).start()

    def start_and_stop_tasks(self, configs: list[dict[str, Any]]) -> None:
        harnesses: list[SinkTaskHarness] = []
        try:
            for task_id, config in enumerate(configs):
                harness = SinkTaskHarness(self.connector_class.task_class, config, [], task_id=task_id)
                harnesses.append(harness)
                harness.start()
        finally:
            for harness in harnesses:
                harness.close_and_stop()

    def _check_put_and_pre_commit(self) -> None:
        topic = self.sink_topic()
        partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        harness = self.sink_harness(partitions)
        put: list[SinkRecord] = []
        n = 0
        try:
            for round_ in range(2):
                records = []
                for tp in partitions:
                    for i in range(self.records_per_partition):
                        records.append(self.make_record(tp.topic, tp.partition, round_ * self.records_per_partition + i, n))
                        n += 1
                harness.put(SinkRecordBatch.of(records))
                put += records
                given = {tp: (round_ + 1) * self.records_per_partition for tp in partitions}
                committed = harness.commit_all(given, self.commit_timeout_s)
                assert committed == given, f"after {self.commit_timeout_s}s pre_commit made {committed} durable of {given}"
                written = set(self.read_written())
                missing = [self.written_identity(r) for r in put if self.written_identity(r) not in written]
                assert not missing, f"committed but not readable: {missing[:10]} (round {round_ + 1})"
            reporter = harness.context.reporter
            assert reporter is not None and not reporter.reported, f"good records were reported as errant: {reporter.reported[:3] if reporter else None}"
        finally:
            harness.close_and_stop()

    def _put_as_the_runtime_does(self, harness: SinkTaskHarness, records: list[SinkRecord]) -> list[SinkRecord]:
        """``put`` the batch; on a ``DataError`` do what the runtime does, and return the records it
        set aside: the one an ``UnwritableRecordError`` names, after which the others are offered
        again; for a plain ``DataError``, each record offered alone, and those that fail alone."""
        pending, refused = list(records), list[SinkRecord]()
        while pending:
            try:
                harness.put(SinkRecordBatch.of(pending))
                return refused
            except UnwritableRecordError as exc:
                named = [r for r in pending if (r.partition, r.kafka_offset) == (exc.record.partition, exc.record.kafka_offset)]
                assert named, f"UnwritableRecordError names a record that is not in the batch: {exc.record!r}"
                refused.append(named[0])
                pending.remove(named[0])
            except DataError:
                for record in pending:
                    try:
                        harness.put(SinkRecordBatch.of([record]))
                    except DataError:
                        refused.append(record)
                return refused
        return refused

    # -- checks -----------------------------------------------------------------------------------

    def test_put_a_record_batch_then_pre_commit_makes_them_readable(self) -> None:
        self._check_put_and_pre_commit()

    def test_an_unwritable_record_is_refused_or_reported_alone(self) -> None:
        topic = self.sink_topic()
        tp = TopicPartition(topic, 0)
        bad = self.unwritable_record(topic, 0, 2)
        assert bad is not None, f"{type(self).__name__}.unwritable_record() returned None"
        good = [self.make_record(topic, 0, offset, offset) for offset in (0, 1, 3, 4)]
        harness = self.sink_harness([tp])
        try:
            refused = self._put_as_the_runtime_does(harness, [*good[:2], bad, *good[2:]])
            committed = harness.commit_all({tp: 5}, self.commit_timeout_s)
            assert committed == {tp: 5}, f"after {self.commit_timeout_s}s pre_commit made {committed} durable of offset 5"
            # A sink that writes asynchronously reports when it learns, at the latest by pre_commit.
            assert harness.context.reporter is not None
            reported = [record for record, _ in harness.context.reporter.reported]
            singled_out = sorted((r.partition, r.kafka_offset) for r in refused + reported)
            assert singled_out == [(0, 2)], f"refused {refused}, reported {reported}: expected the record at offset 2 alone"
            written = sorted(self.read_written(), key=repr)
            expected = sorted((self.written_identity(r) for r in good), key=repr)
            assert written == expected, "the good records, each once, and nothing else should be written"
        finally:
            harness.close_and_stop()
