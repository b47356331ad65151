"""Suite-wide pytest options: where the time of a run goes.

``--file-times`` prints, after the run, the wall time of each test file (set-up, call and
tear-down of its tests added up) with the share its fixtures' set-up took, slowest first. With
pytest's own ``--durations=N`` (the slowest tests) it is what CI prints, so the next change that
makes the suite slower shows which file it landed in. ``--file-times=tests/file_times.json`` also
writes the times down: the order in which pytest-xdist's workers take the files
(:mod:`tests.xdist_schedule`, slowest first).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--file-times",
        nargs="?",
        const="",
        default=None,
        metavar="JSON",
        help="after the run, print each test file's total time and its fixture set-up share, slowest first"
        " (and write the times to JSON, e.g. tests/file_times.json, the xdist schedule's order)",
    )


class _FileTimes:
    """Adds up the phases of each test's report per file."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.total: dict[str, float] = defaultdict(float)
        self.setup: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        self.total[path] += report.duration
        if report.when == "setup":
            self.setup[path] += report.duration
        elif report.when == "call":
            self.tests[path] += 1

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.total:
            return
        terminalreporter.write_sep("=", "time per test file (set-up share in brackets)")
        overall = sum(self.total.values())
        for path, seconds in sorted(self.total.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(
                f"{seconds:8.1f}s  [{self.setup[path]:7.1f}s]  {self.tests[path]:4d} tests  {path}"
            )
        terminalreporter.write_line(f"{overall:8.1f}s  in {len(self.total)} files")
        if self.out:
            times = {path: round(seconds, 1) for path, seconds in sorted(self.total.items())}
            Path(self.out).write_text(json.dumps(times, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("--file-times")
    if out is not None and not hasattr(config, "workerinput"):  # the xdist controller gets every report
        config.pluginmanager.register(_FileTimes(out), "sluice-file-times")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` hands out the slowest files first (:mod:`tests.xdist_schedule`)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.xdist_schedule import SlowestFileFirst

    return SlowestFileFirst(config, log)


@pytest.fixture(autouse=True)
def _untagged_log_lines() -> Iterator[None]:
    """Each test starts with the main thread's log lines untagged: a test that ran product code
    tagging them (``set_context``) on this thread must not change what the next test logs (xdist
    runs the tests of a worker in another order than a serial run)."""
    from sluice.worker.observability.logcontext import clear_context

    clear_context()
    yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The xdist controller, once every worker is done: stop the services they shared."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from tests.integration.shared_services import stop_shared_services

    stop_shared_services(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
