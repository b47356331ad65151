"""Debezium PostgreSQL keys that change the data, through a real worker, PostgreSQL and Kafka.

``hstore.handling.mode`` (json, map), ``include.unknown.datatypes``, ``message.key.columns`` (in the
snapshot and the stream, on the native and the Python path), ``slot.max.retries`` /
``slot.retry.delay.ms`` (a slot held by another connection), ``unavailable.value.placeholder`` and
``money.fraction.digits``: what a Debezium user would check, the records in the topics.
"""

from __future__ import annotations

import base64
import decimal
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sluice.connectors.source.postgres_cdc.replication import ReplicationStream
from tests.integration.cdc_helpers import cdc_config, dbname, key, read_events, run_sql, value, worker, write_connector
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.postgres_fixtures import ON_PG15_AND_PG18, skip_without_extension
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration


def _after_schema(record: Any) -> dict[str, Any]:
    schema = orjson.loads(record.value)["schema"]
    after = next(f for f in schema["fields"] if f["field"] == "after")
    return {f["field"]: f for f in after["fields"]}


def _task_status(w: WorkerProcess, name: str, state: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = httpx.get(f"{w.url}/connectors/{name}/status", timeout=5)
        if r.status_code == 200:
            body = r.json()
            if body["tasks"] and body["tasks"][0]["state"] == state:
                return dict(body["tasks"][0])
        time.sleep(0.2)
    raise AssertionError(f"task of {name} not {state} after {timeout}s: {body}\n{w.log()}")


def _pair_events(
    tmp_path: Path,
    bootstrap: str,
    postgres: PostgresServer,
    postgres_db: str,
    table: str,
    variants: dict[str, tuple[str, dict[str, str]]],
    change: str,
    expected: int,
) -> tuple[dict[str, list[Any]], str]:
    """Run one connector per variant (name → (topic prefix, extra keys)) on ``table``: wait for
    the snapshot, make ``change``, and return each variant's ``expected`` events and the log."""
    configs = {
        name: cdc_config(
            postgres.port, dbname(postgres_db), prefix,
            **{"table.include.list": rf"public\.{table}", "slot.drop.on.stop": "true", **extra},
        )  # fmt: skip
        for name, (prefix, extra) in variants.items()
    }
    w = worker(tmp_path, bootstrap).start(*(write_connector(tmp_path / f"{n}.json", n, c) for n, c in configs.items()))
    try:
        for name, (prefix, _) in variants.items():
            w.wait_running(name)
            read_events(bootstrap, f"{prefix}.public.{table}", expected - 1)
        run_sql(postgres_db, change)
        got = {n: read_events(bootstrap, f"{p}.public.{table}", expected) for n, (p, _) in variants.items()}
        return got, w.log(tail=1_000_000)
    finally:
        w.stop()


@ON_PG15_AND_PG18
def test_hstore_as_json_and_as_map(kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path) -> None:
    skip_without_extension(pg_server, "hstore")
    bootstrap = kafka.bootstrap_servers
    run_sql(
        postgres_db,
        "CREATE EXTENSION IF NOT EXISTS hstore",
        "CREATE TABLE attrs (id int PRIMARY KEY, h hstore, tags hstore NOT NULL)",
        r"""INSERT INTO attrs VALUES (1, 'color=>red, size=>NULL', ''), (2, NULL, 'q=>"a \"b\" c"')""",
    )
    tag = unique_topic_name("hs")[-6:]
    variants = {"json": (f"hsj{tag}", {}), "map": (f"hsm{tag}", {"hstore.handling.mode": "map"})}
    change = "INSERT INTO attrs VALUES (3, 'b=>2, a=>1, \"k e y\"=>\"\u00e9\"', 'x=>y')"
    got, _ = _pair_events(tmp_path, bootstrap, pg_server, postgres_db, "attrs", variants, change, 3)
    as_json = [value(r)["after"] for r in got["json"]]
    assert [value(r)["op"] for r in got["json"]] == ["r", "r", "c"]
    assert as_json[0] == {"id": 1, "h": '{"size":null,"color":"red"}', "tags": "{}"}  # Debezium's (HashMap) order
    assert as_json[1] == {"id": 2, "h": None, "tags": '{"q":"a \\"b\\" c"}'}
    assert orjson.loads(as_json[2]["h"]) == {"a": "1", "b": "2", "k e y": "é"}
    fields = _after_schema(got["json"][2])
    assert fields["h"]["type"] == "string" and fields["h"]["name"] == "io.debezium.data.Json"
    assert fields["h"]["version"] == 1 and fields["tags"]["optional"] is False

    as_map = [value(r)["after"] for r in got["map"]]
    assert [value(r)["op"] for r in got["map"]] == ["r", "r", "c"]
    assert as_map[0] == {"id": 1, "h": {"size": None, "color": "red"}, "tags": {}}
    assert as_map[1] == {"id": 2, "h": None, "tags": {"q": 'a "b" c'}}
    assert as_map[2] == {"id": 3, "h": {"a": "1", "b": "2", "k e y": "é"}, "tags": {"x": "y"}}
    fields = _after_schema(got["map"][2])
    assert fields["h"]["type"] == "map" and fields["h"]["optional"] is True
    assert (fields["h"]["keys"]["type"], fields["h"]["keys"]["optional"]) == ("string", False)
    assert (fields["h"]["values"]["type"], fields["h"]["values"]["optional"]) == ("string", True)


def test_unknown_types_are_left_out_unless_included(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """pg_lsn and int2vector (Debezium maps no such types) are left out by default and its text arrives as bytes
    with include.unknown.datatypes=true; types Debezium maps (ranges, geometric, domains) stay."""
    bootstrap = kafka.bootstrap_servers
    run_sql(
        postgres_db,
        "CREATE DOMAIN positive AS int CHECK (VALUE > 0)",
        "CREATE TABLE odd (id int PRIMARY KEY, at pg_lsn, ats pg_lsn[], span int4range, spot point, qty positive,"
        " iv int2vector)",
        "INSERT INTO odd VALUES (1, '0/16B6C50', '{0/1,1/2}', '[1,5)', '(1,2)', 3, '1 2')",
    )
    tag = unique_topic_name("unk")[-6:]
    variants = {"omit": (f"uno{tag}", {}), "include": (f"uni{tag}", {"include.unknown.datatypes": "true"})}
    change = "INSERT INTO odd VALUES (2, 'A/B', NULL, 'empty', '(0,0)', 9, NULL)"
    got, log = _pair_events(tmp_path, bootstrap, postgres, postgres_db, "odd", variants, change, 2)
    omitted = [value(r)["after"] for r in got["omit"]]
    # A point is Debezium's geometry struct, its WKB little-endian (type 1, then x and y).
    wkb = [base64.b64encode(struct.pack("<BIdd", 1, 1, x, y)).decode() for x, y in ((1, 2), (0, 0))]
    assert omitted == [
        {"id": 1, "span": "[1,5)", "spot": {"x": 1.0, "y": 2.0, "wkb": wkb[0], "srid": None}, "qty": 3},
        {"id": 2, "span": "empty", "spot": {"x": 0.0, "y": 0.0, "wkb": wkb[1], "srid": None}, "qty": 9},
    ]
    assert set(_after_schema(got["omit"][1])) == {"id", "span", "spot", "qty"}
    assert log.count("Column public.odd.at has type pg_lsn, which has no mapping") == 1  # warned once

    included = [value(r)["after"] for r in got["include"]]
    assert [base64.b64decode(a["at"]) for a in included] == [b"0/16B6C50", b"A/B"]
    assert [base64.b64decode(x) for x in included[0]["ats"]] == [b"0/1", b"1/2"] and included[1]["ats"] is None
    assert included[0]["span"] == "[1,5)" and included[0]["qty"] == 3
    assert base64.b64decode(included[0]["iv"]) == b"1 2" and included[1]["iv"] is None  # no array literal
    fields = _after_schema(got["include"][1])
    assert fields["at"]["type"] == "bytes" and fields["ats"]["items"]["type"] == "bytes"


@ON_PG15_AND_PG18
def test_message_key_columns_replace_the_primary_key(
    kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """Snapshot and stream, native encoding on and off: the events of public.orders are keyed by
    customer; another table keeps its primary key."""
    bootstrap = kafka.bootstrap_servers
    run_sql(
        postgres_db,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, region text, n int)",
        "ALTER TABLE orders REPLICA IDENTITY FULL",
        "CREATE TABLE other (id int PRIMARY KEY, v text)",
        "INSERT INTO orders SELECT g, 'c' || (g % 3), 'eu', g FROM generate_series(1, 6) g",
        "INSERT INTO other VALUES (1, 'x')",
    )
    tag = unique_topic_name("mk")[-6:]
    prefixes = {"native": f"mkn{tag}", "python": f"mkp{tag}"}
    extra = {
        "table.include.list": r"public\.(orders|other)", "slot.drop.on.stop": "true",
        "message.key.columns": r"public\.ORDERS:Customer;nothing\.matches:x",
    }  # fmt: skip
    configs = {
        name: cdc_config(pg_server.port, dbname(postgres_db), prefix, **extra, **({"native.encoding": "false"} if name == "python" else {}))
        for name, prefix in prefixes.items()
    }  # fmt: skip
    w = worker(tmp_path, bootstrap).start(*(write_connector(tmp_path / f"{n}.json", n, c) for n, c in configs.items()))
    try:
        w.wait_running("native")
        w.wait_running("python")
        for prefix in prefixes.values():
            read_events(bootstrap, f"{prefix}.public.orders", 6)
        run_sql(postgres_db, "INSERT INTO orders VALUES (7, 'c9', NULL, 7)", "INSERT INTO other VALUES (2, 'y')")
        run_sql(postgres_db, "UPDATE orders SET n = 70 WHERE id = 7")
        run_sql(postgres_db, "UPDATE orders SET customer = 'c8' WHERE id = 7")  # a key change: d, tombstone, c
        run_sql(postgres_db, "DELETE FROM orders WHERE id = 1")
        got = {n: read_events(bootstrap, f"{p}.public.orders", 6 + 7) for n, p in prefixes.items()}
        others = {n: read_events(bootstrap, f"{p}.public.other", 2) for n, p in prefixes.items()}
        log = w.log(tail=1_000_000)
    finally:
        w.stop()
    assert "Table public.orders: changes are serialized natively" in log
    for name, records in got.items():
        ops = [(value(r) or {}).get("op") for r in records]
        assert ops == ["r"] * 6 + ["c", "u", "d", None, "c", "d", None], name
        keys = [key(r) for r in records]
        assert keys[:6] == [{"customer": f"c{g % 3}"} for g in range(1, 7)], name
        assert keys[6:] == [{"customer": "c9"}] * 4 + [{"customer": "c8"}] + [{"customer": "c1"}] * 2, name
        key_schema = orjson.loads(records[0].key)["schema"]
        assert key_schema["name"] == f"{prefixes[name]}.public.orders.Key"
        assert key_schema["fields"] == [{"field": "customer", "type": "string", "optional": False}]
        assert value(records[6])["after"] == {"id": 7, "customer": "c9", "region": None, "n": 7}
        assert [key(r) for r in others[name]] == [{"id": 1}, {"id": 2}], name
    # Native and Python path write the same keys.
    assert [r.key for r in got["native"]] == [r.key.replace(prefixes["python"].encode(), prefixes["native"].encode()) for r in got["python"]]


def test_message_key_column_that_does_not_exist_is_named(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("mkbad")
    run_sql(postgres_db, "CREATE TABLE orders (id int PRIMARY KEY, customer text)")
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.orders", "message.key.columns": "public.orders:customer,regoin"},
    )  # fmt: skip
    w = worker(tmp_path, bootstrap, **{"task.restart.max.attempts": "0"})
    w.start()
    try:
        r = httpx.put(f"{w.url}/connector-plugins/{config['connector.class']}/config/validate", json=config, timeout=30)
        assert r.status_code == 200, r.text
        errors = {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"] if c["value"]["errors"]}
        assert list(errors) == ["message.key.columns"], errors
        (message,) = errors["message.key.columns"]
        assert "'regoin'" in message and "public.orders" in message
        # Creating it is refused the same way (Debezium's validate runs on create).
        created = httpx.post(f"{w.url}/connectors", json={"name": "bad", "config": config}, timeout=30)
        assert created.status_code == 400, created.text
        assert "message.key.columns: " in created.json()["message"] and "'regoin'" in created.json()["message"]
        # A column dropped after the connector was created fails its task, naming the key.
        run_sql(postgres_db, "ALTER TABLE orders ADD COLUMN regoin text")
        assert httpx.post(f"{w.url}/connectors", json={"name": "bad", "config": config}, timeout=30).status_code == 201
        run_sql(postgres_db, "ALTER TABLE orders DROP COLUMN regoin")
        httpx.post(f"{w.url}/connectors/bad/restart?includeTasks=true", timeout=30)
        trace = _task_status(w, "bad", "FAILED")["trace"]
        assert "message.key.columns" in trace and "'regoin'" in trace and "public.orders" in trace
        malformed = {**config, "message.key.columns": "public.orders"}
        r = httpx.put(f"{w.url}/connector-plugins/{config['connector.class']}/config/validate", json=malformed, timeout=30)
        errors = {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"] if c["value"]["errors"]}
        assert list(errors) == ["message.key.columns"], errors
    finally:
        w.stop()


def test_slot_held_by_another_connection_is_retried_then_fails(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """slot.max.retries attempts slot.retry.delay.ms apart: a slot freed meanwhile is taken, one
    still held fails the task with a message naming the slot, the holder's PID and the keys."""
    bootstrap = kafka.bootstrap_servers
    tag = unique_topic_name("slot")[-6:]
    run_sql(postgres_db, "CREATE TABLE t (id int PRIMARY KEY)")
    configs = {
        "patient": cdc_config(
            postgres.port, dbname(postgres_db), f"slp{tag}",
            **{"table.include.list": r"public\.t", "snapshot.mode": "no_data", "slot.max.retries": "100",
               "slot.retry.delay.ms": "300", "slot.drop.on.stop": "true"},
        ),
        "impatient": cdc_config(
            postgres.port, dbname(postgres_db), f"sli{tag}",
            **{"table.include.list": r"public\.t", "snapshot.mode": "no_data", "slot.max.retries": "2",
               "slot.retry.delay.ms": "300"},
        ),
    }  # fmt: skip
    holders = {}
    for name, config in configs.items():
        run_sql(postgres_db, f"CREATE PUBLICATION {config['publication.name']} FOR TABLE t")
        run_sql(postgres_db, f"SELECT pg_create_logical_replication_slot('{config['slot.name']}', 'pgoutput')")
        holder = ReplicationStream(
            {"host": "127.0.0.1", "port": postgres.port, "user": "postgres", "dbname": dbname(postgres_db), "replication": "database"},
            config["slot.name"], config["publication.name"],
        )  # fmt: skip
        holder.open(0)
        holders[name] = holder
    w = worker(tmp_path, bootstrap, **{"task.restart.max.attempts": "0"})
    w.start(*(write_connector(tmp_path / f"{n}.json", n, c) for n, c in configs.items()))
    try:
        failed = _task_status(w, "impatient", "FAILED", timeout=60)
        pid = holders["impatient"].backend_pid
        trace = failed["trace"]
        assert f"Replication slot '{configs['impatient']['slot.name']}' is held by another connection (PID {pid})" in trace
        assert "slot.max.retries=2" in trace and "slot.retry.delay.ms=300" in trace and "3 attempts" in trace
        log = w.log(tail=1_000_000)
        assert "retry 1 of 2 in 300 ms" in log and "retry 2 of 2 in 300 ms" in log
        holders["patient"].close()  # freed while the other connector still retries
        w.wait_running("patient", timeout=60)
        time.sleep(1.0)
        run_sql(postgres_db, "INSERT INTO t VALUES (1)")
        (created,) = read_events(bootstrap, f"slp{tag}.public.t", 1)
        assert value(created)["after"] == {"id": 1}
        assert "retry 1 of 100 in 300 ms" in w.log(tail=1_000_000)
    finally:
        w.stop()
        for holder in holders.values():
            holder.close()
        run_sql(postgres_db, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active",
                params=(configs["impatient"]["slot.name"],))  # fmt: skip


def test_unavailable_value_placeholder_and_money_fraction_digits(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcph")
    run_sql(
        postgres_db,
        "CREATE TABLE docs (id int PRIMARY KEY, n int, body text, price money)",
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",
    )
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.docs", "snapshot.mode": "no_data", "slot.drop.on.stop": "true",
           "unavailable.value.placeholder": "hex:3f3f", "money.fraction.digits": "3"},
    )  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        time.sleep(1.0)
        run_sql(postgres_db, "INSERT INTO docs VALUES (1, 1, %s, 12.34)", params=("x" * 20_000,))
        run_sql(postgres_db, "UPDATE docs SET n = 2 WHERE id = 1")
        created, updated = read_events(bootstrap, f"{prefix}.public.docs", 2)
    finally:
        w.stop()
    assert value(updated)["after"]["body"] == "??"  # hex:3f3f
    assert _after_schema(created)["price"]["parameters"]["scale"] == "3"
    price = value(created)["after"]["price"]
    assert decimal.Decimal(int.from_bytes(base64.b64decode(price), "big", signed=True)).scaleb(-3) == decimal.Decimal("12.340")
