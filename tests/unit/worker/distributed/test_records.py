"""Config and status topic records: Kafka Connect's keys and JSON values, read back into state."""

from __future__ import annotations

import orjson

from sluice.worker.distributed.assignor import CONNECTOR
from sluice.worker.distributed.forwarding import sign, verify
from sluice.worker.herder.stores.kafka_config_store import (
    ASSIGNMENT_KEY,
    LEGACY_ASSIGNMENT_KEY,
    Assignment,
    KafkaConfigStore,
)
from sluice.worker.herder.stores.kafka_status_store import decode_status, encode_status
from sluice.worker.status import State, Status, TargetState


class _Reader(KafkaConfigStore):
    """The config store's record handling without a Kafka client."""

    def __init__(self) -> None:  # no super(): no consumer
        import threading

        from sluice.worker.herder.stores.kafka_config_store import ClusterSnapshot

        self._lock = threading.Lock()
        self._snapshot = ClusterSnapshot()
        self._on_change = lambda: None
        self.topic, self.sluice_topic = "configs", "configs-sluice"
        self._assignment = self._legacy_assignment = None
        self._legacy_live = False
        self._write_lock = threading.Lock()
        self._leader_producer = None
        self.produced: list[tuple[str, bytes, bytes | None]] = []

    def read_to_end(self, timeout: float = 30.0) -> None:
        pass

    def lead(self) -> None:
        """A leader's transactional producer that records what it writes."""
        produced = self.produced

        class _Producer:
            def begin_transaction(self) -> None:
                pass

            def produce(self, topic: str, value: bytes | None, key: bytes, on_delivery: object = None) -> None:
                produced.append((topic, key, value))

            def commit_transaction(self, timeout: float) -> None:
                pass

            def poll(self, timeout: float) -> int:
                return 0  # no delivery reports: the test store's read_to_end is the catch-up

        self._leader_producer = _Producer()  # type: ignore[assignment]

    def feed(self, key: str, value: object) -> None:
        self._apply(key.encode(), None if value is None else orjson.dumps(value))


def test_record_shapes_are_connects() -> None:
    assert KafkaConfigStore.connector_record("c", {"a": "1"}) == ("connector-c", {"properties": {"a": "1"}})
    assert KafkaConfigStore.target_state_record("c", TargetState.STOPPED) == (
        "target-state-c",
        {"state": "PAUSED", "state.v2": "STOPPED"},
    )
    assert KafkaConfigStore.target_state_record("c", TargetState.STARTED)[1] == {"state": "STARTED", "state.v2": "STARTED"}
    assert KafkaConfigStore.task_records("c", [{"x": "1"}, {"x": "2"}]) == [
        ("task-c-0", {"properties": {"x": "1"}}),
        ("task-c-1", {"properties": {"x": "2"}}),
        ("commit-c", {"tasks": 2}),
    ]
    assert KafkaConfigStore.restart_record("c", True, False) == ("restart-connector-c", {"only-failed": True, "include-tasks": False})


def test_task_configs_apply_only_on_commit() -> None:
    reader = _Reader()
    reader.feed("connector-my-conn", {"properties": {"connector.class": "X"}})
    reader.feed("task-my-conn-0", {"properties": {"n": "0"}})
    reader.feed("task-my-conn-1", {"properties": {"n": "1"}})
    assert reader.snapshot().task_configs == {}, "task configs without a commit record must not apply"
    reader.feed("commit-my-conn", {"tasks": 2})
    snap = reader.snapshot()
    assert snap.task_configs == {"my-conn": [{"n": "0"}, {"n": "1"}]}
    assert snap.wanted_items() == {("my-conn", CONNECTOR), ("my-conn", 0), ("my-conn", 1)}


def test_target_state_reads_v2_and_legacy_values() -> None:
    reader = _Reader()
    reader.feed("connector-c", {"properties": {}})
    reader.feed("target-state-c", {"state": "PAUSED", "state.v2": "STOPPED"})
    assert reader.snapshot().target_state("c") is TargetState.STOPPED
    reader.feed("target-state-c", {"state": "PAUSED"})  # written by an old Connect worker
    assert reader.snapshot().target_state("c") is TargetState.PAUSED
    reader.feed("commit-c", {"tasks": 1})
    reader.feed("target-state-c", {"state": "PAUSED", "state.v2": "STOPPED"})
    assert reader.snapshot().wanted_items() == {("c", CONNECTOR)}, "a stopped connector runs no tasks"


def test_a_connector_tombstone_forgets_everything_about_it() -> None:
    reader = _Reader()
    reader.feed("connector-c", {"properties": {"k": "v"}})
    reader.feed("task-c-0", {"properties": {}})
    reader.feed("commit-c", {"tasks": 1})
    reader.feed("connector-c", None)
    snap = reader.snapshot()
    assert snap.connectors == {} and snap.task_configs == {} and snap.wanted_items() == set()


def test_config_versions_change_with_each_connector_record() -> None:
    reader = _Reader()
    reader.feed("connector-c", {"properties": {"k": "1"}})
    first = reader.snapshot().versions["c"]
    reader.feed("connector-d", {"properties": {}})
    assert reader.snapshot().versions["c"] == first, "another connector's record must not look like a change"
    reader.feed("connector-c", {"properties": {"k": "2"}})
    assert reader.snapshot().versions["c"] > first


def test_unknown_and_malformed_records_are_skipped() -> None:
    reader = _Reader()
    reader.feed("tasks-fencing-c", {"x": 1})
    reader._apply(b"connector-c", b"not json")
    assert reader.snapshot().connectors == {}


def test_assignment_round_trips() -> None:
    assignment = Assignment(
        generation=7,
        leader="h:1",
        leader_url="http://h:1",
        owners={"h:1": {("a", CONNECTOR), ("a", 0)}, "h:2": {("a", 1), ("b-c", 2)}},
        revoking={("b-c", 0): ("h:2", 12.5)},
        departed={"h:3": 10.0},
        urls={"h:1": "http://h:1", "h:2": "http://h:2"},
    )
    reader = _Reader()
    reader._apply_sluice(ASSIGNMENT_KEY.encode(), assignment.to_json())
    back = reader.snapshot().assignment
    assert back == assignment


def _assignment(generation: int) -> Assignment:
    return Assignment(
        generation=generation, leader="h:1", leader_url="http://h:1", owners={"h:1": {("a", CONNECTOR)}}, urls={"h:1": ""}
    )


def test_the_assignment_lives_outside_the_config_topic() -> None:
    """A Connect worker logs every unknown key of the config topic as an error: the leader writes
    its assignment to sluice.storage.topic, and only Connect's keys to the config topic."""
    reader = _Reader()
    reader.lead()
    reader.write_assignment(_assignment(1))
    assert [(topic, key) for topic, key, _ in reader.produced] == [("configs-sluice", b"assignment")]


def test_an_earlier_sluices_assignment_is_used_until_the_new_topic_has_one_and_then_tombstoned() -> None:
    reader = _Reader()
    reader._apply(LEGACY_ASSIGNMENT_KEY.encode(), _assignment(5).to_json())
    assert reader.snapshot().assignment == _assignment(5), "a cluster upgraded from an earlier Sluice keeps its plan"
    reader.lead()
    reader.write_assignment(_assignment(6))
    assert [(topic, key, value is None) for topic, key, value in reader.produced] == [
        ("configs-sluice", b"assignment", False),
        ("configs", b"sluice-assignment", True),
    ]
    reader._apply_sluice(ASSIGNMENT_KEY.encode(), _assignment(6).to_json())
    reader._apply(LEGACY_ASSIGNMENT_KEY.encode(), None)
    assert reader.snapshot().assignment == _assignment(6)
    reader.produced.clear()
    reader.write_assignment(_assignment(7))
    assert [topic for topic, _, _ in reader.produced] == ["configs-sluice"], "the tombstone is written once"


def test_status_values_are_connects() -> None:
    status = Status(State.FAILED, "h:1", trace="boom", generation=3)
    assert orjson.loads(encode_status(status)) == {"state": "FAILED", "trace": "boom", "worker_id": "h:1", "generation": 3}
    back = decode_status(b'{"state":"RUNNING","trace":null,"worker_id":"w:8083","generation":12}')
    assert (back.state, back.worker_id, back.trace, back.generation) == (State.RUNNING, "w:8083", None, 12)
    retrying = Status(State.RESTARTING, "h:1", trace="t", restart_attempt=2, restart_attempts_max=3)
    decoded = decode_status(encode_status(retrying))
    assert (decoded.restart_attempt, decoded.restart_attempts_max) == (2, 3)


def test_internal_request_signatures() -> None:
    key, body = b"k" * 32, b'[{"a":"1"}]'
    signature = sign(key, body)
    assert verify(key, body, signature)
    assert not verify(key, body + b" ", signature)
    assert not verify(b"x" * 32, body, signature)
    assert not verify(None, body, signature)
    assert not verify(key, body, None)
