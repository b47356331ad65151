"""Starts one session service for all of a run's pytest-xdist workers and stops it at the end.

Run by :mod:`tests.integration.shared_services` (``python -m tests.integration.service_host``): makes the
service with the fixture module's factory, starts it, publishes what a worker needs to use it, then
waits until the controller asks it to stop (a ``stop`` file) or the controller's process is gone,
and stops the service cleanly. The services are started with ``kill_with_parent``: if this host is
killed, the kernel stops them too.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType

from tests.integration.shared_services import _alive, describe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--factory", required=True, help="module:function making the (not started) service")
    parser.add_argument("--dir", required=True, type=Path, help="the run's shared-services directory")
    parser.add_argument("--controller-pid", required=True, type=int)
    args = parser.parse_args(argv)
    published = args.dir / f"{args.name}.pickle"
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    module, _, function = args.factory.partition(":")
    try:
        factory = getattr(importlib.import_module(module), function)
        data_dir = args.dir / args.name
        data_dir.mkdir(parents=True, exist_ok=True)
        service = factory(data_dir)
        service.start()
    except Exception as exc:  # noqa: BLE001 - published as the reason every test that needs it fails with
        traceback.print_exc()
        _publish(published, {"error": str(exc) or type(exc).__name__})
        return 1
    _publish(published, describe(service))
    print(f"{args.name}: started {service!r}; host pid {os.getpid()}", flush=True)
    try:
        while not stopping and _alive(args.controller_pid) and not (args.dir / "stop").exists():
            time.sleep(0.5)
    finally:
        print(f"{args.name}: stopping", flush=True)
        service.stop()
    return 0


def _publish(path: Path, state: dict[str, object]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_bytes(pickle.dumps(state))
    partial.rename(path)  # whole or absent: a worker never reads half of it


if __name__ == "__main__":
    sys.exit(main())
