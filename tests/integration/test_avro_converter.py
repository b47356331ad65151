"""The AvroConverter against a real Schema Registry (Apicurio Registry's Confluent-compatible API).

What a user checks: the bytes in the topic are Confluent's wire format with the id the registry
gave the subject's schema; any Avro reader that fetches that schema by id reads the record; a
table copied through Avro topics by the JDBC source and sink comes out identical; an
incompatible schema change is refused with the registry's reason; an unreachable registry is a
retriable error that names it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
from pathlib import Path
from typing import Any

import fastavro
import httpx
import orjson
import pytest

from sluice.connectors.api.errors import DataError, RetriableError
from sluice.connectors.api.schema import (
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Date,
    Decimal,
    Schema,
    Timestamp,
)
from sluice.converters.avro import AvroConverter
from sluice.deploy.schema_registry import SchemaRegistryServer
from tests.integration.cdc_helpers import cdc_config, dbname, read_events, run_sql, write_connector
from tests.integration.cdc_helpers import worker as cdc_worker
from tests.integration.jdbc_helpers import (
    JDBC_SINK,
    JDBC_SOURCE,
    WORKER_SETTINGS,
    Database,
    connector_url,
    make_database,
    wait_for,
)
from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

AVRO = "io.confluent.connect.avro.AvroConverter"

ORDER = Schema.struct(
    [
        ("id", INT64_SCHEMA),
        ("customer", STRING_SCHEMA),
        ("note", OPTIONAL_STRING_SCHEMA),
        ("total", Decimal.schema(2)),
        ("placed", Timestamp.SCHEMA),
        ("ships", Date.OPTIONAL_SCHEMA),
    ],
    name="shop.Order",
)


def _order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "customer": f"customer {i} ✓",
        "note": None if i % 2 else "fragile",
        "total": decimal.Decimal(i * 100 + 99).scaleb(-2),
        "placed": dt.datetime(2024, 3, 1, 12, 0, 0, i * 1000, tzinfo=dt.UTC),
        "ships": dt.date(2024, 3, 2) if i % 3 else None,
    }


def _converter(registry: SchemaRegistryServer, is_key: bool = False, **settings: str) -> AvroConverter:
    converter = AvroConverter()
    converter.configure({"schema.registry.url": registry.url, **settings}, is_key)
    return converter


def test_values_carry_the_registry_id_and_any_avro_reader_decodes_them(schema_registry: SchemaRegistryServer) -> None:
    topic = unique_topic_name("orders")
    converter = _converter(schema_registry)
    encoded = converter.from_connect_batch(topic, [ORDER] * 3, [_order(i) for i in range(3)])

    latest = httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions/latest").json()
    assert latest["version"] == 1
    for data in encoded:
        assert data is not None and data[0] == 0
        assert int.from_bytes(data[1:5], "big") == latest["id"]

    # An independent reader: the schema fetched by id over HTTP, the body decoded by fastavro.
    text = httpx.get(f"{schema_registry.url}/schemas/ids/{latest['id']}").json()["schema"]
    parsed = fastavro.parse_schema(orjson.loads(text))
    first = fastavro.schemaless_reader(io.BytesIO(encoded[1][5:]), parsed, None)  # type: ignore[index]
    assert first["id"] == 1 and first["customer"] == "customer 1 ✓" and first["note"] is None
    assert first["total"] == decimal.Decimal("1.99")
    assert first["placed"] == dt.datetime(2024, 3, 1, 12, 0, 0, 1000, tzinfo=dt.UTC)

    # And Sluice reads them back as the Connect schema and values that were written.
    reader = _converter(schema_registry)
    schemas, values = reader.to_connect_batch(topic, encoded)
    assert values == [_order(i) for i in range(3)]
    assert schemas[0] == ORDER.with_(version=1)  # no connect.version: the subject's version, as Confluent's


def test_an_unchanged_schema_is_registered_once_and_a_new_field_makes_version_two(
    schema_registry: SchemaRegistryServer,
) -> None:
    topic = unique_topic_name("evolve")
    _converter(schema_registry).from_connect_data(topic, ORDER, _order(1))
    _converter(schema_registry).from_connect_data(topic, ORDER, _order(2))  # a new converter, the same schema
    assert httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions").json() == [1]

    schema_registry.set_compatibility("BACKWARD", f"{topic}-value")
    added = Schema.struct(
        [*((f.name, f.schema) for f in ORDER.fields), ("coupon", OPTIONAL_STRING_SCHEMA)], name="shop.Order"
    )
    data = _converter(schema_registry).from_connect_data(topic, added, {**_order(3), "coupon": "SPRING"})
    assert httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions").json() == [1, 2]
    assert _converter(schema_registry).to_connect_data(topic, data).value["coupon"] == "SPRING"


def test_an_incompatible_schema_is_refused_with_the_registrys_reason(schema_registry: SchemaRegistryServer) -> None:
    topic = unique_topic_name("strict")
    _converter(schema_registry).from_connect_data(topic, ORDER, _order(1))
    schema_registry.set_compatibility("BACKWARD", f"{topic}-value")
    # A new required field without a default: old records cannot be read with the new schema.
    changed = Schema.struct([*((f.name, f.schema) for f in ORDER.fields), ("region", STRING_SCHEMA)], name="shop.Order")
    with pytest.raises(DataError, match=f"subject '{topic}-value' as incompatible.*HTTP 409"):
        _converter(schema_registry).from_connect_data(topic, changed, {**_order(2), "region": "EU"})
    assert httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions").json() == [1]


def test_without_auto_registration_an_unregistered_schema_is_named_and_refused(
    schema_registry: SchemaRegistryServer,
) -> None:
    topic = unique_topic_name("manual")
    converter = _converter(schema_registry, **{"auto.register.schemas": "false"})
    with pytest.raises(DataError, match=f"no subject '{topic}-value'"):
        converter.from_connect_data(topic, ORDER, _order(1))
    _converter(schema_registry).from_connect_data(topic, ORDER, _order(1))  # registered by someone else
    assert converter.from_connect_data(topic, ORDER, _order(2))[0] == 0  # type: ignore[index]


def test_use_latest_version_writes_with_the_subjects_latest_schema(schema_registry: SchemaRegistryServer) -> None:
    topic = unique_topic_name("latest")
    _converter(schema_registry).from_connect_data(topic, ORDER, _order(1))
    latest_id = httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions/latest").json()["id"]
    converter = _converter(schema_registry, **{"auto.register.schemas": "false", "use.latest.version": "true"})
    data = converter.from_connect_data(topic, ORDER, _order(5))
    assert data is not None and int.from_bytes(data[1:5], "big") == latest_id


def test_keys_and_record_name_strategies_choose_the_subject(schema_registry: SchemaRegistryServer) -> None:
    topic = unique_topic_name("keys")
    key_schema = Schema.struct([("id", INT64_SCHEMA)], name="shop.OrderKey")
    _converter(schema_registry, is_key=True).from_connect_data(topic, key_schema, {"id": 1})
    _converter(schema_registry, **{"value.subject.name.strategy": "TopicRecordNameStrategy"}).from_connect_data(
        topic, ORDER, _order(1)
    )
    record_subject = f"shop.Order{unique_topic_name('x')[-6:]}"
    renamed = ORDER.with_(name=record_subject)
    _converter(schema_registry, **{"value.subject.name.strategy": "RecordNameStrategy"}).from_connect_data(
        topic, renamed, _order(1)
    )
    subjects = set(httpx.get(f"{schema_registry.url}/subjects").json())
    assert {f"{topic}-key", f"{topic}-shop.Order", record_subject} <= subjects
    assert f"{topic}-value" not in subjects


def test_an_unreachable_registry_is_a_retriable_error_that_names_it(schema_registry: SchemaRegistryServer) -> None:
    dead = "http://127.0.0.1:9/apis/ccompat/v7"
    converter = AvroConverter()
    converter.configure({"schema.registry.url": f"{dead},{schema_registry.url}"}, False)
    topic = unique_topic_name("failover")
    assert converter.from_connect_data(topic, ORDER, _order(1)) is not None  # the second URL answered

    lonely = AvroConverter()
    lonely.configure({"schema.registry.url": dead, "schema.registry.request.timeout.ms": "2000"}, False)
    with pytest.raises(RetriableError, match="Schema Registry unreachable: http://127.0.0.1:9/apis/ccompat/v7"):
        lonely.from_connect_data(topic, ORDER, _order(1))


def test_a_table_copied_through_avro_topics_comes_out_identical(
    kafka: Any, schema_registry: SchemaRegistryServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db: Database = make_database("postgresql", request, tmp_path)
    db.sql(
        "CREATE TABLE orders (id integer NOT NULL PRIMARY KEY, customer text NOT NULL, note text, "
        "total numeric(12,2), placed timestamp, ships date, tiny smallint, flags boolean[])"
    )
    rows = [
        (
            1,
            "Ada",
            "fragile ✓",
            decimal.Decimal("12.50"),
            dt.datetime(2024, 3, 1, 12, 0, 0, 123000),
            dt.date(2024, 3, 2),
            7,
            [True, False],
        ),
        (2, "Bo", None, None, None, None, None, None),
        (3, "tab\there", "", decimal.Decimal("-0.01"), dt.datetime(1970, 1, 1), dt.date(1969, 12, 31), -32768, []),
    ]
    for row in rows:
        db.sql("INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", row)
    prefix = unique_topic_name("avro-rt") + "-"
    url = connector_url(db, request)
    settings: dict[str, Any] = {
        **WORKER_SETTINGS,
        "key.converter": AVRO,
        "key.converter.schema.registry.url": schema_registry.url,
        "value.converter": AVRO,
        "value.converter.schema.registry.url": schema_registry.url,
        "offset.flush.interval.ms": "500",
    }
    source = tmp_path / "source.json"
    sink = tmp_path / "sink.json"
    source.write_bytes(
        orjson.dumps(
            {
                "name": "avro-source",
                "config": {
                    "connector.class": JDBC_SOURCE,
                    "connection.url": url,
                    "mode": "incrementing",
                    "incrementing.column.name": "id",
                    "table.include.list": "orders",
                    "topic.prefix": prefix,
                    "poll.interval.ms": "200",
                },
            }
        )
    )
    sink.write_bytes(
        orjson.dumps(
            {
                "name": "avro-sink",
                "config": {
                    "connector.class": JDBC_SINK,
                    "connection.url": url,
                    "topics": prefix + "orders",
                    "table.name.format": "orders_copy",
                    "insert.mode": "upsert",
                    "pk.mode": "record_value",
                    "pk.fields": "id",
                    "auto.create": "true",
                },
            }
        )
    )
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **settings).start(source, sink)
    try:
        worker.wait_running("avro-source")
        worker.wait_running("avro-sink")
        copied = wait_for(lambda: db.rows("orders_copy"), lambda r: len(r) == len(rows), timeout=90, what="copied rows")
    finally:
        worker.stop()
    try:
        assert db.columns("orders_copy") == db.columns("orders")
        assert copied == db.rows("orders")
    finally:
        db.dispose()

    # The topic holds Confluent's wire format under the subject <topic>-value.
    records = consume_all(kafka.bootstrap_servers, prefix + "orders", len(rows))
    subject = httpx.get(f"{schema_registry.url}/subjects/{prefix}orders-value/versions/latest").json()
    assert {int.from_bytes(r.value[1:5], "big") for r in records} == {subject["id"]}
    assert all(r.value[0] == 0 for r in records)


def test_debezium_change_events_travel_as_avro(
    kafka: Any, postgres: Any, postgres_db: str, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    """The most common production set-up: Debezium's envelope, Avro converters, one subject per table."""
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcavro")
    run_sql(postgres_db, "CREATE TABLE items (id int PRIMARY KEY, price numeric(10,2), label text, at timestamp)")
    config = cdc_config(
        postgres.port,
        dbname(postgres_db),
        prefix,
        **{
            "table.include.list": r"public\.items",
            "snapshot.mode": "no_data",
            # The prefix has a '-', which Avro names refuse: Debezium's setting makes the schema names valid.
            "schema.name.adjustment.mode": "avro",
            "key.converter": AVRO,
            "key.converter.schema.registry.url": schema_registry.url,
            "value.converter": AVRO,
            "value.converter.schema.registry.url": schema_registry.url,
        },
    )
    w = cdc_worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc-avro", config))
    try:
        w.wait_running("cdc-avro")
        run_sql(postgres_db, "INSERT INTO items VALUES (1, 12.34, 'first', '2024-03-01 10:11:12.345678')")
        run_sql(postgres_db, "UPDATE items SET label = 'second' WHERE id = 1")
        run_sql(postgres_db, "DELETE FROM items WHERE id = 1")
        events = read_events(bootstrap, f"{prefix}.public.items", 4)
    finally:
        w.stop()

    topic = f"{prefix}.public.items"
    reader = _converter(schema_registry)
    key_reader = _converter(schema_registry, is_key=True)
    values = [reader.to_connect_data(topic, e.value) for e in events]
    keys = [key_reader.to_connect_data(topic, e.key).value for e in events]
    assert [(v.value or {}).get("op") for v in values] == ["c", "u", "d", None]
    assert keys == [{"id": 1}] * 4
    created = values[0].value
    assert created["after"] == {
        "id": 1,
        "price": decimal.Decimal("12.34"),
        "label": "first",
        "at": 1709287872345678,  # io.debezium.time.MicroTimestamp
    }
    assert created["source"]["table"] == "items" and created["source"]["connector"] == "postgresql"
    assert values[2].value["before"]["id"] == 1 and values[2].value["after"] is None
    namespace = prefix.replace("-", "_") + ".public.items"
    envelope = values[0].schema
    assert envelope is not None and envelope.name == f"{namespace}.Envelope"

    # The registered schema is Confluent's mapping of Debezium's: the Value record defined once.
    text = httpx.get(f"{schema_registry.url}/subjects/{topic}-value/versions/latest").json()["schema"]
    avro = orjson.loads(text)
    assert (avro["namespace"], avro["name"], avro["connect.name"]) == (namespace, "Envelope", f"{namespace}.Envelope")
    fields = {f["name"]: f["type"] for f in avro["fields"]}
    assert fields["before"][0] == "null" and fields["before"][1]["name"] == "Value"
    assert fields["after"] == ["null", f"{namespace}.Value"]
    assert fields["source"]["name"] == "Source" and fields["source"]["namespace"] == "io.debezium.connector.postgresql"
