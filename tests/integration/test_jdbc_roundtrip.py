"""table → JDBC source → topic → JDBC sink (auto.create) → table, on each dialect.

What a user checks: the copy has the same columns with the same types and nullability, the same
primary key, and the same values (NULLs, edge values, text that needs escaping in COPY) as the
table it came from. The records travel as JsonConverter envelopes, so every Connect type's JSON
form is exercised on the way.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.jdbc_helpers import (
    DIALECTS,
    JDBC_SINK,
    JDBC_SOURCE,
    JSON_CONVERTER,
    WORKER_SETTINGS,
    Database,
    connector_url,
    make_database,
    wait_for,
)
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

_TEXT = 'tab\there, new\nline, back\\slash, "quotes", \\N, ünïcödé ✓'

#: Per dialect: the column definitions (id first) and three rows: full, all NULL, edge values.
_TABLES: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {
    "postgresql": (
        [
            "id integer NOT NULL PRIMARY KEY",
            "c_smallint smallint",
            "c_bigint bigint",
            "c_real real",
            "c_double double precision",
            "c_numeric numeric(12,3)",
            "c_numeric_free numeric",
            "c_bool boolean",
            "c_text text",
            "c_bytes bytea",
            "c_date date",
            "c_time time",
            "c_timestamp timestamp",
            "c_ints integer[]",
            "c_texts text[]",
        ],
        [
            (
                1,
                7,
                9_000_000_000,
                1.5,
                2.25,
                decimal.Decimal("123456789.125"),
                decimal.Decimal("12345.6789"),
                True,
                "plain",
                b"\x00\x01\xff",
                dt.date(2024, 3, 1),
                dt.time(13, 45, 30, 123000),
                dt.datetime(2024, 2, 29, 23, 59, 59, 999000),
                [1, 2, 3],
                ["a", "b"],
            ),
            (2, *([None] * 14)),
            (
                3,
                -32768,
                -(2**63),
                -0.5,
                1e300,
                decimal.Decimal("-0.001"),
                decimal.Decimal("-98765432109876543210.0123456789"),
                False,
                _TEXT,
                b"",
                dt.date(1970, 1, 1),
                dt.time(0, 0),
                dt.datetime(1999, 12, 31, 0, 0, 0, 1000),
                [],
                ["x\ty", ""],
            ),
        ],
    ),
    "mariadb": (
        [
            "id int NOT NULL PRIMARY KEY",
            "c_tinyint tinyint",
            "c_smallint smallint",
            "c_bigint bigint",
            "c_float float",
            "c_double double",
            "c_decimal decimal(12,3)",
            "c_text text",
            "c_blob blob",
            "c_date date",
            "c_time time(3)",
            "c_datetime datetime(3)",
        ],
        [
            (
                1,
                -128,
                7,
                9_000_000_000,
                1.5,
                2.25,
                decimal.Decimal("123456789.125"),
                "plain",
                b"\x00\x01\xff",
                dt.date(2024, 3, 1),
                dt.timedelta(hours=13, minutes=45, seconds=30, milliseconds=123),
                dt.datetime(2024, 2, 29, 23, 59, 59, 999000),
            ),
            (2, *([None] * 11)),
            (
                3,
                127,
                -32768,
                -(2**63),
                -0.5,
                1e300,
                decimal.Decimal("-0.001"),
                _TEXT,
                b"",
                dt.date(1970, 1, 1),
                dt.timedelta(0),
                dt.datetime(1999, 12, 31, 0, 0, 0, 1000),
            ),
        ],
    ),
    "sqlite": (
        [
            "id INTEGER NOT NULL PRIMARY KEY",
            "c_int INTEGER",
            "c_real REAL",
            "c_numeric NUMERIC",
            "c_bool BOOLEAN",
            "c_text TEXT",
            "c_blob BLOB",
            "c_date DATE",
            "c_time TIME",
            "c_datetime DATETIME",
        ],
        [
            (
                1,
                9_000_000_000,
                2.25,
                "12.5",
                1,
                "plain",
                b"\x00\x01\xff",
                "2024-03-01",
                "13:45:30.123000",
                "2024-02-29 23:59:59.999000",
            ),
            (2, *([None] * 9)),
            (3, -(2**63), 1e300, "-0.001", 0, _TEXT, b"", "1970-01-01", "00:00:00", "1999-12-31 00:00:00.001000"),
        ],
    ),
}


def _normalised(columns: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    # MariaDB reports integer display widths (int(11), tinyint(4)) that carry no type information.
    return [
        (name, re.sub(r"^((?:tiny|small|big)?int(?:eger)?)\(\d+\)", r"\1", kind), null) for name, kind, null in columns
    ]


@pytest.mark.parametrize("kind", DIALECTS)
def test_table_to_topic_to_table_reproduces_the_table(
    kind: str, kafka: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db: Database = make_database(kind, request, tmp_path)
    columns, rows = _TABLES[kind]
    db.sql(f"CREATE TABLE everything ({', '.join(columns)})")
    for row in rows:
        db.sql(f"INSERT INTO everything VALUES ({', '.join(['%s'] * len(row))})", row)
    prefix = unique_topic_name(f"rt-{kind}") + "-"
    url = connector_url(db, request)
    settings: dict[str, Any] = {
        **WORKER_SETTINGS,
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "offset.flush.interval.ms": "500",
    }
    source = tmp_path / "source.json"
    sink = tmp_path / "sink.json"
    source.write_bytes(
        orjson.dumps(
            {
                "name": "rt-source",
                "config": {
                    "connector.class": JDBC_SOURCE,
                    "connection.url": url,
                    "mode": "incrementing",
                    "incrementing.column.name": "id",
                    "table.include.list": "everything",
                    "topic.prefix": prefix,
                    "poll.interval.ms": "200",
                },
            }
        )
    )
    sink.write_bytes(
        orjson.dumps(
            {
                "name": "rt-sink",
                "config": {
                    "connector.class": JDBC_SINK,
                    "connection.url": url,
                    "topics": prefix + "everything",
                    "table.name.format": "copied",
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
        worker.wait_running("rt-source")
        worker.wait_running("rt-sink")
        copied = wait_for(lambda: db.rows("copied"), lambda r: len(r) == len(rows), timeout=90, what="copied rows")
    finally:
        worker.stop()
    try:
        assert _normalised(db.columns("copied")) == _normalised(db.columns("everything"))
        assert db.primary_key("copied") == db.primary_key("everything") == ["id"]
        assert copied == db.rows("everything")
    finally:
        db.dispose()
