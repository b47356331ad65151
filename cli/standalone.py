"""``sluice standalone``: run a standalone worker until SIGTERM/SIGINT."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from sluice.connectors.api import ConfigError, ConnectError
from sluice.connectors.backfill.session import use_jar_source
from sluice.deploy.spark import provisioned_jars
from sluice.offsets import FileOffsetStore, MemoryOffsetStore, OffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.rest.server import RestServer, metrics_listener_server
from sluice.rest.settings import RestSettings
from sluice.worker.config.local_paths import create_data_dir
from sluice.worker.config.models import WorkerConfig, with_cli_defaults
from sluice.worker.config.properties import load_properties
from sluice.worker.runtime import tune_gc
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker

log = logging.getLogger(__name__)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A worker or connector config from ``.properties`` or ``.json``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Config file {path} does not exist")
    if path.suffix == ".json":
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object")
        return data
    return load_properties(path)


def load_worker_file(path: str | Path) -> dict[str, Any]:
    """A worker config file's keys, with ``worker.config.file`` naming it: no connector may reach it."""
    return {**load_config_file(path), "worker.config.file": str(Path(path).resolve())}


def connector_from_file(path: str | Path) -> tuple[str, dict[str, Any]]:
    """A connector file holds either ``{"name", "config"}`` (the REST body) or a flat config with ``name``."""
    data = load_config_file(path)
    if isinstance(data.get("config"), dict):
        name = data.get("name") or data["config"].get("name")
        config = dict(data["config"])
    else:
        name = data.get("name")
        config = dict(data)
    if not name:
        raise ConfigError(f"{path}: the connector config has no name", key="name")
    return str(name), config


class StandaloneWorker:
    """Wires the herder, the REST server and the offset store of one standalone process."""

    def __init__(self, worker_config: dict[str, Any]) -> None:
        self.config = WorkerConfig.from_mapping(with_cli_defaults(worker_config))
        # Before anything starts: a listener other machines reach needs authentication (or an explicit opt-out).
        rest_settings = RestSettings.from_worker_config(self.config.raw)
        rest_settings.check_exposure(self.config.listener[1])
        registry = PluginRegistry([p.strip() for p in self.config.plugin_path.split(",") if p.strip()])
        store: OffsetStore
        if self.config.offset_storage_file_filename:
            store = FileOffsetStore(self.config.offset_storage_file_filename)
        else:
            log.warning("offset.storage.file.filename is not set: source offsets are kept in memory only")
            store = MemoryOffsetStore()
        self.herder = StandaloneHerder(Worker(self.config, registry, store))
        create_data_dir(self.config)  # after the worker checked that it overlaps nothing protected
        _, host, port = self.config.listener
        app = create_app(self.herder, rest_settings, backfills=self.herder.backfills)
        self.rest = RestServer(app, host, port)
        self.metrics_server = metrics_listener_server(app, self.config.metrics_listener)

    def start(self) -> None:
        # The REST server first, as Connect's: GET /health answers 503 "starting" meanwhile (KIP-1017).
        self.rest.start()
        if self.metrics_server is not None:
            self.metrics_server.start()
        self.herder.start()

    def refresh_plugins(self) -> None:
        """Scan ``plugin.path`` again: the operator's ``kill -HUP``, never a REST request."""
        self.herder.worker.refresh_plugins()

    def stop(self) -> None:
        try:
            self.herder.stop()
        finally:
            if self.metrics_server is not None:
                self.metrics_server.stop()
            self.rest.stop()


class Node(Protocol):
    """A worker process's parts, started and stopped together."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


#: A shutdown still running after this long writes every thread's stack to stderr (once).
SHUTDOWN_STACK_DUMP_S = 20.0


class _SignalCounts:
    """What SIGTERM/SIGINT and SIGHUP asked for, counted by the handlers and acted on by :meth:`wait`.

    The handlers only count: a handler runs on the main thread between two of its bytecodes, and
    that may be inside ``stop.wait()``, holding the Event's (non-reentrant) lock — ``stop.set()``
    there would wait for that lock forever (seen as a worker that ignored SIGTERM).
    """

    def __init__(self) -> None:
        self.stops = 0
        self.hangups = 0

    def install(self, *, hangup: bool) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        if hangup and hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, self._on_hangup)

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stops += 1
        if self.stops > 1:
            log.warning("Second signal: exiting without waiting for tasks")
            raise SystemExit(130)
        log.info("Received %s, shutting down (flushing and committing offsets)", signal.Signals(signum).name)

    def _on_hangup(self, signum: int, frame: Any) -> None:
        self.hangups += 1

    def wait(self, stop: threading.Event, on_hangup: Callable[[], object] | None) -> None:
        """Until a stop signal or ``stop`` is set, calling ``on_hangup`` once per SIGHUP batch."""
        handled = 0
        while not self.stops and not stop.wait(0.2):
            if on_hangup is not None and self.hangups != handled:
                handled = self.hangups
                try:
                    on_hangup()
                except Exception:  # a refresh that fails leaves the worker as it was, running
                    log.exception("SIGHUP handling failed")


def serve(
    node: Node,
    after_start: Callable[[threading.Event], int] | None = None,
    stack_dump_after_s: float = SHUTDOWN_STACK_DUMP_S,
    on_hangup: Callable[[], object] | None = None,
) -> int:
    """Start ``node``, run until SIGTERM/SIGINT (or ``after_start`` sets the event), stop it.

    Returns the process exit code: 2 for an invalid configuration found at start, 1 when the
    node cannot start, else what ``after_start`` returned (0 without one).

    ``kill -USR1 <pid>`` writes every thread's stack to stderr at any time (the worker's
    ``jstack``). A shutdown that takes longer than ``stack_dump_after_s`` does so by itself, so
    whatever holds it up is in the log; a second SIGTERM/SIGINT exits without waiting.
    ``kill -HUP <pid>`` calls ``on_hangup`` (the plugin refresh) on the main thread.
    """
    stop = threading.Event()
    signals = _SignalCounts()
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    signals.install(hangup=on_hangup is not None)
    try:
        node.start()
    except ConfigError as exc:
        print(f"sluice: invalid configuration: {exc}", file=sys.stderr)
        node.stop()
        return 2
    except (RuntimeError, ConnectError) as exc:
        print(f"sluice: cannot start the worker: {exc}", file=sys.stderr)
        node.stop()
        return 1
    tune_gc()
    exit_code = 0
    try:
        if after_start is not None:
            exit_code = after_start(stop)
        signals.wait(stop, on_hangup)
    finally:
        if stack_dump_after_s > 0:
            faulthandler.dump_traceback_later(stack_dump_after_s, exit=False)
        try:
            node.stop()
        finally:
            faulthandler.cancel_dump_traceback_later()
    return exit_code


def provide_spark_jars() -> None:
    """Backfills of this process get Spark's extra jars from the dev-stack fetcher (Maven), called
    when the first one starts Spark: a worker that never backfills fetches nothing."""
    use_jar_source(provisioned_jars)


def run_standalone(worker_file: str, connector_files: list[str]) -> int:
    """Run until a signal arrives; return the process exit code."""
    provide_spark_jars()
    try:
        node = StandaloneWorker(load_worker_file(worker_file))
        connectors = [connector_from_file(f) for f in connector_files]
    except ConfigError as exc:
        print(f"sluice: invalid configuration: {exc}", file=sys.stderr)
        return 2

    def create_connectors(stop: threading.Event) -> int:
        for name, config in connectors:
            try:
                node.herder.put_connector_config(name, config, allow_replace=False)
            except ConnectError as exc:
                log.error("Failed to create connector %s: %s", name, exc)
                stop.set()
                return 1
        return 0

    return serve(node, create_connectors, on_hangup=node.refresh_plugins)
