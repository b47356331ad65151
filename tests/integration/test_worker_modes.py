"""The same connector tests against a standalone worker and a (one-worker) distributed cluster,
each with tasks on threads and with a process per task (``task.executor``).

Both modes run the same connector code; only where configs, offsets and statuses are kept
differs (files and memory vs. compacted Kafka topics). Each test here runs once per mode.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import cluster_settings, wait_for
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess


@pytest.fixture(params=["standalone", "distributed", "standalone/process", "distributed/process"])
def worker(request: pytest.FixtureRequest, tmp_path: Path, kafka: KafkaBroker) -> Iterator[WorkerProcess]:
    """Each mode with each task executor: threads of the worker, or a process per task."""
    mode, _, executor = request.param.partition("/")
    settings: dict[str, Any] = {"offset.flush.interval.ms": "500", "task.executor": executor or "thread"}
    if mode == "distributed":
        settings.update(cluster_settings(f"sluice-modes-{uuid.uuid4().hex[:8]}"))
    process = WorkerProcess(tmp_path, kafka.bootstrap_servers, mode=mode, **settings)
    process.start()
    yield process
    process.stop()


def _call(worker: WorkerProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """A REST call, retried while a cluster answers 409 + Retry-After (no leader elected yet)."""
    deadline = time.monotonic() + 60
    while True:
        response = httpx.request(method, worker.url + path, timeout=30, **kwargs)
        if response.status_code != 409 or "Retry-After" not in response.headers or time.monotonic() > deadline:
            return response
        time.sleep(0.25)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_file_pipeline_with_pause_offsets_and_a_restart(worker: WorkerProcess, kafka: KafkaBroker, tmp_path: Path) -> None:
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("".join(f"line {i}\n" for i in range(200)))
    topic = unique_topic_name("modes")
    src = {"connector.class": "FileStreamSource", "file": str(source_file), "topic": topic}
    sink = {"connector.class": "FileStreamSink", "file": str(sink_file), "topics": topic}
    created = _call(worker, "POST", "/connectors", json={"name": "src", "config": src})
    assert created.status_code == 201, created.text
    assert _call(worker, "PUT", "/connectors/sink/config", json=sink).status_code == 201
    worker.wait_running("src")
    worker.wait_running("sink")
    expected = [f"line {i}" for i in range(200)]
    wait_for(lambda: _lines(sink_file), lambda got: got == expected, timeout=30, what="200 lines in the sink file")

    assert _call(worker, "PUT", "/connectors/sink/pause").status_code == 202
    wait_for(lambda: httpx.get(f"{worker.url}/connectors/sink/status").json()["tasks"][0]["state"], lambda s: s == "PAUSED")
    with source_file.open("a") as f:
        f.write("".join(f"line {i}\n" for i in range(200, 250)))
    # The source has read the new lines and its producer has acknowledged them (their offset is
    # committed): the paused sink has records to take, and a second to (wrongly) write them.
    wait_for(
        lambda: _call(worker, "GET", "/connectors/src/offsets").json(),
        lambda body: [o["offset"] for o in body.get("offsets", [])] == [{"position": source_file.stat().st_size}],
        timeout=30,
        what="the source offset past the new lines",
    )
    time.sleep(1)
    assert len(_lines(sink_file)) == 200, "a paused sink must not write"
    assert _call(worker, "PUT", "/connectors/sink/resume").status_code == 202
    expected += [f"line {i}" for i in range(200, 250)]
    wait_for(lambda: _lines(sink_file), lambda got: got == expected, timeout=30, what="250 lines after resume")

    size = source_file.stat().st_size
    offsets = wait_for(
        lambda: _call(worker, "GET", "/connectors/src/offsets").json(),
        lambda body: [o["offset"] for o in body.get("offsets", [])] == [{"position": size}],
        timeout=15,
        what="the source offset at the end of the file",
    )
    assert offsets["offsets"][0]["partition"] == {"filename": str(source_file)}

    # A restarted worker resumes from the stored offsets: nothing twice, nothing missing.
    assert worker.stop() == 0
    worker.start()
    if worker.mode == "standalone":
        # A standalone worker is given its connectors at start (as connect-standalone); a
        # cluster keeps them in its config topic.
        for name, config in (("src", src), ("sink", sink)):
            assert _call(worker, "PUT", f"/connectors/{name}/config", json=config).status_code == 201
    else:
        assert sorted(httpx.get(f"{worker.url}/connectors").json()) == ["sink", "src"]
    worker.wait_running("src")
    worker.wait_running("sink")
    with source_file.open("a") as f:
        f.write("".join(f"line {i}\n" for i in range(250, 260)))
    expected += [f"line {i}" for i in range(250, 260)]
    wait_for(lambda: _lines(sink_file), lambda got: len(got) >= 260, timeout=30, what="260 lines after the restart")
    time.sleep(1)
    assert _lines(sink_file) == expected

    assert _call(worker, "DELETE", "/connectors/src").status_code == 204
    wait_for(lambda: httpx.get(f"{worker.url}/connectors").json(), lambda names: names == ["sink"], timeout=10)


def test_sequence_source_tasks_write_every_number_once(worker: WorkerProcess, kafka: KafkaBroker) -> None:
    topic = unique_topic_name("modes-seq")
    create_topic(kafka.bootstrap_servers, topic, partitions=3)
    config = {
        "connector.class": "SequenceSource",
        "tasks.max": "3",
        "topic": topic,
        "sequence.count": "500",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "transforms": "seq",
        "transforms.seq.type": "org.apache.kafka.connect.transforms.ExtractField$Value",
        "transforms.seq.field": "seq",
    }
    assert _call(worker, "PUT", "/connectors/seq/config", json=config).status_code == 201
    worker.wait_running("seq", tasks=3)
    records = consume_all(kafka.bootstrap_servers, topic, 1500, timeout=60, settle=1.0)
    keys = sorted(r.key.decode() for r in records)
    assert keys == sorted(f"{t}-{n}" for t in range(3) for n in range(500))
    assert all(r.value.decode() == r.key.decode().split("-")[1] for r in records)
