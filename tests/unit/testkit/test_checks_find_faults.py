"""The connector kit's checks pass a well-behaved connector and fail one with each fault they
exist to find. The connectors here keep their "external system" in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import pytest
from pydantic import Field

from sluice.connectors.api import (
    PluginConfig,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SinkTaskContext,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
    TopicPartition,
    UnwritableRecordError,
)
from sluice.connectors.testkit import SinkConnectorChecks, SourceConnectorChecks

SourceFault = Literal["none", "ignores_offsets", "deaf_to_stop", "skips_one", "slow_poll"]
SinkFault = Literal["none", "overcommits", "commits_unwritten", "writes_then_refuses", "drops_bad_silently"]


class MemorySourceConfig(PluginConfig):
    inbox: str = Field(description="Name of the in-memory inbox")
    topic: str
    fault: SourceFault = "none"


INBOXES: dict[str, list[str]] = {}


class MemorySourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = MemorySourceConfig.parse(config)
        self.stopped = threading.Event()
        stored = context.offset_reader.offset({"inbox": self.cfg.inbox})
        self.next = 0 if stored is None or self.cfg.fault == "ignores_offsets" else int(stored["next"])

    def poll(self) -> list[SourceRecord]:
        if self.cfg.fault == "deaf_to_stop":
            time.sleep(3)  # and then some: stop() cannot cut it short
        items = INBOXES[self.cfg.inbox][self.next :]
        if not items:
            self.stopped.wait(1.0 if self.cfg.fault == "slow_poll" else 0.05)
            return []
        records = []
        for item in items:
            self.next += 1
            if self.cfg.fault == "skips_one" and self.next == 3:
                continue  # its offset is stored with the next record: lost for good
            records.append(SourceRecord(self.cfg.topic, item, source_partition={"inbox": self.cfg.inbox}, source_offset={"next": self.next}))
        return records

    def stop(self) -> None:
        self.stopped.set()


class MemorySource(SourceConnector):
    Config = MemorySourceConfig
    task_class = MemorySourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True)]


class MemorySinkConfig(PluginConfig):
    store: str
    fault: SinkFault = "none"


STORES: dict[str, list[int]] = {}


class MemorySinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        self.cfg = MemorySinkConfig.parse(config, ignore={"topics"})
        self.buffer: list[int] = []

    def put(self, records: Sequence[SinkRecord]) -> None:
        good = [r.value["id"] for r in records if "id" in r.value]
        bad = [r for r in records if "id" not in r.value]
        if bad and self.cfg.fault == "writes_then_refuses":
            self.buffer += good
        if bad and self.cfg.fault != "drops_bad_silently":
            raise UnwritableRecordError("no id", bad[0])
        self.buffer += good

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        if self.cfg.fault != "commits_unwritten":
            STORES[self.cfg.store] += self.buffer
            self.buffer = []
        if self.cfg.fault == "overcommits":
            return {tp: offset + 1 for tp, offset in offsets.items()}
        return offsets

    def stop(self) -> None:
        pass


class MemorySink(SinkConnector):
    Config = MemorySinkConfig
    task_class = MemorySinkTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True)] * max_tasks


def source_checks(fault: SourceFault) -> SourceConnectorChecks:
    class Checks(SourceConnectorChecks):
        connector_class = MemorySource
        data_timeout_s = 3.0
        settle_s = 0.3
        stop_bound_s = 1.0
        poll_bound_s = 0.5
        inbox = f"inbox-{fault}"

        def valid_config(self) -> dict[str, Any]:
            return {"inbox": self.inbox, "topic": "t", "fault": fault}

        def add_source_data(self, start: int, count: int) -> None:
            INBOXES[self.inbox] += [f"item {n}" for n in range(start, start + count)]

        def expected_identities(self, start: int, count: int) -> list[Hashable]:
            return [("t", None, f"item {n}") for n in range(start, start + count)]

    INBOXES[Checks.inbox] = []
    return Checks()


def sink_checks(fault: SinkFault) -> SinkConnectorChecks:
    class Checks(SinkConnectorChecks):
        connector_class = MemorySink
        commit_timeout_s = 0.5
        store: ClassVar[str] = f"store-{fault}"

        def valid_config(self) -> dict[str, Any]:
            return {"store": self.store, "fault": fault, "topics": "t"}

        def read_written(self) -> list[Hashable]:
            return list(STORES[self.store])

        def unwritable_record(self, topic: str, partition: int, offset: int) -> SinkRecord:
            return SinkRecord(topic, partition, offset, value={"no": "id"})

    STORES[Checks.store] = []
    return Checks()


SOURCE_CHECKS: list[Callable[[SourceConnectorChecks], None]] = [
    SourceConnectorChecks.test_validate_accepts_the_valid_config,
    SourceConnectorChecks.test_validate_names_the_key_of_each_invalid_config,
    SourceConnectorChecks.test_connector_starts_splits_work_and_its_tasks_start_and_stop,
    SourceConnectorChecks.test_poll_without_new_data_returns_in_bounded_time,
    SourceConnectorChecks.test_stop_from_another_thread_ends_a_running_poll,
    SourceConnectorChecks.test_restart_with_delivered_offsets_resumes_without_loss_or_repeats,
]
SINK_CHECKS: list[Callable[[SinkConnectorChecks], None]] = [
    SinkConnectorChecks.test_validate_accepts_the_valid_config,
    SinkConnectorChecks.test_validate_names_the_key_of_each_invalid_config,
    SinkConnectorChecks.test_connector_starts_splits_work_and_its_tasks_start_and_stop,
    SinkConnectorChecks.test_put_a_record_batch_then_pre_commit_makes_them_readable,
    SinkConnectorChecks.test_an_unwritable_record_is_refused_or_reported_alone,
]


@pytest.mark.parametrize("check", SOURCE_CHECKS, ids=lambda c: c.__name__)
def test_a_well_behaved_source_passes(check: Callable[[SourceConnectorChecks], None]) -> None:
    check(source_checks("none"))


@pytest.mark.parametrize("check", SINK_CHECKS, ids=lambda c: c.__name__)
def test_a_well_behaved_sink_passes(check: Callable[[SinkConnectorChecks], None]) -> None:
    check(sink_checks("none"))


@pytest.mark.parametrize(
    ("fault", "check", "message"),
    [
        ("ignores_offsets", SourceConnectorChecks.test_restart_with_delivered_offsets_resumes_without_loss_or_repeats, "came again"),
        ("skips_one", SourceConnectorChecks.test_restart_with_delivered_offsets_resumes_without_loss_or_repeats, "only 4 of 5 records"),
        ("deaf_to_stop", SourceConnectorChecks.test_stop_from_another_thread_ends_a_running_poll, "after stop()"),
        ("slow_poll", SourceConnectorChecks.test_poll_without_new_data_returns_in_bounded_time, "with no new data"),
    ],
)
def test_a_faulty_source_fails_the_check_for_its_fault(fault: SourceFault, check: Callable[[SourceConnectorChecks], None], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check(source_checks(fault))


@pytest.mark.parametrize(
    ("fault", "check", "message"),
    [
        ("overcommits", SinkConnectorChecks.test_put_a_record_batch_then_pre_commit_makes_them_readable, "beyond the"),
        ("commits_unwritten", SinkConnectorChecks.test_put_a_record_batch_then_pre_commit_makes_them_readable, "not readable"),
        ("writes_then_refuses", SinkConnectorChecks.test_an_unwritable_record_is_refused_or_reported_alone, "each once"),
        ("drops_bad_silently", SinkConnectorChecks.test_an_unwritable_record_is_refused_or_reported_alone, "alone"),
    ],
)
def test_a_faulty_sink_fails_the_check_for_its_fault(fault: SinkFault, check: Callable[[SinkConnectorChecks], None], message: str) -> None:
    with pytest.raises((AssertionError, AttributeError), match=message):
        check(sink_checks(fault))


def test_validate_that_names_the_wrong_key_fails() -> None:
    class WrongKey(MemorySource):
        @classmethod
        def validate(cls, raw: Mapping[str, Any]) -> Any:
            from sluice.connectors.api import ConfigError

            if "inbox" not in raw:
                raise ConfigError("something is missing", key="topic")
            return super().validate(raw)

    checks = source_checks("none")
    checks.connector_class = WrongKey  # type: ignore[misc]
    with pytest.raises(AssertionError, match="the error names 'topic'"):
        checks.test_validate_names_the_key_of_each_invalid_config()
