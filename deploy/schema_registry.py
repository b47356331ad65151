"""A real Confluent-compatible Schema Registry on loopback: Apicurio Registry from Maven Central.

* :func:`ensure_apicurio` fetches ``io.apicurio:apicurio-registry-app:<version>:tar.gz:all`` (a
  Quarkus application: the runner jar plus ``lib/``) with ``mvn dependency:copy``, once per version,
  and unpacks it into ``~/.cache/sluice/apicurio-registry-<version>/app`` under the cache's lock,
  through a staging directory and a completion marker, as :mod:`sluice.deploy.maven` does for jars.
* :class:`SchemaRegistryServer` runs it on a free loopback port with in-memory storage (H2; a
  restart starts empty) and no management interface, and waits until the Confluent API answers.
  Clients use :attr:`SchemaRegistryServer.url`, the ``/apis/ccompat/v7`` root, as
  ``schema.registry.url``. Ids are global and name the schema text, as Confluent's do: the same
  schema under two subjects gets one id, and ``/schemas/ids/<id>`` returns it. (A refused
  registration still uses up an id, so ids can have gaps; Confluent's never do.)

Command line::

    python -m sluice.deploy.schema_registry fetch                # prints the application directory
    python -m sluice.deploy.schema_registry run [--port 8081]    # foreground server, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Final

from sluice.deploy import maven
from sluice.deploy.managed_server import ManagedServer
from sluice.deploy.processes import find_java

log = logging.getLogger(__name__)

DEFAULT_APICURIO_VERSION: Final = "3.0.9"
GROUP_ID: Final = "io.apicurio"
ARTIFACT_ID: Final = "apicurio-registry-app"
CCOMPAT_PATH: Final = "/apis/ccompat/v7"
CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryError(RuntimeError):
    """Base class for errors fetching, running or talking to the local Schema Registry."""


class SchemaRegistryFetchError(SchemaRegistryError):
    """Apicurio Registry could not be fetched from Maven Central or unpacked."""


class SchemaRegistryStartError(SchemaRegistryError):
    """The server could not be launched, exited during startup, or did not become ready."""


# -- the application ----------------------------------------------------------------------------


def _check_version(version: str) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+(?:[.-][0-9A-Za-z]+)*", version):
        raise ValueError(
            f"unsupported Apicurio Registry version {version!r} (expected e.g. {DEFAULT_APICURIO_VERSION})"
        )


def apicurio_home(version: str = DEFAULT_APICURIO_VERSION) -> Path:
    """The cache directory of Apicurio Registry ``version`` (lock, marker and ``app/``)."""
    return maven.cache_dir() / f"apicurio-registry-{version}"


def runner_jar(version: str = DEFAULT_APICURIO_VERSION) -> Path:
    """Where the runner jar of ``version`` lives once fetched (whether or not it is yet)."""
    return apicurio_home(version) / "app" / f"{ARTIFACT_ID}-{version}-runner.jar"


def is_apicurio_cached(version: str = DEFAULT_APICURIO_VERSION) -> bool:
    """True if a completed fetch of ``version`` is in the cache."""
    return (apicurio_home(version) / maven.COMPLETE_MARKER).is_file() and runner_jar(version).is_file()


def ensure_apicurio(version: str = DEFAULT_APICURIO_VERSION, *, mvn: str | None = None) -> Path:
    """The directory holding Apicurio Registry ``version``'s runner jar (and ``lib/``), fetched
    with Maven (``~/.m2`` and its settings) and unpacked on first use. Raises
    :class:`SchemaRegistryFetchError` with Maven's output tail."""
    _check_version(version)
    if is_apicurio_cached(version):
        return runner_jar(version).parent
    home = apicurio_home(version)
    home.mkdir(parents=True, exist_ok=True)
    with maven.exclusive_lock(home / ".lock"):
        if not is_apicurio_cached(version):  # another process may have finished while we waited
            _fetch_locked(home, version, mvn)
    return runner_jar(version).parent


def _fetch_locked(home: Path, version: str, mvn: str | None) -> None:
    artifact = f"{GROUP_ID}:{ARTIFACT_ID}:{version}:tar.gz:all"
    mvn_exe = maven.find_mvn(artifact, mvn, SchemaRegistryFetchError)
    for leftover in home.glob("app.partial-*"):  # from fetches that were killed
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix="app.partial-", dir=home))
    started = time.monotonic()
    try:
        download = staging / "download"
        # dependency:copy needs no pom: Maven runs it in its stand-alone project.
        maven.run_mvn(
            ["dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={download}"],
            artifact=artifact,
            cwd=home,
            mvn=mvn_exe,
            error=SchemaRegistryFetchError,
        )
        archives = sorted(download.glob("*.tar.gz"))
        if len(archives) != 1:
            raise SchemaRegistryFetchError(
                f"mvn succeeded but left {len(archives)} tarballs in {download}, not one: {[a.name for a in archives]}"
            )
        unpacked = staging / "unpacked"
        try:
            with tarfile.open(archives[0], "r:gz") as tar:
                tar.extractall(unpacked, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise SchemaRegistryFetchError(f"could not unpack {archives[0].name}: {exc}") from exc
        shutil.rmtree(download)
        name = runner_jar(version).name
        found = sorted(unpacked.rglob(name))
        if len(found) != 1:
            raise SchemaRegistryFetchError(f"{archives[0].name} holds {len(found)} copies of {name}, not one")
        app = home / "app"
        if app.exists():  # a crash between the rename and the marker left it unmarked
            shutil.rmtree(app)
        os.replace(found[0].parent, app)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    elapsed = time.monotonic() - started
    marker = {
        "artifact": artifact,
        "version": version,
        "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(elapsed, 1),
    }
    maven.write_atomically(home / maven.COMPLETE_MARKER, json.dumps(marker, indent=2) + "\n")
    log.info("Fetched and unpacked %s in %.1fs into %s", artifact, elapsed, app)


# -- the server ---------------------------------------------------------------------------------


class SchemaRegistryServer(ManagedServer):
    """Apicurio Registry on ``127.0.0.1`` for tests, benchmarks and the local stack.

    Storage is in memory, so every start begins empty; :attr:`data_dir` holds only ``server.log``
    (a temporary directory, deleted on :meth:`stop`, unless one is given). Use :attr:`url` as
    ``schema.registry.url``.

    ``detach=True`` (used by ``sluice dev up``) leaves the server out of the exit hook, so it
    outlives the interpreter that started it; :meth:`stop` and a failed :meth:`start` still stop
    it. It excludes ``kill_with_parent``.
    """

    temp_prefix = "sluice-registry-"

    def __init__(
        self,
        *,
        version: str = DEFAULT_APICURIO_VERSION,
        port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 120.0,
        kill_with_parent: bool = False,
        detach: bool = False,
    ) -> None:
        _check_version(version)
        if detach and kill_with_parent:
            raise ValueError("a detached server cannot also be killed with its parent")
        super().__init__(port=port, data_dir=data_dir, start_timeout=start_timeout, kill_with_parent=kill_with_parent)
        self.version = version
        self.detach = detach

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent Schema Registry API root: what clients put in ``schema.registry.url``."""
        return self.base_url + CCOMPAT_PATH

    def start(self) -> None:
        """Fetch Apicurio if needed, launch it and wait until it answers; raises
        :class:`SchemaRegistryError` on failure (after stopping what was started)."""
        if self.is_running():
            return
        started = time.monotonic()
        try:
            self._spawn(self._command(ensure_apicurio(self.version)), SchemaRegistryStartError)
            if self.detach:
                self.outlive_interpreter()
            self._wait_ready()
        except BaseException:
            self.stop()  # also deletes a temporary data directory
            raise
        log.info(
            "Apicurio Registry %s serves %s (ready in %.1fs)", self.version, self.url, time.monotonic() - started
        )

    def _command(self, app: Path) -> list[str]:
        return [
            find_java(SchemaRegistryStartError, "Apicurio Registry 3 needs Java 17 or newer"),
            "-Xms64m",
            "-Xmx384m",
            "-XX:+UseSerialGC",
            "-XX:-UsePerfData",
            f"-Dquarkus.http.host={self.host}",
            f"-Dquarkus.http.port={self.port}",
            # Otherwise Quarkus also listens on 0.0.0.0:9000 for health and metrics.
            "-Dquarkus.management.enabled=false",
            # Apicurio logs storage and audit lines at INFO; keep its warnings, Quarkus' "started
            # in" line and the access log (one line per request, with the status).
            '-Dquarkus.log.category."io.apicurio".level=WARN',
            '-Dquarkus.log.category."io.quarkus".level=INFO',
            # Vert.x's file cache (a vertx-cache-<uuid> directory), otherwise under /tmp/vertx-cache.
            f"-Dquarkus.vertx.cache-directory={self._data_dir / 'vertx-cache'}",
            "-jar",
            str(app / runner_jar(self.version).name),
        ]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        probe = self.url + "/subjects"
        while time.monotonic() < deadline:
            self._raise_if_exited("Apicurio Registry", SchemaRegistryStartError)
            try:
                with urllib.request.urlopen(probe, timeout=1) as response:  # noqa: S310 - http:// URL of the server this module started
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or an HTTPError while the application starts
            time.sleep(0.1)
        raise SchemaRegistryStartError(
            f"Apicurio Registry did not answer GET {probe} within {self.start_timeout:.0f}s; "
            f"log tail:\n{self._log_tail()}"
        )

    # -- client helpers -----------------------------------------------------------------------

    def set_compatibility(self, level: str, subject: str | None = None) -> dict[str, Any]:
        """Set the compatibility ``level`` (``BACKWARD``, ``FULL``, ``NONE``, …) of ``subject``, or
        the global default (``NONE`` at start, so nothing is refused until this is called).

        Returns Apicurio's answer, ``{"compatibilityLevel": level}`` (Confluent's says
        ``compatibility``). An unknown level raises :class:`SchemaRegistryError`: Apicurio
        answers 500 ``Illegal compatibility level`` where Confluent answers 422. Afterwards an
        incompatible registration answers 409 with ``{"message": "io.apicurio.registry.rules.
        RuleViolationException: Incompatible artifact: <subject> [AVRO], num of incompatible
        diffs: {1}, list of diff types: [z at /fields/1]", "error_code": 409}``.
        """
        path = "/config" if subject is None else "/config/" + urllib.parse.quote(subject, safe="")
        request = urllib.request.Request(  # noqa: S310 - http:// URL of the server this module started
            self.url + path,
            data=json.dumps({"compatibility": level}).encode(),
            method="PUT",
            headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - http:// URL of the server this module started
                answer: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            raise SchemaRegistryError(f"PUT {request.full_url} answered {exc.code}: {body}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise SchemaRegistryError(f"PUT {request.full_url} failed: {exc}") from exc
        return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.deploy.schema_registry", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch Apicurio Registry into the cache and print its directory")
    fetch.add_argument("--version", default=DEFAULT_APICURIO_VERSION)
    run = sub.add_parser("run", help="run a server in the foreground until Ctrl-C")
    run.add_argument("--version", default=DEFAULT_APICURIO_VERSION)
    run.add_argument("--port", type=int, default=None)
    run.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        if args.command == "fetch":
            print(ensure_apicurio(args.version))
            return 0
        # kill_with_parent: a SIGTERM or SIGKILL to this process (no Ctrl-C) must not orphan the JVM.
        server = SchemaRegistryServer(
            version=args.version, port=args.port, data_dir=args.data_dir, kill_with_parent=True
        )
        server.start()
    except (SchemaRegistryError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"schema.registry.url={server.url}", flush=True)
    server.serve_until_interrupted()
    return 0


if __name__ == "__main__":
    sys.exit(main())
