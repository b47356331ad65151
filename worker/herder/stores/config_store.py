"""Where a herder keeps connector configs, task configs, target states and restart requests.

:class:`ConfigStore` is the protocol the herder core writes through (Kafka Connect's
``ConfigBackingStore``). Both implementations speak the records of Connect's config topic:

=============================  =====================================================================
``connector-<c>``              ``{"properties": {...}}`` — the connector's raw config; tombstone = deleted
``task-<c>-<n>``               ``{"properties": {...}}`` — a generated task config, buffered until…
``commit-<c>``                 ``{"tasks": N}`` — …this record applies tasks 0..N-1 atomically
``target-state-<c>``           ``{"state": "PAUSED", "state.v2": "STOPPED"}`` (``state`` for old readers)
``restart-connector-<c>``      ``{"only-failed": bool, "include-tasks": bool}``
``session-key``                ``{"key": base64, "algorithm": "HmacSHA256", "creation-timestamp": ms}``
=============================  =====================================================================

:class:`MemoryConfigStore` applies them at once (standalone, and the tests' fake of a cluster);
:class:`~sluice.worker.herder.stores.kafka_config_store.KafkaConfigStore` writes them to the config topic
and applies them as it reads them back — with the same :func:`apply_record`, so the two cannot
disagree on what a record means.
"""

from __future__ import annotations

import abc
import base64
import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.worker.status import TargetState

#: An assignable unit: ``(connector, -1)`` for the connector instance, ``(connector, n)`` for task n.
Item = tuple[str, int]

CONNECTOR = -1

SESSION_KEY = "session-key"

Record = tuple[str, Any]


@dataclass
class ConfigSnapshot:
    """What the store says, as of the last record applied."""

    connectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: bumps every time a connector's config record is (re)written: running instances compare it
    versions: dict[str, int] = field(default_factory=dict)
    target_states: dict[str, TargetState] = field(default_factory=dict)
    task_configs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pending_tasks: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    #: connector → (sequence, only_failed, include_tasks)
    restarts: dict[str, tuple[int, bool, bool]] = field(default_factory=dict)
    session_key: bytes | None = None
    sequence: int = 0

    def target_state(self, name: str) -> TargetState:
        return self.target_states.get(name, TargetState.STARTED)

    def wanted_items(self) -> set[Item]:
        """Every connector instance and task the cluster should run."""
        items: set[Item] = set()
        for name in self.connectors:
            # A stopped connector keeps an owner, which reports its STOPPED status; it has no tasks.
            items.add((name, CONNECTOR))
            if self.target_state(name) is TargetState.STOPPED:
                continue
            items.update((name, n) for n in range(len(self.task_configs.get(name, ()))))
        return items

    def copy(self) -> ConfigSnapshot:
        """A consistent copy (shallow per map) to read without the store's lock."""
        return dataclasses.replace(
            self,
            connectors=dict(self.connectors),
            versions=dict(self.versions),
            target_states=dict(self.target_states),
            task_configs=dict(self.task_configs),
            pending_tasks={},
            restarts=dict(self.restarts),
        )


# -- records ---------------------------------------------------------------------------------------


def connector_record(name: str, config: Mapping[str, Any] | None) -> Record:
    return f"connector-{name}", None if config is None else {"properties": dict(config)}


def target_state_record(name: str, state: TargetState | None) -> Record:
    if state is None:
        return f"target-state-{name}", None
    legacy = "PAUSED" if state is TargetState.STOPPED else state.value
    return f"target-state-{name}", {"state": legacy, "state.v2": state.value}


def task_records(name: str, configs: list[dict[str, Any]]) -> list[Record]:
    records: list[Record] = [(f"task-{name}-{i}", {"properties": c}) for i, c in enumerate(configs)]
    records.append((f"commit-{name}", {"tasks": len(configs)}))
    return records


def restart_record(name: str, only_failed: bool, include_tasks: bool) -> Record:
    return f"restart-connector-{name}", {"only-failed": only_failed, "include-tasks": include_tasks}


def _split(key: str, prefix: str) -> str | None:
    return key[len(prefix) :] if key.startswith(prefix) else None


def _task_key(rest: str) -> tuple[str, int] | None:
    name, sep, number = rest.rpartition("-")
    if not sep or not number.isdigit():
        return None
    return name, int(number)


def apply_record(s: ConfigSnapshot, key: str, value: Any) -> bool:
    """Apply one record (``value`` decoded, ``None`` a tombstone) to ``s``; ``False`` for a key
    that is not one of the records above. The caller holds the snapshot's lock and has counted
    the record in ``s.sequence``."""
    if (name := _split(key, "connector-")) is not None:
        if value is None:
            for entries in (s.connectors, s.task_configs, s.pending_tasks, s.target_states, s.restarts):
                entries.pop(name, None)
        else:
            s.connectors[name] = dict(value.get("properties") or {})
        s.versions[name] = s.sequence
    elif (rest := _split(key, "task-")) is not None:
        parsed = _task_key(rest)
        if parsed is not None and value is not None:
            s.pending_tasks.setdefault(parsed[0], {})[parsed[1]] = dict(value.get("properties") or {})
    elif (name := _split(key, "commit-")) is not None:
        if value is None:
            s.task_configs.pop(name, None)
        else:
            count = int(value.get("tasks", 0))
            pending = s.pending_tasks.pop(name, {})
            previous = s.task_configs.get(name, [])
            s.task_configs[name] = [pending.get(i, previous[i] if i < len(previous) else {}) for i in range(count)]
    elif (name := _split(key, "target-state-")) is not None:
        if value is None:
            s.target_states.pop(name, None)
        else:
            s.target_states[name] = TargetState(value.get("state.v2") or value.get("state") or "STARTED")
    elif (name := _split(key, "restart-connector-")) is not None:
        if value is not None:
            s.restarts[name] = (s.sequence, bool(value.get("only-failed")), bool(value.get("include-tasks")))
    elif key == SESSION_KEY:
        if value is not None:
            s.session_key = base64.b64decode(value["key"])
    else:
        return False
    return True


# -- the protocol ------------------------------------------------------------------------------------


class ConfigStore(Protocol):
    """What the herder core reads and writes (Kafka Connect's ``ConfigBackingStore``).

    Reads come from :meth:`snapshot`; a write returns once this worker's snapshot shows it, except
    :meth:`put_task_configs` (its writer does not wait for it). In a cluster only the leader writes.
    """

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def snapshot(self) -> ConfigSnapshot: ...

    def put_connector_config(self, name: str, config: Mapping[str, Any], *, initial_state: TargetState | None) -> None:
        """Create or replace ``name``'s config; ``initial_state`` also sets its target state."""

    def remove_connector_config(self, name: str) -> None:
        """Delete ``name`` with its target state and task configs."""

    def put_target_state(self, name: str, state: TargetState, *, task_configs: list[dict[str, Any]] | None = None) -> None:
        """Set ``name``'s target state, and with ``task_configs`` its tasks, in one write."""

    def put_task_configs(self, name: str, configs: list[dict[str, Any]]) -> None: ...

    def put_restart_request(self, name: str, *, only_failed: bool, include_tasks: bool) -> None: ...


class RecordConfigStore(abc.ABC):
    """A :class:`ConfigStore` that writes the config topic's records; subclasses say where to."""

    @abc.abstractmethod
    def write(self, records: list[Record], *, wait_visible: bool = True) -> None:
        """Write ``records`` at once (``None`` values are tombstones)."""

    @abc.abstractmethod
    def snapshot(self) -> ConfigSnapshot: ...

    def put_connector_config(self, name: str, config: Mapping[str, Any], *, initial_state: TargetState | None) -> None:
        records = [connector_record(name, config)]
        if initial_state is not None:
            records.append(target_state_record(name, initial_state))
        self.write(records)

    def remove_connector_config(self, name: str) -> None:
        self.write([connector_record(name, None), target_state_record(name, None)])

    def put_target_state(self, name: str, state: TargetState, *, task_configs: list[dict[str, Any]] | None = None) -> None:
        records = [target_state_record(name, state)]
        if task_configs is not None:
            records.extend(task_records(name, task_configs))
        self.write(records)

    def put_task_configs(self, name: str, configs: list[dict[str, Any]]) -> None:
        self.write(task_records(name, configs), wait_visible=False)

    def put_restart_request(self, name: str, *, only_failed: bool, include_tasks: bool) -> None:
        self.write([restart_record(name, only_failed, include_tasks)])


class MemoryConfigStore(RecordConfigStore):
    """The records applied in memory as they are written: standalone's store, and a test fake.

    ``on_change`` is called after every write (outside the store's lock), as the Kafka store calls
    it for every record read.
    """

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._snapshot = ConfigSnapshot()
        self.on_change = on_change

    def start(self) -> None:
        """Nothing to read: the store starts empty."""

    def stop(self) -> None:
        """Nothing to release."""

    def snapshot(self) -> ConfigSnapshot:
        with self._lock:
            return self._snapshot.copy()

    def write(self, records: list[Record], *, wait_visible: bool = True) -> None:
        with self._lock:
            for key, value in records:
                self._snapshot.sequence += 1
                if not apply_record(self._snapshot, key, value):
                    raise ValueError(f"Not a config record: {key}")
        if self.on_change is not None:
            self.on_change()
