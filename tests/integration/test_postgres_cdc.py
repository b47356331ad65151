"""PostgreSQL (wal_level=logical) → the CDC source → Kafka, through a real worker process.

What a Debezium user checks: the change events in the topics (envelope field by field, schema
names, every listed type), tombstones, that nothing committed is lost when the worker is killed or
PostgreSQL restarts, that an interrupted snapshot continues from its last chunk, and that an idle
database does not hold back the slot.
"""

from __future__ import annotations

import base64
import decimal
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.cdc_helpers import (
    cdc_config,
    confirmed_flush_lsn,
    dbname,
    key,
    read_events,
    read_until,
    run_sql,
    value,
    worker,
    write_connector,
)
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.postgres_fixtures import ON_PG15_AND_PG18
from tests.services.postgres import PostgresServer
from tests.sizes import size

pytestmark = pytest.mark.integration


def _decimal(encoded: str, scale: int) -> decimal.Decimal:
    return decimal.Decimal(int.from_bytes(base64.b64decode(encoded), "big", signed=True)).scaleb(-scale)


@ON_PG15_AND_PG18
def test_changes_match_debezium_envelope_and_types(kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdc")
    run_sql(
        postgres_db,
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
        "CREATE TABLE items (id int PRIMARY KEY, small smallint, big bigint NOT NULL, price numeric(10,2), ratio float8,"
        " label text, flag boolean, day date, at_time time(3), local_ts timestamp, zoned timestamptz, uid uuid, doc jsonb,"
        " raw bytea, tags text[], scores int[], feeling mood, note text)",
        "ALTER TABLE items REPLICA IDENTITY FULL",
        "CREATE TABLE plain (id int PRIMARY KEY, name text NOT NULL, qty int)",
        "INSERT INTO plain VALUES (100, 'before-start', 1)",
    )
    config = cdc_config(pg_server.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.(items|plain)"})
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        snap = read_events(bootstrap, f"{prefix}.public.plain", 1)
        first = value(snap[0])
        assert first["op"] == "r" and first["after"] == {"id": 100, "name": "before-start", "qty": 1}
        assert first["source"]["snapshot"] == "last" and first["before"] is None
        # One transaction, several statements; then single-statement changes.
        run_sql(
            postgres_db,
            "INSERT INTO items VALUES (1, 7, 9000000000, 12.34, 0.5, 'first', true, '2024-03-01', '12:34:56.789',"
            " '2024-03-01 10:11:12.345678', '2024-03-01 10:11:12.5+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',"
            " '{\"k\": [1, 2]}', '\\x00ff', '{a,\"b c\",NULL}', '{1,2,3}', 'happy', 'n')",
            "INSERT INTO items (id, big) VALUES (2, 1)",
            "UPDATE items SET label = 'second' WHERE id = 2",
        )
        run_sql(postgres_db, "UPDATE items SET price = 99.99 WHERE id = 1")
        run_sql(postgres_db, "UPDATE plain SET qty = 2 WHERE id = 100")
        run_sql(postgres_db, "DELETE FROM plain WHERE id = 100")
        run_sql(postgres_db, "DELETE FROM items WHERE id = 2")

        items = read_events(bootstrap, f"{prefix}.public.items", 6)
        ops = [(value(r) or {}).get("op") for r in items]
        assert ops == ["c", "c", "u", "u", "d", None]  # the last one is the tombstone
        assert [key(r) for r in items] == [{"id": 1}, {"id": 2}, {"id": 2}, {"id": 1}, {"id": 2}, {"id": 2}]
        assert items[-1].value is None

        created = value(items[0])
        assert set(created) == {"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}
        after = created["after"]
        assert after["small"] == 7 and after["big"] == 9000000000 and after["ratio"] == 0.5
        assert _decimal(after["price"], 2) == decimal.Decimal("12.34")
        assert after["label"] == "first" and after["flag"] is True
        assert after["day"] == 19783  # io.debezium.time.Date: days since the epoch
        assert after["at_time"] == 45296789  # io.debezium.time.Time (precision 3): ms
        assert after["local_ts"] == 1709287872345678  # io.debezium.time.MicroTimestamp
        assert after["zoned"] == "2024-03-01T08:11:12.500000Z"  # io.debezium.time.ZonedTimestamp, UTC
        assert after["uid"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        assert after["doc"] == '{"k": [1, 2]}'
        assert base64.b64decode(after["raw"]) == b"\x00\xff"
        assert after["tags"] == ["a", "b c", None] and after["scores"] == [1, 2, 3]
        assert after["feeling"] == "happy"
        source = created["source"]
        assert list(source) == [
            "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
            "schema", "table", "txId", "lsn", "xmin", "origin", "origin_lsn",
        ]  # fmt: skip
        assert source["connector"] == "postgresql" and source["name"] == prefix and source["db"] == dbname(postgres_db)
        assert source["schema"] == "public" and source["table"] == "items" and source["snapshot"] == "false"
        assert isinstance(source["txId"], int) and isinstance(source["lsn"], int)
        # the three statements of the first transaction share its txId
        assert value(items[1])["source"]["txId"] == value(items[2])["source"]["txId"] == source["txId"]

        # REPLICA IDENTITY FULL: updates carry the whole old row
        price_update = value(items[3])
        assert _decimal(price_update["before"]["price"], 2) == decimal.Decimal("12.34")
        assert _decimal(price_update["after"]["price"], 2) == decimal.Decimal("99.99")
        assert price_update["before"]["label"] == "first"
        deleted = value(items[4])
        assert deleted["after"] is None and deleted["before"]["label"] == "second"

        # Connect schemas with Debezium's names
        import orjson

        schema = orjson.loads(items[0].value or b"{}")["schema"]
        assert schema["name"] == f"{prefix}.public.items.Envelope"
        fields = {f["field"]: f for f in schema["fields"]}
        assert fields["after"]["name"] == f"{prefix}.public.items.Value" and fields["after"]["optional"] is True
        assert fields["source"]["name"] == "io.debezium.connector.postgresql.Source"
        columns = {f["field"]: f for f in fields["after"]["fields"]}
        assert columns["price"]["name"] == "org.apache.kafka.connect.data.Decimal"
        assert columns["price"]["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
        assert columns["zoned"]["name"] == "io.debezium.time.ZonedTimestamp"
        assert columns["local_ts"]["name"] == "io.debezium.time.MicroTimestamp"
        assert columns["day"]["name"] == "io.debezium.time.Date"
        assert columns["uid"]["name"] == "io.debezium.data.Uuid"
        assert columns["doc"]["name"] == "io.debezium.data.Json"
        assert columns["feeling"]["name"] == "io.debezium.data.Enum"
        assert columns["feeling"]["parameters"] == {"allowed": "sad,ok,happy"}
        assert columns["big"]["optional"] is False and columns["small"]["optional"] is True
        key_schema = orjson.loads(items[0].key or b"{}")["schema"]
        assert key_schema["name"] == f"{prefix}.public.items.Key"

        # REPLICA IDENTITY DEFAULT: update has no before; delete's before holds the key only
        plain = read_events(bootstrap, f"{prefix}.public.plain", 4)
        assert [(value(r) or {}).get("op") for r in plain] == ["r", "u", "d", None]
        assert value(plain[1])["before"] is None and value(plain[1])["after"]["qty"] == 2
        assert value(plain[2])["before"] == {"id": 100, "name": "", "qty": None}
    finally:
        w.stop()


def test_worker_killed_under_load_loses_nothing_and_keeps_commit_order(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdckill")
    run_sql(postgres_db, "CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL)")
    config = cdc_config(postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.counters"})
    connector = write_connector(tmp_path / "cdc.json", "cdc", config)
    committed: dict[int, list[int]] = {}
    stop = threading.Event()

    def write() -> None:
        rng = random.Random(7)
        counts: dict[int, int] = {}
        import psycopg

        with psycopg.connect(postgres_db.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            while not stop.is_set():
                k = rng.randrange(50)
                n = counts.get(k, 0) + 1
                if n == 1:
                    conn.execute("INSERT INTO counters VALUES (%s, 1)", (k,))
                else:
                    conn.execute("UPDATE counters SET n = %s WHERE id = %s", (n, k))
                counts[k] = n
                committed.setdefault(k, []).append(n)
                time.sleep(0.002)

    w = worker(tmp_path, bootstrap).start(connector)
    writer = threading.Thread(target=write)
    try:
        w.wait_running("cdc")
        writer.start()
        time.sleep(4)
        w.kill()
        time.sleep(1)
        w = worker(tmp_path, bootstrap).start(connector)
        w.wait_running("cdc")
        time.sleep(3)
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
    try:
        total = sum(len(v) for v in committed.values())
        events = read_events(bootstrap, f"{prefix}.public.counters", total, timeout=120, settle=2)
        seen: dict[int, list[int]] = {}
        for record in events:
            payload = value(record)
            if payload is not None and payload["op"] != "r":
                seen.setdefault(payload["after"]["id"], []).append(payload["after"]["n"])
        for k, values in committed.items():
            got = seen.get(k, [])
            first_seen: list[int] = []
            for v in got:  # replays after the restart repeat a suffix; keep first occurrences
                if v not in first_seen:
                    first_seen.append(v)
            assert first_seen == values, f"key {k}: committed {values}, topic {got}"
    finally:
        w.stop()


def test_reconnects_after_postgres_restart(kafka: Any, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcrestart")
    base = Path(tempfile.mkdtemp(prefix="sluice-pg-cdc-"))
    server = PostgresServer(base_dir=base, kill_with_parent=True).start()
    try:
        url = server.url()
        run_sql(url, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
        config = cdc_config(server.port or 0, server.database, prefix, **{"table.include.list": r"public\.t"})
        w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
        try:
            w.wait_running("cdc")
            run_sql(url, "INSERT INTO t VALUES (2, 'b')")
            read_events(bootstrap, f"{prefix}.public.t", 2)
            server.stop()
            time.sleep(2)
            server.start()
            run_sql(url, "INSERT INTO t VALUES (3, 'c')")
            # At least once: a change read before the restart may come again, so wait for row 3
            # itself, not for a third record.
            def ids(records: list[Any]) -> list[int]:
                return [value(r)["after"]["id"] for r in records]

            try:
                events = read_until(bootstrap, f"{prefix}.public.t", lambda rs: 3 in ids(rs), timeout=120, what="row 3")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nworker log:\n{w.log()}") from None
            assert sorted(set(ids(events))) == [1, 2, 3] and ids(events)[-1] == 3
            status = httpx.get(f"{w.url}/connectors/cdc/status", timeout=5).json()
            assert status["tasks"][0]["state"] == "RUNNING"
        finally:
            w.stop()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_initial_snapshot_resumes_from_last_chunk_after_kill(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """A worker killed mid-snapshot, after it stored snapshot progress: the restarted one resumes
    from the row after the stored key, and every row arrives.

    The small size (100,000 rows in chunks of 1,000) still has 100 chunks, so the kill falls
    between chunk boundaries with most of the snapshot left: with offsets flushed every 100 ms the
    first stored key is a few chunks in (3,000-16,500 rows delivered at the kill in 7 runs on the
    shared 2-core machine; with the usual 500 ms, up to ~48,000), far from the end, and the resumed
    snapshot crosses dozens more chunk boundaries. ``SLUICE_TEST_FULL_SIZES=1`` runs the
    original 1,000,000 rows in chunks of 5,000."""
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcsnap")
    rows, chunk = size(100_000, 1_000_000), size(1_000, 5_000)
    run_sql(
        postgres_db,
        "CREATE TABLE big (id bigint PRIMARY KEY, name text, amount numeric(12,2))",
        f"INSERT INTO big SELECT g, 'name-' || g, g * 1.25 FROM generate_series(1, {rows}) g",
    )
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.big", "snapshot.chunk.size": str(chunk), "value.converter.schemas.enable": "false"},
    )  # fmt: skip
    connector = write_connector(tmp_path / "cdc.json", "cdc", config)
    topic = f"{prefix}.public.big"
    # Offsets flushed often, so the first stored key (and so the kill) comes a few chunks into the
    # snapshot, not after a whole 500 ms flush interval of it.
    w = worker(tmp_path, bootstrap, **{"offset.flush.interval.ms": "100"}).start(connector)
    offsets = w.offsets_path
    try:
        w.wait_running("cdc")
        # Kill as soon as some snapshot progress is stored: killing after a number of records had
        # been read raced the first offset flush on a loaded machine (nothing stored yet, so the
        # restart rightly began again and the test could not tell resuming from restarting).
        deadline = time.monotonic() + 120
        while stored_snapshot_key(offsets) is None:
            assert time.monotonic() < deadline, f"no snapshot progress stored after 120 s:\n{w.log()}"
            time.sleep(0.02)
        w.kill()
        stored = stored_snapshot_key(offsets)  # what the restart resumes from
        assert stored is not None and stored < rows, "the snapshot finished before the kill; make the table bigger"
        delivered_before_kill = len(read_events(bootstrap, topic, stored, settle=1))
        assert delivered_before_kill < rows, "the snapshot finished before the kill; make the table bigger"
        w = worker(tmp_path, bootstrap).start(connector)
        w.wait_running("cdc")
        run_sql(postgres_db, "UPDATE big SET name = 'changed' WHERE id = 1")
        events = read_events(bootstrap, topic, rows + 1, timeout=300, settle=2)
        ids = {value(r)["after"]["id"] for r in events if value(r)["op"] == "r"}
        assert ids == set(range(1, rows + 1))
        # Resumed, not restarted: after the restart the snapshot went on from the row after the
        # stored key, so each row after it was sent again at most once and none before it.
        again = [value(r)["after"]["id"] for r in events[delivered_before_kill:] if value(r)["op"] == "r"]
        assert again[0] == stored + 1, (again[:3], stored)
        assert again == list(range(stored + 1, rows + 1))
        assert value(events[-1])["op"] in ("u", "r")
    finally:
        w.stop()


def stored_snapshot_key(path: Path) -> int | None:
    """The key of the last snapshot row whose offset the worker stored in its offsets file (one-column key)."""
    try:
        lines = path.read_bytes().splitlines()[1:]
    except FileNotFoundError:
        return None
    for line in lines:
        key = orjson.loads(line)["value"].get("snapshot_key") if line.strip() else None
        if key:
            return int(key[0])
    return None


def test_idle_database_with_heartbeats_advances_the_slot(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdchb")
    run_sql(
        postgres_db,
        "CREATE TABLE quiet (id int PRIMARY KEY)",
        "CREATE TABLE heartbeat (id int PRIMARY KEY, ts timestamptz)",
    )
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{
            "table.include.list": r"public\.quiet",
            "heartbeat.interval.ms": "500",
            "heartbeat.action.query": "INSERT INTO heartbeat VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET ts = now()",
            "status.update.interval.ms": "500",
        },
    )  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        read_events(bootstrap, f"__debezium-heartbeat.{prefix}", 2, timeout=60, settle=0)
        first = confirmed_flush_lsn(postgres_db, config["slot.name"])
        deadline = time.monotonic() + 60
        later = first
        while time.monotonic() < deadline and later <= first:
            time.sleep(1)
            later = confirmed_flush_lsn(postgres_db, config["slot.name"])
        assert later > first, "confirmed_flush_lsn did not advance on an idle database"
        beats = read_events(bootstrap, f"__debezium-heartbeat.{prefix}", 2, settle=0)
        assert key(beats[0]) == {"serverName": prefix} and isinstance(value(beats[0])["ts_ms"], int)
    finally:
        w.stop()


@ON_PG15_AND_PG18
def test_signal_table_runs_an_incremental_snapshot(kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcsig")
    run_sql(
        postgres_db,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g",
        "CREATE TABLE dbz_signal (id text PRIMARY KEY, type text NOT NULL, data text)",
    )
    config = cdc_config(
        pg_server.port, dbname(postgres_db), prefix,
        **{
            "table.include.list": r"public\.t",
            "snapshot.mode": "no_data",
            "signal.data.collection": "public.dbz_signal",
            "incremental.snapshot.chunk.size": "10",
        },
    )  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        run_sql(postgres_db, "INSERT INTO t VALUES (51, 'streamed')")
        read_events(bootstrap, f"{prefix}.public.t", 1)
        run_sql(
            postgres_db,
            "INSERT INTO dbz_signal VALUES ('s1', 'execute-snapshot', '{\"data-collections\": [\"public\\\\.t\"], \"type\": \"incremental\"}')",
        )
        events = read_events(bootstrap, f"{prefix}.public.t", 52, settle=2)
        reads = [value(r) for r in events if value(r)["op"] == "r"]
        assert sorted(r["after"]["id"] for r in reads) == list(range(1, 52))
        assert {r["source"]["snapshot"] for r in reads} == {"incremental"}
    finally:
        w.stop()


def test_streaming_starts_after_an_lsn_recorded_elsewhere(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """The backfill hand-off: the slot exists before the backfill reads; the backfill records the
    LSN it read at; the connector streams only what committed after it."""
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdclsn")
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.t", "snapshot.mode": "no_data"}
    )
    run_sql(
        postgres_db,
        "CREATE TABLE t (id int PRIMARY KEY)",
        f"CREATE PUBLICATION {config['publication.name']} FOR TABLE t",
    )
    run_sql(postgres_db, f"SELECT pg_create_logical_replication_slot('{config['slot.name']}', 'pgoutput')")
    run_sql(postgres_db, "INSERT INTO t SELECT generate_series(1, 3)")  # read by the backfill
    lsn = run_sql(postgres_db, "SELECT pg_current_wal_lsn()::text")[0][0]
    run_sql(postgres_db, "INSERT INTO t VALUES (4), (5)")
    config["streaming.start.lsn"] = lsn
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        events = read_events(bootstrap, f"{prefix}.public.t", 2, settle=2)
        assert [value(r)["after"]["id"] for r in events] == [4, 5]
    finally:
        w.stop()


@ON_PG15_AND_PG18
def test_table_changes_show_up_in_record_schemas(kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path) -> None:
    import orjson

    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcddl")
    run_sql(postgres_db, "CREATE TABLE t (id int PRIMARY KEY, n int)")
    config = cdc_config(
        pg_server.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.t", "snapshot.mode": "no_data"}
    )
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        run_sql(postgres_db, "INSERT INTO t VALUES (1, 1)")
        read_events(bootstrap, f"{prefix}.public.t", 1)
        run_sql(postgres_db, "ALTER TABLE t ADD COLUMN label text NOT NULL DEFAULT 'x'", "ALTER TABLE t ALTER COLUMN n TYPE bigint")
        run_sql(postgres_db, "INSERT INTO t VALUES (2, 5000000000, 'y')")
        events = read_events(bootstrap, f"{prefix}.public.t", 2)

        def after_fields(record: Any) -> dict[str, Any]:
            schema = orjson.loads(record.value)["schema"]
            after = next(f for f in schema["fields"] if f["field"] == "after")
            return {f["field"]: f["type"] for f in after["fields"]}

        assert after_fields(events[0]) == {"id": "int32", "n": "int32"}
        assert after_fields(events[1]) == {"id": "int32", "n": "int64", "label": "string"}
        assert value(events[1])["after"] == {"id": 2, "n": 5000000000, "label": "y"}
    finally:
        w.stop()


@pytest.mark.parametrize("schemas", ["true", "false"])
def test_native_encoding_writes_the_python_paths_bytes(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path, schemas: str
) -> None:
    """Two connectors capture the same changes, one with ``native.encoding=false``: every key and
    value in their topics is the same bytes, apart from the prefix and the processing time."""
    import re

    bootstrap = kafka.bootstrap_servers
    table = f"nat_{schemas}"
    run_sql(
        postgres_db,
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, n int, small smallint, flag boolean, ratio float8, label text NOT NULL,"
        " code varchar(12), price numeric(12,2) NOT NULL, whole numeric(18,0), at timestamptz, at3 timestamptz(3),"
        " local_ts timestamp, day date, uid uuid, doc jsonb, blob bytea, clock time, clock3 time(3))",
    )
    tag = unique_topic_name("n")[-6:]
    prefixes = {"native": f"nat{tag}", "python": f"pyt{tag}"}  # the same length, compared as bytes
    w = worker(tmp_path, bootstrap)
    extra = {
        "table.include.list": rf"public\.{table}", "snapshot.mode": "no_data", "slot.drop.on.stop": "true",
        "value.converter.schemas.enable": schemas, "key.converter.schemas.enable": schemas,
    }  # fmt: skip
    configs = {
        name: cdc_config(postgres.port, dbname(postgres_db), prefix, **extra, **({"native.encoding": "false"} if name == "python" else {}))
        for name, prefix in prefixes.items()
    }  # fmt: skip
    w.start(*(write_connector(tmp_path / f"{name}.json", name, config) for name, config in configs.items()))
    try:
        w.wait_running("native")
        w.wait_running("python")
        time.sleep(1.0)
        run_sql(
            postgres_db,
            f"INSERT INTO {table} SELECT g, g * 7, (g % 100)::smallint, g % 2 = 0, g / 8.0, 'l' || g || E'\\u00e9\\u0001\"\\\\',"
            " CASE WHEN g % 5 = 0 THEN NULL ELSE 'c' || g END, g * 1.25, g::bigint * 1000000007, now() - g * interval '1.001 second',"
            " now(), timestamp '2024-02-29 23:59:59.999999' + g * interval '1 day', date '1969-12-31' + g,"
            " md5(g::text)::uuid, jsonb_build_object('g', g), CASE WHEN g % 4 = 0 THEN NULL ELSE int4send(g) END,"
            " time '00:00:00' + g * interval '217.123457 second', time '23:59:59.999' - g * interval '1.5 second'"
            " FROM generate_series(1, 400) g",
        )
        run_sql(postgres_db, f"INSERT INTO {table} (id, label, price) VALUES (1000, E'\\U0001F600 x', -0.01)")
        run_sql(postgres_db, f"UPDATE {table} SET label = label || '!', ratio = -ratio WHERE id % 3 = 0")
        run_sql(postgres_db, f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        run_sql(postgres_db, f"UPDATE {table} SET n = NULL WHERE id % 7 = 0", f"UPDATE {table} SET id = id + 5000 WHERE id = 11")
        run_sql(postgres_db, f"DELETE FROM {table} WHERE id % 10 = 1")
        run_sql(postgres_db, f"ALTER TABLE {table} REPLICA IDENTITY DEFAULT")
        run_sql(postgres_db, f"DELETE FROM {table} WHERE id % 10 = 2")
        expected = 401 + 133 + 57 + 3 + 2 * 40 + 2 * 40  # inserts, updates, key change (d, tombstone, c), deletes + tombstones
        got = {name: read_events(bootstrap, f"{prefix}.public.{table}", expected, timeout=120) for name, prefix in prefixes.items()}
        natively = re.findall(r"Slot (\S+): row changes are serialized natively", w.log(tail=1_000_000))
        assert natively == [configs["native"]["slot.name"]]  # and only there
        assert f"Table public.{table}: changes are serialized natively" in w.log(tail=1_000_000)
    finally:
        w.stop()
    processing_time = re.compile(rb'"ts_ms":\d+,"ts_us":\d+,"ts_ns":\d+}(}?)$')

    def normalized(records: list[Any], prefix: str) -> list[tuple[bytes | None, bytes | None]]:
        out = []
        for r in records:
            k = None if r.key is None else r.key.replace(prefix.encode(), b"PREFIX")
            v = None if r.value is None else processing_time.sub(rb"\1", r.value.replace(prefix.encode(), b"PREFIX"))
            out.append((k, v))
        return out

    native_records = normalized(got["native"], prefixes["native"])
    assert native_records == normalized(got["python"], prefixes["python"])
    assert len(native_records) == expected
    assert {(value(r) or {}).get("op") for r in got["native"]} == {"c", "u", "d", None}


def test_unchanged_toast_values_and_the_handling_modes(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """An update that leaves a TOASTed column alone carries Debezium's placeholder for it (text and
    bytea); ``decimal.handling.mode=string`` and ``time.precision.mode=connect`` shape the values."""
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdctoast")
    run_sql(
        postgres_db,
        "CREATE TABLE docs (id int PRIMARY KEY, n int, body text, blob bytea, price numeric(10,2), day date,"
        " at_time time(3), local_ts timestamp)",
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",
        "ALTER TABLE docs ALTER COLUMN blob SET STORAGE EXTERNAL",
    )
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.docs", "snapshot.mode": "no_data", "value.converter.schemas.enable": "false",
           "decimal.handling.mode": "string", "time.precision.mode": "connect"},
    )  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        time.sleep(1.0)
        body = "x" * 20_000  # stored out of line (EXTERNAL: not compressed), so an update may omit it
        run_sql(
            postgres_db,
            "INSERT INTO docs VALUES (1, 1, %s, decode(repeat('ab', 10000), 'hex'), 12.34, '2024-03-01', '12:34:56.789',"
            " '2024-03-01 10:11:12.345678')",
            params=(body,),
        )
        run_sql(postgres_db, "UPDATE docs SET n = 2 WHERE id = 1")
        created, updated = (value(r) for r in read_events(bootstrap, f"{prefix}.public.docs", 2))
    finally:
        w.stop()
    assert created["after"]["body"] == body
    assert base64.b64decode(created["after"]["blob"]) == b"\xab" * 10_000
    assert created["after"]["price"] == "12.34"  # decimal.handling.mode=string
    assert created["after"]["day"] == 19783  # Connect Date: days since the epoch
    assert created["after"]["at_time"] == 45296789  # Connect Time: ms of the day
    assert created["after"]["local_ts"] == 1709287872345  # Connect Timestamp: ms
    after = updated["after"]
    assert updated["op"] == "u" and after["n"] == 2
    assert after["body"] == "__debezium_unavailable_value"
    assert base64.b64decode(after["blob"]) == b"__debezium_unavailable_value"
    assert after["price"] == "12.34"
