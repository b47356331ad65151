"""The standard checks of a source connector."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Hashable
from typing import Any, ClassVar

from sluice.connectors.api import SourceConnector, SourceRecord
from sluice.connectors.testkit.common import ConnectorChecks, frozen
from sluice.connectors.testkit.contexts import MemoryOffsetReader
from sluice.connectors.testkit.harness import SourceTaskHarness, runtime_task_configs


class SourceConnectorChecks(ConnectorChecks):
    """Subclass it in a test module (``class TestMySource(SourceConnectorChecks)``) and fill the hooks:

    * :attr:`connector_class`, :meth:`valid_config` (and optionally :meth:`invalid_configs`);
    * :meth:`add_source_data`: make items appear in the external system (lines, rows, objects);
    * optionally :meth:`record_identity`, to say which item a record stands for (and which records
      to ignore, such as heartbeats), and :meth:`expected_identities`, to compare exactly.

    The checks: ``validate`` accepts the valid configuration and names the key of each invalid one;
    the connector starts and its task configurations start and stop tasks; a poll without new
    data returns within :attr:`poll_bound_s`; ``stop()`` from another thread ends a running poll
    within :attr:`stop_bound_s`; a task restarted with the offsets of what it delivered goes on
    with nothing lost and nothing repeated, and its offsets are JSON.
    """

    connector_class: ClassVar[type[SourceConnector]]
    #: How long a poll with nothing new may take (the SPI asks for about a second).
    poll_bound_s: ClassVar[float] = 3.0
    #: How long a poll may go on after ``stop()`` was called from another thread.
    stop_bound_s: ClassVar[float] = 5.0
    #: How long to wait for items added to the external system to come out of ``poll``.
    data_timeout_s: ClassVar[float] = 30.0
    #: How long to keep polling after the last expected record, to catch repeats.
    settle_s: ClassVar[float] = 1.5
    #: Items added before the first run and before the restart.
    first_count: ClassVar[int] = 5
    second_count: ClassVar[int] = 7

    # -- hooks ------------------------------------------------------------------------------------

    def add_source_data(self, start: int, count: int) -> None:
        """Make items number ``start`` … ``start + count - 1`` appear in the external system, each
        becoming one record. A source that makes up its data (a generator) may do nothing."""
        raise NotImplementedError(f"{type(self).__name__} must define add_source_data()")

    def record_identity(self, record: SourceRecord) -> Hashable | None:
        """Which item ``record`` stands for (equal for a repeat), or ``None`` to ignore the record
        (a heartbeat, a schema change). Default: its topic, key and value."""
        return (record.topic, frozen(record.key), frozen(record.value))

    def expected_identities(self, start: int, count: int) -> list[Hashable] | None:
        """The identities items ``start`` … ``start + count - 1`` must come out as; ``None`` (the
        default) checks only that the right number of distinct records came out."""
        return None

    # -- helpers ----------------------------------------------------------------------------------

    def source_harness(self, offsets: MemoryOffsetReader, *, max_tasks: int = 1, task: int = 0) -> SourceTaskHarness:
        """A started harness for task ``task`` of the valid configuration."""
        configs = runtime_task_configs(self.connector_class, self.valid_config(), max_tasks)
        return SourceTaskHarness(self.connector_class.task_class, configs[task], offsets, task_id=task).start()

    def start_and_stop_tasks(self, configs: list[dict[str, Any]]) -> None:
        offsets = MemoryOffsetReader()
        harnesses: list[SourceTaskHarness] = []
        try:
            for task_id, config in enumerate(configs):
                harness = SourceTaskHarness(self.connector_class.task_class, config, offsets, task_id=task_id)
                harnesses.append(harness)
                harness.start()
        finally:
            for harness in harnesses:
                harness.stop()

    def _identities(self, records: list[SourceRecord]) -> list[Hashable]:
        identities = []
        for record in records:
            assert isinstance(record, SourceRecord), f"poll returned {type(record).__name__}, not SourceRecord"
            assert isinstance(record.topic, str) and record.topic, f"record without a topic: {record!r}"
            # The runtime stores them as JSON: anything else fails at the first offset flush.
            json.dumps(record.source_partition)
            json.dumps(record.source_offset)
            identity = self.record_identity(record)
            if identity is not None:
                identities.append(identity)
        return identities

    # -- checks -----------------------------------------------------------------------------------

    def test_poll_without_new_data_returns_in_bounded_time(self) -> None:
        harness = self.source_harness(MemoryOffsetReader())
        try:
            for _ in range(3):
                began = time.monotonic()
                harness.poll()
                took = time.monotonic() - began
                assert took <= self.poll_bound_s, f"poll() took {took:.1f}s with no new data (bound {self.poll_bound_s}s)"
        finally:
            harness.stop()

    def test_stop_from_another_thread_ends_a_running_poll(self) -> None:
        harness = self.source_harness(MemoryOffsetReader())
        stopping = threading.Event()
        errors: list[BaseException] = []

        def poll_loop() -> None:
            try:
                while not stopping.is_set():
                    harness.poll()
            except Exception as exc:  # noqa: BLE001 - an error before stop() is the finding
                if not stopping.is_set():
                    errors.append(exc)

        poller = threading.Thread(target=poll_loop, name="kit-poll", daemon=True)
        poller.start()
        time.sleep(0.5)  # well inside a poll that waits for data
        stopping.set()
        stopper = threading.Thread(target=harness.stop, name="kit-stop", daemon=True)
        began = time.monotonic()
        stopper.start()
        stopper.join(self.stop_bound_s)
        poller.join(max(0.0, self.stop_bound_s - (time.monotonic() - began)))
        took = time.monotonic() - began
        assert not errors, f"poll() failed before stop(): {errors[0]!r}"
        assert not stopper.is_alive(), f"stop() did not return within {self.stop_bound_s}s"
        assert not poller.is_alive(), f"poll() still running {took:.1f}s after stop() (bound {self.stop_bound_s}s)"

    def test_restart_with_delivered_offsets_resumes_without_loss_or_repeats(self) -> None:
        offsets = MemoryOffsetReader()
        total = self.first_count + self.second_count
        self.add_source_data(0, self.first_count)
        first = self.source_harness(offsets)
        try:
            before = self._identities(first.poll_until(self.first_count, self.data_timeout_s))
        finally:
            first.stop()
        assert len(before) >= self.first_count, (
            f"only {len(before)} of {self.first_count} records within {self.data_timeout_s}s"
        )
        self.add_source_data(self.first_count, self.second_count)
        second = self.source_harness(offsets)
        try:
            after = self._identities(second.poll_until(total - len(before), self.data_timeout_s))
            after += self._identities(second.poll_for(self.settle_s))
        finally:
            second.stop()
        repeated = sorted(map(repr, set(before) & set(after)))
        assert not repeated, f"records delivered before the restart came again after it: {repeated[:5]}"
        everything = before + after
        assert len(set(everything)) == len(everything), "a record came twice within one run"
        assert len(everything) == total, f"{len(everything)} records for {total} items (before: {len(before)})"
        expected = self.expected_identities(0, total)
        if expected is not None:
            missing = [item for item in expected if item not in set(everything)]
            unexpected = [item for item in everything if item not in set(expected)]
            assert not missing and not unexpected, f"missing {missing[:5]}, unexpected {unexpected[:5]}"
