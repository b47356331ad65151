"""The REST side of a distributed worker (the :class:`~worker.herder.Herder` calls).

Reads are answered from this worker's copy of the config, status and offset topics; writes are
performed by the leader, so a follower forwards them with the caller's credentials
(:mod:`sluice.worker.distributed.forwarding`). The tick thread and everything that starts and stops
work stay in :mod:`sluice.worker.distributed.herder`; this mixin only reads its state and asks it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from sluice.connectors.api import (
    AlreadyExistsError,
    ConfigError,
    NotFoundError,
    SinkConnector,
    SourceConnector,
)
from sluice.offsets.kafka import KafkaOffsetStore
from sluice.plugins import PluginKind
from sluice.worker.connector_offsets import SinkOffsets, SourceOffsets, parse_changes, sink_changes
from sluice.worker.distributed.assignor import CONNECTOR, Item
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.distributed.config_store import ConfigSnapshot, ConfigStore
from sluice.worker.distributed.forwarding import (
    ALGORITHM,
    ForwardedError,
    Forwarder,
    NoLeader,
    is_forwarded,
    verify,
)
from sluice.worker.distributed.status_store import KafkaStatusStore
from sluice.worker.herder import BadRequest, ConnectorInfo, ConnectorStateInfo, Forbidden, TaskInfo
from sluice.worker.herder_support import (
    NOT_STOPPED_MESSAGE,
    call_with_timeout,
    offsets_message,
    request_config,
    restore_masked_secrets,
)
from sluice.worker.masking import mask_config
from sluice.worker.restarts import TaskRestarter
from sluice.worker.status import ConnectorTaskId, State, Status, TargetState
from sluice.worker.worker import ValidatedConnector, Worker

log = logging.getLogger(__name__)


class ClusterRequests:
    """REST calls of :class:`~worker.distributed.herder.DistributedHerder` (which provides the
    state declared here)."""

    configs: ConfigStore
    forwarder: Forwarder
    offset_store: KafkaOffsetStore
    worker: Worker
    status: KafkaStatusStore
    config: DistributedConfig
    restarter: TaskRestarter
    _lock: threading.RLock
    _worker_id: str
    _tasks: dict[ConnectorTaskId, Any]

    if TYPE_CHECKING:

        @property
        def ready(self) -> bool: ...

        def _ensure_writer(self) -> bool: ...

        def _start_task(self, task_id: ConnectorTaskId, snapshot: ConfigSnapshot) -> None: ...

        def _stop_tasks(self, task_ids: list[ConnectorTaskId], *, forget: bool) -> None: ...

        def _check_topic_tracking(self, key: str, message: str) -> None: ...

    # -- REST: reads ---------------------------------------------------------------------------------------

    def _config_of(self, name: str) -> dict[str, Any]:
        raw = self.configs.snapshot().connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        return raw

    def _secret_keys(self, raw: Mapping[str, Any]) -> set[str]:
        info = self.worker.plugins.find(str(raw.get("connector.class", "")), (PluginKind.SOURCE, PluginKind.SINK))
        if info is None:
            return set()
        config_model: Any = getattr(info.cls, "Config", None)
        return set(config_model.secret_keys()) if config_model is not None else set()

    def _type(self, raw: Mapping[str, Any]) -> str:
        info = self.worker.plugins.find(str(raw.get("connector.class", "")), (PluginKind.SOURCE, PluginKind.SINK))
        return info.kind.value if info is not None else "unknown"

    def connectors(self) -> list[str]:
        return sorted(self.configs.snapshot().connectors)

    def connector_info(self, name: str) -> ConnectorInfo:
        snapshot = self.configs.snapshot()
        raw = snapshot.connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        tasks = list(range(len(snapshot.task_configs.get(name, ()))))
        return ConnectorInfo(name, mask_config(raw, self._secret_keys(raw)), tasks, self._type(raw))

    def connector_config(self, name: str) -> dict[str, Any]:
        raw = self._config_of(name)
        return mask_config(raw, self._secret_keys(raw))

    def task_configs(self, name: str) -> list[TaskInfo]:
        snapshot = self.configs.snapshot()
        raw = snapshot.connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        keys = self._secret_keys(raw)
        return [TaskInfo(name, i, mask_config(c, keys)) for i, c in enumerate(snapshot.task_configs.get(name, ()))]

    def connector_status(self, name: str) -> ConnectorStateInfo:
        snapshot = self.configs.snapshot()
        raw = snapshot.connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        connector = self.status.connector(name) or Status(State.UNASSIGNED, self._owner(snapshot, (name, CONNECTOR)))
        tasks = []
        for n in range(len(snapshot.task_configs.get(name, ()))):
            task_id = ConnectorTaskId(name, n)
            status = self.status.task(task_id) or Status(State.UNASSIGNED, self._owner(snapshot, (name, n)))
            tasks.append({"id": n, **status.to_json()})
        return ConnectorStateInfo(name, connector.to_json(), tasks, self._type(raw))

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        snapshot = self.configs.snapshot()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        if not 0 <= task < len(snapshot.task_configs.get(name, ())):
            raise NotFoundError(f"Task {name}-{task} not found")
        status = self.status.task(ConnectorTaskId(name, task)) or Status(State.UNASSIGNED, self._owner(snapshot, (name, task)))
        return {"id": task, **status.to_json()}

    def _owner(self, snapshot: ConfigSnapshot, item: Item) -> str:
        owner = None
        if snapshot.assignment is not None:
            owner = next((w for w, items in snapshot.assignment.owners.items() if item in items), None)
        return owner or ""

    def connector_topics(self, name: str) -> list[str]:
        self._check_topic_tracking("topic.tracking.enable", "Topic tracking is disabled.")
        self._config_of(name)
        topics = self.status.topics(name)  # every worker's, from the status topic
        with self._lock:
            for task_id, running in self._tasks.items():
                if task_id.connector == name:
                    topics.update(running.runner.active_topics)
        return sorted(topics)

    def reset_connector_topics(self, name: str) -> None:
        self._check_topic_tracking("topic.tracking.enable", "Topic tracking is disabled.")
        self._check_topic_tracking("topic.tracking.allow.reset", "Topic tracking reset is disabled.")
        self._config_of(name)
        with self._lock:
            for task_id, running in self._tasks.items():
                if task_id.connector == name:
                    running.runner.reset_active_topics()
        self.status.reset_topics(name)

    # -- REST: writes (performed by the leader) -------------------------------------------------------------

    def _leader_or_forward(self) -> str | None:
        """``None`` when this worker is the leader and may write; else the leader's URL to forward to."""
        if not self.ready:
            raise NoLeader()
        if self._ensure_writer():
            return None
        if is_forwarded():
            raise NoLeader()  # a forwarded request reached a worker that is not the leader (any more)
        assignment = self.configs.snapshot().assignment
        if assignment is None or assignment.leader == self._worker_id or not assignment.leader_url:
            raise NoLeader()
        return assignment.leader_url

    def put_connector_config(
        self,
        name: str,
        config: Mapping[str, Any],
        *,
        allow_replace: bool,
        initial_state: TargetState = TargetState.STARTED,
    ) -> tuple[bool, ConnectorInfo]:
        raw = request_config(name, config)
        leader = self._leader_or_forward()
        if leader is not None:
            path = f"/connectors/{quote(name, safe='')}"
            if allow_replace:
                status, body = self.forwarder.send(leader, "PUT", path + "/config", body=raw)
            else:
                state = {TargetState.STARTED: "RUNNING"}.get(initial_state, initial_state.value)
                status, body = self.forwarder.send(leader, "POST", "/connectors", body={"name": name, "config": raw, "initial_state": state})
            return status == 201, _info_from_json(body)
        snapshot = self.configs.snapshot()
        current = snapshot.connectors.get(name)
        if current is not None:
            restore_masked_secrets(raw, current, self._secret_keys(current))
        validated = self.worker.validate(raw)
        if current is not None and not allow_replace:
            raise AlreadyExistsError(f"Connector {name} already exists")
        records = [ConfigStore.connector_record(name, raw)]
        if current is None:
            records.append(ConfigStore.target_state_record(name, initial_state))
        self.configs.write(records)
        tasks = list(range(len(snapshot.task_configs.get(name, ())))) if current is not None else []
        log.info("%s connector %s (%s)", "Updated" if current else "Created", name, validated.plugin.class_name)
        self.worker.warn_ignored_keys(validated)
        return current is None, ConnectorInfo(name, mask_config(raw, self._secret_keys(raw)), tasks, validated.type)

    def patch_connector_config(self, name: str, patch: Mapping[str, Any]) -> ConnectorInfo:
        leader = self._leader_or_forward()
        if leader is not None:
            _, body = self.forwarder.send(leader, "PATCH", f"/connectors/{quote(name, safe='')}/config", body=dict(patch))
            return _info_from_json(body)
        merged = dict(self._config_of(name))
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        _, info = self.put_connector_config(name, merged, allow_replace=True)
        return info

    def delete_connector(self, name: str) -> None:
        leader = self._leader_or_forward()
        if leader is not None:
            self.forwarder.send(leader, "DELETE", f"/connectors/{quote(name, safe='')}")
            return
        self._config_of(name)
        self.configs.write([ConfigStore.connector_record(name, None), ConfigStore.target_state_record(name, None)])
        log.info("Deleted connector %s", name)

    def set_target_state(self, name: str, state: TargetState) -> None:
        leader = self._leader_or_forward()
        if leader is not None:
            verb = {TargetState.STARTED: "resume", TargetState.PAUSED: "pause", TargetState.STOPPED: "stop"}[state]
            self.forwarder.send(leader, "PUT", f"/connectors/{quote(name, safe='')}/{verb}")
            return
        snapshot = self.configs.snapshot()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        if snapshot.target_state(name) is state:
            return
        records = [ConfigStore.target_state_record(name, state)]
        if state is TargetState.STOPPED:
            # As Connect: a stopped connector has no tasks; they are generated again when it resumes.
            records.extend(ConfigStore.task_records(name, []))
        self.configs.write(records)

    def restart_connector(self, name: str) -> None:
        leader = self._leader_or_forward()
        if leader is not None:
            self.forwarder.send(leader, "POST", f"/connectors/{quote(name, safe='')}/restart")
            return
        self._config_of(name)
        self.configs.write([ConfigStore.restart_record(name, False, False)])

    def restart_connector_and_tasks(self, name: str, *, include_tasks: bool, only_failed: bool) -> ConnectorStateInfo:
        leader = self._leader_or_forward()
        if leader is not None:
            params = {"includeTasks": str(include_tasks).lower(), "onlyFailed": str(only_failed).lower()}
            _, body = self.forwarder.send(leader, "POST", f"/connectors/{quote(name, safe='')}/restart", params=params)
            return ConnectorStateInfo(body["name"], body["connector"], body["tasks"], body["type"])
        snapshot = self.configs.snapshot()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        planned = self.connector_status(name)
        if snapshot.target_state(name) is TargetState.STOPPED:
            return planned
        if not only_failed or planned.connector.get("state") == State.FAILED.value:
            planned.connector = {**planned.connector, "state": State.RESTARTING.value}
        if include_tasks:
            planned.tasks = [
                {**t, "state": State.RESTARTING.value} if not only_failed or t.get("state") == State.FAILED.value else t
                for t in planned.tasks
            ]
        self.configs.write([ConfigStore.restart_record(name, only_failed, include_tasks)])
        return planned

    def restart_task(self, name: str, task: int) -> None:
        snapshot = self.configs.snapshot()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        if not 0 <= task < len(snapshot.task_configs.get(name, ())):
            raise NotFoundError(f"Task {name}-{task} not found")
        owner = self._owner(snapshot, (name, task))
        task_id = ConnectorTaskId(name, task)
        if owner == self._worker_id:
            with self._lock:
                self.restarter.reset(task_id)
                self._stop_tasks([task_id], forget=False)
                self._start_task(task_id, self.configs.snapshot())
            return
        url = snapshot.assignment.urls.get(owner) if snapshot.assignment and owner else None
        if not url or is_forwarded():
            raise NoLeader("Cannot restart the task now: it is being reassigned; retry in a moment")
        self.forwarder.send(url, "POST", f"/connectors/{quote(name, safe='')}/tasks/{task}/restart")

    def put_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        """Internal: the worker running connector ``name`` hands its task configs to the leader."""
        snapshot = self.configs.snapshot()
        if algorithm not in (None, ALGORITHM):
            raise BadRequest(f"Unsupported request signature algorithm {algorithm}")
        if not verify(snapshot.session_key, body, signature):
            raise Forbidden("Internal request missing or carrying an invalid signature")
        if not self._ensure_writer():
            raise NoLeader()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        try:
            configs = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"Task configs are not valid JSON: {exc}") from None
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise BadRequest("Task configs must be a JSON array of objects")
        if configs != snapshot.task_configs.get(name):
            self.configs.write(ConfigStore.task_records(name, configs), wait_visible=False)
            log.info("Wrote %d task config(s) of %s", len(configs), name)

    # -- offsets (KIP-875) -----------------------------------------------------------------------------------

    def _sink_offsets(self) -> SinkOffsets:
        return SinkOffsets({"bootstrap.servers": self.config.bootstrap_servers, **self.config.prefixed("admin.")})

    @staticmethod
    def _group(raw: Mapping[str, Any]) -> str:
        return str(raw.get("consumer.override.group.id") or f"connect-{raw['name']}")

    def connector_offsets(self, name: str) -> list[dict[str, Any]]:
        raw = self._config_of(name)
        if self._type(raw) == PluginKind.SINK.value:
            return self._sink_offsets().get(self._group(raw))
        self.offset_store.read_to_end()
        return SourceOffsets(self.offset_store).get(name)

    def _stopped_config(self, name: str) -> dict[str, Any]:
        snapshot = self.configs.snapshot()
        raw = snapshot.connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        if snapshot.target_state(name) is not TargetState.STOPPED:
            raise BadRequest(NOT_STOPPED_MESSAGE.format(name=name))
        return raw

    def alter_connector_offsets(self, name: str, entries: list[dict[str, Any]]) -> str:
        changes = parse_changes(entries)
        raw = self._stopped_config(name)
        validated = self.worker.validate(raw)
        if validated.plugin.kind is PluginKind.SINK:
            by_partition = sink_changes(changes)
            checked = self._ask_connector(validated, by_partition)
            self._sink_offsets().alter(self._group(raw), by_partition)
        else:
            checked = self._ask_connector(validated, changes)
            self.offset_store.read_to_end()
            SourceOffsets(self.offset_store).alter(name, changes)
        log.info("Altered the offsets of %d partition(s) of connector %s", len(changes), name)
        return offsets_message("altered", checked)

    def reset_connector_offsets(self, name: str) -> str:
        raw = self._stopped_config(name)
        validated = self.worker.validate(raw)
        if validated.plugin.kind is PluginKind.SINK:
            sink = self._sink_offsets()
            group = self._group(raw)
            current = sink_changes([(e["partition"], None) for e in sink.get(group)])
            checked = self._ask_connector(validated, current)
            sink.reset(group)
        else:
            self.offset_store.read_to_end()
            source = SourceOffsets(self.offset_store)
            checked = self._ask_connector(validated, [(e["partition"], None) for e in source.get(name)])
            source.reset(name)
        log.info("Reset the offsets of connector %s", name)
        return offsets_message("reset", checked)

    def _ask_connector(self, validated: ValidatedConnector, offsets: Any) -> bool:
        connector = self.worker.new_connector(validated)
        assert isinstance(connector, (SourceConnector, SinkConnector))
        name = validated.common.name
        try:
            return bool(
                call_with_timeout(lambda: connector.alter_offsets(validated.raw, offsets), f"alter offsets of {name}", name)
            )
        except ConfigError as exc:
            raise BadRequest(f"The connector {name} refused the offsets: {exc}") from exc


def _info_from_json(body: Any) -> ConnectorInfo:
    if not isinstance(body, dict):
        raise ForwardedError(502, f"The leader answered with an unexpected body: {body!r}")
    return ConnectorInfo(
        str(body.get("name")),
        dict(body.get("config") or {}),
        [int(t["task"]) for t in body.get("tasks") or []],
        str(body.get("type")),
    )
