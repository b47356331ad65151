"""Debezium's PostgreSQL connector from Maven Central, as a Kafka Connect plugin directory.

The differential test runs it in a real Kafka Connect worker beside Sluice's CDC source, on the same
database and broker::

    python -m tests.services.debezium fetch [--version 3.6.1.Final]   # prints the plugin directory

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
POM_PATH = CONNECT_FILES_DIR / "debezium-pom.xml"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+\.(Final|CR\d+|Beta\d+|Alpha\d+)$")


class DebeziumFetchError(RuntimeError):
    """Debezium's jars could not be fetched; carries Maven's output tail."""


def ensure_debezium_jars(version: str = DEFAULT_DEBEZIUM_VERSION, *, mvn: str | None = None) -> Path:
    """The directory of ``debezium-connector-postgres`` ``version``'s runtime jars, fetched on first use."""
    if not _VERSION_RE.match(version):  # also keeps the version from escaping the cache directory
        raise ValueError(f"unsupported Debezium version {version!r}: expected e.g. {DEFAULT_DEBEZIUM_VERSION}")
    wanted = f"debezium-connector-postgres-{version}.jar"

    def check(jars: list[str]) -> str | None:
        if wanted not in jars:
            return f"{wanted} missing from its output"
        clashing = [j for j in jars if j.startswith(("connect-api-", "kafka-clients-"))]
        return f"Kafka's own jars {clashing} would shadow the worker's" if clashing else None

    return maven.ensure_jars(
        "debezium-postgres",
        version,
        pom=POM_PATH,
        properties={"debezium.version": version},
        artifact=f"io.debezium:debezium-connector-postgres:{version}",
        check=check,
        mvn=mvn,
        error=DebeziumFetchError,
    )


def plugin_path(version: str = DEFAULT_DEBEZIUM_VERSION) -> Path:
    """A ``plugin.path`` entry holding exactly one plugin, Debezium's PostgreSQL connector: Connect
    treats each directory under a plugin path entry as one plugin with its own class loader."""
    libs = ensure_debezium_jars(version)
    return libs.parent


class DebeziumConnect:
    """A Kafka Connect distributed worker (a group of one, on loopback) with Debezium's PostgreSQL
    connector on its plugin path; its REST API at :attr:`url`, its log in ``workdir/connect.log``.

    The JVM runs with its own JIT settings, as in production; ``jvm_options`` adds options."""

    def __init__(self, workdir: Path, bootstrap: str, *, version: str = DEFAULT_DEBEZIUM_VERSION,
                 heap: str = "1g", jvm_options: tuple[str, ...] = (), **settings: str) -> None:  # fmt: skip
        self.workdir = workdir
        self.port = find_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "connect.log"
        self._command_options = (f"-Xmx{heap}", *jvm_options)
        group = f"sluice-dbz-{uuid.uuid4().hex[:8]}"
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
            "plugin.path": str(plugin_path(version)),
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
    fetch.add_argument("--version", default=DEFAULT_DEBEZIUM_VERSION)
    args = parser.parse_args(argv)
    try:
        print(plugin_path(args.version))
    except (DebeziumFetchError, ValueError) as exc:
        print(f"tests.services.debezium: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
