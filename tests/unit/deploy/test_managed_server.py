"""ManagedServer, the lifecycle the local Java servers share, run here with a Python child."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.deploy import managed_server
from sluice.deploy.managed_server import ManagedServer
from sluice.deploy.schema_registry import SchemaRegistryServer
from tests.services.opensearch import OpenSearchNode
from tests.services.s3_server import S3Server


class StartError(RuntimeError):
    pass


class Sleeper(ManagedServer):
    """Prints a line, then sleeps (or exits at once with ``exit_code``)."""

    temp_prefix = "sluice-test-"

    def __init__(self, data_dir: Path | None = None, exit_code: int | None = None) -> None:
        super().__init__(port=None, data_dir=data_dir, start_timeout=5.0, kill_with_parent=True)
        self.exit_code = exit_code

    def start(self) -> None:
        code = "import time; print('up', flush=True); time.sleep(60)"
        if self.exit_code is not None:
            code = f"import sys; print('failing', flush=True); sys.exit({self.exit_code})"
        self._spawn([sys.executable, "-c", code], StartError)


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_an_owned_directory_is_created_and_deleted_by_stop() -> None:
    server = Sleeper()
    assert server.data_dir.is_dir() and server.data_dir.name.startswith("sluice-test-")
    with server:
        assert server.is_running() and server.pid is not None
        assert server in managed_server._LIVE_SERVERS
        _wait_for(lambda: "up" in server.log_path.read_text())
    assert not server.is_running() and server.pid is None
    assert server not in managed_server._LIVE_SERVERS
    assert not server.data_dir.exists()


def test_a_given_directory_and_its_log_are_kept(tmp_path: Path) -> None:
    with Sleeper(tmp_path / "given") as server:
        assert server.log_path == tmp_path / "given" / "server.log"
    assert server.log_path.is_file()


def test_the_exit_message_shows_only_this_runs_log(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("an earlier run\n")
    server = Sleeper(tmp_path, exit_code=3)
    server.start()
    _wait_for(lambda: server._proc is not None and server._proc.poll() is not None)
    with pytest.raises(StartError, match="Sleeper exited with code 3") as info:
        server._raise_if_exited("Sleeper", StartError)
    assert "failing" in str(info.value) and "an earlier run" not in str(info.value)
    server.stop()


def test_a_command_that_cannot_run_raises_the_given_error() -> None:
    server = Sleeper()
    with pytest.raises(StartError, match="could not run"):
        server._spawn([str(server.data_dir / "missing")], StartError)
    assert server._log is None and server not in managed_server._LIVE_SERVERS
    server.stop()
    assert not server.data_dir.exists()


def test_the_three_servers_keep_their_directories_and_log_names(tmp_path: Path) -> None:
    node = OpenSearchNode()
    assert node.base_dir == node.data_dir and node.log_path == node.base_dir / "node.log"
    node.stop(keep_dir=True)
    assert node.base_dir.is_dir()
    node.stop()
    assert not node.base_dir.exists()
    s3 = S3Server(data_dir=tmp_path / "s3")
    registry = SchemaRegistryServer(data_dir=tmp_path / "registry")
    assert s3.log_path == tmp_path / "s3" / "server.log"
    assert registry.log_path == tmp_path / "registry" / "server.log"
    assert s3.host == registry.host == "127.0.0.1" and s3.port != 0 and registry.port != 0
