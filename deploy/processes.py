"""What every local service launcher needs around its child process: loopback ports, Java, the
child's process group, its death with our process, its stop (SIGTERM, then SIGKILL) and the tail
of its log for error messages. Kafka, S3Proxy, OpenSearch, PostgreSQL and MariaDB use it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from sluice.deploy import maven
from sluice.worker.runtime import parent_death_signal

LOOPBACK: Final = "127.0.0.1"
LOG_TAIL_LINES: Final = 40


def find_free_port(host: str = LOOPBACK, *, exclude: Sequence[int] = ()) -> int:
    """A TCP port on ``host`` that nothing listens on right now (the OS picks it)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in exclude:
            return port


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """True if a server could bind ``host:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka's acceptor binds with SO_REUSEADDR, so connections left in TIME_WAIT by a
        # previous broker do not block it; probe the same way or a quick restart looks busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def is_port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def find_java(error: type[Exception], needs: str) -> str:
    """Path of the ``java`` executable: ``$JAVA_HOME/bin/java``, else ``java`` on PATH; raises
    ``error`` saying what ``needs`` it (e.g. "Kafka 4.x needs Java 17 or newer")."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise error(
            f"{needs}, but JAVA_HOME is not set and 'java' is not on PATH "
            "(e.g. `apt-get install openjdk-17-jre-headless`)."
        )
    return found


def signal_process_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``pid`` (or to ``pid`` if it leads none).

    Services run in a session of their own, so this also reaches anything they spawned.
    """
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)  # not a group leader after all


def stop_process_group(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """SIGTERM ``proc``'s group and wait ``timeout`` seconds, then SIGKILL it; ``True`` if it
    stopped on SIGTERM. Nothing happens to a process that has ended already."""
    if proc.poll() is not None:
        return True
    # poll() just said it is alive and unreaped, so its pid cannot have been reused.
    signal_process_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        signal_process_group(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when its parent thread dies."""
    arm = parent_death_signal()  # resolved before fork, not in the child
    if arm is None:
        return None
    parent_pid = os.getpid()
    return lambda: arm(signal.SIGTERM, parent_pid)


def tail_file(path: Path, start: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` written after byte ``start`` (for error messages)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(start, size - 64 * 1024))
            data = handle.read()
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return maven.tail_text(data.decode(errors="replace"), lines)
