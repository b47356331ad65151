"""``serve``: the run-until-signal loop every ``sluice`` worker command ends in."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time

import pytest

from sluice.cli.standalone import serve


class SlowToStop:
    def __init__(self, stop_takes_s: float) -> None:
        self.stop_takes_s = stop_takes_s
        self.stopped = False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        time.sleep(self.stop_takes_s)
        self.stopped = True


def _sigterm_soon() -> None:
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()


@pytest.fixture(autouse=True)
def _restore_signal_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
    faulthandler.unregister(signal.SIGUSR1)


def test_a_slow_shutdown_writes_every_threads_stack(capfd: pytest.CaptureFixture[str]) -> None:
    node = SlowToStop(1.0)
    _sigterm_soon()
    assert serve(node, stack_dump_after_s=0.3) == 0
    assert node.stopped
    err = capfd.readouterr().err
    assert "thread 0x" in err.lower() and "in stop" in err  # the main thread, stuck in SlowToStop.stop


def test_a_prompt_shutdown_writes_no_stacks(capfd: pytest.CaptureFixture[str]) -> None:
    node = SlowToStop(0.0)
    _sigterm_soon()
    assert serve(node, stack_dump_after_s=0.5) == 0
    time.sleep(0.7)  # past the dump's deadline: it was cancelled, so nothing is written
    assert "thread 0x" not in capfd.readouterr().err.lower()


def test_sigusr1_writes_the_stacks_while_running(capfd: pytest.CaptureFixture[str]) -> None:
    node = SlowToStop(0.0)

    def poke(stop: threading.Event) -> int:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.1)
        stop.set()
        return 0

    assert serve(node, poke) == 0
    err = capfd.readouterr().err
    assert "thread 0x" in err.lower() and "in poke" in err
