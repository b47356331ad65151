"""The sink task against an in-memory cluster: what is committed, retries, the DLQ, back-pressure."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sluice.connectors.api import ConnectError, DataError, RetriableError, SinkRecord, SinkRecordBatch, TopicPartition
from sluice.connectors.sink.elasticsearch.task import ElasticsearchSinkTask
from tests.unit.connectors.elasticsearch.fakes import FakeCluster, RecordingContext

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    ElasticsearchSinkTask.client_factory = lambda cfg: fake
    yield fake
    fake.gate.set()
    del ElasticsearchSinkTask.client_factory  # back to the class default


def _task(context: RecordingContext | None = None, **config: Any) -> tuple[ElasticsearchSinkTask, RecordingContext]:
    ctx = context or RecordingContext({TP0, TP1})
    task = ElasticsearchSinkTask()
    settings = {"connection.url": "http://h:9200", "retry.backoff.ms": "1", **{k: str(v) for k, v in config.items()}}
    task.start(settings, ctx)  # type: ignore[arg-type]
    return task, ctx


def _records(n: int, start: int = 0, partition: int = 0, value: Callable[[int], Any] = lambda i: {"i": i}) -> list[SinkRecord]:
    return [SinkRecord("t", partition, i, value(i), key=f"k{i}") for i in range(start, start + n)]


def _eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_documents_land_and_offsets_follow_acknowledgements(cluster: FakeCluster) -> None:
    task, _ = _task()
    try:
        task.put(SinkRecordBatch.of(_records(5) + _records(3, start=100, partition=1)))
        task.flush({})
        assert cluster.indices["t"] == {f"k{i}": {"i": i} for i in [*range(5), *range(100, 103)]}
        assert task.pre_commit({TP0: 5, TP1: 103}) == {TP0: 5, TP1: 103}
    finally:
        task.stop()


def test_nothing_is_committed_past_an_unacknowledged_request(cluster: FakeCluster) -> None:
    task, _ = _task(batch_size=2)
    try:
        task.put(SinkRecordBatch.of(_records(2)))
        task.flush({})
        cluster.gate.clear()  # the next requests hang (a slow node)
        task.put(SinkRecordBatch.of(_records(4, start=2)))
        assert task.pre_commit({TP0: 6}) == {TP0: 2}
        cluster.gate.set()
        _eventually(lambda: task.pre_commit({TP0: 6}) == {TP0: 6})
    finally:
        task.stop()


def test_a_node_going_away_is_retried_with_backoff(cluster: FakeCluster) -> None:
    task, _ = _task(max_retries=50)
    try:
        task.put(SinkRecordBatch.of(_records(1)))
        task.flush({})
        cluster.down = True
        task.put(SinkRecordBatch.of(_records(3, start=1)))
        time.sleep(0.2)
        assert task.pre_commit({TP0: 4}) == {TP0: 1}
        cluster.down = False
        task.flush({})
        assert len(cluster.indices["t"]) == 4
        assert task.pre_commit({TP0: 4}) == {TP0: 4}
    finally:
        task.stop()


def test_the_task_fails_after_max_retries(cluster: FakeCluster) -> None:
    task, _ = _task(max_retries=2)
    try:
        cluster.fail_requests = 10
        task.put(SinkRecordBatch.of(_records(1)))
        with pytest.raises(ConnectError, match="max.retries=2"):
            task.flush({})
        with pytest.raises(ConnectError):
            task.put(SinkRecordBatch.of(_records(1, start=1)))
    finally:
        task.stop()


def test_an_unreachable_cluster_while_preparing_the_index_is_retriable(cluster: FakeCluster) -> None:
    task, _ = _task()
    try:
        cluster.down = True
        with pytest.raises(RetriableError):
            task.put(SinkRecordBatch.of(_records(1)))
    finally:
        task.stop()


def test_failed_items_are_retried_from_the_first_failure_on(cluster: FakeCluster) -> None:
    task, _ = _task(max_in_flight_requests=1)  # one lane: all three in one request
    attempts: dict[str, int] = {}

    def status(op: str, meta: dict[str, Any]) -> int | None:
        attempts[meta["_id"]] = attempts.get(meta["_id"], 0) + 1
        return 429 if meta["_id"] == "k1" and attempts["k1"] < 3 else None

    cluster.item_status = status
    try:
        task.put(SinkRecordBatch.of(_records(3)))
        task.flush({})
        assert attempts == {"k0": 1, "k1": 3, "k2": 3}
        assert set(cluster.indices["t"]) == {"k0", "k1", "k2"}
    finally:
        task.stop()


def test_malformed_documents_go_to_the_reporter_and_then_count_as_done(cluster: FakeCluster) -> None:
    cluster.refuse = lambda doc: doc.get("i") == 2
    task, ctx = _task(behavior_on_malformed_documents="warn")
    try:
        task.put(SinkRecordBatch.of(_records(5)))
        task.flush({})
        assert set(cluster.indices["t"]) == {"k0", "k1", "k3", "k4"}
        assert [(r.kafka_offset, "mapper_parsing_exception" in str(e)) for r, e in ctx.reported] == [(2, True)]
        assert task.pre_commit({TP0: 5}) == {TP0: 5}
    finally:
        task.stop()


def test_malformed_documents_fail_the_task_by_default(cluster: FakeCluster) -> None:
    cluster.refuse = lambda doc: doc.get("i") == 1
    task, ctx = _task(RecordingContext({TP0, TP1}, reporter=False))
    try:
        task.put(SinkRecordBatch.of(_records(3)))
        with pytest.raises(ConnectError, match="offset 1"):
            task.flush({})
        assert ctx.reported == []
    finally:
        task.stop()


def test_malformed_documents_go_to_the_errant_record_reporter_when_there_is_one(cluster: FakeCluster) -> None:
    # behavior.on.malformed.documents=fail leaves the record to errors.tolerance (the reporter fails
    # the task under none, after the DLQ if there is one; dead-letters it under all).
    cluster.refuse = lambda doc: doc.get("i") == 1
    task, ctx = _task()
    try:
        task.put(SinkRecordBatch.of(_records(3)))
        task.flush({})
        assert [r.kafka_offset for r, _ in ctx.reported] == [1]
        assert set(cluster.indices["t"]) == {"k0", "k2"}
        assert task.pre_commit({TP0: 3}) == {TP0: 3}
    finally:
        task.stop()


def test_version_conflicts_count_as_written(cluster: FakeCluster) -> None:
    cluster.item_status = lambda op, meta: 409
    task, ctx = _task(external_version_field="i")
    try:
        task.put(SinkRecordBatch.of(_records(3)))
        task.flush({})
        assert task.pre_commit({TP0: 3}) == {TP0: 3}
        assert ctx.reported == []
    finally:
        task.stop()


def test_invalid_records_are_reported_dropped_or_fail(cluster: FakeCluster) -> None:
    bad = _records(3, value=lambda i: "not json" if i == 1 else {"i": i})
    task, ctx = _task()
    try:
        task.put(SinkRecordBatch.of(bad))
        assert [r.kafka_offset for r, _ in ctx.reported] == [1]
    finally:
        task.stop()
    task, ctx = _task(RecordingContext({TP0}, reporter=False), drop_invalid_message="true")
    try:
        task.put(SinkRecordBatch.of(bad))
        task.flush({})
        assert set(cluster.indices["t"]) == {"k0", "k2"}
    finally:
        task.stop()
    task, _ = _task(RecordingContext({TP0}, reporter=False))
    try:
        with pytest.raises(DataError, match="offset 1"):
            task.put(SinkRecordBatch.of(bad))
    finally:
        task.stop()


def test_a_full_buffer_pauses_consumption_until_it_drains(cluster: FakeCluster) -> None:
    task, ctx = _task(max_buffered_records=10, batch_size=5)
    try:
        cluster.gate.clear()
        task.put(SinkRecordBatch.of(_records(12)))
        assert ctx.paused == {TP0, TP1}
        assert ctx.commit_requests == 1
        task.pre_commit({TP0: 12})
        assert ctx.paused == {TP0, TP1}  # still full: look again soon
        assert ctx.commit_requests == 2
        cluster.gate.set()
        _eventually(lambda: (task.pre_commit({TP0: 12}) == {TP0: 12}) and not ctx.paused)
    finally:
        task.stop()


def test_close_waits_for_in_flight_requests(cluster: FakeCluster) -> None:
    task, _ = _task(linger_ms=60_000, batch_size=1000)
    try:
        task.put(SinkRecordBatch.of(_records(3)))
        task.close([TP0])
        assert len(cluster.indices["t"]) == 3
    finally:
        task.stop()


def test_upserts_and_deletes(cluster: FakeCluster) -> None:
    task, _ = _task(write_method="upsert", behavior_on_null_values="delete")
    try:
        task.put(SinkRecordBatch.of([SinkRecord("t", 0, 0, {"a": 1}, key="x"), SinkRecord("t", 0, 1, {"b": 2}, key="x"),
                  SinkRecord("t", 0, 2, {"c": 3}, key="y"), SinkRecord("t", 0, 3, None, key="y")]))
        task.flush({})
        assert cluster.indices["t"] == {"x": {"a": 1, "b": 2}}
    finally:
        task.stop()


def test_a_retried_item_never_overwrites_a_later_write_of_the_same_document(cluster: FakeCluster) -> None:
    task, _ = _task(max_in_flight_requests=1)
    first = {"done": False}

    def status(op: str, meta: dict[str, Any]) -> int | None:
        if not first["done"]:
            first["done"] = True
            return 503  # the first write of "x" fails once; its second write is in the same request
        return None

    cluster.item_status = status
    try:
        task.put(SinkRecordBatch.of([SinkRecord("t", 0, 0, {"v": 1}, key="x"), SinkRecord("t", 0, 1, {"v": 2}, key="x")]))
        task.flush({})
        assert cluster.indices["t"] == {"x": {"v": 2}}
    finally:
        task.stop()


def test_offsets_are_tracked_per_consumed_partition_when_a_router_merges_topics(cluster: FakeCluster) -> None:
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    task, _ = _task(RecordingContext({a, b}))
    routed = [
        SinkRecord("all", 0, 5, {"i": 1}, key="x", original_topic="a", original_partition=0, original_offset=5),
        SinkRecord("all", 0, 9, {"i": 2}, key="y", original_topic="b", original_partition=0, original_offset=9),
    ]
    try:
        cluster.gate.clear()
        for batch in SinkRecordBatch.group(routed):  # the runtime puts them per consumed topic
            task.put(batch)
        assert task.pre_commit({a: 6, b: 10}) == {a: 5, b: 9}
        cluster.gate.set()
        task.flush({})
        assert task.pre_commit({a: 6, b: 10}) == {a: 6, b: 10}
        assert set(cluster.indices["all"]) == {"x", "y"}
    finally:
        task.stop()
