"""Topic → OpenSearch through a real worker process, a real Kafka broker and a real OpenSearch node.

What a user checks: the documents in the index (ids, sources, counts), the index mapping, the
dead-letter topic, and the consumer group's committed offsets; and that a node restarted
mid-stream, or a topic replayed from the start, leaves exactly the documents it should. Keyed,
typed topics (JsonConverter with schemas) are written by the raw fast path and by the decoded path
into two indices, which must hold the same documents.
"""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.opensearch import OpenSearchNode
from tests.sizes import size

pytestmark = pytest.mark.integration

# By the Python path of the installed entry point (what the worker discovered at start).
ES_SINK = "sluice.connectors.sink.elasticsearch.connector.ElasticsearchSinkConnector"
SCHEMALESS_JSON = {
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
}
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


# -- helpers ------------------------------------------------------------------------------------


def _worker(tmp_path: Path, bootstrap: str) -> WorkerProcess:
    return WorkerProcess(tmp_path, bootstrap).start()


def _deploy(worker: WorkerProcess, name: str, config: dict[str, Any]) -> None:
    response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert response.status_code == 201, response.text
    worker.wait_running(name)


def _sink(opensearch: OpenSearchNode, topic: str, **extra: str) -> dict[str, str]:
    # A generous read timeout: the test machine is small and shared.
    return {
        "connector.class": ES_SINK,
        "topics": topic,
        "connection.url": opensearch.url,
        "read.timeout.ms": "30000",
        **extra,
    }


def _count(opensearch: OpenSearchNode, index: str) -> int:
    opensearch.request("POST", f"/{index}/_refresh")
    status, body = opensearch.request("GET", f"/{index}/_count")
    return int(body["count"]) if status == 200 else -1


def _wait_count(
    opensearch: OpenSearchNode, index: str, expected: int, worker: WorkerProcess, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    got = -1
    while time.monotonic() < deadline:
        got = _count(opensearch, index)
        if got == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"index {index} has {got} documents, expected {expected}\n{worker.log()}")


def _docs(opensearch: OpenSearchNode, index: str) -> dict[str, Any]:
    """Every document of ``index`` as ``{id: source}``."""
    opensearch.request("POST", f"/{index}/_refresh")
    status, body = opensearch.request("POST", f"/{index}/_search", {"size": 10000, "query": {"match_all": {}}})
    if status == 404:  # not created yet
        return {}
    assert status == 200, body
    return {hit["_id"]: hit["_source"] for hit in body["hits"]["hits"]}


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([KafkaTopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


def _wait_committed(bootstrap: str, group: str, topic: str, expected: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    got: list[int] = []
    while time.monotonic() < deadline:
        got = _committed(bootstrap, group, topic, len(expected))
        if got == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"committed offsets of {group} are {got}, expected {expected}")


def _envelope(schema: dict[str, Any], payload: Any) -> bytes:
    return orjson.dumps({"schema": schema, "payload": payload})


ORDER_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "name": "shop.Order",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int32"},
        {"field": "small", "type": "int8"},
        {"field": "big", "type": "int64"},
        {"field": "price", "type": "double"},
        {"field": "ratio", "type": "float"},
        {"field": "paid", "type": "boolean"},
        {"field": "note", "type": "string", "optional": True},
        {"field": "created", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
        {"field": "day", "type": "int32", "name": "org.apache.kafka.connect.data.Date", "version": 1},
        {
            "field": "address",
            "type": "struct",
            "fields": [{"field": "city", "type": "string"}, {"field": "zip", "type": "int32"}],
        },
        {"field": "tags", "type": "array", "items": {"type": "string"}},
    ],
}


def _order(i: int, note: str = "") -> dict[str, Any]:
    return {
        "id": i,
        "small": i % 100,
        "big": 10_000_000_000 + i,
        "price": i * 1.25,
        "ratio": 0.5,
        "paid": i % 2 == 0,
        "note": note or f"order {i}",
        "created": T0 + i * 86_400_000,  # one day apart
        "day": 19_675 + i,  # 2023-11-14 + i days
        "address": {"city": f"city-{i % 3}", "zip": 10_000 + i},
        "tags": ["a", f"t{i}"],
    }


# -- tests --------------------------------------------------------------------------------------


def test_insert_by_key_with_schema_mapping_and_tombstone_deletes(
    kafka: Any, opensearch: OpenSearchNode, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("EsOrders")  # upper case: the index name is lower-cased
    index = topic.lower()
    create_topic(bootstrap, topic, partitions=2)
    records = [OutgoingRecord(key=f"order-{i}", value=_envelope(ORDER_SCHEMA, _order(i))) for i in range(10)]
    # A later version of order-3 replaces it; order-4 is deleted by a tombstone.
    records.append(OutgoingRecord(key="order-3", value=_envelope(ORDER_SCHEMA, _order(3, note="updated"))))
    records.append(OutgoingRecord(key="order-4", value=None))
    produce(bootstrap, topic, records)
    worker = _worker(tmp_path, bootstrap)
    try:
        _deploy(
            worker,
            "es-orders",
            _sink(
                opensearch,
                topic,
                **{
                    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable": "true",
                    "behavior.on.null.values": "delete",
                },
            ),
        )
        _wait_count(opensearch, index, 9, worker)
        # Both partitions fully committed once everything consumed is in the index.
        consumed = consume_all(bootstrap, topic, expected_count=len(records))
        _wait_committed(
            bootstrap, "connect-es-orders", topic, [sum(1 for r in consumed if r.partition == p) for p in (0, 1)]
        )
        status, mapping = opensearch.request("GET", f"/{index}/_mapping")
        assert status == 200
        props = mapping[index]["mappings"]["properties"]
        assert props["id"]["type"] == "integer"
        assert props["small"]["type"] == "byte"
        assert props["big"]["type"] == "long"
        assert props["price"]["type"] == "double"
        assert props["ratio"]["type"] == "float"
        assert props["paid"]["type"] == "boolean"
        assert props["note"]["type"] == "text" and props["note"]["fields"]["keyword"]["type"] == "keyword"
        assert props["created"]["type"] == "date"
        assert props["day"]["type"] == "date"
        assert props["address"]["properties"] == {"city": props["note"], "zip": {"type": "integer"}}
        assert props["tags"] == props["note"]

        docs = _docs(opensearch, index)
        assert set(docs) == {f"order-{i}" for i in range(10) if i != 4}
        assert docs["order-3"]["note"] == "updated"
        assert docs["order-7"]["address"] == {"city": "city-1", "zip": 10_007}
        assert docs["order-7"]["big"] == 10_000_000_007
        assert docs["order-0"]["created"].startswith("2023-11-14T22:13:20")
        assert docs["order-0"]["day"] == "2023-11-14"
        # The dates are dates: a range query finds the orders created from 2023-11-20 on.
        status, body = opensearch.request(
            "POST", f"/{index}/_search", {"query": {"range": {"created": {"gte": "2023-11-20T00:00:00Z"}}}, "size": 100}
        )
        assert status == 200
        assert sorted(h["_id"] for h in body["hits"]["hits"]) == [f"order-{i}" for i in range(6, 10)]
        status, body = opensearch.request(
            "POST", f"/{index}/_search", {"query": {"range": {"day": {"lt": "2023-11-16"}}}}
        )
        assert sorted(h["_id"] for h in body["hits"]["hits"]) == ["order-0", "order-1"]
    finally:
        worker.stop()


TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
#: A value schema with every Connect logical type and the primitives (``typed_v2`` follows it
#: mid-topic: a field added, one dropped, one made optional).
TYPED_V1: dict[str, Any] = {
    "type": "struct",
    "name": "shop.Typed",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "amount", "type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
         "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "12"}},
        {"field": "rate", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "version": 1, "parameters": {"scale": "6"}},
        {"field": "created", "type": "int64", "optional": False, "name": TIMESTAMP, "version": 1},
        {"field": "day", "type": "int32", "optional": False, "name": "org.apache.kafka.connect.data.Date", "version": 1},
        {"field": "at", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time", "version": 1},
        {"field": "qty", "type": "int16", "optional": False},
        {"field": "tiny", "type": "int8", "optional": False},
        {"field": "ratio", "type": "float", "optional": False},
        {"field": "score", "type": "double", "optional": True},
        {"field": "paid", "type": "boolean", "optional": False},
        {"field": "code", "type": "string", "optional": False},
        {"field": "note", "type": "string", "optional": True},
        {"field": "region", "type": "string", "optional": True, "default": "eu"},
        {"field": "blob", "type": "bytes", "optional": True},
    ],
}
TYPED_V2: dict[str, Any] = {
    **TYPED_V1,
    "fields": [f for f in TYPED_V1["fields"] if f["field"] != "blob"]
    + [{"field": "status", "type": "string", "optional": True}],
}
INT64_KEY: dict[str, Any] = {"type": "int64", "optional": False}
# 1900, just before 1970, the epoch, past 2038 (int32 seconds), 2100.
STAMPS = [-2_208_988_800_000, -1, 0, 2_147_483_648_001, 4_102_444_800_123]
DAYS = [-25_567, -1, 0, 24_856, 47_482]
TIMES = [80, 45_296_789, 0, 86_399_999, None]


def _decimal(unscaled: int) -> str:
    """Connect's Decimal bytes as JsonConverter writes them (base64 of the two's complement)."""
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _typed(i: int, schema: dict[str, Any]) -> bytes:
    payload: dict[str, Any] = {
        "id": i,
        "amount": _decimal((i * 7_919) % 20_000_000 - 10_000_000),  # half negative
        "rate": None if i % 5 == 0 else _decimal(-(i**3) - 1),
        "created": STAMPS[i % 5] + i,
        "day": DAYS[i % 5],
        "at": TIMES[i % 5],
        "qty": (i * 331) % 65_536 - 32_768,
        "tiny": i % 256 - 128,
        "ratio": [0.5, -1.25, 3.0e38, 1.0e-7, 0.0][i % 5],
        "score": None if i % 7 == 0 else [i / 7, -1e21, 1.0e-7, 12345678.9][i % 4],
        "paid": i % 2 == 0,
        "code": f"SKU-{i:010d}-" + "abcdefghijklmnopqrstuvwxyz"[: 25],
        "note": None if i % 4 == 0 else ["plain", 'a "quote", \\ and \n', "é€😀", "\u001b"][i % 4],
        "region": None if i % 3 == 0 else "us",  # null: the default
        "blob": base64.b64encode(bytes(range(i % 9))).decode(),
        "status": "new" if i % 2 else None,
    }
    names = {f["field"] for f in schema["fields"]}
    return _envelope(schema, {k: v for k, v in payload.items() if k in names})


def test_typed_keyed_topic_fast_and_decoded_paths_index_the_same_documents(
    kafka: Any, opensearch: OpenSearchNode, tmp_path: Path
) -> None:
    """One topic of JsonConverter envelopes (keys an int64 with its schema, values of every
    logical type, nulls, defaults, a tombstone, a schema change) written by two connectors: one as
    users run it (raw values and keys, the fast path) and one through a RegexRouter (a transform
    that does not keep raw values: the decoded path) into ``<topic>-decoded``."""
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("estyped")
    create_topic(bootstrap, topic, partitions=2)
    records = []
    for i in range(240):
        key = _envelope(INT64_KEY, i % 200)  # keys 0-39 come again, with the second schema
        value = None if i in (150, 205, 239) else _typed(i, TYPED_V1 if i < 120 else TYPED_V2)
        records.append(OutgoingRecord(key=key, value=value))
    produce(bootstrap, topic, records)
    converters = {
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "behavior.on.null.values": "delete",
        "consumer.override.max.poll.records": "50",
    }
    decoded = {
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)",
        "transforms.route.replacement": "$1-decoded",
    }
    configs = {
        "es-typed-fast": _sink(opensearch, topic, **converters),
        "es-typed-decoded": _sink(opensearch, topic, **converters, **decoded),
    }
    worker = _worker(tmp_path, bootstrap)
    try:
        for name, config in configs.items():  # both at once: their tasks start side by side
            response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
            assert response.status_code == 201, response.text
        for name in configs:
            worker.wait_running(name)
        consumed = consume_all(bootstrap, topic, expected_count=len(records))
        counts = [sum(1 for r in consumed if r.partition == p) for p in (0, 1)]
        for name in configs:
            _wait_committed(bootstrap, f"connect-{name}", topic, counts)
        fast, slow = _docs(opensearch, topic), _docs(opensearch, f"{topic}-decoded")
        # Keys 5 and 39 deleted by tombstones; 150's tombstone came before any document.
        assert set(fast) == {str(k) for k in range(200)} - {"5", "39", "150"}
        for doc_id, doc in slow.items():
            assert fast[doc_id] == doc, doc_id
        assert fast == slow
        mappings = [opensearch.request("GET", f"/{index}/_mapping")[1] for index in (topic, f"{topic}-decoded")]
        assert mappings[0][topic] == mappings[1][f"{topic}-decoded"]
        # What the documents hold: decimals as numbers, timestamps and times as text, defaults.
        assert fast["43"]["amount"] == (43 * 7_919 - 10_000_000) / 100
        assert fast["43"]["created"] == "2038-01-19T03:14:08.044000+00:00"
        assert fast["40"]["created"] == "1900-01-01T00:00:00.040000+00:00" and fast["41"]["day"] == "1969-12-31"
        assert fast["120"]["at"] == "00:00:00.080000" and "blob" not in fast["120"]
        assert fast["42"]["region"] == "eu" and fast["43"]["region"] == "us" and fast["44"]["note"] is None
        assert fast["120"]["status"] is None and "status" not in fast["40"]
    finally:
        worker.stop()


def test_upsert_merges_partial_documents(kafka: Any, opensearch: OpenSearchNode, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("esupsert")
    create_topic(bootstrap, topic, partitions=1)
    produce(
        bootstrap,
        topic,
        [
            OutgoingRecord(key="u1", value=orjson.dumps({"name": "Ada", "visits": 1})),
            OutgoingRecord(key="u2", value=orjson.dumps({"name": "Bob"})),
            OutgoingRecord(key="u1", value=orjson.dumps({"visits": 2, "city": "London"})),
        ],
    )
    worker = _worker(tmp_path, bootstrap)
    try:
        _deploy(
            worker,
            "es-upsert",
            _sink(opensearch, topic, **SCHEMALESS_JSON, **{"write.method": "upsert", "schema.ignore": "true"}),
        )
        _wait_committed(bootstrap, "connect-es-upsert", topic, [3])
        docs = _docs(opensearch, topic)
        assert docs == {"u1": {"name": "Ada", "visits": 2, "city": "London"}, "u2": {"name": "Bob"}}
    finally:
        worker.stop()


def test_external_versions_from_a_header_keep_the_newest_document(
    kafka: Any, opensearch: OpenSearchNode, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("esversion")
    create_topic(bootstrap, topic, partitions=1)
    # Versions from the source (say, a database LSN): a late-arriving older version is ignored.
    produce(
        bootstrap,
        topic,
        [
            OutgoingRecord(key="a", value=orjson.dumps({"v": "lsn-20"}), headers=[("lsn", b"20")]),
            OutgoingRecord(key="a", value=orjson.dumps({"v": "lsn-10"}), headers=[("lsn", b"10")]),
            OutgoingRecord(key="b", value=orjson.dumps({"v": "lsn-5"}), headers=[("lsn", b"5")]),
        ],
    )
    worker = _worker(tmp_path, bootstrap)
    try:
        _deploy(
            worker,
            "es-version",
            _sink(opensearch, topic, **SCHEMALESS_JSON, **{"schema.ignore": "true", "external.version.header": "lsn"}),
        )
        _wait_committed(bootstrap, "connect-es-version", topic, [3])
        assert _docs(opensearch, topic) == {"a": {"v": "lsn-20"}, "b": {"v": "lsn-5"}}
        status, body = opensearch.request("GET", f"/{topic}/_doc/a")
        assert status == 200 and body["_version"] == 20
        worker.wait_running("es-version")
    finally:
        worker.stop()


def test_key_ignore_ids_and_replaying_the_topic_leaves_the_same_documents(
    kafka: Any, opensearch: OpenSearchNode, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("esreplay")
    create_topic(bootstrap, topic, partitions=3)
    produce(
        bootstrap,
        topic,
        [
            OutgoingRecord(key=None, value=orjson.dumps({"n": i, "even": i % 2 == 0}), partition=i % 3)
            for i in range(300)
        ],
    )
    worker = _worker(tmp_path, bootstrap)
    try:
        config = _sink(opensearch, topic, **SCHEMALESS_JSON, **{"key.ignore": "true", "schema.ignore": "true"})
        _deploy(worker, "es-replay-1", config)
        _wait_count(opensearch, topic, 300, worker)
        _wait_committed(bootstrap, "connect-es-replay-1", topic, [100, 100, 100])
        first = _docs(opensearch, topic)
        # id = topic+partition+offset; partition p offset o holds n = 3*o + p.
        assert first == {
            f"{topic}+{p}+{o}": {"n": 3 * o + p, "even": (3 * o + p) % 2 == 0} for p in range(3) for o in range(100)
        }

        # A second connector (its own consumer group) replays the whole topic into the same index.
        _deploy(worker, "es-replay-2", config)
        _wait_committed(bootstrap, "connect-es-replay-2", topic, [100, 100, 100])
        assert _docs(opensearch, topic) == first
        assert _count(opensearch, topic) == 300
    finally:
        worker.stop()


def test_keyed_replay_is_idempotent(kafka: Any, opensearch: OpenSearchNode, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("eskeyreplay")
    create_topic(bootstrap, topic, partitions=2)
    # Ten keys, each written five times; the last write of each key wins, on any replay.
    produce(bootstrap, topic, [OutgoingRecord(key=f"k{i % 10}", value=orjson.dumps({"v": i})) for i in range(50)])
    worker = _worker(tmp_path, bootstrap)
    try:
        config = _sink(opensearch, topic, **SCHEMALESS_JSON, **{"schema.ignore": "true", "max.in.flight.requests": "3"})
        _deploy(worker, "es-keyreplay-1", config)
        expected = {f"k{k}": {"v": 40 + k} for k in range(10)}
        deadline = time.monotonic() + 60
        while _docs(opensearch, topic) != expected and time.monotonic() < deadline:
            time.sleep(0.3)
        assert _docs(opensearch, topic) == expected
        _deploy(worker, "es-keyreplay-2", config)
        committed = [
            sum(1 for r in consume_all(bootstrap, topic, expected_count=50) if r.partition == p) for p in range(2)
        ]
        _wait_committed(bootstrap, "connect-es-keyreplay-2", topic, committed)
        assert _docs(opensearch, topic) == expected
    finally:
        worker.stop()


def test_malformed_document_goes_to_dlq_and_the_rest_are_indexed(
    kafka: Any, opensearch: OpenSearchNode, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("esmalformed")
    dlq = unique_topic_name("esdlq")
    create_topic(bootstrap, topic, partitions=1)
    create_topic(bootstrap, dlq, partitions=1)
    # The index exists with "n" an integer, so a text "n" is refused by the server (HTTP 400).
    status, body = opensearch.request("PUT", f"/{topic}", {"mappings": {"properties": {"n": {"type": "integer"}}}})
    assert status == 200, body
    values = [orjson.dumps({"n": i}) for i in range(20)]
    values[7] = orjson.dumps({"n": "not a number"})
    produce(bootstrap, topic, [OutgoingRecord(key=f"id{i}", value=v) for i, v in enumerate(values)])
    worker = _worker(tmp_path, bootstrap)
    try:
        _deploy(
            worker,
            "es-malformed",
            _sink(
                opensearch,
                topic,
                **SCHEMALESS_JSON,
                **{
                    "schema.ignore": "true",
                    "behavior.on.malformed.documents": "warn",
                    "errors.tolerance": "all",
                    "errors.deadletterqueue.topic.name": dlq,
                    "errors.deadletterqueue.topic.replication.factor": "1",
                    "errors.deadletterqueue.context.headers.enable": "true",
                },
            ),
        )
        _wait_committed(bootstrap, "connect-es-malformed", topic, [20])
        assert set(_docs(opensearch, topic)) == {f"id{i}" for i in range(20) if i != 7}
        dead = consume_all(bootstrap, dlq, expected_count=1)
        assert len(dead) == 1
        assert dead[0].key == b"id7"
        assert orjson.loads(dead[0].value or b"null") == {"n": "not a number"}
        headers = dict(dead[0].headers)
        assert headers["__connect.errors.offset"] == b"7"
        assert headers["__connect.errors.stage"] == b"TASK_PUT"
        assert b"mapper_parsing_exception" in (headers["__connect.errors.exception.message"] or b"")
        # The task keeps running.
        worker.wait_running("es-malformed")
    finally:
        worker.stop()


def test_data_stream_mode_writes_with_timestamps(kafka: Any, opensearch: OpenSearchNode, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("esstream")
    create_topic(bootstrap, topic, partitions=1)
    produce(
        bootstrap,
        topic,
        [
            OutgoingRecord(key=f"e{i}", value=orjson.dumps({"level": "info", "i": i}), timestamp=T0 + i)
            for i in range(25)
        ],
    )
    worker = _worker(tmp_path, bootstrap)
    try:
        _deploy(
            worker,
            "es-stream",
            _sink(
                opensearch,
                topic,
                **SCHEMALESS_JSON,
                **{"schema.ignore": "true", "data.stream.type": "LOGS", "data.stream.dataset": "sluice"},
            ),
        )
        stream = f"logs-sluice-{topic}"
        _wait_count(opensearch, stream, 25, worker)
        status, body = opensearch.request("GET", f"/_data_stream/{stream}")
        assert status == 200 and body["data_streams"][0]["name"] == stream
        docs = _docs(opensearch, stream)
        assert docs["e3"] == {"@timestamp": T0 + 3, "level": "info", "i": 3}
    finally:
        worker.stop()


def test_node_restart_mid_stream_loses_no_document(kafka: Any, private_opensearch: OpenSearchNode, tmp_path: Path) -> None:
    """The node stops once the first half's documents are being indexed, and the second half arrives
    while it is down; once it is back, every document is there and every offset committed.

    The small size (6,000 records, 3,000 per half) still crosses every boundary the test relies
    on: each half is several ``batch.size`` (500) bulk requests over 2 partitions, and the half
    that arrives while the node is down is more than ``max.buffered.records`` (2,000), so the task
    retries its requests, fills its buffer, pauses its partitions and resumes them once the retried
    requests land. ``SLUICE_TEST_FULL_SIZES=1`` runs the original 20,000 records. The node is the
    test's own: the session's is shared by the other pytest workers."""
    opensearch = private_opensearch
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("esrestart")
    create_topic(bootstrap, topic, partitions=2)
    total = size(6_000, 20_000)
    produce(bootstrap, topic, [OutgoingRecord(key=f"k{i}", value=orjson.dumps({"i": i})) for i in range(total // 2)])
    worker = _worker(tmp_path, bootstrap)
    try:
        _deploy(
            worker,
            "es-restart",
            _sink(
                opensearch,
                topic,
                **SCHEMALESS_JSON,
                **{
                    "schema.ignore": "true",
                    "batch.size": "500",
                    "max.buffered.records": "2000",
                    # Enough retries to outlast a restart (about 15 s here); the backoff caps at 10 s.
                    "max.retries": "40",
                    "retry.backoff.ms": "200",
                },
            ),
        )
        deadline = time.monotonic() + 60
        while _count(opensearch, topic) <= 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        # The second half arrives while the node is down.
        producer = threading.Thread(
            target=produce,
            args=(
                bootstrap,
                topic,
                [OutgoingRecord(key=f"k{i}", value=orjson.dumps({"i": i})) for i in range(total // 2, total)],
            ),
        )
        indexed_before = _count(opensearch, topic)
        assert 0 < indexed_before < total
        opensearch.stop(keep_dir=True)
        producer.start()
        time.sleep(3)
        opensearch.start()
        producer.join(60)
        _wait_count(opensearch, topic, total, worker, timeout=180)
        docs = _docs_ids(opensearch, topic, total)
        assert docs == {f"k{i}" for i in range(total)}
        worker.wait_running("es-restart")
        committed_total = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            committed_total = sum(o for o in _committed(bootstrap, "connect-es-restart", topic, 2) if o > 0)
            if committed_total == total:
                break
            time.sleep(0.5)
        assert committed_total == total
    finally:
        worker.stop()
        if not opensearch.is_running():
            opensearch.start()


def _docs_ids(opensearch: OpenSearchNode, index: str, expected: int) -> set[str]:
    """The ids of every document (paged with ``search_after`` on the ``i`` field)."""
    opensearch.request("POST", f"/{index}/_refresh")
    ids: set[str] = set()
    after: list[Any] | None = None
    while True:
        query: dict[str, Any] = {"size": 5000, "_source": False, "sort": [{"i": "asc"}], "query": {"match_all": {}}}
        if after is not None:
            query["search_after"] = after
        status, body = opensearch.request("POST", f"/{index}/_search", query)
        assert status == 200, body
        hits = body["hits"]["hits"]
        if not hits:
            return ids
        ids.update(h["_id"] for h in hits)
        after = hits[-1]["sort"]
