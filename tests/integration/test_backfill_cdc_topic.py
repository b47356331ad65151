"""A backfill that writes a CDC connector's topic, then that connector streaming on, into a sink.

What a user of the hand-off checks (issue #23): a table of every type the PostgreSQL CDC source
maps is backfilled into an 8-partition topic *as the CDC connector's snapshot* (``target.cdc``)
while a writer updates, deletes and inserts rows; the CDC connector is started from the printed
hand-off config; a JDBC sink with ``tasks.max=4`` upserts the unwrapped rows (and deletes on
tombstones) into a second database. At the end the sink's table equals the source table row by row,
and every key's records sit in one partition, so no consumer can apply them out of order.

The differential part: the CDC connector's own snapshot of the same table (another topic prefix,
another slot) is compared with the backfill's records for the rows the writer never touched: the
key bytes are equal, and the value bytes are equal once the fields that legitimately differ are
blanked (:data:`DIFFERING`) and the other prefix is renamed.

Rows: 20,000 by default, 100,000 (the issue's size, several minutes on a 2-core machine, most of it
the sink catching up and the connector's own snapshot) with ``SLUICE_TEST_FULL_SIZES=1``;
``SLUICE_BACKFILL_CDC_ROWS`` sets any other number.
"""

from __future__ import annotations

import decimal
import os
import random
import re
import struct
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from sluice.cli.backfill import handoff_connector
from sluice.connectors.source.postgres_cdc import catalog
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.snapshot import copy_out
from sluice.connectors.source.postgres_cdc.tables import Table
from sluice.deploy.kafka_stack import KafkaBroker
from sluice.worker.backfill import BackfillManager, JobState
from tests.integration.cdc_helpers import (
    JSON,
    BackgroundWriter,
    cdc_config,
    dbname,
    libpq,
    read_events,
    run_sql,
    worker,
    write_connector,
)
from tests.integration.jdbc_helpers import JDBC_SINK, WORKER_SETTINGS
from tests.integration.kafka_helpers import ConsumedRecord, unique_topic_name
from tests.services.postgres import PostgresServer
from tests.sizes import size

pytestmark = pytest.mark.integration

ROWS = int(os.environ.get("SLUICE_BACKFILL_CDC_ROWS") or size(20_000, 100_000))
PARTITIONS = 8

#: Fields of a read event that legitimately differ between the backfill and the connector's own
#: snapshot of the same row: when each was made (source.ts_*, the envelope's ts_*), the snapshot
#: marker (the connector marks each table's first and last rows, as Debezium does), and the point
#: each read at: the LSN (the backfill's slot consistent point, the connector's snapshot point), its
#: ``sequence`` ``[null,"<lsn>"]`` and transaction (the connector's; null in the backfill). xmin is
#: null in both.
DIFFERING = re.compile(rb'"(ts_ms|ts_us|ts_ns|lsn)":\d+|"snapshot":"[a-z_]+"|"txId":(\d+|null)|"sequence":"\[null,\\"\d+\\"\]"')

COLUMNS = """
    id bigint PRIMARY KEY,
    i2 smallint, i4 integer NOT NULL, f4 real, f8 double precision, flag boolean,
    price numeric(10,2), wide numeric(30,8), free numeric, cash money,
    name text, code char(5), vc varchar(20),
    d date, t time, t3 time(3), ts timestamp, ts3 timestamp(3), tstz timestamptz, tstz0 timestamptz(0),
    ttz timetz, iv interval,
    doc json, docb jsonb, uid uuid, blob bytea, x xml, addr inet, m {mood},
    tags text[], nums integer[], prices numeric(8,3)[], days date[], stamps timestamptz[],
    flags bit(12), bits varbit(20)
"""

#: One row per ``i`` (a NULL in most nullable columns now and then).
ROW_SQL = """
SELECT i,
  CASE WHEN i % 17 = 0 THEN NULL ELSE (i % 32000 - 16000)::int2 END,
  (i * 7 - 50000)::int4,
  CASE WHEN i % 19 = 0 THEN NULL ELSE (i / 7.0)::real END,
  CASE WHEN i % 13 = 0 THEN NULL ELSE i * 1.0000001 / 3 END,
  CASE WHEN i % 23 = 0 THEN NULL ELSE i % 2 = 0 END,
  (i % 100000) / 100.0 - 500,
  CASE WHEN i % 11 = 0 THEN NULL ELSE i::numeric * 123456789.12345678 - 1e18 END,
  round(i::numeric / 7, (i % 25)::int) * CASE WHEN i % 3 = 0 THEN -1 ELSE 1 END,
  ((i % 100000) / 100.0 - 20)::numeric::money,
  'name ' || i || CASE WHEN i % 5 = 0 THEN E' "quoted" \\\\ tab\\t é ✓' ELSE '' END,
  lpad((i % 1000)::text, 3, '0'),
  'v' || i,
  DATE '2000-01-01' + (i % 20000)::int - 10000,
  TIME '00:00' + make_interval(secs => (i * 1.234567) % 86400),
  TIME '00:00' + make_interval(secs => (i * 1.234) % 86400),
  TIMESTAMP '1960-01-01' + make_interval(secs => i * 1234.567891),
  TIMESTAMP '1990-01-01' + make_interval(secs => i * 98.765),
  TIMESTAMPTZ '1965-06-01 00:00:00+00' + make_interval(secs => i * 4321.123457),
  TIMESTAMPTZ '2020-06-01 00:00:00+02' + make_interval(secs => i * 61),
  ((TIME '00:00' + make_interval(secs => (i % 86400) + 0.25))::text || CASE WHEN i % 2 = 0 THEN '-03' ELSE '+05:30' END)::timetz,
  make_interval(years => (i % 3)::int, months => (i % 14)::int, days => (i % 40)::int, secs => i * 1.5),
  json_build_object('i', i, 's', 'x' || i),
  jsonb_build_object('k', i, 'arr', jsonb_build_array(1, 'two', null)),
  md5(i::text)::uuid,
  decode(md5(i::text), 'hex') || CASE WHEN i % 4 = 0 THEN '\\x00ff'::bytea ELSE ''::bytea END,
  ('<a n="' || i || '">&amp;</a>')::xml,
  ('10.0.' || (i % 256) || '.' || (i % 200) || CASE WHEN i % 2 = 0 THEN '/32' ELSE '/24' END)::inet,
  (ARRAY['sad', 'ok', 'happy'])[(i % 3)::int + 1]::{mood},
  CASE WHEN i % 29 = 0 THEN NULL ELSE ARRAY['a' || i, NULL, 'b c', 'q"u,o{{te}}'] END,
  ARRAY[i::int, -i::int, NULL],
  ARRAY[(i % 1000) / 8.0, NULL]::numeric(8,3)[],
  ARRAY[DATE '2020-02-29' + (i % 100)::int],
  ARRAY[TIMESTAMPTZ '2021-01-01 00:00:00.5+00' + make_interval(secs => i)],
  (i % 4096)::int::bit(12),
  CASE WHEN i % 37 = 0 THEN NULL ELSE substring(((i * 7919) % 1048576)::int::bit(20)::varbit FROM 1 FOR (i % 21)::int) END
FROM {source}
"""


class Writer(BackgroundWriter):
    """Updates, deletes and inserts rows until stopped; remembers every id it touched."""

    def __init__(self, url: str, mood: str) -> None:
        super().__init__(url, name="cdc-topic-writer", seed=23, pause_s=0.003)
        self.touched: set[int] = set()
        self._next_id = ROWS + 1
        self._insert = "INSERT INTO items " + ROW_SQL.format(mood=mood, source="(SELECT {}::bigint AS i) s")

    def step(self, conn: psycopg.Connection[Any], rnd: random.Random) -> None:
        roll = rnd.random()
        victim = rnd.randrange(1, self._next_id)
        if roll < 0.5:
            conn.execute(
                "UPDATE items SET i4 = i4 + 1, name = %s, tstz = now(), price = price + 0.01, "
                "free = free * 3, tags = array_append(tags, 'u'), docb = docb || '{\"u\": true}', "
                "iv = iv + interval '1 month 1 second' WHERE id = %s",
                (f"updated {self.commits}", victim),
            )
        elif roll < 0.75:
            conn.execute("DELETE FROM items WHERE id = %s", (victim,))
        else:
            with conn.transaction():
                conn.execute(self._insert.replace("{}", str(self._next_id)))  # type: ignore[call-overload]
                conn.execute("UPDATE items SET flag = NOT flag WHERE id = %s", (victim,))
            self.touched.add(self._next_id)
            self._next_id += 1
        self.touched.add(victim)


def describe(url: str, config: dict[str, str]) -> tuple[PostgresCdcConfig, Table]:
    """The table as the CDC source describes it (its decoders give the rows it would emit)."""
    cfg = PostgresCdcConfig.from_task_config(config)
    with psycopg.connect(**cfg.conninfo(), autocommit=True) as conn:
        oid = catalog.table_oid(conn, "public", "items")
        assert oid is not None
        table = catalog.load_table(conn, oid, cfg, catalog.TableFilter(cfg))
    assert table is not None
    return cfg, table


def source_rows(cfg: PostgresCdcConfig, table: Table) -> dict[int, dict[str, Any]]:
    """Every row of the source as the CDC source converts it (its COPY decoder)."""
    names = ", ".join(f'"{c.name}"' for c in table.included_columns)
    with psycopg.connect(**cfg.conninfo(), autocommit=True) as conn:
        text = copy_out(conn, f"COPY (SELECT {names} FROM public.items) TO STDOUT".encode())
    rows = [table.from_copy(line) for line in text.split(b"\n") if line]
    return {row["id"]: row for row in rows}


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def canonical(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """A row's values in one form whether they come from the CDC source's decoder or from the sink's
    table (bytes, base64 in JSON, float32 columns stored as REAL)."""
    out: dict[str, Any] = {}
    types = {c.name: c.ctype.schema for c in table.included_columns}
    for name, value in row.items():
        if isinstance(value, memoryview):
            value = bytes(value)
        if isinstance(value, dict) and "scale" in value:  # VariableScaleDecimal (the sink keeps it as JSON, bytes in hex)
            raw = value["value"]
            raw = bytes.fromhex(raw) if isinstance(raw, str) else raw
            value = decimal.Decimal(f"{int.from_bytes(raw, 'big', signed=True)}E-{value['scale']}")  # exact
        if isinstance(value, float) and types[name].type.name == "FLOAT32":
            value = _f32(value)
        out[name] = value
    return out


def sink_rows(url: str, table: Table) -> dict[int, dict[str, Any]]:
    names = [c.name for c in table.included_columns]
    quoted = ", ".join(f'"{n}"' for n in names)
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('public.items_copy')").fetchone()
        if not exists or exists[0] is None:
            return {}
        rows = conn.execute(f"SELECT {quoted} FROM items_copy").fetchall()
    return {row[0]: dict(zip(names, row)) for row in rows}


def read_topic(bootstrap: str, topic: str) -> list[ConsumedRecord]:
    """Every record of ``topic`` now (up to each partition's high watermark)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends if ends[p] > 0])
        records: list[ConsumedRecord] = []
        left = {p for p in ends if ends[p] > 0}
        deadline = time.monotonic() + 120
        while left and time.monotonic() < deadline:
            for msg in consumer.consume(5000, timeout=1.0):
                assert msg.error() is None, msg.error()
                p, o = msg.partition() or 0, msg.offset() or 0
                records.append(ConsumedRecord(topic, p, o, msg.key(), msg.value()))
                if o + 1 >= ends[p]:
                    left.discard(p)
        assert not left, f"partitions {left} of {topic} not read to their end"
        return records
    finally:
        consumer.close()


def test_backfill_into_the_cdc_topic_then_streaming_into_a_four_task_sink(
    backfills: BackfillManager, postgres: PostgresServer, postgres_db: str, kafka: KafkaBroker, tmp_path: Path
) -> None:
    """:data:`ROWS` rows backfilled, streamed on and sunk; byte-compared with the connector's own
    snapshot. The small size (20,000) still crosses every boundary the test relies on: 4 Spark
    reads of 5,000 rows into 8 partitions, the connector's own snapshot in several chunks of its
    ``snapshot.chunk.size`` (10,000; the writer's inserts make a last, partial one) and polls of its
    ``max.batch.size`` (2,048), the 4 sink tasks reading their share of the 8 partitions (some
    5,000 records each) in several puts of ``max.poll.records`` (2,000), and thousands of writer
    changes racing the read and the hand-off.
    ``SLUICE_TEST_FULL_SIZES=1`` runs the original 100,000 rows."""
    bootstrap = kafka.bootstrap_servers
    mood = f"mood_{uuid.uuid4().hex[:6]}"
    run_sql(
        postgres_db,
        f"CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy')",
        f"CREATE TABLE items ({COLUMNS.format(mood=mood)})",
        "INSERT INTO items " + ROW_SQL.format(mood=mood, source=f"generate_series(1, {ROWS}) AS g(i)"),
    )
    prefix = unique_topic_name("cdcbf")
    config = cdc_config(postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.items"})
    target_db = postgres.create_database(f"sink_{uuid.uuid4().hex[:8]}")
    topic = f"{prefix}.public.items"

    writer = Writer(postgres_db, mood)
    writer.start()
    try:
        time.sleep(0.3)
        started = time.monotonic()
        backfills.submit(
            {
                "id": "items",
                "kind": "jdbc_to_topic",
                "source": {
                    "connection.url": postgres.jdbc_url(dbname(postgres_db)),
                    "connection.user": "postgres",
                    "table": "public.items",
                    "num.partitions": 4,
                },
                "target": {"partitions": PARTITIONS, "cdc": {"name": "items-cdc", "config": config}},
            }
        )
        status = backfills.wait("items", timeout=600)
        backfill_seconds = time.monotonic() - started
        assert status.state is JobState.SUCCEEDED, status.error
        assert status.details["topic"] == topic and status.details["partitions"] == PARTITIONS
        backfilled_rows = status.rows_done
        assert backfilled_rows == status.rows_total

        # What `sluice backfill status items --handoff` prints: the connector to create.
        connector = handoff_connector(backfills.get("items"), {})
        assert connector is not None and connector["name"] == "items-cdc"
        assert connector["config"]["snapshot.mode"] == "no_data" and connector["config"]["slot.name"] == config["slot.name"]
        sink = {
            "connector.class": JDBC_SINK,
            "tasks.max": "4",
            "topics": topic,
            "connection.url": postgres.jdbc_url(dbname(target_db)),
            "connection.user": "postgres",
            "table.name.format": "items_copy",
            "auto.create": "true",
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "pk.fields": "id",
            "delete.enabled": "true",
            "key.converter": JSON,
            "value.converter": JSON,
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        }
        w = worker(tmp_path, bootstrap, **WORKER_SETTINGS).start(
            write_connector(tmp_path / "cdc.json", connector["name"], connector["config"]),
            write_connector(tmp_path / "sink.json", "items-sink", sink),
        )
        try:
            w.wait_running("items-cdc")
            w.wait_running("items-sink", tasks=4, timeout=60)
            time.sleep(3.0)  # the writer keeps going while the stream and the sink run
            writer.stop()
            cfg, table = describe(postgres_db, config)
            expected = {k: canonical(table, v) for k, v in source_rows(cfg, table).items()}
            deadline = time.monotonic() + 240
            differing: list[int] = []
            while time.monotonic() < deadline:
                actual = {k: canonical(table, v) for k, v in sink_rows(target_db, table).items()}
                differing = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
                if not differing:
                    break
                time.sleep(2.0)
            first = differing[0] if differing else 0
            assert not differing, (
                f"{len(differing)} rows differ (of {len(expected)}), e.g. id {first}: source {expected.get(first)} "
                f"sink {actual.get(first)}\n{w.log()[-3000:]}"
            )
        finally:
            w.stop()
    finally:
        writer.stop()
    assert writer.commits > 50 and len(expected) > ROWS // 2

    # Every key's records (the backfill's and the stream's) are in one partition.
    records = read_topic(bootstrap, topic)
    partitions_of: dict[bytes, set[int]] = defaultdict(set)
    for record in records:
        assert record.key is not None
        partitions_of[record.key].add(record.partition)
    split = [k for k, ps in partitions_of.items() if len(ps) > 1]
    assert not split, f"{len(split)} keys in several partitions, e.g. {split[0][:200]!r}"
    assert len({r.partition for r in records}) == PARTITIONS
    backfilled = [r for r in records if r.value is not None and b'"op":"r"' in r.value]
    assert len(backfilled) == backfilled_rows

    # The CDC connector's own snapshot of the same table, under another prefix and slot.
    other_prefix = unique_topic_name("cdcsnap")
    snapshot_config = cdc_config(
        postgres.port, dbname(postgres_db), other_prefix, **{"table.include.list": r"public\.items", "snapshot.mode": "initial_only"}
    )
    (tmp_path / "w2").mkdir()
    w2 = worker(tmp_path / "w2", bootstrap).start(write_connector(tmp_path / "snap.json", "items-snapshot", snapshot_config))
    try:
        w2.wait_running("items-snapshot")
        snapshot = read_events(bootstrap, f"{other_prefix}.public.items", len(expected), timeout=180)
    finally:
        w2.stop()
    untouched = set(range(1, ROWS + 1)) - writer.touched
    by_key = {r.key: r for r in backfilled}
    compared = 0
    for record in snapshot:
        assert record.key is not None and record.value is not None
        key = record.key.replace(other_prefix.encode(), prefix.encode())
        row_id = int(re.search(rb'"payload":\{"id":(-?\d+)\}', key).group(1))  # type: ignore[union-attr]
        if row_id not in untouched:
            continue
        mine = by_key[key]  # the key bytes are equal: it is found by them
        theirs = DIFFERING.sub(b"", record.value.replace(other_prefix.encode(), prefix.encode()))
        assert DIFFERING.sub(b"", mine.value or b"") == theirs, f"id {row_id}:\n{mine.value!r}\n{record.value!r}"
        compared += 1
    assert compared > len(untouched) * 0.99, (compared, len(untouched))
    print(f"{ROWS} rows: backfill {backfill_seconds:.1f}s; {writer.commits} writer commits; {compared} records byte-compared")


@pytest.mark.parametrize(
    "modes",
    [
        {"decimal.handling.mode": "double", "time.precision.mode": "connect"},
        {
            "decimal.handling.mode": "string",
            "time.precision.mode": "adaptive_time_microseconds",
            "key.converter.schemas.enable": "false",
            "schema.name.adjustment.mode": "avro",
        },
        {"value.converter.decimal.format": "NUMERIC", "key.converter.decimal.format": "NUMERIC", "value.converter.schemas.enable": "false"},
    ],
    ids=["double-connect", "string-micros-avro", "numeric-schemaless"],
)
def test_every_conversion_mode_gives_the_connectors_snapshot_bytes(
    modes: dict[str, str], backfills: BackfillManager, postgres: PostgresServer, postgres_db: str, kafka: KafkaBroker, tmp_path: Path
) -> None:
    """The connector's conversion settings are followed: for every row, the backfilled key bytes equal
    the connector's own snapshot's, and the value bytes too apart from :data:`DIFFERING`."""
    bootstrap = kafka.bootstrap_servers
    mood = f"mood_{uuid.uuid4().hex[:6]}"
    rows = 500
    run_sql(
        postgres_db,
        f"CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy')",
        f"CREATE TABLE items ({COLUMNS.format(mood=mood)})",
        "INSERT INTO items " + ROW_SQL.format(mood=mood, source=f"generate_series(1, {rows}) AS g(i)"),
    )
    prefix, other = unique_topic_name("cdcmode"), unique_topic_name("cdcsnapmode")
    config = cdc_config(postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.items", **modes})
    backfills.submit(
        {
            "id": "modes",
            "kind": "jdbc_to_topic",
            "source": {"connection.url": postgres.jdbc_url(dbname(postgres_db)), "connection.user": "postgres", "table": "public.items"},
            "target": {"partitions": 3, "cdc": {"name": "modes-cdc", "config": config}},
        }
    )
    status = backfills.wait("modes", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    backfilled = read_topic(bootstrap, status.details["topic"])
    assert len(backfilled) == rows

    snapshot_config = {**cdc_config(postgres.port, dbname(postgres_db), other, **{"table.include.list": r"public\.items", **modes}),
                       "snapshot.mode": "initial_only"}  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "snap.json", "snap", snapshot_config))
    try:
        w.wait_running("snap")
        snapshot = read_events(bootstrap, f"{other}.public.items", rows, timeout=120)
    finally:
        w.stop()
    # The connector's topic here has one partition (auto-created): compare by key.
    by_key = {r.key: r.value for r in backfilled}
    other_name, name = other.encode(), prefix.encode()
    if modes.get("schema.name.adjustment.mode") == "avro":  # '-' is not allowed in Avro names
        other_name, name = other_name.replace(b"-", b"_"), name.replace(b"-", b"_")
    differing = []
    for record in snapshot:
        assert record.key is not None and record.value is not None
        key = record.key.replace(other.encode(), prefix.encode()).replace(other_name, name)
        assert key in by_key, f"no backfilled record with key {key!r}"
        theirs = DIFFERING.sub(b"", record.value.replace(other.encode(), prefix.encode()).replace(other_name, name))
        if DIFFERING.sub(b"", by_key[key] or b"") != theirs:
            differing.append((key, by_key[key], record.value))
    assert not differing, f"{len(differing)} of {rows} values differ, e.g.\n{differing[0][1]!r}\n{differing[0][2]!r}"
