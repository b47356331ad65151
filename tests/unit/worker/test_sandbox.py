"""The task host sandbox (``worker.sandbox``): what a confined process can and cannot reach.

Each confinement runs in a forked child (Landlock is for good), which reports what it observed
through a pipe; the tests assert on those observations. Where the kernel offers no Landlock the
tests that need it fail under CI (this project's machines have it) and are skipped elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson

from sluice.worker.config.local_paths import PathGrant, ProtectedPlace
from sluice.worker.execution import sandbox
from tests.unavailable import unavailable


def _landlock_or_skip() -> int:
    try:
        return sandbox.landlock_abi()
    except OSError as exc:
        unavailable(f"no Landlock in this kernel: {exc.strerror}")


def _in_confined_child(grants: sandbox.Grants, probe: Callable[[], object]) -> object:
    """Fork, confine the child to ``grants``, run ``probe`` there and return what it returned."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            sandbox.restrict(grants)
            result: object = {"ok": probe()}
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, orjson.dumps(result))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return orjson.loads(data)


def _attempt(action: Callable[[], object]) -> str:
    try:
        action()
    except PermissionError:
        return "denied"
    return "allowed"


def test_a_confined_process_reads_and_writes_only_what_it_was_granted(tmp_path: Path) -> None:
    _landlock_or_skip()
    data, temp, plugins, conf = (tmp_path / name for name in ("data", "tmp", "plugins", "conf"))
    for directory in (data, temp, plugins, conf):
        directory.mkdir()
    (plugins / "mod.py").write_text("X = 1\n")
    (conf / "worker.properties").write_text("secret=1\n")
    grants = sandbox.task_host_grants(
        PathGrant((data,), False, ()),
        plugin_paths=[str(plugins)],
        temp_dir=str(temp),
        data_dir=None,
        worker_settings={},
    )

    def probe() -> dict[str, str]:
        return {
            "read data": _attempt(lambda: (data / "x").write_text("x") and (data / "x").read_text()),
            "write temp": _attempt(lambda: (temp / "y").write_text("y")),
            "read plugin": _attempt(lambda: (plugins / "mod.py").read_text()),
            "write plugin": _attempt(lambda: (plugins / "evil.py").write_text("boom")),
            "read conf": _attempt(lambda: (conf / "worker.properties").read_text()),
            "write conf": _attempt(lambda: (conf / "evil").write_text("x")),
            "read shadow": _attempt(lambda: Path("/etc/shadow").read_bytes()),
            "read passwd": _attempt(lambda: Path("/etc/passwd").read_bytes()),
            "write devnull": _attempt(lambda: Path("/dev/null").write_text("x")),
            "import json": _attempt(lambda: __import__("json.tool")),
        }

    assert _in_confined_child(grants, probe) == {
        "ok": {
            "read data": "allowed",
            "write temp": "allowed",
            "read plugin": "allowed",
            "write plugin": "denied",
            "read conf": "denied",
            "write conf": "denied",
            "read shadow": "denied",
            "read passwd": "allowed",
            "write devnull": "allowed",
            "import json": "allowed",
        }
    }
    assert not (plugins / "evil.py").exists() and not (conf / "evil").exists()


def test_anywhere_grants_everything_around_the_protected_places(tmp_path: Path) -> None:
    _landlock_or_skip()
    conf, other, state = tmp_path / "conf", tmp_path / "other", tmp_path / "state"
    for directory in (conf, other, state / "data"):
        directory.mkdir(parents=True)
    (conf / "worker.properties").write_text("secret=1\n")
    grant = PathGrant(
        (),
        True,
        (
            ProtectedPlace("the worker's config file", conf / "worker.properties"),
            ProtectedPlace("state.dir", state, True),
        ),
    )
    grants = sandbox.task_host_grants(
        grant, plugin_paths=[], temp_dir=str(tmp_path / "other"), data_dir=state / "data", worker_settings={}
    )

    def probe() -> dict[str, str]:
        return {
            "write other": _attempt(lambda: (other / "a").write_text("a")),
            "write data": _attempt(lambda: (state / "data" / "b").write_text("b")),
            "write state": _attempt(lambda: (state / "offsets").write_text("x")),
            "read config": _attempt(lambda: (conf / "worker.properties").read_text()),
            "write beside config": _attempt(lambda: (conf / "evil").write_text("x")),
            "write etc": _attempt(lambda: open("/etc/sluice-sandbox-probe", "x")),
        }

    assert _in_confined_child(grants, probe) == {
        "ok": {
            "write other": "allowed",
            "write data": "allowed",
            "write state": "denied",
            "read config": "denied",
            "write beside config": "denied",
            "write etc": "denied",
        }
    }
    assert not Path("/etc/sluice-sandbox-probe").exists()


def test_a_process_with_threads_is_not_confined(tmp_path: Path) -> None:
    """Landlock would leave the running threads out, so restrict() refuses instead."""
    _landlock_or_skip()
    import threading

    def probe() -> None:  # pragma: no cover - never reached: restrict() raises first
        return None

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        try:
            sandbox.restrict(sandbox.Grants(()))
            outcome = "confined"
        except sandbox.SandboxError as exc:
            outcome = exc.strerror or ""
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome = pipe.read().decode()
    os.waitpid(pid, 0)
    assert "2 threads" in outcome, outcome


def test_handled_rights_follow_the_abi() -> None:
    assert sandbox.handled_fs_rights(1) == (1 << 13) - 1
    assert sandbox.handled_fs_rights(2) & sandbox.FS_REFER and not sandbox.handled_fs_rights(2) & sandbox.FS_TRUNCATE
    assert (
        sandbox.handled_fs_rights(4) & sandbox.FS_TRUNCATE and not sandbox.handled_fs_rights(4) & sandbox.FS_IOCTL_DEV
    )
    assert sandbox.handled_fs_rights(7) == (1 << 16) - 1


def test_what_the_worker_reports() -> None:
    assert (
        sandbox.probe("landlock", "thread").describe() == "off: tasks run in the worker process (task.executor=thread)"
    )
    assert sandbox.probe("none", "process").describe() == "off: task.host.sandbox=none"
    abi = _landlock_or_skip()
    assert sandbox.probe("landlock", "process").describe() == f"landlock ABI {abi}"


def test_writable_around_leaves_out_the_excluded_and_their_parents(tmp_path: Path) -> None:
    for name in ("a/keep", "a/secret", "b"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "a" / "file").write_text("x")
    around = sandbox.writable_around([tmp_path / "a" / "secret"], top=tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in around) == ["a/file", "a/keep", "b"]
