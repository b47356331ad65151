"""``log.format=json``: a worker moving a file through a topic into another file writes only JSON
lines, and every line of its tasks names the connector and the task; in text mode the same lines
carry Connect's ``[name|task-N]``.

What an operator checks: ship the worker's output to a log store, parse each line, filter on a
connector or a task. Both executors: task processes must write the worker's format too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

LINES = 500


def _pipeline(worker: WorkerProcess, tmp_path: Path) -> tuple[str, str]:
    """A FileStreamSource → topic → FileStreamSink pipeline; returns (source, sink) names once the
    output file holds every line."""
    source, sink = unique_topic_name("log-src"), unique_topic_name("log-sink")
    topic = unique_topic_name("log-format")
    infile, outfile = tmp_path / "in.txt", tmp_path / "out.txt"
    infile.write_text("".join(f"line {i}\n" for i in range(LINES)))
    # DEBUG for the runtime's task code too: its per-commit lines are task lines to check.
    for logger in ("sluice.worker.runners", "sluice.connectors"):
        r = httpx.put(f"{worker.url}/admin/loggers/{logger}", json={"level": "DEBUG"}, timeout=10)
        assert r.status_code == 200, r.text
    configs = {
        source: {"connector.class": "FileStreamSource", "file": str(infile), "topic": topic},
        sink: {"connector.class": "FileStreamSink", "file": str(outfile), "topics": topic},
    }
    for name, config in configs.items():
        r = httpx.put(f"{worker.url}/connectors/{name}/config", json=config, timeout=30)
        assert r.status_code in (200, 201), r.text
        worker.wait_running(name)
    deadline = time.monotonic() + 60
    while not outfile.exists() or len(outfile.read_text().splitlines()) < LINES:
        assert time.monotonic() < deadline, f"the sink wrote too little:\n{worker.log()}"
        time.sleep(0.2)
    # Actions on a connector over REST: their lines are the connector's too.
    for action in ("pause", "resume"):
        assert httpx.put(f"{worker.url}/connectors/{sink}/{action}", timeout=10).status_code == 202
    time.sleep(1.5)  # a commit interval: DEBUG commit lines from both tasks
    return source, sink


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_json_lines_name_the_connector_and_task(kafka: Any, tmp_path: Path, executor: str) -> None:
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"log.format": "json", "task.executor": executor}).start()
    try:
        source, sink = _pipeline(worker, tmp_path)
    finally:
        assert worker.stop() == 0
    text = worker.log_path.read_text()
    lines: list[dict[str, Any]] = []
    for raw in text.splitlines():
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pytest.fail(f"not a JSON line: {raw!r}")
        assert isinstance(line, dict), raw
        assert {"ts", "level", "logger", "message", "thread"} <= line.keys(), raw
        assert line["ts"].endswith("+00:00") and "T" in line["ts"], raw
        lines.append(line)

    for name in (source, sink):
        task_lines = [ln for ln in lines if ln.get("connector") == name and ln.get("task") == 0]
        assert task_lines, f"no line of {name}'s task:\n{text[-5000:]}"
        # Lines of a task's thread: named by its runner, so they must say whose they are.
        on_thread = [ln for ln in lines if ln["thread"] == f"task-{name}-0"]
        assert all(ln.get("connector") == name and ln.get("task") == 0 for ln in on_thread), on_thread
    # Every line from a runner's module is a task's line.
    runner_lines = [ln for ln in lines if ln["logger"].startswith("sluice.worker.runners")]
    assert runner_lines and all("connector" in ln and "task" in ln for ln in runner_lines), runner_lines
    assert any(ln["message"].startswith("Assigned partitions") and ln.get("connector") == sink for ln in lines)
    # Created over REST: the herder's lines about it are the connector's.
    created = [ln for ln in lines if ln["message"].startswith("Created connector")]
    assert len(created) == 2 and {ln.get("connector") for ln in created} == {source, sink}, created
    # A line outside any connector has neither field.
    assert any("connector" not in ln and "task" not in ln for ln in lines)


def test_text_lines_carry_the_task_tag(kafka: Any, tmp_path: Path) -> None:
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"task.executor": "thread"}).start()
    try:
        source, sink = _pipeline(worker, tmp_path)
    finally:
        assert worker.stop() == 0
    lines = worker.log_path.read_text().splitlines()
    assert any(f"INFO [{sink}|task-0] Assigned partitions" in ln for ln in lines), "\n".join(lines[-50:])
    assert any(f"DEBUG [{source}|task-0] Committed offsets" in ln for ln in lines), "\n".join(lines[-50:])
    runner_lines = [ln for ln in lines if "(sluice.worker.runners." in ln]
    assert runner_lines and all(f"[{source}|task-0]" in ln or f"[{sink}|task-0]" in ln for ln in runner_lines), runner_lines
