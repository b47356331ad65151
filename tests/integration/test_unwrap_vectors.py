"""Debezium 3.6's own ExtractNewRecordState, run in Java, against Sluice's, byte for byte (issue #37).

``tests/compat/UnwrapVectors.java`` runs the real SMT over PostgreSQL-shaped change events under
several configurations (Debezium's documented "Adding metadata" example with ``operation.header``
among them) and serializes the result as a Connect worker does: key and value with JsonConverter,
every header with JsonConverter as the header converter (schemas on and off) and with
SimpleHeaderConverter. This test builds the same events in Python, runs Sluice's transform and
converters, and compares every byte. Java and the jars of Kafka Connect 4.3 and Debezium 3.6 are
required (fetched once into Sluice's cache); a missing one fails the test.
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Schema,
    SchemaAndValue,
    SourceRecord,
)
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.deploy.kafka_stack import find_java
from sluice.transforms import ExtractNewRecordState
from tests.services.debezium import ensure_debezium_jars
from tests.services.kafka_connect import ensure_connect_jars

pytestmark = pytest.mark.integration

PROGRAM = Path(__file__).resolve().parents[1] / "compat" / "UnwrapVectors.java"

ROW = Schema.struct(
    [
        ("id", INT32_SCHEMA),
        ("name", OPTIONAL_STRING_SCHEMA),
        ("score", Schema(INT32_SCHEMA.type, optional=True, default=7)),
    ],
    name="srv.public.users.Value",
    optional=True,
)
KEY = Schema.struct([("id", INT32_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA)], name="srv.public.users.Key")
SOURCE = Schema.struct(
    [
        *((n, STRING_SCHEMA) for n in ("version", "connector", "name")),
        ("ts_ms", INT64_SCHEMA),
        *((n, STRING_SCHEMA) for n in ("db", "schema", "table")),
        ("lsn", OPTIONAL_INT64_SCHEMA),
    ],
    name="io.debezium.connector.postgresql.Source",
)
TRANSACTION = Schema.struct(
    [("id", STRING_SCHEMA), ("total_order", INT64_SCHEMA), ("data_collection_order", INT64_SCHEMA)],
    name="event.block",
    optional=True,
)
ENVELOPE = Schema.struct(
    [
        ("before", ROW),
        ("after", ROW),
        ("source", SOURCE),
        ("transaction", TRANSACTION),
        ("op", STRING_SCHEMA),
        ("ts_ms", OPTIONAL_INT64_SCHEMA),
    ],
    name="srv.public.users.Envelope",
    version=2,
)
HEARTBEAT = Schema.struct([("ts_ms", INT64_SCHEMA)], name="io.debezium.connector.common.Heartbeat")
SOURCE_VALUE = {
    "version": "3.6.1.Final",
    "connector": "postgresql",
    "name": "srv",
    "ts_ms": 1_700_000_000_000,
    "db": "app",
    "schema": "public",
    "table": "users",
    "lsn": 123456,
}

CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "docs_metadata": {
        "add.fields": "op,table,lsn,source.ts_ms",
        "add.headers": "db",
        "delete.tombstone.handling.mode": "rewrite",
        "operation.header": "true",
    },
    "drop": {"delete.tombstone.handling.mode": "drop", "add.headers": "op"},
    "rewrite_with_tombstone": {
        "delete.tombstone.handling.mode": "rewrite-with-tombstone",
        "add.headers": "op,source.ts_ms:EVENT_TS,transaction.id,ts_ms,lsn",
        "add.headers.prefix": "",
        "add.fields": "op:OP,ts_ms,transaction.total_order",
        "add.fields.prefix": "cdc_",
        "replace.null.with.default": "false",
    },
    "rewrite_defaults": {"delete.tombstone.handling.mode": "rewrite"},
    "delete_to_tombstone": {"delete.tombstone.handling.mode": "delete-to-tombstone", "add.headers": "op"},
    "route": {"route.by.field": "name", "delete.tombstone.handling.mode": "rewrite"},
    "legacy": {"delete.handling.mode": "rewrite", "drop.tombstones": "false", "operation.header": "true"},
    "drop_fields": {"drop.fields.header.name": "drop_me", "drop.fields.from.key": "true"},
    "drop_fields_all": {"drop.fields.header.name": "drop_me", "drop.fields.keep.schema.compatible": "false"},
}


def _row(id_: int, name: str, score: int | None) -> dict[str, Any]:
    return {"id": id_, "name": name, "score": score}


def _envelope(op: str, before: dict | None, after: dict | None, in_transaction: bool) -> dict[str, Any]:
    transaction = {"id": "571:123456", "total_order": 3, "data_collection_order": 2} if in_transaction else None
    return {
        "before": before,
        "after": after,
        "source": SOURCE_VALUE,
        "transaction": transaction,
        "op": op,
        "ts_ms": 1_700_000_000_500,
    }


def _record(schema: Schema | None, value: Any, headers: tuple[tuple[str, Any], ...] = ()) -> SourceRecord:
    return SourceRecord(
        "srv.public.users", value, schema, {"id": 1, "name": "ann"}, KEY, timestamp=1_700_000_000_900, headers=headers
    )


EVENTS: dict[str, SourceRecord] = {
    "create": _record(ENVELOPE, _envelope("c", None, _row(1, "ann", None), False)),
    "update": _record(
        ENVELOPE,
        _envelope("u", _row(1, "ann", None), _row(1, "bob", 3), True),
        (("trace", SchemaAndValue(STRING_SCHEMA, "t-1")),),
    ),
    "delete": _record(ENVELOPE, _envelope("d", _row(1, "bob", None), None, True)),
    "tombstone": _record(None, None),
    "truncate": _record(ENVELOPE, _envelope("t", None, None, False)),
    "heartbeat": _record(HEARTBEAT, {"ts_ms": 5}),
    "update_drop_fields": _record(
        ENVELOPE,
        _envelope("u", None, _row(2, "cy", 4), False),
        (("drop_me", SchemaAndValue(Schema.array(STRING_SCHEMA), ["name", "id", "score"])),),
    ),
}


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _json_headers(schemas: bool) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"converter.type": "header", "schemas.enable": str(schemas).lower()})
    return converter


def _sluice_line(config: str, event: str) -> dict[str, Any]:
    smt = ExtractNewRecordState()
    smt.configure(CONFIGS[config])
    out = smt.apply(EVENTS[event])
    line: dict[str, Any] = {"config": config, "event": event, "dropped": out is None}
    if out is None:
        return line
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": "true"}, True)
    values.configure({"schemas.enable": "true"}, False)
    with_schemas, plain, simple = _json_headers(True), _json_headers(False), SimpleHeaderConverter()
    line["topic"] = out.topic
    line["key"] = _b64(keys.from_connect_data(out.topic, out.key_schema, out.key))
    line["value"] = _b64(values.from_connect_data(out.topic, out.value_schema, out.value))
    line["headers"] = [
        [k, *(_b64(c.from_connect_header(out.topic, k, None, v)) for c in (with_schemas, plain, simple))]
        for k, v in out.headers or ()
    ]
    return line


def _debezium_lines() -> list[dict[str, Any]]:
    classpath = f"{ensure_connect_jars()}/*:{ensure_debezium_jars()}/*"
    with tempfile.TemporaryDirectory() as scratch:  # the single-file launch writes nothing, but keep cwd clean
        result = subprocess.run(
            [find_java(), "-cp", classpath, str(PROGRAM)], capture_output=True, cwd=scratch, check=False, timeout=120
        )
    if result.returncode != 0:
        pytest.fail(f"{PROGRAM.name} failed ({result.returncode}):\n{result.stderr.decode(errors='replace')}")
    return [orjson.loads(raw) for raw in result.stdout.splitlines()]


def _readable(line: dict[str, Any]) -> dict[str, Any]:
    def text(b64: str | None) -> str | None:
        return None if b64 is None else base64.b64decode(b64).decode(errors="replace")

    shown = dict(line)
    for part in ("key", "value"):
        if part in shown:
            shown[part] = text(shown[part])
    if "headers" in shown:
        shown["headers"] = [[h[0], *map(text, h[1:])] for h in shown["headers"]]
    return shown


def test_sluice_unwraps_and_serializes_what_debezium_and_connect_do() -> None:
    theirs = _debezium_lines()
    assert len(theirs) == len(CONFIGS) * len(EVENTS)
    mismatches = []
    for line in theirs:
        ours = _sluice_line(line["config"], line["event"])
        if ours != line:
            mismatches.append(
                f"{line['config']}/{line['event']}:\n  debezium: {_readable(line)}\n  sluice:   {_readable(ours)}"
            )
    assert not mismatches, "\n".join(mismatches)
