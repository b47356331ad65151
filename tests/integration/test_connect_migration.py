"""Moving a cluster from Kafka Connect to Sluice and back, with a real Kafka Connect 4.x worker.

What an operator checks after each move: the connectors run (no task failed), every line of the
source file reached the sink file exactly once, and the workers' logs are clean. Connect runs its
own FileStreamSource and FileStreamSink (Java, from Maven Central); Sluice takes over the same
group and internal topics with its stand-ins, a config is changed through Sluice, and Connect
takes over again from what Sluice stored: task configs (``task.class``), active-topic records,
source offsets and sink consumer offsets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import cluster_settings, wait_for
from tests.integration.kafka_connect_peer import KafkaConnectWorker
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess

#: Record keys Kafka Connect 4.x reads from its config topic without an error.
CONNECT_CONFIG_PREFIXES = (
    "connector-", "task-", "commit-", "target-state-", "restart-connector-", "tasks-fencing-", "session-key", "logger-cluster-"
)
FILE_SOURCE_TASK = "org.apache.kafka.connect.file.FileStreamSourceTask"
FILE_SINK_TASK = "org.apache.kafka.connect.file.FileStreamSinkTask"


def _settings(group: str) -> dict[str, str]:
    """Worker keys both systems read the same way: the test cluster's group and topics, plain-string data."""
    settings = cluster_settings(
        group, **{"offset.flush.interval.ms": "1000", "value.converter": "org.apache.kafka.connect.storage.StringConverter"}
    )
    return {k: str(v) for k, v in settings.items()}


def _append(path: Path, start: int, count: int) -> list[str]:
    lines = [f"line-{i:05d}" for i in range(start, start + count)]
    with path.open("a") as handle:
        handle.write("".join(f"{line}\n" for line in lines))
    return lines


def _sink_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _latest(bootstrap: str, topic: str) -> dict[str, bytes | None]:
    """The last value of every key of an internal topic (what compaction would keep)."""
    records = consume_all(bootstrap, topic, 1, timeout=30, settle=1.5)
    return {r.key.decode(): r.value for r in sorted(records, key=lambda r: (r.partition, r.offset)) if r.key is not None}


def _wait_connect_running(connect: KafkaConnectWorker, name: str) -> dict[str, Any]:
    def running(body: dict[str, Any]) -> bool:
        tasks = body.get("tasks", [])
        failed = [t for t in tasks if t.get("state") == "FAILED"] + (
            [body["connector"]] if body.get("connector", {}).get("state") == "FAILED" else []
        )
        assert not failed, f"{name} failed on Kafka Connect: {failed}"
        # Statuses another worker wrote before (Sluice's last ones) must not pass for Connect's.
        mine = [body.get("connector", {})] + tasks
        return bool(tasks) and all(s.get("state") == "RUNNING" and s.get("worker_id") == connect.worker_id for s in mine)

    return wait_for(lambda: connect.status(name), running, timeout=90, what=f"{name} running on Kafka Connect")


def test_a_cluster_moves_from_kafka_connect_to_sluice_and_back(tmp_path: Path, kafka: KafkaBroker) -> None:
    bootstrap = kafka.bootstrap_servers
    group = unique_topic_name("migrate")
    settings = _settings(group)
    topic = unique_topic_name("lines")
    create_topic(bootstrap, topic, partitions=1)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    expected: list[str] = []
    source = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1",
        "file": str(source_file),
        "topic": topic,
    }
    sink = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "file": str(sink_file),
        "topics": topic,
    }
    (tmp_path / "connect").mkdir()
    connect = KafkaConnectWorker(tmp_path / "connect", bootstrap, **settings)
    sluice_dir = tmp_path / "sluice"
    sluice_dir.mkdir()
    sluice = WorkerProcess(sluice_dir, bootstrap, mode="distributed", **settings)

    def all_lines_in_sink(what: str) -> None:
        wait_for(lambda: _sink_lines(sink_file), lambda got: len(got) >= len(expected), timeout=90, what=what)

    try:
        # 1. Kafka Connect runs the pipeline, then stops (its tasks commit their offsets).
        started = time.monotonic()
        connect.start()
        expected += _append(source_file, 0, 500)
        for name, config in (("src", source), ("snk", sink)):
            response = connect.request("PUT", f"/connectors/{name}/config", json=config)
            assert response.status_code in (200, 201), response.text
        _wait_connect_running(connect, "src")
        _wait_connect_running(connect, "snk")
        all_lines_in_sink("Connect moving the first lines")
        connect.stop()
        print(f"Kafka Connect, first run: {time.monotonic() - started:.1f}s")

        # 2. Sluice takes over the same group and topics, and a config changes through it.
        started = time.monotonic()
        expected += _append(source_file, 500, 300)
        sluice.start()
        sluice.wait_running("src", timeout=60)
        sluice.wait_running("snk", timeout=60)
        all_lines_in_sink("Sluice moving the lines written while Connect was down")
        response = httpx.put(f"{sluice.url}/connectors/src/config", json={**source, "batch.size": "50"}, timeout=30)
        assert response.status_code == 200, response.text
        expected += _append(source_file, 800, 300)
        all_lines_in_sink("Sluice moving lines after the config change")
        topics = httpx.get(f"{sluice.url}/connectors/src/topics", timeout=10).json()
        assert topics == {"src": {"topics": [topic]}}, topics
        assert sluice.stop() == 0
        print(f"Sluice: {time.monotonic() - started:.1f}s")

        # What Sluice left in the internal topics is what Connect writes there.
        configs = _latest(bootstrap, settings["config.storage.topic"])
        unknown = [k for k in configs if not k.startswith(CONNECT_CONFIG_PREFIXES)]
        assert unknown == [], f"config records a Connect worker logs as errors: {unknown}"
        source_task = orjson.loads(configs["task-src-0"] or b"null")["properties"]
        assert source_task == {**source, "batch.size": "50", "name": "src", "task.class": FILE_SOURCE_TASK}, source_task
        sink_task = orjson.loads(configs["task-snk-0"] or b"null")["properties"]
        assert sink_task == {**sink, "name": "snk", "task.class": FILE_SINK_TASK}, sink_task
        statuses = _latest(bootstrap, settings["status.storage.topic"])
        assert f"status-topic-{topic}:connector-src" in statuses, sorted(statuses)
        assert not [k for k in statuses if k.startswith("topic-")], sorted(statuses)

        # 3. Kafka Connect takes over again: no task fails, nothing is logged at ERROR, no line
        #    is lost or repeated (both moves stopped gracefully: everything was committed).
        started = time.monotonic()
        expected += _append(source_file, 1100, 200)
        connect.start()
        _wait_connect_running(connect, "src")
        _wait_connect_running(connect, "snk")
        all_lines_in_sink("Connect moving the lines written while Sluice was down")
        expected += _append(source_file, 1300, 100)
        all_lines_in_sink("Connect moving new lines")
        time.sleep(2)  # anything repeated would arrive now
        _wait_connect_running(connect, "src")
        topics = connect.request("GET", "/connectors/src/topics").json()
        assert topics == {"src": {"topics": [topic]}}, topics
        connect.stop()
        print(f"Kafka Connect, second run: {time.monotonic() - started:.1f}s")
        errors = connect.error_lines()
        assert errors == [], "Kafka Connect logged errors after Sluice ran the cluster:\n" + "\n".join(errors)
        assert "Missing required configuration" not in connect.log()

        assert _sink_lines(sink_file) == expected, "every line once, in order, in the sink file"
        in_topic = [r.value.decode() for r in consume_all(bootstrap, topic, len(expected), timeout=30, settle=1.0) if r.value]
        assert in_topic == expected, f"{len(in_topic)} records in {topic} for {len(expected)} lines"
    finally:
        sluice.stop()
        connect.stop()

