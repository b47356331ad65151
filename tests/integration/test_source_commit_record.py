"""``SourceTask.commit_record`` as Connect calls it: once for every record the task polled, with
where Kafka stored it, or with ``None`` when the record will never be produced (a transform
filtered it out, or ``errors.tolerance=all`` skipped it). A task that acknowledges records to
its own system (a queue, a log) relies on hearing of each one."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import consume_all, create_topic
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

COUNT = 15
TOMBSTONES = {1, 4, 8, 13}  # filtered out: 1 and 4 in a poll that converts whole, 8 and 13 too
MISFITS = {7}  # refused by the converter: its poll (5-9) goes record by record


def _calls(journal: Path) -> list[dict]:
    if not journal.exists():
        return []
    return [e for e in map(orjson.loads, journal.read_bytes().splitlines()) if e["event"] == "commit_record"]


def test_every_polled_record_is_acknowledged_once_with_its_kafka_offset_or_none(kafka, tmp_path: Path) -> None:
    topic = f"acking-{time.time_ns()}"
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    journal = tmp_path / "journal.jsonl"
    config = {
        "connector.class": "tests.plugins.acking.AckingSource",
        "topic": topic,
        "count": str(COUNT),
        "tombstones": ",".join(map(str, sorted(TOMBSTONES))),
        "misfits": ",".join(map(str, sorted(MISFITS))),
        "journal": str(journal),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "all",
        "transforms": "dropTombstones",
        "transforms.dropTombstones.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.dropTombstones.predicate": "isTombstone",
        "predicates": "isTombstone",
        "predicates.isTombstone.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers)
    worker.start()
    try:
        created = httpx.post(f"{worker.url}/connectors", json={"name": "acking", "config": config})
        assert created.status_code == 201, created.text
        kept = [i for i in range(COUNT) if i not in TOMBSTONES | MISFITS]
        records = consume_all(kafka.bootstrap_servers, topic, len(kept))
        assert [r.value for r in records] == [f'"v{i}"'.encode() for i in kept]
        deadline = time.monotonic() + 30
        while len(_calls(journal)) < COUNT and time.monotonic() < deadline:
            time.sleep(0.1)
        calls = _calls(journal)
    finally:
        assert worker.stop() == 0, worker.log()

    assert sorted(c["n"] for c in calls) == list(range(COUNT)), calls  # each record once
    by_n = {c["n"]: c["metadata"] for c in calls}
    for i in TOMBSTONES | MISFITS:
        assert by_n[i] is None, (i, by_n[i])
    stored_at = {r.value: r.offset for r in records}
    for i in kept:
        assert by_n[i] == [topic, 0, stored_at[f'"v{i}"'.encode()]], (i, by_n[i])
