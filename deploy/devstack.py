"""``sluice dev up | down | status``: a local Kafka broker that outlives the command.

The broker is the same :class:`~deploy.kafka_stack.KafkaBroker` the integration tests use,
launched detached (its own session, no ``atexit`` hook). ``up --schema-registry`` also runs
the tests' :class:`~deploy.schema_registry.SchemaRegistryServer` (Apicurio Registry,
in-memory storage) detached the same way. Everything lives in the state directory
(``--state-dir``, ``$SLUICE_DEV_DIR``, default ``./.sluice/dev``)::

    state.json        pid, ports, version, paths of the running broker and registry
                      (absent when stopped)
    kafka/            the broker's directory: server.properties, data/, broker.log
    schema-registry/  the registry's server.log (its schemas live in memory only)

Data survive ``down`` and the next ``up``; ``down --purge`` deletes them.

Try it without the main CLI: ``python -m sluice.deploy.devstack up``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sluice.deploy import maven
from sluice.deploy.kafka_stack import (
    DEFAULT_KAFKA_VERSION,
    KafkaBroker,
    KafkaStackError,
    exclusive_lock,
    is_kafka_cached,
    is_port_free,
    is_port_open,
    signal_process_group,
)
from sluice.deploy.schema_registry import (
    ARTIFACT_ID,
    DEFAULT_APICURIO_VERSION,
    SchemaRegistryError,
    SchemaRegistryServer,
    is_apicurio_cached,
)

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".sluice") / "dev"
DEFAULT_PORT = 9092
DEFAULT_SCHEMA_REGISTRY_PORT = 8081
_STATE_FILE = "state.json"


class DevStackError(Exception):
    """A ``sluice dev`` action could not be carried out; the message is for the user."""


@dataclass(frozen=True, slots=True)
class DevStackState:
    """What ``up`` records about the broker it started, persisted as ``state.json``.

    The ``schema_registry_*`` fields are None (and left out of the JSON) unless ``up
    --schema-registry`` started a registry; state files written before they existed still load.
    """

    pid: int
    bootstrap_servers: str
    port: int
    controller_port: int
    kafka_version: str
    data_dir: str
    log_file: str
    config_file: str
    started_at: str
    schema_registry_pid: int | None = None
    schema_registry_port: int | None = None
    schema_registry_url: str | None = None
    schema_registry_log_file: str | None = None

    def as_dict(self) -> dict[str, Any]:
        raw = dataclasses.asdict(self)
        return {k: v for k, v in raw.items() if not (k.startswith("schema_registry_") and v is None)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DevStackState:
        raw: dict[str, Any] = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


class DevStack:
    """The local development stack kept in one state directory: a Kafka broker and, if asked
    for, a Schema Registry.

    The click commands below are thin wrappers around this class.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.expanduser().resolve()

    @property
    def state_path(self) -> Path:
        return self.state_dir / _STATE_FILE

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def schema_registry_dir(self) -> Path:
        return self.state_dir / "schema-registry"

    def read_state(self) -> DevStackState | None:
        """The recorded state, whether or not its process still runs."""
        try:
            return DevStackState.from_json(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            log.warning("Ignoring unreadable %s: %s", self.state_path, exc)
            return None

    def running(self) -> DevStackState | None:
        """The state of the broker if it is still running, else None."""
        state = self.read_state()
        if state is None or not _pid_alive(state.pid):
            return None
        # Pids are reused: only trust it if it is still the JVM we started on our config.
        cmdline = _process_command_line(state.pid) or ""
        if "kafka.Kafka" not in cmdline or state.config_file not in cmdline:
            return None
        return state

    def schema_registry_running(self, state: DevStackState | None) -> bool:
        """True if ``state`` records a Schema Registry that is still running."""
        if state is None or state.schema_registry_pid is None or not _pid_alive(state.schema_registry_pid):
            return False
        # As for the broker: the pid must still be the Apicurio JVM started in our directory.
        cmdline = _process_command_line(state.schema_registry_pid) or ""
        return (
            ARTIFACT_ID in cmdline
            and f"-Dquarkus.http.port={state.schema_registry_port}" in cmdline
            and str(self.schema_registry_dir) in cmdline
        )

    def clear_stale_state(self) -> DevStackState | None:
        """Remove ``state.json`` if nothing it records still runs; return what it said."""
        state = self.read_state()
        if state is not None and self.running() is None and not self.schema_registry_running(state):
            self.state_path.unlink(missing_ok=True)
            return state
        return None

    def up(
        self,
        *,
        port: int = DEFAULT_PORT,
        kafka_version: str = DEFAULT_KAFKA_VERSION,
        num_partitions: int = 1,
        heap_max: str = "768m",
        timeout: float = 120.0,
        schema_registry: bool = False,
        schema_registry_port: int = DEFAULT_SCHEMA_REGISTRY_PORT,
    ) -> tuple[DevStackState, bool, bool]:
        """Start the broker unless it runs, and with ``schema_registry`` a Schema Registry
        unless one runs; returns the state and whether the broker and the registry were
        started now. A failed start leaves running only what ran before."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Two concurrent `up`s (e.g. `make -j`) would both find nothing running; the loser's
        # cleanup would then delete the winner's state file.
        with exclusive_lock(self.state_dir / ".up.lock"):
            current = self.running()
            if current is not None:
                if not schema_registry or self.schema_registry_running(current):
                    return current, False, False
                return self._start_schema_registry(current, schema_registry_port, timeout), False, True
            # The broker is gone; a registry it left behind would hold its port.
            self._stop_schema_registry(self.read_state(), timeout=15.0)
            self.clear_stale_state()
            if schema_registry:  # fail before starting anything
                self._check_schema_registry_port(schema_registry_port, kafka_port=port)
            state = self._start(port, kafka_version, num_partitions, heap_max, timeout)
            if not schema_registry:
                return state, True, False
            try:
                return self._start_schema_registry(state, schema_registry_port, timeout), True, True
            except BaseException:
                _terminate_process_group(state.pid, 15.0)
                self.state_path.unlink(missing_ok=True)
                raise

    def _start(
        self, port: int, kafka_version: str, num_partitions: int, heap_max: str, timeout: float
    ) -> DevStackState:
        # Check before launching so the message names the real problem, not a JVM bind error.
        if not is_port_free(port):
            raise DevStackError(
                f"Port {port} on 127.0.0.1 is already in use by another process "
                "(another Kafka?). Stop it, or pick another port with --port."
            )
        broker = KafkaBroker(
            version=kafka_version,
            port=port,
            data_dir=self.kafka_dir,
            num_partitions=num_partitions,
            heap_max=heap_max,
            start_timeout=timeout,
            detach=True,
        )
        try:
            pid = broker.launch()
            state = DevStackState(
                pid=pid,
                bootstrap_servers=broker.bootstrap_servers,
                port=broker.port,
                controller_port=broker.controller_port,
                kafka_version=broker.version,
                data_dir=str(broker.data_dir),
                log_file=str(broker.log_path),
                config_file=str(broker.config_path),
                started_at=_now(),
            )
            # Written before waiting, so `status` and `down` in another terminal see it.
            maven.write_atomically(self.state_path, state.to_json())
            broker.wait_until_ready()
        except BaseException:
            # Includes Ctrl-C while waiting: an aborted `up` leaves nothing running.
            broker.stop(timeout=15.0)
            self.state_path.unlink(missing_ok=True)
            raise
        return state

    @staticmethod
    def _check_schema_registry_port(port: int, kafka_port: int | None = None) -> None:
        if port == kafka_port:
            raise DevStackError(f"The Schema Registry and Kafka cannot both use port {port}; pick another.")
        if not is_port_free(port):
            raise DevStackError(
                f"Port {port} on 127.0.0.1 is already in use by another process "
                "(another Schema Registry?). Stop it, or pick another port with --schema-registry-port."
            )

    def _start_schema_registry(self, state: DevStackState, port: int, timeout: float) -> DevStackState:
        """Start a detached Schema Registry next to the broker of ``state``; record and return it."""
        self._check_schema_registry_port(port, kafka_port=state.port)
        server = SchemaRegistryServer(port=port, data_dir=self.schema_registry_dir, start_timeout=timeout, detach=True)
        server.start()  # stops what it started if it fails (Ctrl-C included)
        pid = server.pid
        if pid is None:  # it exited right after answering
            raise SchemaRegistryError(f"the Schema Registry exited after starting; see {server.log_path}")
        state = dataclasses.replace(
            state,
            schema_registry_pid=pid,
            schema_registry_port=server.port,
            schema_registry_url=server.url,
            schema_registry_log_file=str(server.log_path),
        )
        try:
            maven.write_atomically(self.state_path, state.to_json())
        except BaseException:
            server.stop(timeout=15.0)
            raise
        return state

    def _stop_schema_registry(self, state: DevStackState | None, timeout: float) -> bool:
        """Stop the registry ``state`` records if it runs; True if it did."""
        if state is None or state.schema_registry_pid is None or not self.schema_registry_running(state):
            return False
        _terminate_process_group(state.schema_registry_pid, timeout)
        return True

    def down(self, *, timeout: float = 30.0, purge: bool = False) -> tuple[DevStackState | None, DevStackState | None]:
        """Stop the broker and the Schema Registry; returns the recorded state as
        ``(broker, registry)``, each None if that one was not running."""
        recorded = self.read_state()
        state = self.running()
        registry = recorded if self._stop_schema_registry(recorded, timeout) else None
        if state is not None:
            _terminate_process_group(state.pid, timeout)
        self.state_path.unlink(missing_ok=True)
        if purge:
            shutil.rmtree(self.kafka_dir, ignore_errors=True)
            shutil.rmtree(self.schema_registry_dir, ignore_errors=True)
        return state, registry


def _pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): trust kill(0)
    # A zombie still answers kill(0) until its parent reaps it; it is gone for our purposes.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _process_command_line(pid: int) -> str | None:
    """The command line of ``pid`` as one string, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return None
        try:  # no procfs (macOS): ask ps
            out = subprocess.run(
                ["ps", "-o", "command=", "-p", str(pid)],
                capture_output=True,
                text=True,
                check=False,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() or None
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None


def _terminate_process_group(pid: int, timeout: float = 30.0) -> bool:
    """Stop a process started in its own session: SIGTERM, then SIGKILL after ``timeout``.

    For processes this interpreter did not start (``sluice dev down``); callers should check
    :func:`_process_command_line` first, since pids get reused. Returns True if SIGKILL was
    needed.
    """
    signal_process_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            log.warning("Process %d did not stop within %.0fs of SIGTERM; killing it", pid, timeout)
            signal_process_group(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10.0
            while _pid_alive(pid) and time.monotonic() < kill_deadline:
                time.sleep(0.05)
            return True
        time.sleep(0.1)
    return False


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------
# click commands
# --------------------------------------------------------------------------------------

_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    envvar="SLUICE_DEV_DIR",
    show_envvar=True,
    help="Directory holding the stack's state and data.",
)


@click.group(name="dev")
def dev() -> None:
    """Run a local Apache Kafka broker (and Schema Registry) for development.

    \b
    sluice dev up       start Kafka (KRaft, one node) on 127.0.0.1:9092 in the background
    sluice dev up --schema-registry
                        ... and a Confluent-compatible Schema Registry on 127.0.0.1:8081
    sluice dev status   show whether they run, and where
    sluice dev down     stop them (Kafka's data are kept; --purge deletes them)

    The first `up` fetches the Kafka jars (and Apicurio Registry) from Maven Central with
    `mvn` (Java 17+ and Maven are needed) into ~/.cache/sluice ($SLUICE_CACHE_DIR).
    """


@dev.command()
@_state_dir_option
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="PLAINTEXT listener port on 127.0.0.1 (the bootstrap address).",
)
@click.option(
    "--kafka-version", default=DEFAULT_KAFKA_VERSION, show_default=True, help="Apache Kafka 4.x version to run."
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="num.partitions for auto-created topics.",
)
@click.option("--max-heap", default="768m", show_default=True, help="Broker JVM -Xmx.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Seconds to wait for the broker (and the Schema Registry) to become ready.",
)
@click.option(
    "--schema-registry",
    is_flag=True,
    help="Also run a Confluent-compatible Schema Registry (Apicurio Registry, schemas kept in memory).",
)
@click.option(
    "--schema-registry-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_SCHEMA_REGISTRY_PORT,
    show_default=True,
    help="Schema Registry port on 127.0.0.1 (with --schema-registry).",
)
def up(
    state_dir: Path,
    port: int,
    kafka_version: str,
    partitions: int,
    max_heap: str,
    timeout: float,
    schema_registry: bool,
    schema_registry_port: int,
) -> None:
    """Start Kafka in the background and wait until it is ready.

    Prints the bootstrap address, and with --schema-registry the schema.registry.url for the
    AvroConverter. If Kafka already runs, says so and changes nothing but adding a Schema
    Registry (run `down` first to change options). Fails if a port is taken by something else.
    """
    stack = DevStack(state_dir)
    if stack.running() is None and not is_kafka_cached(kafka_version):
        click.echo(f"Fetching Kafka {kafka_version} from Maven Central (first run only)...", err=True)
    if schema_registry and not is_apicurio_cached():
        click.echo(
            f"Fetching Apicurio Registry {DEFAULT_APICURIO_VERSION} from Maven Central (first run only)...", err=True
        )
    try:
        state, started, registry_started = stack.up(
            port=port,
            kafka_version=kafka_version,
            num_partitions=partitions,
            heap_max=max_heap,
            timeout=timeout,
            schema_registry=schema_registry,
            schema_registry_port=schema_registry_port,
        )
    except (DevStackError, KafkaStackError, SchemaRegistryError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not started:
        click.echo(f"Kafka {state.kafka_version} is already running at {state.bootstrap_servers} (pid {state.pid}).")
        if state.port != port:
            click.echo(f"It listens on port {state.port}, not {port}; run `sluice dev down` first to change it.")
    else:
        click.echo(f"Kafka {state.kafka_version} ready at {state.bootstrap_servers} (pid {state.pid}).")
    if registry_started:
        click.echo(f"Schema Registry ready at {state.schema_registry_url} (pid {state.schema_registry_pid}).")
    elif stack.schema_registry_running(state):
        click.echo(
            f"Schema Registry is already running at {state.schema_registry_url} (pid {state.schema_registry_pid})."
        )
        if schema_registry and state.schema_registry_port != schema_registry_port:
            click.echo(
                f"It listens on port {state.schema_registry_port}, not {schema_registry_port}; "
                "run `sluice dev down` first to change it."
            )
    if stack.schema_registry_running(state):
        click.echo(f"schema.registry.url={state.schema_registry_url}")
    if started or registry_started:
        click.echo(f"Data and log: {state.data_dir}   Stop it with: sluice dev down")


@dev.command()
@_state_dir_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for a clean shutdown before killing the broker.",
)
@click.option("--purge", is_flag=True, help="Also delete the broker's data (topics, offsets) and the registry's log.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Only stop the broker if it listens on this port (a safety check for scripts).",
)
def down(state_dir: Path, timeout: float, purge: bool, port: int | None) -> None:
    """Stop the Kafka broker (and Schema Registry) started by `up`. Succeeds if nothing was running."""
    stack = DevStack(state_dir)
    current = stack.running()
    if port is not None and current is not None and current.port != port:
        raise click.ClickException(
            f"Kafka is running at {current.bootstrap_servers}, not on port {port}; nothing stopped."
        )
    purged = [d for d in (stack.kafka_dir, stack.schema_registry_dir) if d.exists()] if purge else []
    state, registry = stack.down(timeout=timeout, purge=purge)
    if registry is not None:
        click.echo(
            f"Stopped the Schema Registry at {registry.schema_registry_url} (pid {registry.schema_registry_pid})."
        )
    if state is None:
        click.echo("Kafka is not running; nothing to stop.")
    else:
        click.echo(f"Stopped Kafka {state.kafka_version} at {state.bootstrap_servers} (pid {state.pid}).")
    if purge:
        click.echo(f"Deleted {' and '.join(map(str, purged or [stack.kafka_dir]))}.")


@dev.command()
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON (empty object when stopped).")
def status(state_dir: Path, as_json: bool) -> None:
    """Show whether Kafka runs (exit code 0) or not (exit code 1).

    When running, prints its pid, bootstrap address, Kafka version, data directory and
    log file, and the Schema Registry's URL and pid if `up --schema-registry` started one.
    Scripts can test the exit code, or read `--json`.
    """
    stack = DevStack(state_dir)
    state = stack.running()
    if as_json:
        click.echo(json.dumps(state.as_dict() if state else {}, indent=2))
        sys.exit(0 if state else 1)
    if state is None:
        recorded = stack.read_state()
        stack.clear_stale_state()  # kept while a registry still runs: `down` stops it
        click.echo("Kafka: stopped")
        if recorded is not None:
            click.echo(f"  (pid {recorded.pid} exited without `sluice dev down`; see {recorded.log_file})")
        if stack.schema_registry_running(recorded):
            _echo_schema_registry(stack, recorded)
            click.echo("  (stop it with `sluice dev down`)")
        sys.exit(1)
    answering = "" if is_port_open(state.port) else "  (not accepting connections)"
    click.echo(f"Kafka: running{answering}")
    click.echo(f"  pid:        {state.pid}")
    click.echo(f"  bootstrap:  {state.bootstrap_servers}")
    click.echo(f"  version:    {state.kafka_version}")
    click.echo(f"  data dir:   {state.data_dir}")
    click.echo(f"  log:        {state.log_file}")
    click.echo(f"  started:    {state.started_at}")
    _echo_schema_registry(stack, state)


def _echo_schema_registry(stack: DevStack, state: DevStackState | None) -> None:
    """The Schema Registry lines of `status` (none if `up` did not start one)."""
    if state is None or state.schema_registry_pid is None:
        return
    if not stack.schema_registry_running(state):
        click.echo("Schema Registry: stopped")
        click.echo(
            f"  (pid {state.schema_registry_pid} exited without `sluice dev down`; see {state.schema_registry_log_file})"
        )
        return
    answering = "" if is_port_open(state.schema_registry_port or 0) else "  (not accepting connections)"
    click.echo(f"Schema Registry: running at {state.schema_registry_url} (pid {state.schema_registry_pid}){answering}")
    click.echo(f"  log:        {state.schema_registry_log_file}")


if __name__ == "__main__":
    dev()
