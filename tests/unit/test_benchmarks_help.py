"""``python -m benchmarks.<name> --help`` describes the benchmark and its knobs without running it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_help_prints_the_docstring_and_knobs_and_runs_nothing() -> None:
    done = _run("-m", "benchmarks.file_sink", "--help")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("usage: python -m benchmarks.file_sink\n"), out
    assert "topic → FileStreamSink, against bare confluent-kafka" in out
    assert "SLUICE_BENCH_RECORDS" in out and "SLUICE_BENCH_ROUNDS" in out and "SLUICE_BENCH_BOOTSTRAP" in out
    assert "records of" not in out  # the run's own first line: it never started


def test_help_names_a_benchmark_that_does_not_exist() -> None:
    done = _run("-m", "benchmarks.no_such_thing", "-h")
    assert done.returncode == 0 and done.stdout.strip() == "No benchmark benchmarks.no_such_thing", done
