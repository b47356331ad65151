"""Worker shutdown never kills a task that was stopping normally (issue #26).

Start/stop cycles of a standalone worker with 10 FileStreamSource connectors (tasks in task
host processes, the ``sluice standalone`` default) must end with every task stopped cleanly: no
"did not stop in time" in the worker's log, and every line of every file in the topic exactly
once — each clean stop committed its offsets, so no restart read a line again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.sizes import size

pytestmark = pytest.mark.integration

CONNECTORS = 10
CYCLES = size(5, 20)
LINES = 50


def test_repeated_worker_restarts_stop_every_task_cleanly(kafka: Any, tmp_path: Path) -> None:
    """5 cycles (20 with ``SLUICE_TEST_FULL_SIZES=1``, as first written). Each cycle stops all 10
    tasks in their host processes at once, some with lines still to read, so 5 cycles still take
    50 clean stops through the same shutdown path and check 5 restarts that each resume from the
    offsets the stop before committed; the full count gives an intermittent race more chances."""
    topic = unique_topic_name("cycles")
    create_topic(kafka.bootstrap_servers, topic)
    connector_files = []
    for i in range(CONNECTORS):
        data = tmp_path / f"in-{i}.txt"
        data.write_text("")
        props = tmp_path / f"file-{i}.properties"
        props.write_text(f"name=file-{i}\nconnector.class=FileStreamSource\nfile={data}\ntopic={topic}\n")
        connector_files.append(props)
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"task.executor": "process"})
    for cycle in range(CYCLES):
        for i in range(CONNECTORS):  # new lines for every cycle, read while the worker runs or after its restart
            with (tmp_path / f"in-{i}.txt").open("a") as f:
                f.write("".join(f"{i}:{cycle}:{n}\n" for n in range(LINES)))
        worker.start(*connector_files)
        for i in range(CONNECTORS):
            worker.wait_running(f"file-{i}")
        assert worker.stop() == 0, worker.log()

    worker.start(*connector_files)  # one more run reads what the last cycle's stop came too soon for
    expected = sorted(f"{i}:{c}:{n}" for i in range(CONNECTORS) for c in range(CYCLES) for n in range(LINES))
    got = sorted(r.value.decode() for r in consume_all(kafka.bootstrap_servers, topic, len(expected), timeout=60, settle=2.0))
    assert worker.stop() == 0, worker.log()

    log = worker.log_path.read_text()
    assert "did not stop in time" not in log, [line for line in log.splitlines() if "did not stop in time" in line]
    assert "before the task stopped" not in log  # no host died under a task either
    assert got == expected
