"""Seeded random Debezium change events of PostgreSQL tables, as the CDC source emits them, for
differential tests of what reads them (ExtractNewRecordState's raw path, sinks behind it).

A table's row schema mixes the Connect types the PostgreSQL source emits (integers, floats,
booleans, text, bytea, Decimal and VariableScaleDecimal, Connect's and Debezium's temporal types,
JSON, UUID, enums, bit strings, arrays, points), optional or required, some with defaults; its
events carry the source's ``source`` block (:data:`SOURCE_SCHEMA`) and sometimes a ``transaction``
block, and are of every operation: ``c``, ``r``, ``u`` (with or without ``before``), ``d``
(followed by a tombstone), ``t``. :func:`wire_nulls` turns some members null or leaves them out,
as a converter never writes them (it writes a field's default in place of a null).
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct
from collections.abc import Callable
from typing import Any

import orjson

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.connectors.cdc.envelope import envelope_schema
from sluice.connectors.source.postgres_cdc.tables import SOURCE_SCHEMA
from sluice.connectors.source.postgres_cdc.types import POINT_SCHEMA, VARIABLE_SCALE_DECIMAL, semantic

__all__ = ["SOURCE_SCHEMA", "Table", "key_schema", "random_table", "wire_nulls"]

Value = Callable[[random.Random], Any]
_UTC = dt.UTC


def _float32(rng: random.Random) -> float:
    value = rng.choice([0.0, -0.0, 1.5, -2.25, 3.0e38, rng.uniform(-1e6, 1e6)])
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _decimal(scale: int, digits: int) -> Value:
    def make(rng: random.Random) -> decimal.Decimal:
        unscaled = rng.choice([0, 1, -1, 10**digits - 1, rng.randrange(-(10**digits) + 1, 10**digits)])
        return decimal.Decimal(unscaled).scaleb(-scale)

    return make


def _text(rng: random.Random) -> str:
    return "".join(rng.choice("abcXYZ09 ,;\"'\\\n\té€😀") for _ in range(rng.randrange(0, 12)))


def _blob(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 10)))


def _timestamp(rng: random.Random) -> dt.datetime:
    millis = rng.choice([0, -1, 1_700_000_000_123, rng.randrange(-(2**40), 2**42)])
    return dt.datetime(1970, 1, 1, tzinfo=_UTC) + dt.timedelta(milliseconds=millis)


def _point(rng: random.Random) -> dict[str, Any]:
    x, y = rng.uniform(-180, 180), rng.uniform(-90, 90)
    return {"x": x, "y": y, "wkb": struct.pack("<BIdd", 1, 1, x, y), "srid": rng.choice([None, 4326])}


#: ``(column name, required schema, a random value)`` for each kind of column.
COLUMNS: list[tuple[str, Schema, Value]] = [
    ("small", Schema(Type.INT16), lambda r: r.randint(-(2**15), 2**15 - 1)),
    ("big", Schema(Type.INT64), lambda r: r.choice([0, -(2**63), 2**63 - 1, r.randint(-(2**40), 2**40)])),
    ("flag", Schema(Type.BOOLEAN), lambda r: r.random() < 0.5),
    ("ratio", Schema(Type.FLOAT32), _float32),
    ("score", Schema(Type.FLOAT64), lambda r: r.choice([0.0, -0.0, 1e300, 2.5e-300, r.uniform(-1e9, 1e9)])),
    ("name", Schema(Type.STRING), _text),
    ("blob", Schema(Type.BYTES), _blob),
    ("price", Decimal.schema(2, precision=10), _decimal(2, 8)),
    ("huge", Decimal.schema(0, precision=38), _decimal(0, 38)),
    ("amount", VARIABLE_SCALE_DECIMAL, lambda r: {"scale": r.randrange(0, 6), "value": r.randbytes(r.randrange(1, 9))}),
    ("day", Date.SCHEMA, lambda r: dt.date(1970, 1, 1) + dt.timedelta(days=r.randrange(-700_000, 2_900_000))),
    ("day_n", semantic(Type.INT32, "io.debezium.time.Date"), lambda r: r.randrange(-700_000, 2_900_000)),
    (
        "clock",
        Time.SCHEMA,
        lambda r: dt.time(r.randrange(24), r.randrange(60), r.randrange(60), r.randrange(1000) * 1000),
    ),
    ("micro_t", semantic(Type.INT64, "io.debezium.time.MicroTime"), lambda r: r.randrange(86_400_000_000)),
    ("at", Timestamp.SCHEMA, _timestamp),
    ("at_us", semantic(Type.INT64, "io.debezium.time.MicroTimestamp"), lambda r: r.randrange(-(2**50), 2**52)),
    ("zoned", semantic(Type.STRING, "io.debezium.time.ZonedTimestamp"), lambda r: "2024-05-06T07:08:09.123456Z"),
    ("doc", semantic(Type.STRING, "io.debezium.data.Json"), lambda r: '{"a": [1, 2]}'),
    ("uid", semantic(Type.STRING, "io.debezium.data.Uuid"), lambda r: "0f8fad5b-d9cb-469f-a165-70867728950e"),
    (
        "mood",
        semantic(Type.STRING, "io.debezium.data.Enum", {"allowed": "sad,ok,happy"}),
        lambda r: r.choice(["sad", "ok"]),
    ),
    ("bits", semantic(Type.BYTES, "io.debezium.data.Bits", {"length": "12"}), lambda r: r.randbytes(2)),
    (
        "tags",
        Schema.array(Schema(Type.STRING, optional=True)),
        lambda r: [r.choice(["a", None, "é"]) for _ in range(3)],
    ),
    ("prices", Schema.array(Decimal.schema(3, optional=True)), lambda r: [_decimal(3, 6)(r), None]),
    ("spot", POINT_SCHEMA, _point),
]

_DEFAULTABLE = frozenset({"small", "big", "flag", "score", "name", "price", "day", "at", "mood"})


def key_schema(table: str) -> Schema:
    """The key schema of a table whose primary key is ``id``."""
    return Schema.struct([("id", Schema(Type.INT32))], name=f"srv.public.{table}.Key")


class Table:
    """One table's schemas and random events."""

    def __init__(self, rng: random.Random, name: str, columns: list[tuple[str, Schema, Value]]) -> None:
        self.rng, self.name = rng, name
        self.columns = columns
        row = Schema.struct(
            [("id", Schema(Type.INT32)), *((n, s) for n, s, _ in columns)],
            name=f"srv.public.{name}.Value",
            optional=True,
        )
        self.row_schema = row
        self.envelope_schema = envelope_schema(f"srv.public.{name}", row, SOURCE_SCHEMA)
        self.key_schema = key_schema(name)

    def row(self, row_id: int) -> dict[str, Any]:
        rng = self.rng
        out: dict[str, Any] = {"id": row_id}
        for (name, _, make), field in zip(self.columns, self.row_schema.fields[1:]):
            nullable = field.schema.optional or field.schema.default is not None
            out[name] = None if nullable and rng.random() < 0.2 else make(rng)
        return out

    def source(self, lsn: int) -> dict[str, Any]:
        rng = self.rng
        return {
            "version": "3.0.0", "connector": "postgresql", "name": "srv", "ts_ms": 1_700_000_000_000 + lsn,
            "snapshot": rng.choice(["false", "true", "last", None]), "db": "app", "sequence": rng.choice([None, '["1","2"]']),
            "ts_us": None, "ts_ns": None, "schema": "public", "table": self.name, "txId": rng.choice([None, 571 + lsn]),
            "lsn": rng.choice([None, 33_000_000 + lsn]), "xmin": None, "origin": None, "origin_lsn": None,
        }  # fmt: skip

    def event(self, op: str, row_id: int, lsn: int) -> dict[str, Any]:
        rng = self.rng
        before = self.row(row_id) if op == "d" or (op == "u" and rng.random() < 0.5) else None
        after = self.row(row_id) if op in "cur" else None
        transaction = None
        if rng.random() < 0.3:
            transaction = {"id": f"{571 + lsn}:{lsn}", "total_order": lsn, "data_collection_order": 1}
        return {
            "before": before, "after": after, "source": self.source(lsn), "transaction": transaction, "op": op,
            "ts_ms": 1_700_000_000_500 + lsn, "ts_us": rng.choice([None, 1_700_000_000_500_000 + lsn]), "ts_ns": None,
        }  # fmt: skip

    def events(self, count: int) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """``count`` events or more, ``(key, value)``; a delete is followed by its tombstone (value ``None``)."""
        rng = self.rng
        out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        lsn = 0
        while len(out) < count:
            lsn += 1
            op = rng.choice("ccrruuuddt")
            row_id = rng.randrange(1, 50)
            out.append(({"id": row_id}, self.event(op, row_id, lsn)))
            if op == "d":
                out.append(({"id": row_id}, None))
        return out


def random_table(rng: random.Random, name: str, columns: int = 10) -> Table:
    """A table of ``id`` and ``columns`` random columns, some optional, some with defaults."""
    chosen = rng.sample(COLUMNS, min(columns, len(COLUMNS)))
    picked: list[tuple[str, Schema, Value]] = []
    for column, schema, make in chosen:
        if rng.random() < 0.5:
            schema = schema.as_optional()
        if column in _DEFAULTABLE and rng.random() < 0.3:
            schema = schema.with_(default=make(rng))
        picked.append((column, schema, make))
    return Table(rng, name, picked)


def wire_nulls(
    rng: random.Random, raw: bytes, row_schema: Schema, *, replace_null: bool = True, rate: float = 0.3
) -> bytes:
    """``raw`` (an envelope the converter wrote) with some row members null or left out where a
    converter reads them (optional, or with a default it reads a null as: ``replace_null``), and
    sometimes ``source.snapshot`` null."""
    if rng.random() >= rate:
        return raw
    doc = orjson.loads(raw)
    payload = doc["payload"]
    for part in ("before", "after"):
        row = payload.get(part)
        if row is None:
            continue
        for field in row_schema.fields:
            nullable = field.schema.optional or (field.schema.default is not None and replace_null)
            if nullable and rng.random() < 0.3:
                if rng.random() < 0.5:
                    row[field.name] = None
                else:
                    row.pop(field.name, None)
    if rng.random() < 0.5:
        payload["source"]["snapshot"] = None
    return orjson.dumps(doc)
