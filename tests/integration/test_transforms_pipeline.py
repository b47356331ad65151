"""Single message transforms and predicates configured as in Kafka Connect, on a real worker."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(kafka, tmp_path_factory: pytest.TempPathFactory):
    w = WorkerProcess(tmp_path_factory.mktemp("smt-worker"), kafka.bootstrap_servers, **{"offset.flush.interval.ms": "500"})
    w.start()
    yield w
    assert w.stop() == 0, w.log()


def test_source_chain_hoists_inserts_routes_and_filters_by_predicate(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    stamp = time.time_ns()
    source = tmp_path / "in.txt"
    source.write_text("alpha\nbeta\n")
    create_topic(kafka.bootstrap_servers, f"smt-{stamp}-out")
    config = {
        "connector.class": "FileStreamSource",
        "file": str(source),
        "topic": f"smt-{stamp}-in",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "transforms": "hoist,insert,route,keepRouted",
        "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.hoist.field": "line",
        "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.insert.static.field": "origin",
        "transforms.insert.static.value": "demo",
        "transforms.route.type": "RegexRouter",
        "transforms.route.regex": "(.*)-in",
        "transforms.route.replacement": "$1-out",
        # Filter drops what its predicate matches; negated, it keeps only the routed records.
        "transforms.keepRouted.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.keepRouted.predicate": "isRouted",
        "transforms.keepRouted.negate": "true",
        "predicates": "isRouted",
        "predicates.isRouted.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isRouted.pattern": ".*-out",
    }
    created = httpx.post(f"{worker.url}/connectors", json={"name": f"smt-src-{stamp}", "config": config})
    assert created.status_code == 201, created.text
    records = consume_all(kafka.bootstrap_servers, f"smt-{stamp}-out", 2)
    assert [json.loads(r.value) for r in records] == [
        {"line": "alpha", "origin": "demo"},
        {"line": "beta", "origin": "demo"},
    ]


def test_filter_with_a_matching_predicate_drops_everything(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    stamp = time.time_ns()
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    topic = f"smt-drop-{stamp}"
    create_topic(kafka.bootstrap_servers, topic)
    config = {
        "connector.class": "FileStreamSource",
        "file": str(source),
        "topic": topic,
        "transforms": "drop",
        "transforms.drop.type": "Filter",
        "transforms.drop.predicate": "all",
        "predicates": "all",
        "predicates.all.type": "TopicNameMatches",
        "predicates.all.pattern": "smt-drop-.*",
    }
    assert httpx.post(f"{worker.url}/connectors", json={"name": f"smt-drop-{stamp}", "config": config}).status_code == 201
    worker.wait_running(f"smt-drop-{stamp}")
    time.sleep(2)
    with pytest.raises(TimeoutError):
        consume_all(kafka.bootstrap_servers, topic, 1, timeout=3)


def test_sink_chain_masks_a_field_before_writing(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic = f"smt-sink-{time.time_ns()}"
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(json.dumps({"name": "ada", "ssn": "123-45-6789"}).encode())])
    out = tmp_path / "out.txt"
    config = {
        "connector.class": "FileStreamSink",
        "file": str(out),
        "topics": topic,
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        "transforms": "mask",
        "transforms.mask.type": "MaskField$Value",
        "transforms.mask.fields": "ssn",
    }
    assert httpx.post(f"{worker.url}/connectors", json={"name": f"smt-sink-{time.time_ns()}", "config": config}).status_code == 201
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (out.exists() and out.read_text()):
        time.sleep(0.2)
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{"name": "ada", "ssn": ""}]


def test_bad_transform_configs_are_rejected_naming_the_key(worker: WorkerProcess, tmp_path: Path) -> None:
    base = {"connector.class": "FileStreamSource", "file": str(tmp_path / "x"), "topic": "t"}
    cases = {
        "transforms.r.type": {"transforms": "r", "transforms.r.type": "NoSuchTransform"},
        "transforms.r.regex": {"transforms": "r", "transforms.r.type": "RegexRouter", "transforms.r.replacement": "x"},
        "transforms.r.predicate": {"transforms": "r", "transforms.r.type": "Filter", "transforms.r.predicate": "missing"},
    }
    for key, extra in cases.items():
        response = httpx.post(f"{worker.url}/connectors", json={"name": "bad-smt", "config": {**base, **extra}})
        assert response.status_code == 400, response.text
        assert key in response.json()["message"]
