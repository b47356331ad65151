"""errors.* on a real worker: tolerance, the dead-letter queue with Connect's context headers,
and the errant record reporter of sink tasks (KIP-610)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(**{"offset.flush.interval.ms": "500"})


def envelope(text: str) -> bytes:
    return b'{"schema":{"type":"string"},"payload":"%s"}' % text.encode()


POISONED = [
    OutgoingRecord(envelope("one"), key="k0"),
    OutgoingRecord(b'{"plain": "json"}', key="k1", headers=[("origin", b"test")]),
    OutgoingRecord(envelope("two"), key="k2"),
    OutgoingRecord(b"\x00garbage{", key="k3"),
    OutgoingRecord(envelope("three"), key="k4"),
]


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed([KafkaTopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def wait_for(condition: Any, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    r = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=10)
    assert r.status_code == 201, r.text


def json_sink_config(topic: str, out: Path, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "FileStreamSink",
        "topics": topic,
        "file": str(out),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        **extra,
    }


def test_tolerance_all_skips_poison_records_into_the_dlq_with_context_headers(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic, dlq = unique_topic_name("poison"), unique_topic_name("dlq")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, POISONED)
    out = tmp_path / "out.txt"
    name = f"dlq-{topic}"
    create(worker, name, json_sink_config(
        topic, out,
        **{
            "errors.tolerance": "all",
            "errors.log.enable": "true",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.topic.replication.factor": "3",  # capped at the one broker
            "errors.deadletterqueue.context.headers.enable": "true",
        },
    ))
    wait_for(lambda: len(lines(out)) >= 3, what=f"3 lines in the sink file\n{worker.log()}")
    assert lines(out) == ["one", "two", "three"]

    dead = consume_all(kafka.bootstrap_servers, dlq, 2)
    assert [(r.key, r.value) for r in dead] == [(b"k1", b'{"plain": "json"}'), (b"k3", b"\x00garbage{")]
    first = dict(dead[0].headers)
    assert first["origin"] == b"test"  # the original headers travel too
    assert first["__connect.errors.topic"] == topic.encode()
    assert first["__connect.errors.partition"] == b"0"
    assert first["__connect.errors.offset"] == b"1"
    assert first["__connect.errors.connector.name"] == name.encode()
    assert first["__connect.errors.task.id"] == b"0"
    assert first["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert first["__connect.errors.class.name"].endswith(b"JsonConverter")
    assert first["__connect.errors.exception.class.name"].endswith(b"DataError")
    assert b"schema" in first["__connect.errors.exception.message"]
    assert first["__connect.errors.exception.stacktrace"]
    assert dict(dead[1].headers)["__connect.errors.offset"] == b"3"

    # The consumer group moved past the skipped records.
    wait_for(lambda: committed(kafka.bootstrap_servers, f"connect-{name}", topic) == 5, what="offset 5 committed")


def test_tolerance_none_fails_the_task_and_commits_nothing_past_the_poison_record(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic = unique_topic_name("poison-none")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, POISONED)
    out = tmp_path / "out.txt"
    name = f"none-{topic}"
    create(worker, name, json_sink_config(topic, out))

    def failed() -> dict[str, Any] | None:
        body = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5).json()
        tasks = body.get("tasks") or []
        return tasks[0] if tasks and tasks[0]["state"] == "FAILED" else None

    task = wait_for(failed, what=f"task FAILED\n{worker.log()}")
    assert "Tolerance exceeded in error handler" in task["trace"]
    assert "schema" in task["trace"] and "payload" in task["trace"]  # the converter's own message
    time.sleep(1.5)  # more than offset.flush.interval.ms: a commit would have happened by now
    assert committed(kafka.bootstrap_servers, f"connect-{name}", topic) <= 1
    assert lines(out) in ([], ["one"])


def test_errant_record_reporter_sends_rejected_records_to_the_dlq(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic, dlq = unique_topic_name("errant"), unique_topic_name("errant-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(v, key=f"k{i}") for i, v in enumerate(["good1", "bad2", "good3", "bad4"])])
    out = tmp_path / "out.txt"
    name = f"errant-{topic}"
    create(worker, name, {
        "connector.class": "tests.plugins.errant.ErrantSink",
        "topics": topic,
        "file": str(out),
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    })
    wait_for(lambda: len(lines(out)) >= 2, what=f"2 lines in the sink file\n{worker.log()}")
    dead = consume_all(kafka.bootstrap_servers, dlq, 2)
    assert lines(out) == ["good1", "good3"]
    assert [(r.key, r.value) for r in dead] == [(b"k1", b"bad2"), (b"k3", b"bad4")]
    headers = dict(dead[0].headers)
    assert headers["__connect.errors.stage"] == b"TASK_PUT"
    assert headers["__connect.errors.offset"] == b"1"
    assert headers["__connect.errors.class.name"] == b"tests.plugins.errant.ErrantSinkTask"
    assert headers["__connect.errors.exception.message"] == b"rejected value 'bad2'"
    wait_for(lambda: committed(kafka.bootstrap_servers, f"connect-{name}", topic) == 4, what="offset 4 committed")
    assert httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5).json()["tasks"][0]["state"] == "RUNNING"


def test_unknown_errors_key_is_rejected_naming_it(worker: WorkerProcess, tmp_path: Path) -> None:
    r = httpx.post(
        f"{worker.url}/connectors",
        json={"name": "bad-errors", "config": json_sink_config("t", tmp_path / "o.txt", **{"errors.tolerance": "most"})},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert "errors.tolerance" in r.text


def source_dlq_config(path: Path, topic: str, dlq: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "FileStreamSource",
        "file": str(path),
        "topic": topic,
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
        **extra,
    }


def test_source_records_failing_a_transform_go_to_the_source_dlq(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic, dlq = unique_topic_name("src-out"), unique_topic_name("src-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    path = tmp_path / "numbers.txt"
    path.write_text("1\n2\nthree\n4\nfive\n6\n")
    name = f"src-dlq-{topic}"
    create(worker, name, source_dlq_config(path, topic, dlq, **{
        "transforms": "toInt",
        "transforms.toInt.type": "org.apache.kafka.connect.transforms.Cast$Value",
        "transforms.toInt.spec": "int32",
    }))
    good = consume_all(kafka.bootstrap_servers, topic, 4)
    assert [r.value for r in good] == [b"1", b"2", b"4", b"6"]
    dead = consume_all(kafka.bootstrap_servers, dlq, 2)
    assert [r.value for r in dead] == [b'"three"', b'"five"']  # the record as the value converter writes it
    headers = dict(dead[0].headers)
    assert headers["__connect.errors.stage"] == b"TRANSFORMATION"
    assert headers["__connect.errors.class.name"] == b"sluice.transforms.cast.CastValue"
    assert headers["__connect.errors.connector.name"] == name.encode()
    assert headers["__connect.errors.task.id"] == b"0"
    assert headers["__connect.errors.topic"] == topic.encode()
    assert headers["__connect.errors.exception.class.name"].endswith(b"DataError")
    assert b"three" in headers["__connect.errors.exception.message"]
    status = httpx.get(f"{worker.url}/connectors/{name}/tasks/0/status", timeout=5).json()
    assert status["state"] == "RUNNING"
    assert status["errors"]["total-records-skipped"] == 2
    assert status["errors"]["deadletterqueue-produce-requests"] == 2


def test_source_records_failing_conversion_go_to_the_source_dlq(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic, dlq = unique_topic_name("src-conv"), unique_topic_name("src-conv-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    path = tmp_path / "lines.txt"
    path.write_text("alpha\nbeta\n")
    name = f"src-conv-{topic}"
    # ByteArrayConverter refuses string-schema values: conversion fails for every line.
    config = source_dlq_config(path, topic, dlq, **{"value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"})
    del config["value.converter.schemas.enable"]
    create(worker, name, config)
    worker.wait_running(name)  # the DLQ topic exists once the task runs
    dead = consume_all(kafka.bootstrap_servers, dlq, 2)
    assert [dict(r.headers)["__connect.errors.stage"] for r in dead] == [b"VALUE_CONVERTER"] * 2
    assert [dict(r.headers)["__connect.errors.class.name"] for r in dead] == [b"sluice.converters.bytes.ByteArrayConverter"] * 2
    assert [r.value for r in dead] == [b'"alpha"', b'"beta"']  # the converter failed: a JSON rendering
    assert consume_all(kafka.bootstrap_servers, topic, 0, timeout=3) == []
    status = httpx.get(f"{worker.url}/connectors/{name}/tasks/0/status", timeout=5).json()
    assert status["state"] == "RUNNING", status


def test_a_raw_json_sink_meeting_a_value_that_is_not_json_gets_it_decoded_from_the_runtime(
    worker: WorkerProcess, kafka, tmp_path: Path
) -> None:
    """A sink that takes raw JSON (``value_format``) and has no recovery code of its own: the value
    that does not decode makes the runtime deliver the batch again decoded, record by record, so
    the bad record is dead-lettered per errors.tolerance and every good one is written once."""
    topic, dlq = unique_topic_name("rawjson"), unique_topic_name("rawjson-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    values = [b'{"n":1}', b'{"n":2}', b"{not json", b'{"n":4}']
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(v, key=f"k{i}") for i, v in enumerate(values)])
    out = tmp_path / "raw.jsonl"
    name = f"rawjson-{topic}"
    create(worker, name, {
        "connector.class": "tests.plugins.raw_json.RawJsonSink",
        "topics": topic,
        "file": str(out),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    })
    wait_for(lambda: len(lines(out)) >= 3, what=f"3 lines in the sink file\n{worker.log()}")
    (dead,) = consume_all(kafka.bootstrap_servers, dlq, 1)
    assert (dead.key, dead.value) == (b"k2", b"{not json")
    assert dict(dead.headers)["__connect.errors.stage"] == b"VALUE_CONVERTER"
    written = [orjson.loads(line) for line in lines(out)]
    assert [w["value"] for w in written] == [{"n": 1}, {"n": 2}, {"n": 4}]
    assert "could not use the raw values" in worker.log()  # the poll with the bad value came again, decoded
    wait_for(lambda: committed(kafka.bootstrap_servers, f"connect-{name}", topic) == 4, what="offset 4 committed")
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(b'{"n":5}', key="k4")])
    wait_for(lambda: len(lines(out)) >= 4, what="the next record")
    assert orjson.loads(lines(out)[3]) == {"value": {"n": 5}, "delivered": "raw"}  # raw values resume
    assert httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5).json()["tasks"][0]["state"] == "RUNNING"


def _dlq_page(worker: WorkerProcess, name: str, **params: int) -> dict[str, Any]:
    r = httpx.get(f"{worker.url}/connectors/{name}/dlq", params=params, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _redrive(worker: WorkerProcess, name: str, first: int, last: int, max_redrives: int) -> dict[str, Any]:
    body = {"partition": 0, "from_offset": first, "to_offset": last, "max_redrives": max_redrives}
    r = httpx.post(f"{worker.url}/connectors/{name}/dlq/redrive", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _dlq_end(worker: WorkerProcess, name: str, end: int) -> dict[str, Any]:
    return wait_for(
        lambda: (page := _dlq_page(worker, name, limit=1))["partitions"][0]["end"] >= end and page,
        what=f"{end} records in the DLQ of {name}",
    )


def test_the_dlq_reads_decoded_and_a_fixed_sink_takes_its_dead_letters_back(
    worker: WorkerProcess, kafka, tmp_path: Path
) -> None:
    topic, dlq = unique_topic_name("redrive"), unique_topic_name("redrive-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, POISONED)
    out, name = tmp_path / "out.txt", f"redrive-{topic}"
    dlq_keys = {
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    }
    create(worker, name, json_sink_config(topic, out, **dlq_keys))
    wait_for(lambda: len(lines(out)) >= 3, what="3 lines in the sink file")

    # Read page by page, decoded: the record, its own headers and the error the task met.
    page = _dlq_end(worker, name, 2)
    [first] = page["records"]
    assert (first["offset"], first["key"], first["value"]) == (0, {"text": "k1"}, {"text": '{"plain": "json"}'})
    assert first["headers"] == [{"key": "origin", "value": {"text": "test"}}]
    error = first["error"]
    assert (error["topic"], error["partition"], error["offset"], error["stage"]) == (topic, "0", "1", "VALUE_CONVERTER")
    assert error["exception"].endswith("DataError") and "schema" in error["message"] and error["stacktrace"]
    assert first["redriven"] == 0 and page["next_offset"] == 1 and page["topic"] == dlq
    second = _dlq_page(worker, name, offset=1)
    assert [r["key"] for r in second["records"]] == [{"text": "k3"}] and second["next_offset"] is None

    # Sent back while still poisonous, they fail again and return counted; the loop guard keeps them then.
    assert _redrive(worker, name, 0, 1, max_redrives=1) == {"redriven": 2, "topics": {topic: 2}, "skipped": []}
    again = _dlq_end(worker, name, 4)
    assert [r["redriven"] for r in _dlq_page(worker, name, offset=2)["records"]] == [1, 1]
    assert again["partitions"][0]["end"] == 4
    held = _redrive(worker, name, 2, 3, max_redrives=1)
    assert held["redriven"] == 0 and [s["offset"] for s in held["skipped"]] == [2, 3]
    assert "redriven 1 time(s) already" in held["skipped"][0]["reason"]

    # The sink fixed (plain JSON accepted), the plain record goes back and is written; the garbage stays.
    fixed = json_sink_config(topic, out, **dlq_keys, **{"value.converter.schemas.enable": "false"})
    assert httpx.put(f"{worker.url}/connectors/{name}/config", json=fixed, timeout=10).status_code == 200
    assert _redrive(worker, name, 2, 2, max_redrives=3)["redriven"] == 1
    wait_for(lambda: len(lines(out)) >= 4, what="the redriven record written")
    assert "plain" in lines(out)[3] and lines(out)[:3] == ["one", "two", "three"]


def test_a_dlq_request_names_what_it_cannot_do(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic = unique_topic_name("nodlq")
    create(worker, f"plain-{topic}", json_sink_config(topic, tmp_path / "out.txt"))
    r = httpx.get(f"{worker.url}/connectors/plain-{topic}/dlq", timeout=10)
    assert r.status_code == 400 and "has no dead letter queue" in r.json()["message"]
    source = source_dlq_config(tmp_path / "in.txt", topic, unique_topic_name("src-dlq"))
    create(worker, f"src-{topic}", source)
    body = {"from_offset": 0, "to_offset": 0}
    r = httpx.post(f"{worker.url}/connectors/src-{topic}/dlq/redrive", json=body, timeout=10)
    assert r.status_code == 400 and "is a source" in r.json()["message"]
    assert httpx.get(f"{worker.url}/connectors/missing/dlq", timeout=10).status_code == 404
