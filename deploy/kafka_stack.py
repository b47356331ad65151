"""Apache Kafka from Maven Central, run as a single-node KRaft broker on loopback.

Two pieces, shared by ``sluice dev`` (:mod:`sluice.deploy.devstack`), the quickstart and the
integration-test fixtures:

* :func:`ensure_kafka_jars` resolves ``org.apache.kafka:kafka_2.13`` plus the log4j2 SLF4J
  binding Kafka leaves out (see ``deploy/kafka/pom.xml``) with
  ``mvn dependency:copy-dependencies``, once per version, into
  ``~/.cache/sluice/kafka-<version>/libs``.
* :class:`KafkaBroker` formats a storage directory and runs ``kafka.Kafka`` as a combined
  broker + controller bound to 127.0.0.1 only.

The jars are fetched by :mod:`sluice.deploy.kafka_jars`, the KRaft storage is formatted by
:mod:`sluice.deploy.kafka_storage` and the errors live in :mod:`sluice.deploy.kafka_errors`; this
module runs the broker and re-exports their names, which ``sluice dev`` and the tests import from here.

Command line (the Makefile uses ``fetch``)::

    python -m sluice.deploy.kafka_stack fetch [--kafka-version 4.3.1]   # prints the libs directory
    python -m sluice.deploy.kafka_stack run [--port 9092]               # foreground broker, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from sluice.deploy import maven
from sluice.deploy.kafka_errors import KafkaFetchError, KafkaStackError, KafkaStartError, PortInUseError
from sluice.deploy.kafka_jars import (
    DEFAULT_KAFKA_VERSION,
    KAFKA_FILES_DIR,
    LOG4J2_CONFIG,
    POM_PATH,
    TOOLS_POM_PATH,
    ensure_kafka_jars,
    ensure_kafka_tools_jars,
    is_kafka_cached,
    kafka_libs_dir,
)
from sluice.deploy.kafka_storage import format_storage, logging_options, new_cluster_id, now
from sluice.deploy.maven import cache_dir, exclusive_lock
from sluice.deploy.processes import (
    LOOPBACK,
    die_with_parent_hook,
    find_free_port,
    is_port_free,
    is_port_open,
    signal_process_group,
    stop_process_group,
    tail_file,
)
from sluice.deploy.processes import find_java as _find_java

# The names devstack, the tests and the benchmarks import from here.
__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "KAFKA_FILES_DIR",
    "LOG4J2_CONFIG",
    "LOOPBACK",
    "NODE_ID",
    "POM_PATH",
    "TOOLS_POM_PATH",
    "KafkaBroker",
    "KafkaFetchError",
    "KafkaStackError",
    "KafkaStartError",
    "PortInUseError",
    "cache_dir",
    "die_with_parent_hook",
    "ensure_kafka_jars",
    "ensure_kafka_tools_jars",
    "exclusive_lock",
    "find_free_port",
    "find_java",
    "is_kafka_cached",
    "is_port_free",
    "is_port_open",
    "kafka_libs_dir",
    "main",
    "new_cluster_id",
    "signal_process_group",
    "stop_process_group",
    "tail_file",
]

log = logging.getLogger(__name__)

NODE_ID: Final = 1


def find_java() -> str:
    """Path of the ``java`` executable: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    return _find_java(KafkaStartError, "Kafka 4.x needs Java 17 or newer")


# --------------------------------------------------------------------------------------
# The broker
# --------------------------------------------------------------------------------------

_LIVE_BROKERS: set[KafkaBroker] = set()


@atexit.register
def _stop_live_brokers() -> None:
    # Brokers started in this interpreter (not detached ones) must not outlive it.
    for broker in list(_LIVE_BROKERS):
        with contextlib.suppress(Exception):
            broker.stop(timeout=10.0)


class KafkaBroker:
    """A single-node Apache Kafka broker (KRaft, combined broker + controller) on loopback.

    Runs ``kafka.Kafka`` from the jars :func:`ensure_kafka_jars` fetched, as a child process
    in its own session, so a Ctrl-C aimed at the Python process does not reach the JVM.
    :meth:`stop`, the context manager and an ``atexit`` hook stop it; ``detach=True`` (used
    by ``sluice dev up``) skips the ``atexit`` hook so the broker outlives the interpreter.

    ``data_dir`` holds ``server.properties``, the formatted log directory ``data/`` and
    ``broker.log`` (the JVM's console output). Without one, a temporary directory is made
    and deleted by :meth:`stop`. Ports are picked when the object is created, so
    :attr:`bootstrap_servers` is known before :meth:`start`; :meth:`restart` keeps ports
    and data. A formatted ``data_dir`` from an earlier broker is reused, topics included,
    with its controller port.

    ``kill_with_parent=True`` (Linux) also has the kernel send the JVM SIGTERM when the
    thread that started it dies, which covers a test run killed with SIGKILL; only use it
    from a thread that lives as long as the broker should, e.g. the main thread.

    Example::

        with KafkaBroker(num_partitions=3) as broker:
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    """

    def __init__(
        self,
        *,
        version: str = DEFAULT_KAFKA_VERSION,
        port: int | None = None,
        controller_port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        num_partitions: int = 1,
        heap_initial: str = "256m",
        heap_max: str = "768m",
        jvm_options: Sequence[str] = (),
        extra_config: Mapping[str, str | int | bool] | None = None,
        start_timeout: float = 120.0,
        detach: bool = False,
        kill_with_parent: bool = False,
    ) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        self.version = version
        self.host = LOOPBACK
        self.num_partitions = num_partitions
        self.heap_initial = heap_initial
        self.heap_max = heap_max
        self.jvm_options = tuple(jvm_options)
        self.extra_config = dict(extra_config or {})
        self.start_timeout = start_timeout
        self.detach = detach
        self.kill_with_parent = kill_with_parent

        self._owns_data_dir = data_dir is None
        self._data_dir = Path(data_dir).resolve() if data_dir is not None else self._make_temp_dir()
        if controller_port is None:
            previous = self._previous_controller_port()
            # Reusing it is tidier, but a single-voter quorum also starts on a new one.
            if previous is not None and is_port_free(previous):
                controller_port = previous
        self.port = port if port is not None else find_free_port(exclude=[controller_port or 0])
        self.controller_port = controller_port if controller_port is not None else find_free_port(exclude=[self.port])
        if self.port == self.controller_port:
            raise ValueError("port and controller_port must differ")

        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._log_start = 0

    # -- properties --------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the PLAINTEXT listener, for ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        """The broker's own directory (config, log segments, console log)."""
        return self._data_dir

    @property
    def log_dirs(self) -> Path:
        """Kafka's ``log.dirs``: topic partitions and the KRaft metadata log."""
        return self._data_dir / "data"

    @property
    def config_path(self) -> Path:
        """The generated ``server.properties``."""
        return self._data_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        """The JVM's stdout/stderr (log4j2 writes there), appended to across restarts."""
        return self._data_dir / "broker.log"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs, else None."""
        return self._proc.pid if self.is_running() and self._proc else None

    @property
    def cluster_id(self) -> str | None:
        """The cluster id written by ``kafka-storage format``, or None before formatting."""
        meta = self.log_dirs / "meta.properties"
        with contextlib.suppress(OSError):
            for line in meta.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "cluster.id":
                    return value.strip()
        return None

    def is_running(self) -> bool:
        """True while the JVM this object launched is alive."""
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Launch the broker and wait until it serves metadata requests.

        Fetches the jars first if needed. Does nothing if already running. On failure the
        JVM is stopped and :class:`KafkaStartError` (or :class:`KafkaFetchError`) raised,
        with the tail of :attr:`log_path` in the message.
        """
        if self.is_running():
            return
        self.launch()
        try:
            self.wait_until_ready(timeout)
        except BaseException:
            self._terminate(timeout=10.0)
            raise

    def launch(self) -> int:
        """Start the JVM without waiting for it to be ready; returns its pid.

        See :meth:`wait_until_ready`. Returns the running JVM's pid if already started.
        """
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid
        libs = ensure_kafka_jars(self.version)
        java = find_java()
        if not self._data_dir.exists() and self._owns_data_dir:
            self._data_dir = self._make_temp_dir()  # stop() deleted the previous one
        self._data_dir.mkdir(parents=True, exist_ok=True)
        for port, listener in ((self.port, "PLAINTEXT"), (self.controller_port, "CONTROLLER")):
            if not is_port_free(port, self.host):
                raise PortInUseError(port, self.host, listener)
        self._write_config()
        if not (self.log_dirs / "meta.properties").exists():
            format_storage(java, libs, self.config_path, self.log_dirs, self.log_path)

        cmd = self._java_command(java, libs)
        console = open(self.log_path, "ab")  # noqa: SIM115 - the JVM's console, closed by _terminate()
        self._log_start = console.tell()
        console.write(f"\n=== sluice: starting Kafka {self.version} at {now()} ===\n".encode())
        console.flush()
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd=self._data_dir,
                # Own session: terminal signals (Ctrl-C) go to us, not the JVM, and stop()
                # can signal the whole group.
                start_new_session=True,
                preexec_fn=die_with_parent_hook() if self.kill_with_parent else None,  # noqa: PLW1509 - Linux's parent-death signal, set before exec
            )
        except OSError as exc:
            console.close()
            raise KafkaStartError(f"could not run {java}: {exc}") from exc
        self._log_handle = console
        if not self.detach:
            _LIVE_BROKERS.add(self)
        log.info(
            "Launched Kafka %s (pid %d) on %s, data in %s",
            self.version,
            self._proc.pid,
            self.bootstrap_servers,
            self._data_dir,
        )
        return self._proc.pid

    def _java_command(self, java: str, libs: Path) -> list[str]:
        """The command line of the broker's JVM."""
        return [
            java,
            f"-Xms{self.heap_initial}",
            f"-Xmx{self.heap_max}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:-UsePerfData",
            "-Djava.awt.headless=true",
            *logging_options(),
            *self.jvm_options,
            "-cp",
            str(libs / "*"),
            "kafka.Kafka",
            str(self.config_path),
        ]

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Block until the broker answers a metadata request listing itself.

        Raises :class:`KafkaStartError` if the JVM exits first or ``timeout`` (default
        ``start_timeout``) passes. Does not stop the JVM on failure; :meth:`start` does.
        """
        # Imported here so that fetching jars does not need the client library.
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        budget = self.start_timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + budget
        # Wait for the socket first: librdkafka would log every refused connection.
        while not is_port_open(self.port, self.host):
            self._raise_if_exited()
            if time.monotonic() >= deadline:
                raise self._start_error(f"did not open {self.bootstrap_servers} within {budget:g}s")
            time.sleep(0.1)
        # The listener accepts connections before request processing starts; the broker
        # only answers once it has registered with the controller and been unfenced.
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        last_error = "no answer yet"
        while True:
            self._raise_if_exited()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._start_error(
                    f"did not answer metadata requests within {budget:g}s (last error: {last_error})"
                )
            try:
                metadata = admin.list_topics(timeout=min(2.0, remaining))
            except KafkaException as exc:
                last_error = str(exc)
            else:
                if NODE_ID in metadata.brokers:
                    break
                last_error = f"metadata lists brokers {sorted(metadata.brokers)}"
            time.sleep(0.1)
        log.info(
            "Kafka %s ready at %s after %.1fs",
            self.version,
            self.bootstrap_servers,
            time.monotonic() - started,
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker: SIGTERM (a clean shutdown), SIGKILL after ``timeout`` seconds.

        Idempotent. A temporary data directory this object created is deleted.
        """
        self._terminate(timeout)
        if self._owns_data_dir:
            shutil.rmtree(self._data_dir, ignore_errors=True)

    def restart(self, timeout: float | None = None) -> None:
        """Stop and start again on the same ports and data (topics and offsets survive)."""
        self._terminate(timeout=30.0)
        self.start(timeout)

    def __enter__(self) -> KafkaBroker:
        try:
            self.start()
        except BaseException:
            self.stop()  # __exit__ will not run, and a temporary data dir would be left behind
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"KafkaBroker({self.version}, {self.bootstrap_servers}, {state}, {self._data_dir})"

    # -- internals ---------------------------------------------------------------------

    def server_properties(self) -> dict[str, str]:
        """The broker configuration written to :attr:`config_path` (extra_config applied)."""
        endpoints = f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}"
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            # Dynamic quorum (KIP-853): pairs with `kafka-storage format --standalone`.
            "controller.quorum.bootstrap.servers": f"{self.host}:{self.controller_port}",
            "listeners": endpoints,
            "advertised.listeners": endpoints,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dirs),
            "num.partitions": str(self.num_partitions),
            "auto.create.topics.enable": "true",
            # One broker: every internal topic must accept a replication factor of 1.
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # The internal topics default to 50 partitions each; creating them is most of
            # the first consumer group's or transaction's latency.
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.num.partitions": "5",
            # Tests join a group once and want their assignment now, not after 3 s.
            "group.initial.rebalance.delay.ms": "0",
            # Defaults are sized for big servers; this one shares 2 cores with the tests.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "num.replica.fetchers": "1",
            "group.coordinator.threads": "1",
            "share.coordinator.threads": "1",
            "log.cleaner.threads": "1",
            # The cleaner allocates this up front (128 MiB by default) out of a small heap.
            "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
        }
        for key, value in self.extra_config.items():
            props[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return props

    def _write_config(self) -> None:
        lines = [f"# Written by {__name__} on every start; edits are overwritten."]
        for key, value in self.server_properties().items():
            # java.util.Properties treats backslash as an escape character.
            lines.append(f"{key}={value.replace(chr(92), chr(92) * 2)}")
        maven.write_atomically(self.config_path, "\n".join(lines) + "\n")

    def _previous_controller_port(self) -> int | None:
        # `format --standalone` records the controller's endpoint in the metadata log, so a
        # formatted directory keeps the controller port it was formatted with.
        if not (self.log_dirs / "meta.properties").exists():
            return None
        with contextlib.suppress(OSError, ValueError):
            for line in self.config_path.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "controller.quorum.bootstrap.servers":
                    return int(value.strip().rsplit(":", 1)[1])
        return None

    def _raise_if_exited(self) -> None:
        if self._proc is None:
            raise self._start_error("was stopped while starting")
        code = self._proc.poll()
        if code is not None:
            raise self._start_error(f"exited with code {code} during startup")

    def _start_error(self, reason: str) -> KafkaStartError:
        pid = f"pid {self._proc.pid}, " if self._proc else ""
        return KafkaStartError(
            f"Kafka {self.version} broker ({pid}{self.bootstrap_servers}) {reason}.\n"
            f"Broker log {self.log_path} (last lines):\n" + maven.indent(tail_file(self.log_path, self._log_start))
        )

    def _terminate(self, timeout: float) -> None:
        proc, self._proc = self._proc, None
        _LIVE_BROKERS.discard(self)
        if proc is not None and proc.poll() is None:
            if not stop_process_group(proc, timeout):
                log.warning("Kafka (pid %d) did not stop within %.0fs; killed it", proc.pid, timeout)
            log.info("Stopped Kafka (pid %d) on %s", proc.pid, self.bootstrap_servers)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    @staticmethod
    def _make_temp_dir() -> Path:
        return Path(tempfile.mkdtemp(prefix="sluice-kafka-")).resolve()


# --------------------------------------------------------------------------------------
# python -m sluice.deploy.kafka_stack
# --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sluice.deploy.kafka_stack``; returns the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

    try:
        if args.command == "fetch":
            libs = ensure_kafka_jars(args.kafka_version)
            print(libs)
            return 0
        return _run_broker(args)
    except (KafkaStackError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sluice.deploy.kafka_stack",
        description="Fetch Apache Kafka from Maven Central and run a local KRaft broker.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser(
        "fetch",
        help="fetch the Kafka jars into the cache (once) and print their directory",
        description="Fetch the Kafka jars with Maven into $SLUICE_CACHE_DIR (default "
        "~/.cache/sluice)/kafka-<version>/libs unless already there, then print that path.",
    )
    fetch.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    run = commands.add_parser(
        "run",
        help="run a broker in the foreground until Ctrl-C",
        description="Run a broker in the foreground until Ctrl-C (use `sluice dev up` for a background one).",
    )
    run.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    run.add_argument("--port", type=int, default=9092, help="PLAINTEXT port (default 9092)")
    run.add_argument("--data-dir", type=Path, help="broker directory (default: a temporary one)")
    run.add_argument("--partitions", type=int, default=1, help="num.partitions (default 1)")
    return parser


def _run_broker(args: argparse.Namespace) -> int:
    """``run``: a broker in the foreground until Ctrl-C; the exit code."""
    broker = KafkaBroker(
        version=args.kafka_version,
        port=args.port,
        data_dir=args.data_dir,
        num_partitions=args.partitions,
        # Foreground: if this process is killed (not just Ctrl-C'd), take the JVM along.
        kill_with_parent=True,
    )
    try:
        broker.start()
        print(f"Kafka {broker.version} ready at {broker.bootstrap_servers}; Ctrl-C stops it", flush=True)
        while broker.is_running():
            time.sleep(0.5)
        print(f"Kafka exited unexpectedly; see {broker.log_path}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
