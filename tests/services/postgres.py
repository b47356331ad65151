"""A private PostgreSQL cluster on loopback, for tests, benchmarks and ``sluice dev``.

Uses the server binaries of the Debian packages (``apt-get install postgresql``; found under
``/usr/lib/postgresql/<version>/bin``, ``pg_config --bindir`` or ``PATH``). :class:`PostgresServer`
runs ``initdb`` into a fresh directory, configures a free loopback port, ``wal_level=logical``
(for CDC) and test-friendly durability (``fsync=off``; ``synchronous_commit`` stays on so logical
decoding sees commits at once), and runs ``postgres`` as a child process. PostgreSQL refuses to
run as root, so when Sluice runs as root the server runs as the ``postgres`` user.

Command line::

    python -m tests.services.postgres run [--port 55432]    # foreground server, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from sluice.deploy.processes import LOOPBACK, find_free_port, is_port_free
from tests.services.service_process import check_searchable, child_setup, server_env, service_user, tail

SERVICE_USER: Final = "postgres"
SUPERUSER: Final = "postgres"
_START_TIMEOUT_S: Final = 60.0
_LOG_TAIL_LINES: Final = 30


class PostgresError(RuntimeError):
    """PostgreSQL could not be found, initialised or started; the message says what to do."""


def find_bin_dir() -> Path:
    """The directory with ``initdb`` and ``postgres``: ``$SLUICE_PG_BINDIR``, the newest
    ``/usr/lib/postgresql/*/bin``, ``pg_config --bindir``, or wherever ``initdb`` is on PATH."""
    candidates: list[Path] = []
    if os.environ.get("SLUICE_PG_BINDIR"):
        candidates.append(Path(os.environ["SLUICE_PG_BINDIR"]))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _version_key(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise PostgresError(
        "PostgreSQL server binaries (initdb, postgres) were not found. Install them with "
        "`apt-get install -y postgresql` (Debian/Ubuntu), or set SLUICE_PG_BINDIR to their directory."
    )


def _version_key(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:
        return (0,)


class PostgresServer:
    """One PostgreSQL server with a private data directory, listening on ``127.0.0.1:port``.

    ``base_dir`` (default: a new temporary directory, removed by :meth:`stop`) holds ``data/``,
    the Unix socket and ``server.log``. Root runs the server as the ``postgres`` user, so every
    directory above ``base_dir`` must be searchable by it (``/tmp`` is; pytest's ``tmp_path`` is
    not, which is why the default is a directory of its own).

    Use as a context manager or call :meth:`start` / :meth:`stop`; an ``atexit`` hook and, with
    ``kill_with_parent=True``, the kernel (``PR_SET_PDEATHSIG``) stop it if the caller dies.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        base_dir: Path | None = None,
        database: str = "sluice",
        kill_with_parent: bool = False,
        extra_settings: dict[str, str] | None = None,
        bin_dir: Path | None = None,
    ) -> None:
        self.port = port
        self.bin_dir = bin_dir  # None: find_bin_dir() (the system's server)
        self.database = database
        self.kill_with_parent = kill_with_parent
        self.extra_settings = dict(extra_settings or {})
        self._own_dir = base_dir is None
        self.base_dir = base_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- addresses -------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return LOOPBACK

    def url(self, database: str | None = None, *, driver: str = "postgresql+psycopg") -> str:
        """A SQLAlchemy URL (``postgresql+psycopg://postgres@127.0.0.1:port/db``)."""
        return f"{driver}://{SUPERUSER}@{LOOPBACK}:{self._port()}/{database or self.database}"

    def jdbc_url(self, database: str | None = None) -> str:
        """The JDBC spelling Confluent's connectors are configured with."""
        return f"jdbc:postgresql://{LOOPBACK}:{self._port()}/{database or self.database}"

    def dsn(self, database: str | None = None) -> str:
        """A libpq connection string for psycopg."""
        return f"host={LOOPBACK} port={self._port()} user={SUPERUSER} dbname={database or self.database}"

    @property
    def log_path(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "server.log"

    def _port(self) -> int:
        if self.port is None:
            raise PostgresError("the server has no port yet: call start() first")
        return self.port

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = _START_TIMEOUT_S) -> PostgresServer:
        """initdb, configure and start the server; return once it accepts connections.

        Raises :class:`PostgresError` with the reason and the server log's tail.
        """
        if self._proc is not None:
            return self
        bin_dir = self.bin_dir or find_bin_dir()
        run_as = _service_user()
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = find_free_port()
        elif not is_port_free(self.port):
            raise PostgresError(f"port {self.port} on {LOOPBACK} is already in use by another process")
        data = self.base_dir / "data"
        if run_as is not None:
            os.chmod(self.base_dir, 0o755)
            os.chown(self.base_dir, run_as.pw_uid, run_as.pw_gid)
            _check_searchable(self.base_dir, run_as)
        if not (data / "PG_VERSION").is_file():
            self._initdb(bin_dir, data, run_as)
        self._configure(data)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the server's lifetime
        if run_as is not None:
            os.chown(self.log_path, run_as.pw_uid, run_as.pw_gid)
        log_start = self.log_path.stat().st_size
        try:
            self._proc = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data)],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_child_setup(run_as, self.kill_with_parent),  # noqa: PLW1509 - drops privileges
                env=_server_env(),
            )
        except OSError as exc:
            raise PostgresError(f"cannot run {bin_dir / 'postgres'}: {exc}") from exc
        _LIVE.add(self)
        self._wait_ready(timeout, log_start)
        self._create_database()
        return self

    def _initdb(self, bin_dir: Path, data: Path, run_as: pwd.struct_passwd | None) -> None:
        cmd = [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C"]
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
            preexec_fn=_child_setup(run_as, False),
            env=_server_env(),
            check=False,
        )
        if result.returncode != 0:
            raise PostgresError(
                f"initdb failed (exit code {result.returncode}):\n{_tail(result.stdout + result.stderr)}"
            )

    def _configure(self, data: Path) -> None:
        assert self.base_dir is not None
        settings = {
            "port": str(self.port),
            "listen_addresses": f"'{LOOPBACK}'",
            "unix_socket_directories": f"'{self.base_dir}'",
            "wal_level": "logical",
            "max_replication_slots": "32",
            "max_wal_senders": "32",
            "shared_buffers": "128MB",
            "fsync": "off",
            "full_page_writes": "off",
            "synchronous_commit": "on",  # logical decoding reads only flushed WAL
            "max_connections": "100",
            **self.extra_settings,
        }
        conf = data / "postgresql.auto.conf"
        conf.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        owner = _service_user()
        if owner is not None:
            os.chown(conf, owner.pw_uid, owner.pw_gid)

    def _wait_ready(self, timeout: float, log_start: int) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._cleanup_process()
                raise PostgresError(f"postgres exited with code {code} during startup:\n{self._log_tail(log_start)}")
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                last = exc
                time.sleep(0.1)
        self.stop()
        raise PostgresError(
            f"postgres did not accept connections within {timeout:.0f}s ({last}):\n{self._log_tail(log_start)}"
        )

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def create_database(self, name: str) -> str:
        """Create database ``name`` (if missing) and return its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT: roll back sessions, checkpoint); remove a directory this object created."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._cleanup_process()
        if self._own_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def _cleanup_process(self) -> None:
        self._proc = None
        _LIVE.discard(self)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _log_tail(self, start: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(start)
                return _tail(handle.read().decode(errors="replace"))
        except OSError as exc:
            return f"(cannot read {self.log_path}: {exc})"

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_LIVE: set[PostgresServer] = set()


@atexit.register
def _stop_live() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(timeout=10)


def _service_user() -> pwd.struct_passwd | None:
    return service_user(SERVICE_USER, "PostgreSQL", "postgresql", PostgresError)


def _check_searchable(directory: Path, user: pwd.struct_passwd) -> None:
    check_searchable(directory, user, "PostgreSQL", PostgresError)


def _server_env() -> dict[str, str]:
    return server_env(("PG",))


def _child_setup(user: pwd.struct_passwd | None, die_with_parent: bool) -> Callable[[], None] | None:
    # SIGINT: PostgreSQL's fast shutdown, if the caller dies
    return child_setup(user, die_with_parent, signal.SIGINT)


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return tail(text, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services.postgres", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a server in the foreground until Ctrl-C")
    run.add_argument("--port", type=int, default=None)
    run.add_argument("--database", default="sluice")
    args = parser.parse_args(argv)
    server = PostgresServer(port=args.port, database=args.database, kill_with_parent=True)
    try:
        server.start()
    except PostgresError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"PostgreSQL ready: {server.url()}  (JDBC: {server.jdbc_url()}); Ctrl-C stops it", flush=True)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
