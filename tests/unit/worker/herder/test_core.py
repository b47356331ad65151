"""The herder core's rules, written once: the same request gives the same answer whether the core
runs with the standalone (local) strategy or with a cluster strategy, over the memory config store.

The cluster strategy here is a fake of a one-member cluster: writes are not applied on the
caller's thread but by the tick thread once the store has them, as in a real cluster. Task runners
are fakes that report their states at once, so no test needs Kafka.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import ConfigError, NotFoundError
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.distributed.herder import DistributedHerder
from sluice.worker.herder import HEALTHY, BadRequest, Forbidden, Health, Herder
from sluice.worker.herder.calls import NOT_STOPPED_MESSAGE
from sluice.worker.herder.core import HerderCore
from sluice.worker.herder.stores.config_store import ConfigSnapshot, Item, MemoryConfigStore
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.herder.strategy import HerderState
from sluice.worker.runners import TaskStatusListener
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.worker import Worker

CONTROLLABLE = "tests.plugins.controllable.ControllableSource"
WORKER_ID = "127.0.0.1:8083"


def _config(**extra: str) -> dict[str, str]:
    return {"connector.class": CONTROLLABLE, "topic": "t", "fail.flag": "/nonexistent/flag", **extra}


class FakeRunner:
    """A task runner that reports RUNNING/PAUSED at once and fails when told to."""

    def __init__(self, task_id: ConnectorTaskId, listener: TaskStatusListener, state: TargetState) -> None:
        self.id = task_id
        self.listener = listener
        self.state = state
        self.failed = False
        self.stopping = False
        self.fence: Callable[[], bool] | None = None
        self.active_topics: set[str] = {"t"}

    def start(self) -> None:
        (self.listener.on_pause if self.state is TargetState.PAUSED else self.listener.on_startup)(self.id)

    def transition_to(self, state: TargetState) -> None:
        self.state = state
        (self.listener.on_pause if state is TargetState.PAUSED else self.listener.on_resume)(self.id)

    def fail(self) -> None:
        self.failed = True
        self.listener.on_failure(self.id, RuntimeError("boom"))

    def stop(self) -> None:
        self.stopping = True

    def await_stop(self, timeout: float) -> bool:
        if not self.failed:
            self.listener.on_shutdown(self.id)
        return True

    def reset_active_topics(self) -> None:
        self.active_topics = set()


class FakeCluster:
    """A one-member cluster whose member leads: everything is assigned here, and writes reach the
    work through the store and the tick thread, not on the caller's thread."""

    inline = False
    acting = True

    def __init__(self, store: MemoryConfigStore, leader: str | None = None) -> None:
        self.store = store
        self.leader = leader
        self.forwarded: list[tuple[str, str, str, Any]] = []
        self.fence: Callable[[], bool] | None = lambda: True

    worker_id = WORKER_ID

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def next_tick_s(self) -> float:
        return 0.02

    def tick(self) -> bool:
        return True

    def may_report(self) -> bool:
        return True

    def mine(self, snapshot: ConfigSnapshot) -> set[Item]:
        return snapshot.wanted_items()

    def owner(self, snapshot: ConfigSnapshot, item: Item) -> str:
        return WORKER_ID

    def leader_url(self) -> str | None:
        return self.leader

    def forward(
        self,
        url: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        want_object: bool = False,
    ) -> tuple[int, Any]:
        self.forwarded.append((url, method, path, body))
        return 201, {
            "name": "c",
            "config": body.get("config", body) if isinstance(body, dict) else {},
            "tasks": [],
            "type": "source",
        }

    def forward_to_owner(self, snapshot: ConfigSnapshot, owner: str, method: str, path: str) -> None:
        raise AssertionError("everything runs here")

    def submit_task_configs(self, name: str, configs: list[dict[str, Any]], snapshot: ConfigSnapshot) -> None:
        self.store.put_task_configs(name, configs)

    def accept_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        raise Forbidden("no session key")

    def catch_up_offsets(self) -> None: ...

    def health(self, herder: HerderState) -> Health:
        return HEALTHY

    def set_cluster_logger_level(self, name: str, level: str) -> None: ...


class ClusterHerder(HerderCore):
    """The core composed as a cluster member would be, over the memory store."""

    def __init__(self, worker: Worker, leader: str | None = None) -> None:
        store = MemoryConfigStore(on_change=self.wakeup)
        self.fake = FakeCluster(store, leader)
        super().__init__(worker, store, StatusStore(), self.fake)


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry([str(Path(__file__).resolve().parents[3] / "plugins")])  # tests.plugins.…


class Built:
    """The runners the herder built, by task id."""

    def __init__(self) -> None:
        self.runners: dict[ConnectorTaskId, list[FakeRunner]] = {}

    def latest(self, task_id: ConnectorTaskId) -> FakeRunner:
        return self.runners[task_id][-1]


def _worker(registry: PluginRegistry, built: Built) -> Worker:
    config = WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1", "task.restart.max.attempts": "0"})
    worker = Worker(config, registry, MemoryOffsetStore())

    def build_task(
        task_id: ConnectorTaskId,
        validated: Any,
        task_config: Mapping[str, Any],
        listener: TaskStatusListener,
        state: TargetState,
    ) -> Any:
        runner = FakeRunner(task_id, listener, state)
        built.runners.setdefault(task_id, []).append(runner)
        return runner

    worker.build_task = build_task  # type: ignore[method-assign]
    return worker


MODES = ["local", "cluster"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def built() -> Built:
    return Built()


@pytest.fixture
def herder(mode: str, registry: PluginRegistry, built: Built) -> Iterator[HerderCore]:
    worker = _worker(registry, built)
    core: HerderCore = StandaloneHerder(worker) if mode == "local" else ClusterHerder(worker)
    core.start()
    yield core
    core.stop()


def eventually(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """``check()`` once it returns something truthy (the cluster strategy applies writes on its tick)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, "condition not met in time"
            return result
        time.sleep(0.01)


def _states(herder: HerderCore, name: str = "c") -> tuple[str, list[str]]:
    body = herder.connector_status(name).to_json()
    return body["connector"]["state"], [t["state"] for t in body["tasks"]]


def _running(herder: HerderCore, name: str = "c") -> bool:
    return _states(herder, name) == ("RUNNING", ["RUNNING"])


def test_create_then_status_answers_alike_in_both_modes(herder: HerderCore) -> None:
    created, info = herder.put_connector_config("c", _config(), allow_replace=False)
    assert created and info.name == "c" and info.type == "source"
    eventually(lambda: _running(herder))
    status = herder.connector_status("c").to_json()
    assert status["connector"] == {"state": "RUNNING", "worker_id": WORKER_ID}
    assert [(t["id"], t["worker_id"]) for t in status["tasks"]] == [(0, WORKER_ID)]
    assert [t.task for t in herder.task_configs("c")] == [0]
    assert herder.task_configs("c")[0].config["task.class"].endswith("ControllableSourceTask")
    with pytest.raises(NotFoundError, match="Task c-1 not found"):
        herder.task_status("c", 1)


def test_validation_and_existence_rules_are_the_same(herder: HerderCore) -> None:
    with pytest.raises(ConfigError):
        herder.put_connector_config("c", _config(**{"interval.ms": "soon"}), allow_replace=False)
    with pytest.raises(BadRequest, match="doesn't match connector name"):
        herder.put_connector_config("c", {**_config(), "name": "d"}, allow_replace=False)
    herder.put_connector_config("c", _config(), allow_replace=False)
    with pytest.raises(Exception, match="Connector c already exists"):
        herder.put_connector_config("c", _config(), allow_replace=False)
    with pytest.raises(NotFoundError, match="Connector nope not found"):
        herder.delete_connector("nope")


def test_a_connector_that_checks_on_create_is_refused_with_every_problem_and_nothing_stored(
    herder: HerderCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.plugins.controllable import ControllableSource

    def problems(cls: type, config: Any, timeout_s: float) -> dict[str, str]:
        if config.topic != "unusable":
            return {}
        return {"topic": "the topic is unusable", "fail.flag": "the flag is unusable"}

    monkeypatch.setattr(ControllableSource, "validate_on_create", classmethod(problems))
    with pytest.raises(ConfigError) as refused:
        herder.put_connector_config("c", _config(topic="unusable"), allow_replace=False)
    message = str(refused.value)
    assert message.startswith("Connector configuration is invalid and contains the following 2 error(s):\n")
    assert "topic: the topic is unusable" in message and "fail.flag: the flag is unusable" in message
    assert refused.value.problems == {"topic": "the topic is unusable", "fail.flag": "the flag is unusable"}
    assert herder.connectors() == []
    herder.put_connector_config("c", _config(), allow_replace=False)
    assert herder.connectors() == ["c"]


def test_offsets_change_only_while_stopped(herder: HerderCore) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    with pytest.raises(BadRequest) as refused:
        herder.reset_connector_offsets("c")
    assert str(refused.value) == NOT_STOPPED_MESSAGE.format(name="c")
    herder.set_target_state("c", TargetState.STOPPED)
    eventually(lambda: _states(herder) == ("STOPPED", []))
    entries = [{"partition": {"p": 1}, "offset": {"o": 7}}]
    assert "altered successfully" in herder.alter_connector_offsets("c", entries)
    assert herder.connector_offsets("c") == entries
    assert "reset successfully" in herder.reset_connector_offsets("c")
    assert herder.connector_offsets("c") == []


def test_stop_drops_the_tasks_and_resume_brings_them_back(herder: HerderCore, built: Built) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    herder.set_target_state("c", TargetState.PAUSED)
    eventually(lambda: _states(herder) == ("PAUSED", ["PAUSED"]))
    herder.set_target_state("c", TargetState.STOPPED)
    eventually(lambda: _states(herder) == ("STOPPED", []))
    assert herder.connector_info("c").tasks == []
    herder.set_target_state("c", TargetState.STARTED)
    eventually(lambda: _running(herder))
    assert len(built.runners[ConnectorTaskId("c", 0)]) == 2


def test_restart_of_failed_instances_plans_then_restarts_only_those(herder: HerderCore, built: Built) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    task = ConnectorTaskId("c", 0)
    built.latest(task).fail()
    assert _states(herder) == ("RUNNING", ["FAILED"])
    planned = herder.restart_connector_and_tasks("c", include_tasks=True, only_failed=True).to_json()
    assert planned["connector"]["state"] == "RUNNING" and [t["state"] for t in planned["tasks"]] == ["RESTARTING"]
    eventually(lambda: len(built.runners[task]) == 2 and _running(herder))
    # Nothing failed now: an only-failed restart restarts nothing, and says so.
    planned = herder.restart_connector_and_tasks("c", include_tasks=True, only_failed=True).to_json()
    assert (planned["connector"]["state"], [t["state"] for t in planned["tasks"]]) == ("RUNNING", ["RUNNING"])
    time.sleep(0.2)
    assert len(built.runners[task]) == 2


def test_a_stopped_connector_is_not_restarted(herder: HerderCore) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False, initial_state=TargetState.STOPPED)
    eventually(lambda: _states(herder) == ("STOPPED", []))
    planned = herder.restart_connector_and_tasks("c", include_tasks=True, only_failed=False).to_json()
    assert planned["connector"]["state"] == "STOPPED"


def test_a_task_restart_over_rest_starts_a_new_run(herder: HerderCore, built: Built) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    herder.restart_task("c", 0)
    assert len(built.runners[ConnectorTaskId("c", 0)]) == 2
    with pytest.raises(NotFoundError):
        herder.restart_task("c", 3)


def test_a_config_update_restarts_the_tasks(herder: HerderCore, built: Built) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    herder.patch_connector_config("c", {"topic": "u"})
    eventually(lambda: len(built.runners[ConnectorTaskId("c", 0)]) == 2 and _running(herder))
    assert herder.connector_config("c")["topic"] == "u"


def test_topics_are_tracked_and_reset(herder: HerderCore, built: Built) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    assert herder.connector_topics("c") == ["t"]
    herder.reset_connector_topics("c")
    assert herder.connector_topics("c") == []


def test_delete_forgets_the_connector(herder: HerderCore) -> None:
    herder.put_connector_config("c", _config(), allow_replace=False)
    eventually(lambda: _running(herder))
    herder.delete_connector("c")
    eventually(lambda: herder.connectors() == [] and herder.status.connector("c") is None)
    with pytest.raises(NotFoundError):
        herder.connector_status("c")


def test_a_follower_forwards_writes_and_stores_nothing(registry: PluginRegistry) -> None:
    follower = ClusterHerder(_worker(registry, Built()), leader="http://leader:8083")
    follower.start()
    try:
        created, info = follower.put_connector_config("c", _config(), allow_replace=False)
        follower.set_target_state("c", TargetState.STOPPED)
        assert created and info.name == "c"
        assert [(m, p) for _, m, p, _ in follower.fake.forwarded] == [
            ("POST", "/connectors"),
            ("PUT", "/connectors/c/stop"),
        ]
        assert follower.connectors() == []
    finally:
        follower.stop()


def test_every_facade_method_is_the_cores() -> None:
    """Neither mode overrides a rule: both herders answer every façade call with the core's code."""
    facade = [n for n in dir(Herder) if not n.startswith("_") and callable(getattr(Herder, n))]
    for herder_class in (StandaloneHerder, DistributedHerder):
        for name in facade:
            assert getattr(herder_class, name) is getattr(HerderCore, name), f"{herder_class.__name__}.{name}"


def test_the_memory_store_applies_connects_records() -> None:
    changes: list[int] = []
    store = MemoryConfigStore(on_change=lambda: changes.append(1))
    store.put_connector_config("c", {"a": "1"}, initial_state=TargetState.PAUSED)
    store.put_task_configs("c", [{"x": "1"}, {"x": "2"}])
    store.put_restart_request("c", only_failed=True, include_tasks=False)
    snapshot = store.snapshot()
    assert snapshot.connectors == {"c": {"a": "1"}} and snapshot.target_state("c") is TargetState.PAUSED
    assert snapshot.task_configs["c"] == [{"x": "1"}, {"x": "2"}]
    assert snapshot.restarts["c"][1:] == (True, False)
    store.put_target_state("c", TargetState.STOPPED, task_configs=[])
    assert store.snapshot().task_configs["c"] == [] and store.snapshot().wanted_items() == {("c", -1)}
    store.remove_connector_config("c")
    assert store.snapshot().connectors == {} and store.snapshot().task_configs == {} and len(changes) == 5


def test_lock_is_shared_with_the_work(registry: PluginRegistry) -> None:
    herder = StandaloneHerder(_worker(registry, Built()))
    assert herder.lock is herder.work.lock and isinstance(herder.lock, type(threading.RLock()))
