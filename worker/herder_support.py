"""What both herders share: plugin queries, config validation and connector-call helpers."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from sluice.connectors.api import ConnectError, NotFoundError
from sluice.plugins import PluginInfo, PluginKind
from sluice.worker.config_infos import plugin_definitions, validate_config
from sluice.worker.herder import BadRequest, Forbidden
from sluice.worker.logcontext import set_context
from sluice.worker.masking import MASK
from sluice.worker.outages import DegradedNotice
from sluice.worker.restarts import TaskRestarter
from sluice.worker.runners import WorkerTask
from sluice.worker.status import ConnectorTaskId, State, Status, StatusStore
from sluice.worker.task_metrics import StartupCounters
from sluice.worker.worker import Worker

T = TypeVar("T")

CONNECTOR_CALL_TIMEOUT_S = 30.0

CONNECTOR_KINDS = (PluginKind.SOURCE, PluginKind.SINK)

NOT_STOPPED_MESSAGE = (
    "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the "
    "specified connector by issuing a 'PUT' request to the '/connectors/{name}/stop' endpoint"
)


def offsets_message(verb: str, connector_checked: bool) -> str:
    """Connect's answer to an offsets change; it warns when the connector did not vouch for them."""
    if connector_checked:
        return f"The offsets for this connector have been {verb} successfully"
    return (
        f"The Connect framework-managed offsets for this connector have been {verb} successfully. However, if this "
        f"connector manages offsets externally, they will need to be manually {verb} in the system that the "
        "connector uses."
    )


class TaskStatusReporting(abc.ABC):
    """The herders' ``TaskStatusListener``: statuses from runner threads, and automatic restarts.

    Called on runner threads, so nothing here takes the herder's lock: the herder may hold it
    while it waits for this very runner to stop.
    """

    status: StatusStore
    restarter: TaskRestarter

    @property
    @abc.abstractmethod
    def worker_id(self) -> str: ...

    @abc.abstractmethod
    def _trace(self, name: str, error: BaseException) -> str:
        """The status trace of ``error``, secrets blanked out."""

    @abc.abstractmethod
    def _live_runner(self, task_id: ConnectorTaskId) -> WorkerTask | None:
        """The runner this herder has for ``task_id`` (read without the lock)."""

    @abc.abstractmethod
    def _restarts_allowed(self, task_id: ConnectorTaskId) -> bool:
        """``False`` while the herder stops, or the task's connector is gone."""

    @abc.abstractmethod
    def _auto_restart(self, task_id: ConnectorTaskId, failed: WorkerTask | None) -> None:
        """Restart the task if ``failed`` is still its current run."""

    def _may_report(self) -> bool:
        """Whether this worker's view of the task is current enough to report it stopped."""
        return True

    @property
    def _startups(self) -> StartupCounters:
        """The worker's startup counters (``GET /metrics``); a listener without a worker keeps its own."""
        worker = getattr(self, "worker", None)
        if worker is not None:
            return worker.startups  # type: ignore[no-any-return]
        own = self.__dict__.get("_own_startups")
        if own is None:
            own = self.__dict__["_own_startups"] = StartupCounters()
        return own  # type: ignore[no-any-return]

    def on_startup(self, task_id: ConnectorTaskId) -> None:
        self.restarter.on_started(task_id)
        self._startups.task_started(task_id)
        self.status.put_task(task_id, Status(State.RUNNING, self.worker_id))

    def on_pause(self, task_id: ConnectorTaskId) -> None:
        self._startups.task_started(task_id)
        self.status.put_task(task_id, Status(State.PAUSED, self.worker_id))

    def on_resume(self, task_id: ConnectorTaskId) -> None:
        self.status.put_task(task_id, Status(State.RUNNING, self.worker_id))

    def on_failure(self, task_id: ConnectorTaskId, error: BaseException) -> None:
        trace = self._trace(task_id.connector, error)
        self._startups.task_failed(task_id)
        failed = self._live_runner(task_id)
        scheduled = None
        if self._restarts_allowed(task_id) and not (failed is not None and failed.stopping):
            scheduled = self.restarter.on_failed(task_id, lambda: self._auto_restart(task_id, failed))
        if scheduled is None:
            self.status.put_task(task_id, Status(State.FAILED, self.worker_id, trace=trace))
            return
        attempt, _ = scheduled
        self.status.put_task(
            task_id,
            Status(
                State.RESTARTING,
                self.worker_id,
                trace=trace,
                restart_attempt=attempt,
                restart_attempts_max=self.restarter.policy.max_attempts,
            ),
        )

    def on_shutdown(self, task_id: ConnectorTaskId) -> None:
        if self._may_report():
            self.status.put_task(task_id, Status(State.UNASSIGNED, self.worker_id))

    def on_degraded(self, task_id: ConnectorTaskId, trace: str) -> None:
        # RUNNING, as Connect clients expect of a task that retries; the trace says what is wrong.
        if self._may_report():
            trace = self._trace(task_id.connector, DegradedNotice(trace))
            self.status.put_task(task_id, Status(State.RUNNING, self.worker_id, trace=trace))

    def on_recovered(self, task_id: ConnectorTaskId) -> None:
        if self._may_report():
            self.status.put_task(task_id, Status(State.RUNNING, self.worker_id))


class PluginQueries:
    """Herder methods that only need the worker: plugins, their configs, validation, topic tracking."""

    worker: Worker

    def plugins(self) -> list[PluginInfo]:
        return self.worker.plugins.plugins()

    def worker_settings(self) -> Mapping[str, Any]:
        return dict(self.worker.config.raw)

    def _check_topic_tracking(self, key: str, message: str) -> None:
        if str(self.worker.config.raw.get(key, "true")).strip().lower() == "false":
            raise Forbidden(message)

    def connector_plugin_config(self, plugin: str) -> list[dict[str, Any]]:
        kinds = (*CONNECTOR_KINDS, *(k for k in PluginKind if k not in CONNECTOR_KINDS))
        info = self.worker.plugins.find(plugin, kinds)
        if info is None:
            raise NotFoundError(self._unknown_plugin(plugin, kinds))
        return plugin_definitions(info)

    def _unknown_plugin(self, plugin: str, kinds: Iterable[PluginKind]) -> str:
        """Connect's "Unknown plugin X." plus the closest names, when one is close (a typo)."""
        close = self.worker.plugins.suggest(plugin, kinds)
        return f"Unknown plugin {plugin}." + (f" Did you mean {' or '.join(close)}?" if close else "")

    def validate_connector_config(self, plugin: str, config: Mapping[str, Any]) -> dict[str, Any]:
        info = self.worker.plugins.find(plugin, CONNECTOR_KINDS)
        if info is None:
            raise NotFoundError(self._unknown_plugin(plugin, CONNECTOR_KINDS))
        raw = {str(k): stringify(v) for k, v in config.items()}
        included = raw.get("connector.class")
        if included:
            included_info = self.worker.plugins.find(str(included), CONNECTOR_KINDS)
            if included_info is None or included_info.cls is not info.cls:
                close = self.worker.plugins.suggest(str(included), CONNECTOR_KINDS) if included_info is None else []
                hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                raise BadRequest(f"Included connector type {included}{hint} does not match request type {plugin}")
        else:
            raw["connector.class"] = plugin
        return validate_config(info, raw, self.worker.validate, self.worker.resolve)


def request_config(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A connector config from a REST body: values as strings, ``name`` the one in the URL."""
    raw = {str(k): stringify(v) for k, v in config.items()}
    if "name" in raw and raw["name"] != name:
        raise BadRequest(f"Connector name configuration ({raw['name']}) doesn't match connector name in the URL ({name})")
    raw["name"] = name
    return raw


def restore_masked_secrets(raw: dict[str, Any], stored: Mapping[str, Any], secret_keys: Iterable[str]) -> None:
    """A config read back over REST shows ``[hidden]`` for secrets; re-applying it keeps the stored ones."""
    for key in secret_keys:
        if raw.get(key) == MASK and key in stored:
            raw[key] = stored[key]


def stringify(value: Any) -> Any:
    """Connect configs are strings; JSON bodies may carry numbers and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def call_with_timeout(fn: Callable[[], T], what: str, connector: str, timeout: float = CONNECTOR_CALL_TIMEOUT_S) -> T:
    """Run a connector lifecycle call on its own thread, so a connector that hangs (a database that
    never answers) fails itself instead of freezing the herder and the REST API."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        set_context(connector)
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised on the caller's thread
            error.append(exc)

    thread = threading.Thread(target=target, name=f"connector-{connector}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ConnectError(f"Timed out after {timeout:.0f}s trying to {what}")
    if error:
        raise error[0]
    return result[0]
