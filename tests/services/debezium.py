"""Debezium's PostgreSQL and MariaDB connectors (and its JDBC sink) from Maven Central, as Kafka
Connect plugin directories.

The differential tests run the PostgreSQL and MariaDB connectors in one real Kafka Connect worker
beside Sluice's CDC sources, on the same databases and broker; ``benchmarks/cdc_to_jdbc.py`` adds
Debezium's JDBC sink (``debezium-connector-jdbc``, its own plugin directory) to such a worker::

    python -m tests.services.debezium fetch [--version 3.6.1.Final]   # prints the plugin directory
    python -m tests.services.debezium fetch --artifact debezium-connector-mariadb   # 3.5.0.Final
    python -m tests.services.debezium fetch --artifact debezium-connector-jdbc --version 3.5.0.Final

The jars are cached like Kafka's (see :mod:`sluice.deploy.maven`); a worker loads them through
``plugin.path`` set to :func:`plugin_path`. :class:`DebeziumConnect` runs such a worker (Kafka
Connect's ``ConnectDistributed``, a group of one on loopback) for the CDC benchmark against Debezium.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from sluice.deploy import maven
from sluice.deploy.kafka_jars import LOG4J2_CONFIG
from sluice.deploy.kafka_stack import find_java
from sluice.deploy.processes import die_with_parent_hook, find_free_port, stop_process_group
from tests.services.kafka_connect import CONNECT_FILES_DIR, ensure_connect_jars

DEFAULT_DEBEZIUM_VERSION = "3.6.1.Final"
#: Debezium's JDBC sink: 3.5.0.Final is the newest version Maven Central serves here.
DEFAULT_JDBC_SINK_VERSION = "3.5.0.Final"
#: Debezium's MariaDB connector: 3.5.0.Final is the newest version Maven Central serves here (its
#: MySQL connector 3.6 refuses a MariaDB server, which it asks for ``SHOW BINARY LOG STATUS``).
DEFAULT_MARIADB_VERSION = "3.5.0.Final"
POSTGRES_SOURCE = "debezium-connector-postgres"
MARIADB_SOURCE = "debezium-connector-mariadb"
JDBC_SINK = "debezium-connector-jdbc"
#: Each artifact's version when none is asked for.
DEFAULT_VERSIONS = {
    POSTGRES_SOURCE: DEFAULT_DEBEZIUM_VERSION,
    MARIADB_SOURCE: DEFAULT_MARIADB_VERSION,
    JDBC_SINK: DEFAULT_JDBC_SINK_VERSION,
}
POM_PATH = CONNECT_FILES_DIR / "debezium-pom.xml"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+\.(Final|CR\d+|Beta\d+|Alpha\d+)$")
#: The jars each connector's plugin directory must hold besides its own (the JDBC sink's database
#: drivers are its dependencies; the benchmark writes to PostgreSQL).
_ALSO_WANTED = {JDBC_SINK: ("postgresql-",)}
#: What each connector takes from the worker instead of bringing it: one group of jars besides
#: Kafka's own for the pom to leave out (its ``debezium.worker.group``), and the names of jars that
#: must not be in the plugin directory. The JDBC sink's Hibernate finds the worker's Jackson modules
#: (``jackson-module-blackbird``) through ``ServiceLoader``: with a Jackson of its own in the
#: plugin's class loader they fail as "not a subtype" of its ``Module``, and the task dies at start.
_FROM_WORKER: dict[str, tuple[str, tuple[str, ...]]] = {
    POSTGRES_SOURCE: ("org.apache.kafka", ("connect-api-", "kafka-clients-")),
    MARIADB_SOURCE: ("org.apache.kafka", ("connect-api-", "kafka-clients-")),
    JDBC_SINK: ("com.fasterxml.jackson.core", ("connect-api-", "kafka-clients-", "jackson-core-", "jackson-databind-")),
}


class DebeziumFetchError(RuntimeError):
    """Debezium's jars could not be fetched; carries Maven's output tail."""


def ensure_debezium_jars(
    version: str = DEFAULT_DEBEZIUM_VERSION, *, artifact: str = POSTGRES_SOURCE, mvn: str | None = None
) -> Path:
    """The directory of Debezium's ``artifact`` (``debezium-connector-postgres``,
    ``debezium-connector-mariadb``: :data:`MARIADB_SOURCE`, or ``debezium-connector-jdbc``:
    :data:`JDBC_SINK`) ``version``'s runtime jars, fetched on first use."""
    if not _VERSION_RE.match(version):  # also keeps the version from escaping the cache directory
        raise ValueError(f"unsupported Debezium version {version!r}: expected e.g. {DEFAULT_DEBEZIUM_VERSION}")
    if artifact not in _FROM_WORKER:
        raise ValueError(f"unsupported Debezium artifact {artifact!r}: expected one of {', '.join(_FROM_WORKER)}")
    wanted = f"{artifact}-{version}.jar"
    worker_group, worker_jars = _FROM_WORKER[artifact]

    def check(jars: list[str]) -> str | None:
        if wanted not in jars:
            return f"{wanted} missing from its output"
        missing = [p for p in _ALSO_WANTED.get(artifact, ()) if not any(j.startswith(p) for j in jars)]
        if missing:
            return f"no {', '.join(p + '*.jar' for p in missing)} in its output"
        clashing = [j for j in jars if j.startswith(worker_jars)]
        return f"{clashing} would shadow the worker's own" if clashing else None

    return maven.ensure_jars(
        artifact.replace("-connector", ""),  # debezium-postgres, debezium-mariadb, debezium-jdbc: the cache's names
        version,
        pom=POM_PATH,
        properties={"debezium.version": version, "debezium.artifact": artifact, "debezium.worker.group": worker_group},
        artifact=f"io.debezium:{artifact}:{version}",
        check=check,
        mvn=mvn,
        error=DebeziumFetchError,
    )


def plugin_path(version: str | None = None, *, artifact: str = POSTGRES_SOURCE) -> Path:
    """A ``plugin.path`` entry holding exactly one plugin, Debezium's ``artifact`` (its PostgreSQL
    connector by default; ``version`` as :data:`DEFAULT_VERSIONS` says when ``None``): Connect
    treats each directory under a plugin path entry as one plugin with its own class loader, so
    each connector's jars keep their own versions of what they share."""
    libs = ensure_debezium_jars(version or DEFAULT_VERSIONS.get(artifact, DEFAULT_DEBEZIUM_VERSION), artifact=artifact)
    return libs.parent


class DebeziumConnect:
    """A Kafka Connect distributed worker (a group of one, on loopback) with one of Debezium's source
    connectors on its plugin path (``source``: the PostgreSQL one by default, or
    :data:`MARIADB_SOURCE`; ``version`` its default when ``None``), and Debezium's JDBC sink too
    when ``jdbc_sink_version`` is given (each in its own plugin directory); its REST API at
    :attr:`url`, its log in ``workdir/connect.log``.

    The JVM runs with its own JIT settings, as in production; ``jvm_options`` adds options."""

    def __init__(self, workdir: Path, bootstrap: str, *, version: str | None = None, source: str = POSTGRES_SOURCE,
                 jdbc_sink_version: str | None = None, heap: str = "1g", jvm_options: tuple[str, ...] = (),
                 **settings: str) -> None:  # fmt: skip
        self.workdir = workdir
        self.port = find_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "connect.log"
        self._command_options = (f"-Xmx{heap}", *jvm_options)
        group = f"sluice-dbz-{uuid.uuid4().hex[:8]}"
        plugins = [plugin_path(version, artifact=source)]
        if jdbc_sink_version is not None:
            plugins.append(plugin_path(jdbc_sink_version, artifact=JDBC_SINK))
        props = {
            "bootstrap.servers": bootstrap,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            "group.id": group,
            "config.storage.topic": f"{group}-configs",
            "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status",
            **{f"{kind}.storage.replication.factor": "1" for kind in ("config", "offset", "status")},
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "plugin.path": ",".join(str(p) for p in plugins),
            "plugin.discovery": "hybrid_warn",
            **settings,
        }
        self.props_path = workdir / "connect-distributed.properties"
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float = 180) -> DebeziumConnect:
        libs = ensure_connect_jars()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [find_java(), *self._command_options, f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
                 "-cp", f"{libs}/*", "org.apache.kafka.connect.cli.ConnectDistributed", str(self.props_path)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent_hook(),  # noqa: PLW1509 - Linux's parent-death signal, set before exec
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka Connect exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:  # KIP-1017
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"Kafka Connect not healthy after {timeout}s: {self._log_tail()}")

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A REST call, retried while Connect answers 409 (a rebalance is under way)."""
        deadline = time.monotonic() + 60
        while True:
            response = httpx.request(method, self.url + path, timeout=30, **kwargs)
            if response.status_code != 409 or time.monotonic() > deadline:
                return response
            time.sleep(0.5)

    def stop(self, timeout: float = 60) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_group(proc, timeout)

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def __enter__(self) -> DebeziumConnect:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services.debezium", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch the jars once; print the plugin directory")
    fetch.add_argument("--artifact", choices=tuple(_FROM_WORKER), default=POSTGRES_SOURCE)
    fetch.add_argument(
        "--version",
        help=f"default {DEFAULT_DEBEZIUM_VERSION} ({DEFAULT_MARIADB_VERSION} for MariaDB's, "
        f"{DEFAULT_JDBC_SINK_VERSION} for the sink)",
    )
    args = parser.parse_args(argv)
    try:
        print(plugin_path(args.version, artifact=args.artifact))
    except (DebeziumFetchError, ValueError) as exc:
        print(f"tests.services.debezium: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
