"""Seeded random batches of JsonConverter envelopes (``schemas.enable=true``) for differential tests.

Each batch has one struct schema of flat fields of every Connect type a columnar sink writes
(int8 to int64, float32/64 ('float'/'double'), boolean, string, bytes, Decimal, Date, Time, Timestamp), optional or
required, some with defaults; payloads hold values across each type's range, nulls and missing
members where decoding allows them. The envelopes are written here, not by the converter, so that
nulls reach the reader (the converter writes a field's default in place of a null).
"""

from __future__ import annotations

import base64
import random
from typing import Any

import orjson

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
KINDS = ["int8", "int16", "int32", "int64", "float", "double", "boolean", "string", "bytes"]
KINDS += ["decimal", "date", "time", "timestamp"]


def _unscaled_bytes(unscaled: int) -> bytes:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def random_payload_value(rng: random.Random, field: dict[str, Any]) -> Any:
    """A JSON payload value for ``field`` (a schema JSON of one field), never null."""
    kind = field["type"]
    name = field.get("name")
    if name == DECIMAL:
        precision = int(field["parameters"].get("connect.decimal.precision", "38"))
        limit = 10 ** min(precision, 30)
        unscaled = rng.choice([0, 1, -1, limit - 1, -(limit - 1), rng.randrange(-limit + 1, limit)])
        return base64.b64encode(_unscaled_bytes(unscaled)).decode()
    if name == DATE:
        return rng.choice([0, -1, 18_000, -719_162, 2_932_896, rng.randrange(-50_000, 50_000)])
    if name == TIME:
        return rng.choice([0, 86_399_999, rng.randrange(0, 86_400_000)])
    if name == TIMESTAMP:
        return rng.choice([0, -1, 1_700_000_000_123, -62_135_596_800_000, rng.randrange(-(2**41), 2**42)])
    if kind in _INT_BITS:
        bits = _INT_BITS[kind]
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return rng.choice([0, -1, 1, low, high, rng.randint(low, high)])
    if kind in ("float", "double"):
        return rng.choice([0.0, -0.0, 1.5, -2.25, 1e300 if kind == "double" else 3.0e38, rng.uniform(-1e6, 1e6), 7])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        alphabet = "abcXYZ09 ,;\"'\\\n\té€😀"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
    assert kind == "bytes"
    return base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 10)))).decode()


def random_field(rng: random.Random, index: int) -> dict[str, Any]:
    """The schema JSON of one random field (``field`` named ``f<index>``)."""
    kind = rng.choice(KINDS)
    field: dict[str, Any] = {"field": f"f{index}_{kind}", "optional": rng.random() < 0.5}
    if kind == "decimal":
        precision = rng.choice([5, 10, 18, 38])
        scale = rng.randrange(0, min(precision, 10))
        field.update(type="bytes", name=DECIMAL, version=1)
        field["parameters"] = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    elif kind == "date":
        field.update(type="int32", name=DATE, version=1)
    elif kind == "time":
        field.update(type="int32", name=TIME, version=1)
    elif kind == "timestamp":
        field.update(type="int64", name=TIMESTAMP, version=1)
    else:
        field["type"] = kind
    if rng.random() < 0.25:
        field["default"] = random_payload_value(rng, field)
    return field


def random_schema(rng: random.Random, fields: int | None = None) -> dict[str, Any]:
    """A random struct schema JSON of flat fields."""
    count = fields if fields is not None else rng.randrange(1, 9)
    return {"type": "struct", "fields": [random_field(rng, i) for i in range(count)], "optional": False, "name": "row"}


def random_payload(
    rng: random.Random, schema: dict[str, Any], null_rate: float = 0.2, replace_null: bool = True
) -> dict[str, Any]:
    """A payload of ``schema``: nulls (written or left out) only where decoding allows them
    (``replace_null``: ``replace.null.with.default``, which lets required fields with a default be null)."""
    payload: dict[str, Any] = {}
    for field in schema["fields"]:
        nullable = field["optional"] or ("default" in field and replace_null)
        if nullable and rng.random() < null_rate:
            if rng.random() < 0.5:
                payload[field["field"]] = None
            continue
        payload[field["field"]] = random_payload_value(rng, field)
    return payload


def envelope(schema: dict[str, Any], payload: dict[str, Any]) -> bytes:
    return orjson.dumps({"schema": schema, "payload": payload})


def random_batch(
    rng: random.Random, rows: int, schema: dict[str, Any] | None = None, replace_null: bool = True
) -> tuple[dict[str, Any], list[bytes]]:
    """``(schema JSON, envelopes)``: ``rows`` records of one random schema."""
    schema = schema if schema is not None else random_schema(rng)
    return schema, [envelope(schema, random_payload(rng, schema, replace_null=replace_null)) for _ in range(rows)]
