"""Session services shared by a run's pytest-xdist workers: one broker, one PostgreSQL, ... per run.

Without xdist a session fixture starts its service in the pytest process, as it always did. Under
xdist (``PYTEST_XDIST_WORKER`` set) the first worker that needs a service takes a file lock in the
run's shared directory (the controller's ``basetemp``), starts :mod:`tests.integration.service_host`
for it and waits for the host to publish the started service; every other worker waits on the lock,
then reads what was published. The host, not a worker, owns the service: a worker that runs out of
tests exits while others still use the broker. The host stops its service when the controller asks
(:func:`stop_shared_services`, at the end of the session) or when the controller's process is gone.

Tests receive an attached copy of the service object: the same class (with its addresses, ports,
credentials, directories), whose ``start`` and ``stop`` refuse, since the host owns the process.
Sharing is safe because every test uses names of its own (topics, groups, databases, buckets,
indices, slots); a test that stops or restarts a service starts a private one.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

S = TypeVar("S")

#: Where the hosts keep their files, under the controller's basetemp.
SHARED_DIR = "shared-services"
#: How long a worker waits for a host to publish its service (a first run may fetch jars).
_START_TIMEOUT_S = 900.0
_ROOT = Path(__file__).resolve().parents[2]


def under_xdist() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def session_service(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    factory: Callable[[Path], S],
    failure: str,
) -> Iterator[S]:
    """The body of a session fixture: yields the started service ``factory(data_dir)`` makes, in
    process or shared through a host (see the module). ``failure`` starts the message the tests
    fail with when the service cannot start (the reason follows); no test skips for it."""
    if not under_xdist():
        service = factory(tmp_path_factory.mktemp(name))
        reason: str | None = None
        try:
            service.start()  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - every start failure fails the tests, with its reason
            reason = str(exc)
        if reason is not None:  # outside the except block, so no chained traceback
            _fail(failure, reason)
        try:
            yield service
        finally:
            service.stop()  # type: ignore[attr-defined]
        return
    yield _attach(_published(tmp_path_factory.getbasetemp().parent / SHARED_DIR, name, factory, failure))


def _fail(failure: str, reason: str) -> None:
    ci = " (CI=true: a missing service is a failure)" if os.environ.get("CI", "").lower() == "true" else ""
    pytest.fail(f"{failure}{ci}:\n{reason}", pytrace=False)


def _published(shared: Path, name: str, factory: Callable[[Path], Any], failure: str) -> dict[str, Any]:
    shared.mkdir(parents=True, exist_ok=True)
    published = shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not published.exists():
            _start_host(shared, name, factory)
    state: dict[str, Any] = pickle.loads(published.read_bytes())
    if "error" in state:
        _fail(failure, state["error"])
    return state


def _start_host(shared: Path, name: str, factory: Callable[[Path], Any]) -> None:
    published = shared / f"{name}.pickle"
    log = open(shared / f"{name}.host.log", "ab")  # noqa: SIM115 - the host's, closed below once passed on
    with log:
        host = subprocess.Popen(
            [
                sys.executable, "-m", "tests.integration.service_host",
                "--name", name, "--factory", f"{factory.__module__}:{factory.__qualname__}",
                "--dir", str(shared), "--controller-pid", str(os.getppid()),
            ],
            cwd=_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this worker; the controller's end stops it
        )  # fmt: skip
    (shared / f"{name}.pid").write_text(str(host.pid))
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not published.exists():
        code = host.poll()
        if code is not None:
            tail = (shared / f"{name}.host.log").read_text(errors="replace")[-4000:]
            published.write_bytes(pickle.dumps({"error": f"its host exited with {code} before starting it:\n{tail}"}))
            return
        if time.monotonic() > deadline:
            host.kill()
            published.write_bytes(pickle.dumps({"error": f"not started within {_START_TIMEOUT_S:.0f}s"}))
            return
        time.sleep(0.1)


def _attach(state: dict[str, Any]) -> Any:
    """A copy of the host's service object: its plain attributes, no process handles."""
    module, _, qualname = state["class"].partition(":")
    cls: type = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    attached_cls = _ATTACHED.get(cls)
    if attached_cls is None:
        attached_cls = _ATTACHED[cls] = type(f"Shared{cls.__name__}", (cls,), {"start": _refuse, "stop": _refuse})
    service = object.__new__(attached_cls)
    service.__dict__.update(dict.fromkeys(state["unpicklable"]))
    service.__dict__.update(state["attributes"])
    return service


_ATTACHED: dict[type, type] = {}


def _refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(
        f"{type(self).__name__} is shared by the run's pytest-xdist workers and owned by its host; "
        "a test that stops or restarts a service starts a private one"
    )


def describe(service: Any) -> dict[str, Any]:
    """What :func:`_attach` needs to rebuild ``service`` in another process (used by the host)."""
    attributes: dict[str, Any] = {}
    unpicklable: list[str] = []
    for key, value in vars(service).items():
        try:
            pickle.dumps(value)
        except Exception:  # noqa: BLE001 - processes, files, locks: left out
            unpicklable.append(key)
        else:
            attributes[key] = value
    cls = type(service)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "attributes": attributes, "unpicklable": unpicklable}


def stop_shared_services(basetemp: Path, timeout: float = 60.0) -> None:
    """Ask every host of the run to stop its service and wait for them (the controller, at the end)."""
    shared = basetemp / SHARED_DIR
    if not shared.is_dir():
        return
    (shared / "stop").touch()
    pids = []
    for pid_file in shared.glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            pids.append(int(pid_file.read_text()))
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _alive(pid)]
        time.sleep(0.2)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, which an init that does not reap leaves behind, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
