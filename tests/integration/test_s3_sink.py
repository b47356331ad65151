"""Topic → S3 through a real worker process, a real Kafka broker and a real S3 server (S3Proxy).

What a user checks: the objects in the bucket (names and contents), the consumer group's
committed offsets, and that a worker killed mid-stream leaves each record in exactly one object.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import threading
import time
from pathlib import Path
from typing import Any

import fastavro
import httpx
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api.schema import (
    FLOAT64_SCHEMA,
    INT16_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_BOOLEAN_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Date,
    Decimal,
    Schema,
    Timestamp,
)
from sluice.converters.avro import AvroConverter
from sluice.converters.json import JsonConverter
from sluice.deploy.schema_registry import SchemaRegistryServer
from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration

# Named by the Python path of its entry point (alias io.confluent.connect.s3.S3SinkConnector).
S3_SINK = "sluice.connectors.sink.s3.connector.S3SinkConnector"
JSON_VALUES: dict[str, Any] = {
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
}
T0 = 1_700_000_000_000


def _objects(s3: S3Server, bucket: str, prefix: str = "") -> dict[str, bytes]:
    client = s3.client()
    out: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            if item["Key"].endswith("/"):  # S3Proxy's filesystem backend lists directories too
                continue
            try:
                out[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            except client.exceptions.NoSuchKey:
                # Listed while the sink was replacing it (the filesystem backend writes a temporary
                # name and renames): the callers poll, so the next listing sees the settled object.
                continue
    return out


def _wait_for_keys(
    s3: S3Server, bucket: str, expected: set[str], worker: WorkerProcess, timeout: float = 60
) -> dict[str, bytes]:
    deadline = time.monotonic() + timeout
    found: dict[str, bytes] = {}
    while time.monotonic() < deadline:
        found = _objects(s3, bucket)
        if expected <= set(found):
            return found
        time.sleep(0.3)
    raise AssertionError(f"objects {sorted(expected - set(found))} missing; have {sorted(found)}\n{worker.log()}")


def _committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([KafkaTopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


def _wait_committed(bootstrap: str, group: str, topic: str, expected: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    got: list[int] = []
    while time.monotonic() < deadline:
        got = _committed(bootstrap, group, topic, len(expected))
        if got == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"committed offsets of {group} are {got}, expected {expected}")


def _worker(tmp_path: Path, bootstrap: str, **settings: str) -> WorkerProcess:
    merged: dict[str, Any] = {**JSON_VALUES, **settings}
    return WorkerProcess(tmp_path, bootstrap, **merged)


def _deploy(worker: WorkerProcess, name: str, config: dict[str, Any]) -> None:
    response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert response.status_code == 201, response.text
    worker.wait_running(name)


def _sink_config(s3: S3Server, bucket: str, topic: str, **extra: str) -> dict[str, str]:
    return {"connector.class": S3_SINK, "topics": topic, **s3.connector_config(bucket), **extra}


def _json_lines(data: bytes) -> list[Any]:
    return [orjson.loads(line) for line in data.splitlines() if line]


def test_json_default_partitioner_writes_documented_layout_and_commits_after_upload(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3json")
    create_topic(bootstrap, topic, partitions=2)
    produce(
        bootstrap,
        topic,
        [
            OutgoingRecord(key=f"k{i}", value=orjson.dumps({"id": i, "name": f"n{i}"}), partition=i % 2)
            for i in range(200)
        ],
    )
    worker = _worker(tmp_path, bootstrap).start()
    try:
        _deploy(
            worker,
            "s3-json",
            _sink_config(
                s3,
                s3_bucket,
                topic,
                **{"format.class": "io.confluent.connect.s3.format.json.JsonFormat", "flush.size": "50"},
            ),
        )
        expected = {f"topics/{topic}/partition={p}/{topic}+{p}+{o:010d}.json" for p in (0, 1) for o in (0, 50)}
        objects = _wait_for_keys(s3, s3_bucket, expected, worker)
        assert set(objects) == expected
        for p in (0, 1):
            for start in (0, 50):
                rows = _json_lines(objects[f"topics/{topic}/partition={p}/{topic}+{p}+{start:010d}.json"])
                # Partition p holds ids p, p+2, ...; its offset o is id 2*o+p.
                assert rows == [{"id": 2 * o + p, "name": f"n{2 * o + p}"} for o in range(start, start + 50)]
        _wait_committed(bootstrap, "connect-s3-json", topic, [100, 100])
    finally:
        worker.stop()


def test_parquet_time_based_partitioner_buckets_by_record_time(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3parquet")
    create_topic(bootstrap, topic, partitions=1)
    hour = 3_600_000
    # Ten records in each of three hours, then one in a fourth hour, which closes the third.
    times = [T0 + h * hour + i * 1000 for h in range(3) for i in range(10)] + [T0 + 3 * hour]
    produce(
        bootstrap,
        topic,
        [
            OutgoingRecord(value=orjson.dumps({"id": i, "amount": i * 1.5, "ok": i % 2 == 0}), timestamp=ts)
            for i, ts in enumerate(times)
        ],
    )
    worker = _worker(tmp_path, bootstrap).start()
    try:
        config = _sink_config(
            s3,
            s3_bucket,
            topic,
            **{
                "format.class": "io.confluent.connect.s3.format.parquet.ParquetFormat",
                "parquet.codec": "zstd",
                "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
                "path.format": "'dt'=YYYY-MM-dd/'hour'=HH",
                "partition.duration.ms": str(hour),
                "rotate.interval.ms": str(hour),
                "timestamp.extractor": "Record",
                "timezone": "UTC",
                "locale": "en-US",
                "flush.size": "1000",
            },
        )
        _deploy(worker, "s3-parquet", config)
        expected = {
            f"topics/{topic}/dt=2023-11-14/hour=22/{topic}+0+0000000000.parquet",
            f"topics/{topic}/dt=2023-11-14/hour=23/{topic}+0+0000000010.parquet",
            f"topics/{topic}/dt=2023-11-15/hour=00/{topic}+0+0000000020.parquet",
        }
        objects = _wait_for_keys(s3, s3_bucket, expected, worker)
        assert set(objects) == expected  # the fourth hour's object is still open
        for key in sorted(expected):
            table = pq.read_table(io.BytesIO(objects[key]))
            start = int(key.rsplit("+", 1)[1].split(".")[0])
            assert table.to_pylist() == [
                {"id": i, "amount": i * 1.5, "ok": i % 2 == 0} for i in range(start, start + 10)
            ]
            assert pq.ParquetFile(io.BytesIO(objects[key])).metadata.row_group(0).column(0).compression == "ZSTD"
        # Only what is in completed objects is committed: record 30 is buffered, so 30, not 31.
        _wait_committed(bootstrap, "connect-s3-parquet", topic, [30])
        time.sleep(2)
        assert _committed(bootstrap, "connect-s3-parquet", topic) == [30]
    finally:
        worker.stop()


def test_committed_offset_waits_for_the_upload(kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3commit")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [OutgoingRecord(value=orjson.dumps({"i": i})) for i in range(150)])
    worker = _worker(tmp_path, bootstrap, **{"offset.flush.interval.ms": "300"}).start()
    try:
        _deploy(
            worker, "s3-commit", _sink_config(s3, s3_bucket, topic, **{"format.class": "json", "flush.size": "100"})
        )
        first = f"topics/{topic}/partition=0/{topic}+0+0000000000.json"
        _wait_for_keys(s3, s3_bucket, {first}, worker)
        _wait_committed(bootstrap, "connect-s3-commit", topic, [100])
        time.sleep(1.5)  # several commit intervals: records 100..149 are consumed but not uploaded
        assert _committed(bootstrap, "connect-s3-commit", topic) == [100]
        assert set(_objects(s3, s3_bucket)) == {first}
        produce(bootstrap, topic, [OutgoingRecord(value=orjson.dumps({"i": i})) for i in range(150, 200)])
        _wait_for_keys(s3, s3_bucket, {first, f"topics/{topic}/partition=0/{topic}+0+0000000100.json"}, worker)
        _wait_committed(bootstrap, "connect-s3-commit", topic, [200])
    finally:
        worker.stop()


def test_sigkill_mid_stream_rewrites_identical_objects_and_keeps_each_record_once(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3kill")
    create_topic(bootstrap, topic, partitions=2)
    total, flush = 6000, 100
    config = _sink_config(
        s3,
        s3_bucket,
        topic,
        **{"format.class": "json", "flush.size": str(flush), "s3.compression.type": "gzip", "store.kafka.keys": "true"},
    )
    (tmp_path / "sink.json").write_bytes(orjson.dumps({"name": "s3-kill", "config": config}))

    def feed() -> None:  # a live producer, so the kill lands while the sink is writing
        for start in range(0, total, 200):
            produce(
                bootstrap,
                topic,
                [
                    OutgoingRecord(key=f"k{i}", value=orjson.dumps({"i": i}), partition=i % 2)
                    for i in range(start, start + 200)
                ],
            )
            time.sleep(0.05)

    feeder = threading.Thread(target=feed, daemon=True)
    worker = _worker(tmp_path, bootstrap, **{"offset.flush.interval.ms": "400"})
    worker.start(tmp_path / "sink.json")
    feeder.start()
    try:
        deadline = time.monotonic() + 60
        while len(_objects(s3, s3_bucket)) < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        before_kill = _objects(s3, s3_bucket)
        assert len(before_kill) >= 10, worker.log()
        worker.kill()
        feeder.join(60)
        worker = _worker(tmp_path, bootstrap, **{"offset.flush.interval.ms": "400"})
        worker.start(tmp_path / "sink.json")
        per_partition = total // 2
        expected = {
            f"topics/{topic}/partition={p}/{topic}+{p}+{o:010d}{ext}"
            for p in (0, 1)
            for o in range(0, per_partition, flush)
            for ext in (".json.gz", ".keys.json.gz")
        }
        after = _wait_for_keys(s3, s3_bucket, expected, worker, timeout=120)
        assert set(after) == expected
        # Every object written before the kill was rewritten byte for byte (or left alone).
        for key, data in before_kill.items():
            assert after[key] == data, key
        import gzip

        seen: list[int] = []
        for key in sorted(k for k in after if not k.endswith(".keys.json.gz")):
            values = _json_lines(gzip.decompress(after[key]))
            keys = _json_lines(gzip.decompress(after[key.replace(".json.gz", ".keys.json.gz")]))
            assert len(values) == flush
            assert keys == [f"k{v['i']}" for v in values]
            seen.extend(v["i"] for v in values)
        assert sorted(seen) == list(range(total))  # each record exactly once, none missing
        _wait_committed(bootstrap, "connect-s3-kill", topic, [per_partition, per_partition])
    finally:
        worker.stop()


def test_json_pass_through_archives_the_consumed_bytes_and_bad_records_still_reach_the_dlq(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """JsonConverter (schemas off) → JSON lines writes each value's consumed bytes unchanged:
    spacing, key order and number spelling survive. Tombstones and JSON nulls are skipped with
    behavior.on.null.values=ignore, and a value that spans lines is put on one line. A record that
    is not JSON still fails conversion: it goes to the dead letter queue and its neighbours to
    the bucket."""
    bootstrap = kafka.bootstrap_servers
    clean, mixed, dlq = unique_topic_name("s3raw"), unique_topic_name("s3bad"), unique_topic_name("s3dlq")
    for name in (clean, mixed, dlq):
        create_topic(bootstrap, name)
    values: list[bytes | None] = [b'{"b": 2,  "a": 1.50}', b'{"s":"\\u00e9t\\u00e9 \xc3\xa9"}', None, b"null"]
    values += [b'{\n  "pretty": true\n}', b"[1, 2,3]", b"12345678901234567890", b'"text"', b'{"i":9}']
    produce(bootstrap, clean, [OutgoingRecord(key=f"k{i}", value=v) for i, v in enumerate(values)])
    produce(bootstrap, mixed, [OutgoingRecord(value=v) for v in (b'{"n": 0}', b"not json", b'{"n": 2}')])
    worker = _worker(tmp_path, bootstrap).start()
    try:
        common = {"format.class": "json", "behavior.on.null.values": "ignore"}
        # 9 records, 2 of them null: the other 7 fill one object.
        _deploy(worker, "s3-raw", _sink_config(s3, s3_bucket, clean, **common, **{"flush.size": "7"}))
        _deploy(
            worker,
            "s3-bad",
            _sink_config(
                s3,
                s3_bucket,
                mixed,
                **common,
                **{
                    "flush.size": "2",
                    "errors.tolerance": "all",
                    "errors.deadletterqueue.topic.name": dlq,
                    "errors.deadletterqueue.topic.replication.factor": "1",
                },
            ),
        )
        raw_key = f"topics/{clean}/partition=0/{clean}+0+0000000000.json"
        bad_key = f"topics/{mixed}/partition=0/{mixed}+0+0000000000.json"
        objects = _wait_for_keys(s3, s3_bucket, {raw_key, bad_key}, worker)
        kept = [values[0], values[1], b'{"pretty":true}', *values[5:]]
        assert objects[raw_key] == b"\n".join(kept) + b"\n"  # type: ignore[arg-type]
        assert _json_lines(objects[bad_key]) == [{"n": 0}, {"n": 2}]
        assert [r.value for r in consume_all(bootstrap, dlq, 1)] == [b"not json"]
        _wait_committed(bootstrap, "connect-s3-raw", clean, [9])
        _wait_committed(bootstrap, "connect-s3-bad", mixed, [3])
    finally:
        worker.stop()


def test_parquet_takes_values_unchecked_and_a_bad_one_still_reaches_the_dlq(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """Parquet parses every value into columns itself, so the runtime hands them over raw and
    unchecked. A value that is not JSON surfaces only when its row group is parsed, on an upload
    thread, after its batch was accepted: the sink then drops the partition's open objects and
    gives it back (``UnusableRawValues``); the runtime consumes it again, decoded, so the record
    goes to the DLQ under errors.tolerance=all and the objects are those the decoded path writes,
    each record once."""
    bootstrap = kafka.bootstrap_servers
    bad_values = [b"not json", b'{"n":NaN}', b'{"n":1e999}', b'{"s":"\xff"}', b'{"n":13']
    topics = [unique_topic_name("s3pqbad") for _ in bad_values]
    dlq = unique_topic_name("s3pqdlq")
    create_topic(bootstrap, dlq)
    for topic, bad in zip(topics, bad_values, strict=True):
        create_topic(bootstrap, topic)
        values = [bad if i == 13 else orjson.dumps({"n": i, "s": f"v{i}"}) for i in range(31)]
        produce(bootstrap, topic, [OutgoingRecord(value=v) for v in values])
    worker = _worker(tmp_path, bootstrap).start()
    try:
        for i, topic in enumerate(topics):
            config = _sink_config(
                s3,
                s3_bucket,
                topic,
                **{
                    "format.class": "parquet",
                    "flush.size": "10",
                    "s3.upload.threads": "2",
                    "errors.tolerance": "all",
                    "errors.deadletterqueue.topic.name": dlq,
                    "errors.deadletterqueue.topic.replication.factor": "1",
                },
            )
            _deploy(worker, f"s3-pq-bad-{i}", config)
        for i, topic in enumerate(topics):
            # 13 is dropped, so the second object holds 10-12 and 14-20 and the third 21-30.
            keys = {f"topics/{topic}/partition=0/{topic}+0+{start:010d}.parquet": start for start in (0, 10, 21)}
            objects = _wait_for_keys(s3, s3_bucket, set(keys), worker)
            assert {k for k in objects if k.startswith(f"topics/{topic}/")} == set(keys)
            rows = [
                row for key in sorted(keys, key=keys.get) for row in pq.read_table(io.BytesIO(objects[key])).to_pylist()
            ]
            assert rows == [{"n": n, "s": f"v{n}"} for n in range(31) if n != 13], bad_values[i]
            _wait_committed(bootstrap, f"connect-s3-pq-bad-{i}", topic, [31])
        assert sorted(r.value for r in consume_all(bootstrap, dlq, len(bad_values))) == sorted(bad_values)
        status = httpx.get(f"{worker.url}/connectors/s3-pq-bad-0/status", timeout=10).json()
        assert status["tasks"][0]["state"] == "RUNNING"
        log = worker.log(tail=1_000_000)
        # Every topic was given back: raw and unchecked, no check of the runtime's stopped a bad value first.
        assert all(f"could not use the raw values of {topic}-0 from offset 10" in log for topic in topics), log
    finally:
        worker.stop()


def test_an_avro_topic_archived_as_avro_files_keeps_confluents_schema(
    kafka: Any, s3: S3Server, s3_bucket: str, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    """AvroConverter in, AvroFormat out: the files' schema is the registry subject's schema."""
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3avro")
    create_topic(bootstrap, topic, partitions=1)
    row = Schema.struct(
        [
            ("id", INT64_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("price", Decimal.schema(2)),
            ("at", Timestamp.SCHEMA),
        ],
        name="shop.Sale",
    )
    rows = [
        {
            "id": i,
            "name": None if i % 3 == 0 else f"n{i}",
            "price": decimal.Decimal(i * 7).scaleb(-2),
            "at": dt.datetime.fromtimestamp((T0 + i * 1000) / 1000, dt.UTC),
        }
        for i in range(40)
    ]
    converter = AvroConverter()
    converter.configure({"schema.registry.url": schema_registry.url}, False)
    produce(bootstrap, topic, [OutgoingRecord(value=v) for v in converter.from_connect_batch(topic, [row] * 40, rows)])
    worker = _worker(
        tmp_path,
        bootstrap,
        **{
            "value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.schema.registry.url": schema_registry.url,
        },
    )
    worker.start()
    try:
        _deploy(
            worker,
            "s3-avro",
            _sink_config(
                s3,
                s3_bucket,
                topic,
                **{"format.class": "io.confluent.connect.s3.format.avro.AvroFormat", "flush.size": "20"},
            ),
        )
        expected = {f"topics/{topic}/partition=0/{topic}+0+{o:010d}.avro" for o in (0, 20)}
        objects = _wait_for_keys(s3, s3_bucket, expected, worker)
    finally:
        worker.stop()
    subject = httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions/latest").json()
    archived: list[Any] = []
    for offset in (0, 20):
        reader = fastavro.reader(io.BytesIO(objects[f"topics/{topic}/partition=0/{topic}+0+{offset:010d}.avro"]))
        file_schema = orjson.loads(reader.metadata["avro.schema"])
        # As with Confluent's converter, the subject's version became the schema's version on reading.
        assert file_schema == {**orjson.loads(subject["schema"]), "connect.version": subject["version"]}
        archived.extend(reader)
    assert archived == rows


#: A Connect user's worker: JsonConverter with schemas for keys and values.
ENVELOPES: dict[str, Any] = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "true",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "true",
}


def _typed_topic() -> tuple[list[OutgoingRecord], int]:
    """361 keyed records as a Connect producer with JsonConverter writes them (struct keys ``{id}``;
    values of every logical type at their edges: decimals negative, zero and at full precision,
    timestamps before 1970 and after 2038, dates, int16 extremes, a 40-byte text, nulls), the
    value schema gaining a field at offset 180, tombstones at 7, 8, 123 and 200, and at 300 a
    payload member the schema lacks; and the flush size that makes objects start at 0, 62, 122
    (rotated at the schema change), 180, 241 and 301."""
    fields = [
        ("id", INT64_SCHEMA),
        ("amount", Decimal.schema(2, precision=12)),
        ("created_at", Timestamp.SCHEMA),
        ("day", Date.SCHEMA),
        ("qty", INT16_SCHEMA),
        ("code", STRING_SCHEMA),
        ("score", FLOAT64_SCHEMA),
        ("note", OPTIONAL_STRING_SCHEMA),
    ]
    first = Schema.struct(fields, name="shop.Order")
    second = Schema.struct([*fields, ("paid", OPTIONAL_BOOLEAN_SCHEMA)], name="shop.Order")
    key_schema = Schema.struct([("id", INT64_SCHEMA)], name="shop.OrderKey")
    cents = [0, -1, 1, 99_999_999_999, -99_999_999_999, -12_345, 2**36, -(2**36)]
    times = [-1, 0, -2_208_988_800_000, 2_147_483_648_000, 4_102_444_800_000, -62_135_596_800_000]
    keys: list[Any] = []
    values: list[Any] = []
    for i in range(361):
        value = {
            "id": i,
            "amount": decimal.Decimal(cents[i % len(cents)] + i).scaleb(-2),
            "created_at": dt.datetime.fromtimestamp(times[i % len(times)] / 1000 + i, dt.UTC),
            "day": dt.date(1900, 1, 1) + dt.timedelta(days=i * 211),
            "qty": [-32768, 32767, 0, -1][i % 4] if i % 3 else i,
            "code": f"é-{i:06d}-" + "x" * 30,
            "score": i / 7 - 20,
            "note": None if i % 4 == 0 else f"note {i}",
        }
        if i >= 180:
            value["paid"] = None if i % 5 == 0 else i % 2 == 0
        keys.append({"id": i})
        values.append(None if i in (7, 8, 123, 200) else value)
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true"}, False)
    key_converter = JsonConverter()
    key_converter.configure({"schemas.enable": "true"}, True)
    schemas = [None if v is None else first if i < 180 else second for i, v in enumerate(values)]
    raw_values = converter.from_connect_batch("t", schemas, values)
    # A member the schema lacks, which decoding drops: neither fast path takes it as it is.
    raw_values[300] = raw_values[300].replace(b',"payload":{', b',"payload":{"extra":1,')  # type: ignore[union-attr]
    raw_keys = key_converter.from_connect_batch("t", [key_schema] * len(keys), keys)
    return [OutgoingRecord(key=k, value=v) for k, v in zip(raw_keys, raw_values, strict=True)], 60


def test_keyed_typed_envelopes_make_the_same_objects_on_the_fast_and_the_decoded_path(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """The topic a Connect user has (``_typed_topic``) archived by four connectors of one worker in
    Connect's small polls: JSON lines and Parquet, each by the fast path (JSON lines: the payloads'
    bytes; Parquet: typed columns) and decoded (a Filter that drops nothing: the runtime then
    hands over decoded values). Every object and ``.keys`` sidecar is the same, byte for byte. The
    fast connectors decoded only what they must: JSON lines the batch with the odd member and the
    one with the schema change, if a poll mixes schemas; Parquet the latter, having given the odd
    member's stretch back to be consumed again decoded (its row groups are read after the put)."""
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3typed")
    create_topic(bootstrap, topic)
    records, flush = _typed_topic()
    produce(bootstrap, topic, records)
    decoded = {
        "transforms": "none",
        "transforms.none.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.none.predicate": "never",
        "predicates": "never",
        "predicates.never.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.never.pattern": "no-such-topic",
    }
    worker = WorkerProcess(tmp_path, bootstrap, **ENVELOPES).start()
    try:
        r = httpx.put(f"{worker.url}/admin/loggers/sluice.connectors.sink.s3.batches", json={"level": "DEBUG"}, timeout=10)
        assert r.status_code == 200, r.text
        for fmt in ("json", "parquet"):
            for path in ("fast", "slow"):
                config = {
                    "format.class": fmt,
                    "flush.size": str(flush),
                    "topics.dir": f"{path}-{fmt}",
                    "behavior.on.null.values": "ignore",
                    "store.kafka.keys": "true",
                    "consumer.override.max.poll.records": "50",
                    **(decoded if path == "slow" else {}),
                }
                _deploy(worker, f"s3-{path}-{fmt}", _sink_config(s3, s3_bucket, topic, **config))
        starts = (0, 62, 122, 180, 241, 301)
        expected = {
            f"{path}-{fmt}/{topic}/partition=0/{topic}+0+{o:010d}{suffix}"
            for fmt in ("json", "parquet")
            for path in ("fast", "slow")
            for o in starts
            for suffix in (f".{fmt}", ".keys.json")
        }
        objects = _wait_for_keys(s3, s3_bucket, expected, worker)
        log = worker.log(tail=10_000_000)
    finally:
        worker.stop()
    assert set(objects) == expected
    for fmt in ("json", "parquet"):
        fast = {k.removeprefix(f"fast-{fmt}/"): v for k, v in objects.items() if k.startswith(f"fast-{fmt}/")}
        slow = {k.removeprefix(f"slow-{fmt}/"): v for k, v in objects.items() if k.startswith(f"slow-{fmt}/")}
        assert fast == slow, fmt
    lines = [_json_lines(objects[f"fast-json/{topic}/partition=0/{topic}+0+{o:010d}.json"]) for o in starts]
    assert [len(part) for part in lines] == [60, 60, 57, 60, 60, 60]
    assert lines[0][0]["amount"] == "AA==" and lines[0][1]["amount"] == "AA=="  # Confluent's BASE64 decimals
    table = pq.read_table(io.BytesIO(objects[f"fast-parquet/{topic}/partition=0/{topic}+0+0000000180.parquet"]))
    assert table.column_names[-1] == "paid" and table.column("amount").type == pa.decimal128(12, 2)
    decodings = {
        name: sum(f"[{name}|task-0]" in line and "Decoding" in line for line in log.splitlines())
        for name in ("s3-fast-json", "s3-fast-parquet", "s3-slow-json", "s3-slow-parquet")
    }
    assert 1 <= decodings["s3-fast-json"] <= 2 and decodings["s3-fast-parquet"] <= 1, decodings
    assert decodings["s3-slow-json"] == decodings["s3-slow-parquet"] == 0, decodings  # never had raw values
    given_back = [line for line in log.splitlines() if "could not use the raw values" in line]
    assert given_back and all("s3-fast-parquet" in line for line in given_back), given_back
