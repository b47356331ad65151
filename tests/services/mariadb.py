"""A private MariaDB server on loopback, for tests and benchmarks.

Uses the binaries of the Debian packages (``apt-get install mariadb-server``: ``mariadbd`` and
``mariadb-install-db``; ``$SLUICE_MARIADB_BINDIR`` overrides where they are looked for).
:class:`MariaDbServer` creates a fresh data directory with ``mariadb-install-db``, then runs
``mariadbd`` as a child process on a free loopback port with its Unix socket in the same private
directory, ``--no-defaults`` (the system's ``/etc/mysql`` configuration never leaks in) and
test-friendly durability (no binary log, no flush at every commit). The server refuses to run as
root, so when Sluice runs as root it runs as the ``mysql`` user the package creates.

``binlog=True`` writes a binary log as change data capture reads it (:data:`BINLOG_SETTINGS`: row
format, full row images, full row metadata so table map events carry column names, GTIDs in strict
mode, server id 1), without a sync per commit.

``root`` has no password and may connect over TCP from ``127.0.0.1``; :meth:`MariaDbServer.url`
gives the SQLAlchemy URL (PyMySQL driver), :meth:`MariaDbServer.jdbc_url` the JDBC spelling.

Command line::

    python -m tests.services.mariadb run [--port 53306]    # foreground server, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
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
from typing import IO, Any, Final

from sluice.deploy.processes import LOOPBACK, find_free_port, is_port_free
from tests.services.service_process import check_searchable, child_setup, server_env, service_user, tail

SERVICE_USER: Final = "mysql"
SUPERUSER: Final = "root"
_START_TIMEOUT_S: Final = 90.0
_LOG_TAIL_LINES: Final = 30
_SEARCH_DIRS: Final = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/local/mysql/bin")
#: The binary log a Debezium-style binlog reader needs (``binlog=True``). MariaDB writes GTIDs
#: always; ``binlog_row_metadata=FULL`` (10.5+) puts column names, signedness and enum/set values
#: into each table map event.
BINLOG_SETTINGS: Final[dict[str, str | None]] = {
    "log-bin": "mariadb-bin",
    "server-id": "1",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "gtid-strict-mode": "1",
    "sync-binlog": "0",
    "expire-logs-days": "1",
}


class MariaDbError(RuntimeError):
    """MariaDB could not be found, initialised or started; the message says what to do."""


def find_binaries() -> tuple[Path, Path]:
    """``(mariadbd, mariadb-install-db)`` from ``$SLUICE_MARIADB_BINDIR``, the usual system
    directories or ``PATH`` (the older ``mysqld``/``mysql_install_db`` names are accepted too)."""
    dirs = [Path(os.environ["SLUICE_MARIADB_BINDIR"])] if os.environ.get("SLUICE_MARIADB_BINDIR") else []
    dirs += [Path(d) for d in _SEARCH_DIRS]

    def find(*names: str) -> Path | None:
        for directory in dirs:
            for name in names:
                if (directory / name).is_file():
                    return directory / name
        for name in names:
            found = shutil.which(name)
            if found:
                return Path(found)
        return None

    server = find("mariadbd", "mysqld")
    install = find("mariadb-install-db", "mysql_install_db")
    if server is None or install is None:
        raise MariaDbError(
            "MariaDB server binaries (mariadbd, mariadb-install-db) were not found. Install them with "
            "`apt-get install -y mariadb-server` (Debian/Ubuntu), or set SLUICE_MARIADB_BINDIR to their directory."
        )
    return server, install


class MariaDbServer:
    """One MariaDB server with a private data directory, listening on ``127.0.0.1:port``.

    ``base_dir`` (default: a new temporary directory, removed by :meth:`stop`) holds ``data/``,
    the Unix socket, the pid file and ``server.log``. Use as a context manager or call
    :meth:`start` / :meth:`stop`; an ``atexit`` hook and, with ``kill_with_parent=True``, the
    kernel (``PR_SET_PDEATHSIG``) stop it if the caller dies.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        base_dir: Path | None = None,
        database: str = "sluice",
        kill_with_parent: bool = False,
        extra_settings: dict[str, str] | None = None,
        binlog: bool = False,
    ) -> None:
        self.port = port
        self.binlog = binlog
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

    def url(self, database: str | None = None, *, driver: str = "mysql+pymysql") -> str:
        """A SQLAlchemy URL (``mysql+pymysql://root@127.0.0.1:port/db``)."""
        return f"{driver}://{SUPERUSER}@{LOOPBACK}:{self._port()}/{database or self.database}"

    def jdbc_url(self, database: str | None = None, *, subprotocol: str = "mariadb") -> str:
        """The JDBC spelling (``jdbc:mariadb://…`` or, with ``subprotocol="mysql"``, ``jdbc:mysql://…``)."""
        return f"jdbc:{subprotocol}://{LOOPBACK}:{self._port()}/{database or self.database}?user={SUPERUSER}"

    @property
    def socket_path(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "mysqld.sock"

    @property
    def log_path(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "server.log"

    def connect(self, database: str | None = None, **kwargs: Any) -> Any:
        """A PyMySQL connection as ``root`` over TCP (autocommit unless told otherwise)."""
        import pymysql

        kwargs.setdefault("autocommit", True)
        return pymysql.connect(
            host=LOOPBACK, port=self._port(), user=SUPERUSER, database=database, charset="utf8mb4", **kwargs
        )

    def _port(self) -> int:
        if self.port is None:
            raise MariaDbError("the server has no port yet: call start() first")
        return self.port

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = _START_TIMEOUT_S) -> MariaDbServer:
        """Initialise the data directory, start the server, create the database; return once it
        accepts connections. Raises :class:`MariaDbError` with the reason and the log's tail."""
        if self._proc is not None:
            return self
        server_bin, install_bin = find_binaries()
        run_as = _service_user()
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="sluice-mariadb-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = find_free_port()
        elif not is_port_free(self.port):
            raise MariaDbError(f"port {self.port} on {LOOPBACK} is already in use by another process")
        if run_as is not None:
            os.chmod(self.base_dir, 0o755)
            os.chown(self.base_dir, run_as.pw_uid, run_as.pw_gid)
            _check_searchable(self.base_dir, run_as)
        data = self.base_dir / "data"
        if not (data / "mysql").is_dir():
            self._install_db(install_bin, server_bin, data, run_as)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the server's lifetime
        if run_as is not None:
            os.chown(self.log_path, run_as.pw_uid, run_as.pw_gid)
        log_start = self.log_path.stat().st_size
        try:
            self._proc = subprocess.Popen(
                [str(server_bin), *self._server_args(data)],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_child_setup(run_as, self.kill_with_parent),  # noqa: PLW1509 - drops privileges
                env=_server_env(),
            )
        except OSError as exc:
            raise MariaDbError(f"cannot run {server_bin}: {exc}") from exc
        _LIVE.add(self)
        self._wait_ready(timeout, log_start)
        self.create_database(self.database)
        return self

    def _install_db(self, install_bin: Path, server_bin: Path, data: Path, run_as: pwd.struct_passwd | None) -> None:
        cmd = [
            str(install_bin),
            "--no-defaults",
            f"--datadir={data}",
            f"--basedir={_basedir(server_bin)}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
        ]
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=180,
            preexec_fn=_child_setup(run_as, False),
            env=_server_env(),
            check=False,
        )
        if result.returncode != 0:
            raise MariaDbError(
                f"mariadb-install-db failed (exit code {result.returncode}):\n{_tail(result.stdout + result.stderr)}"
            )

    def _server_args(self, data: Path) -> list[str]:
        assert self.base_dir is not None
        settings = {
            "datadir": str(data),
            "port": str(self.port),
            "bind-address": LOOPBACK,
            "socket": str(self.socket_path),
            "pid-file": str(self.base_dir / "mariadbd.pid"),
            "skip-name-resolve": None,
            **(BINLOG_SETTINGS if self.binlog else {"skip-log-bin": None}),
            "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_unicode_ci",
            "default-time-zone": "+00:00",
            "innodb-buffer-pool-size": "128M",
            "innodb-log-file-size": "48M",
            "innodb-flush-log-at-trx-commit": "0",  # test-friendly: no fsync per commit
            "innodb-doublewrite": "0",
            "max-connections": "200",
            "max-allowed-packet": "64M",
            **self.extra_settings,
        }
        # --no-defaults must come first; nothing from /etc/mysql may change the private server.
        return ["--no-defaults"] + [f"--{k}" if v is None else f"--{k}={v}" for k, v in settings.items()]

    def _wait_ready(self, timeout: float, log_start: int) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._cleanup_process()
                raise MariaDbError(f"mariadbd exited with code {code} during startup:\n{self._log_tail(log_start)}")
            try:
                self.connect(connect_timeout=2).close()
                return
            except pymysql.err.OperationalError as exc:
                last = exc
                time.sleep(0.1)
        self.stop()
        raise MariaDbError(
            f"mariadbd did not accept connections within {timeout:.0f}s ({last}):\n{self._log_tail(log_start)}"
        )

    def create_database(self, name: str) -> str:
        """Create database ``name`` (if missing) and return its SQLAlchemy URL."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name.replace('`', '``')}`")
        finally:
            conn.close()
        return self.url(name)

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown (SIGTERM); remove a directory this object created."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
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

    def __enter__(self) -> MariaDbServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_LIVE: set[MariaDbServer] = set()


@atexit.register
def _stop_live() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(timeout=10)


def _basedir(server_bin: Path) -> Path:
    # /usr/sbin/mariadbd → /usr: mariadb-install-db finds share/ (system tables SQL) under it.
    return server_bin.parent.parent


def _service_user() -> pwd.struct_passwd | None:
    return service_user(SERVICE_USER, "MariaDB", "mariadb-server", MariaDbError)


def _check_searchable(directory: Path, user: pwd.struct_passwd) -> None:
    check_searchable(directory, user, "MariaDB", MariaDbError)


def _server_env() -> dict[str, str]:
    return server_env(("MYSQL", "MARIADB"))


def _child_setup(user: pwd.struct_passwd | None, die_with_parent: bool) -> Callable[[], None] | None:
    # SIGTERM: MariaDB's clean shutdown, if the caller dies
    return child_setup(user, die_with_parent, signal.SIGTERM)


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return tail(text, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services.mariadb", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a server in the foreground until Ctrl-C")
    run.add_argument("--port", type=int, default=None)
    run.add_argument("--database", default="sluice")
    run.add_argument("--binlog", action="store_true", help="write the binary log change data capture reads")
    args = parser.parse_args(argv)
    server = MariaDbServer(port=args.port, database=args.database, kill_with_parent=True, binlog=args.binlog)
    try:
        server.start()
    except MariaDbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"MariaDB ready: {server.url()}  (JDBC: {server.jdbc_url()}); Ctrl-C stops it", flush=True)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
