"""FileStreamSource → a real broker → FileStreamSink, with the worker SIGKILLed mid-stream.

What a user checks after such a crash: every line arrived, in order, and the only duplicates are
the records of the last uncommitted interval (the source re-sends from its last stored position,
the sink re-writes from its last committed consumer offset).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import NewTopic

from sluice.offsets import FileOffsetStore
from tests.integration.kafka_helpers import ClosingAdminClient, committed_offset
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

LINES = 100_000


def _create_topic(bootstrap: str, topic: str) -> None:
    with ClosingAdminClient({"bootstrap.servers": bootstrap}) as admin:
        for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
            future.result(30)


def _read_topic(bootstrap: str, topic: str, expected_at_least: int, timeout: float = 60) -> list[str]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}", "enable.auto.commit": False}
    )
    out: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        while time.monotonic() < deadline:
            msgs = consumer.consume(10_000, timeout=1)
            out.extend(m.value().decode() for m in msgs if m.error() is None)
            if not msgs and len(out) >= expected_at_least:
                break
    finally:
        consumer.close()
    return out


def _committed(bootstrap: str, group: str, topic: str) -> int:
    return max(committed_offset(bootstrap, group, topic), 0)


def _append_lines(path: Path, per_chunk: int = 1000, pause: float = 0.05) -> None:
    with path.open("a") as f:
        for start in range(0, LINES, per_chunk):
            f.write("".join(f"line {i} {'x' * 40}\n" for i in range(start, min(start + per_chunk, LINES))))
            f.flush()
            time.sleep(pause)


def _wait_for_last_line(path: Path, last: str, worker: WorkerProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 200))
            tail = f.read().decode(errors="replace").splitlines()
        if tail and tail[-1] == last:
            return
        time.sleep(0.2)
    raise AssertionError(f"{last!r} never reached {path}\n{worker.log()}")


def _wait_for_lines(path: Path, count: int, worker: WorkerProcess, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        n = sum(1 for _ in path.open("rb")) if path.exists() else 0
        if n >= count:
            return n
        time.sleep(0.2)
    raise AssertionError(f"only {n} of {count} lines reached {path}\n{worker.log()}")


def test_sigkill_mid_stream_loses_nothing_and_duplicates_only_the_uncommitted_interval(kafka, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = f"lines-{time.time_ns()}"
    _create_topic(bootstrap, topic)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("")
    # The lines arrive over ~5 s, as from a live application, so the kill lands mid-stream for the
    # source as well as for the sink.
    writer = threading.Thread(target=_append_lines, args=(source_file,), daemon=True)
    (tmp_path / "source.json").write_bytes(
        orjson.dumps(
            {
                "name": "file-source",
                "config": {
                    "connector.class": "FileStreamSource",
                    "file": str(source_file),
                    "topic": topic,
                    "batch.size": "500",
                },
            }
        )
    )
    (tmp_path / "sink.properties").write_text(
        f"name=file-sink\nconnector.class=org.apache.kafka.connect.file.FileStreamSinkConnector\ntopics={topic}\nfile={sink_file}\n"
    )
    connectors = (tmp_path / "source.json", tmp_path / "sink.properties")

    worker = WorkerProcess(tmp_path, bootstrap, **{"offset.flush.interval.ms": "500"})
    try:
        worker.start(*connectors)
        worker.wait_running("file-source")
        writer.start()
        _wait_for_lines(sink_file, 40_000, worker)
        worker.kill()
        # What was durable when the worker died:
        store = FileOffsetStore(worker.offsets_path)
        store.start()
        stored = dict((orjson.dumps(p), o) for p, o in store.all("file-source"))
        store.stop()
        position = stored[orjson.dumps({"filename": str(source_file)})]["position"]
        committed_sink = _committed(bootstrap, "connect-file-sink", topic)
        lines_before = sum(1 for _ in sink_file.open("rb"))
        assert lines_before >= 40_000

        assert writer.is_alive(), "the input was complete before the kill; the test proves less than it claims"
        worker.start(*connectors)
        worker.wait_running("file-sink")
        writer.join()
        _wait_for_last_line(sink_file, f"line {LINES - 1} {'x' * 40}", worker)
        assert worker.stop() == 0, worker.log()
    finally:
        worker.stop()

    expected = [f"line {i} {'x' * 40}" for i in range(LINES)]
    # The topic holds what the first run delivered, then the re-sent lines from exactly the stored
    # source position on: nothing is missing, and nothing before the last commit is repeated.
    replay_from = len(source_file.read_bytes()[:position].splitlines())
    in_topic = _read_topic(bootstrap, topic, LINES)
    delivered_first = len(in_topic) - (LINES - replay_from)
    print(f"kill: source stored line {replay_from}, delivered {delivered_first}; sink wrote {lines_before}, committed {committed_sink}")
    assert delivered_first >= replay_from
    assert in_topic == expected[:delivered_first] + expected[replay_from:]

    # The file holds what the sink wrote before the kill, then the topic again from exactly the
    # committed consumer offset on.
    out = sink_file.read_text().splitlines()
    assert committed_sink <= lines_before
    assert out == in_topic[:lines_before] + in_topic[committed_sink:]
    assert set(out) == set(expected)
