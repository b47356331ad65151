"""What the local Java servers for tests share: S3Proxy, OpenSearch and Apicurio Registry.

:class:`ManagedServer` owns one child process and its directory: a temporary one it creates and
deletes, or one it is given and keeps. It launches the child in a session of its own with its
output in a log file there, stops it (SIGTERM, then SIGKILL) on :meth:`~ManagedServer.stop`, on
leaving a ``with`` block, and at interpreter exit. A subclass adds its command line, its
readiness probe and its client helpers.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self

from sluice.deploy.processes import LOOPBACK, die_with_parent_hook, find_free_port, stop_process_group, tail_file

_LIVE_SERVERS: set[ManagedServer] = set()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_LIVE_SERVERS):
        with contextlib.suppress(Exception):
            server.stop()


class ManagedServer(abc.ABC):
    """One server process on ``127.0.0.1``, with its data directory and log.

    ``data_dir`` (default: a new temporary directory whose name begins with :attr:`temp_prefix`)
    is the child's working directory and holds :attr:`log_path`. A directory this object created
    is deleted by :meth:`stop`; a given one is kept.
    """

    #: The log's file name in :attr:`data_dir`.
    log_name: ClassVar[str] = "server.log"
    #: How the name of a temporary data directory begins.
    temp_prefix: ClassVar[str] = "sluice-"

    def __init__(
        self,
        *,
        port: int | None,
        data_dir: str | os.PathLike[str] | None,
        start_timeout: float,
        kill_with_parent: bool,
    ) -> None:
        self.host = LOOPBACK
        self.port = port if port is not None else find_free_port()
        self.start_timeout = start_timeout
        self.kill_with_parent = kill_with_parent
        self._owns_data_dir = data_dir is None
        self._data_dir = (
            Path(data_dir).resolve() if data_dir is not None else Path(tempfile.mkdtemp(prefix=self.temp_prefix))
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def log_path(self) -> Path:
        return self._data_dir / self.log_name

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.is_running() and self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @abc.abstractmethod
    def start(self) -> object:
        """Launch the server and wait until it is ready (each subclass says how)."""

    def serve_until_interrupted(self) -> None:
        """Wait while the server runs (the ``run`` commands); stop it on Ctrl-C or when it exits."""
        try:
            while self.is_running():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _spawn(
        self,
        cmd: Sequence[str],
        error: type[Exception],
        *,
        env: dict[str, str] | None = None,
        setup: Callable[[], None] | None = None,
    ) -> None:
        """Run ``cmd`` in :attr:`data_dir`, its output appended to :attr:`log_path`; raises ``error``
        if it cannot be run. ``setup`` replaces the ``preexec_fn`` that makes the child die with
        us when ``kill_with_parent`` is set."""
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self._log_start = self._log.tell()  # error messages show only what this run wrote
        if setup is None and self.kill_with_parent:
            setup = die_with_parent_hook()
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self._data_dir,
                env=env,
                start_new_session=True,
                preexec_fn=setup,  # noqa: PLW1509
            )
        except OSError as exc:
            self._log.close()
            self._log = None
            raise error(f"could not run {shlex.join(cmd)}: {exc}") from exc
        _LIVE_SERVERS.add(self)

    def _log_tail(self) -> str:
        """The end of what the child logged in this run."""
        return tail_file(self.log_path, self._log_start)

    def _raise_if_exited(self, name: str, error: type[Exception]) -> None:
        """Raise ``error`` with the log's tail if the child has exited (during startup)."""
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise error(
                f"{name} exited with code {self._proc.returncode} during startup; log tail:\n{self._log_tail()}"
            )

    def outlive_interpreter(self) -> None:
        """Leave the running server out of the exit hook, so it keeps running after this interpreter
        exits (``sluice dev up``); :meth:`stop` still stops it."""
        _LIVE_SERVERS.discard(self)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and delete a temporary data directory."""
        self._stop(timeout, keep_dir=False)

    def _stop(self, timeout: float, *, keep_dir: bool) -> None:
        proc, self._proc = self._proc, None
        _LIVE_SERVERS.discard(self)
        if proc is not None:
            stop_process_group(proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._owns_data_dir and not keep_dir:
            shutil.rmtree(self._data_dir, ignore_errors=True)
