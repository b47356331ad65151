"""The native Avro → Arrow reader (``read_avro_values``) against the decoded path, table for table.

The decoded path is what a sink does without the reader: ``AvroConverter.to_connect_batch`` (with
an in-memory Schema Registry behind ``httpx.MockTransport``) gives Connect values, and the S3
sink's Parquet format turns them and their Connect schema into an Arrow table. The reader must
give the same table (types, nullability and values, NaN bits included) for every batch it takes,
and take nothing the decoded path would read differently or refuse.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import random
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fastavro
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api.schema import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    Date,
    Decimal,
    Schema,
    Time,
    Timestamp,
    Type,
)
from sluice.connectors.s3_common.parquet_format import arrow_schema
from sluice.connectors.sink.elasticsearch.documents import document_bytes
from sluice.converters import avro_arrow
from sluice.converters.avro import AvroConverter
from sluice.converters.avro_arrow import avro_documents, read_avro_values
from sluice.converters.avro_data import AvroData, strip_logical_types
from sluice.converters.schema_registry import SchemaRegistryClient

URL = "http://registry:8081"
TOPIC = "orders"


@pytest.fixture(autouse=True)
def _native() -> None:
    if not avro_arrow.available():
        pytest.fail("sluice_native is not installed or is out of date: run `make setup` (it builds native/ with cargo)")


class Registry:
    """A Confluent-API registry in memory: ids by schema text, every subject at version 1."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def id_of(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path.startswith("/schemas/ids/"):
            return httpx.Response(200, json={"schema": self.texts[int(path.rpartition("/")[2]) - 1]})
        text = json.loads(request.content)["schema"]
        return httpx.Response(200, json={"id": self.id_of(text), "version": 1, "schema": text})

    def converter(self, **settings: Any) -> AvroConverter:
        converter = AvroConverter()
        converter.configure({"schema.registry.url": URL, **settings}, False)
        converter._registry = SchemaRegistryClient(URL, transport=httpx.MockTransport(self.handle))
        return converter


def decoded_table(registry: Registry, raws: list[bytes], **settings: Any) -> pa.Table:
    schemas, values = registry.converter(**settings).to_connect_batch(TOPIC, raws)
    return pa.Table.from_pylist(values, schema=arrow_schema(schemas[0]))


def write_foreign(registry: Registry, avro: dict[str, Any], datums: list[dict[str, Any]]) -> list[bytes]:
    """``datums`` (Avro's form) in Confluent's wire format, written by fastavro under ``avro``."""
    header = b"\x00" + registry.id_of(json.dumps(avro)).to_bytes(4, "big")
    parsed = fastavro.parse_schema(strip_logical_types(avro))
    out = []
    for datum in datums:
        buf = io.BytesIO()
        buf.write(header)
        fastavro.schemaless_writer(buf, parsed, datum)
        out.append(buf.getvalue())
    return out


def _bits(value: Any) -> Any:
    # NaN != NaN: floats compare by their bits.
    return struct.pack("<d", value) if isinstance(value, float) else value


def assert_same_table(native: pa.Table | None, expected: pa.Table) -> None:
    assert native is not None
    native.validate(full=True)  # offsets, UTF-8 and buffer sizes as Arrow requires them
    assert native.schema == expected.schema
    assert native.num_rows == expected.num_rows
    for name in expected.column_names:
        got = [_bits(v) for v in native.column(name).to_pylist()]
        want = [_bits(v) for v in expected.column(name).to_pylist()]
        assert got == want, name


SCHEMA = Schema.struct(
    [
        ("i8", INT8_SCHEMA),
        ("i16", INT16_SCHEMA.as_optional()),
        ("i32", INT32_SCHEMA),
        ("i64", INT64_SCHEMA.as_optional()),
        ("f32", FLOAT32_SCHEMA),
        ("f64", FLOAT64_SCHEMA.as_optional()),
        ("flag", BOOLEAN_SCHEMA.as_optional()),
        ("text", Schema(Type.STRING, optional=True)),
        ("raw", BYTES_SCHEMA.as_optional()),
        ("price", Decimal.schema(3, optional=True)),
        ("small", Decimal.schema(2, precision=9)),
        ("day", Date.OPTIONAL_SCHEMA),
        ("clock", Time.SCHEMA),
        ("at", Timestamp.OPTIONAL_SCHEMA),
        ("n", Schema(Type.INT32, optional=True, default=7)),
        ("label", Schema(Type.STRING, default="none")),
    ],
    name="test.Every",
)


def random_value(rng: random.Random) -> dict[str, Any]:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.2 else v

    def pick(*choices: Any) -> Any:
        return rng.choice(choices)

    text = "".join(rng.choice('aé✓😀\t"\\ z\x00') for _ in range(rng.randrange(0, 12)))
    big = 10**27 - 1
    return {
        "i8": pick(-128, 127, 0, rng.randint(-128, 127)),
        "i16": maybe(pick(-32768, 32767, rng.randint(-32768, 32767))),
        "i32": pick(0, -1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)),
        "i64": maybe(pick(2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1), 63, -65)),
        "f32": pick(0.0, -0.0, 1.5, rng.uniform(-1e30, 1e30), float("inf"), float("-inf"), float("nan"), 1e-45),
        "f64": maybe(pick(rng.uniform(-1e300, 1e300), float("nan"), -7.0, 5e-324, float("-inf"))),
        "flag": maybe(rng.random() < 0.5),
        "text": maybe(text),
        "raw": maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20)))),
        "price": maybe(decimal.Decimal(pick(big, -big, 0, -1, rng.randint(-big, big))).scaleb(-3)),
        "small": decimal.Decimal(pick(999_999_999, -999_999_999, rng.randint(-(10**9) + 1, 10**9 - 1))).scaleb(-2),
        "day": maybe(
            dt.date(1970, 1, 1) + dt.timedelta(days=pick(-719_162, 2_932_896, -1, rng.randint(-40000, 40000)))
        ),
        "clock": pick(dt.time(0), dt.time(23, 59, 59, 999000), dt.time(rng.randrange(24), rng.randrange(60))),
        "at": maybe(
            pick(
                dt.datetime(1, 1, 1, tzinfo=dt.UTC),
                dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC),
                dt.datetime(1960, 5, 4, 3, 2, 1, 5000, tzinfo=dt.UTC),
                dt.datetime(2000, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rng.randint(-(10**12), 10**12)),
            )
        ),
        "n": maybe(rng.randint(-5, 5)),
        "label": maybe("x" * rng.randrange(3)),
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("meta", [True, False])
def test_random_batches_of_every_type_read_as_the_decoded_path(seed: int, meta: bool) -> None:
    rng = random.Random(seed)
    registry = Registry()
    settings = {"connect.meta.data": str(meta).lower()}
    writer = registry.converter(**settings)
    avro = AvroData(connect_meta_data=meta).avro_schema(SCHEMA)
    for size in (1, 7, 400):
        values = [random_value(rng) for _ in range(size)]
        raws = writer.from_connect_batch(TOPIC, [SCHEMA] * size, values)
        expected = decoded_table(registry, raws, **settings)  # type: ignore[arg-type]
        assert_same_table(read_avro_values(raws, avro, connect_meta_data=meta), expected)  # type: ignore[arg-type]


FOREIGN = {
    "type": "record",
    "name": "Foreign",
    "namespace": "ext",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["string", "null"], "default": "anon"},
        {"name": "tiny", "type": {"type": "int", "connect.type": "int8"}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "maybe_colour", "type": ["null", {"type": "enum", "name": "Shade", "symbols": ["DARK", "LIGHT"]}]},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {
            "name": "cost",
            "type": {"type": "fixed", "name": "Cost", "size": 9, "logicalType": "decimal", "precision": 20, "scale": 4},
        },
        {"name": "micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "tmicros", "type": ["null", {"type": "long", "logicalType": "time-micros"}]},
        {"name": "uuid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "ratio", "type": [{"type": "float"}, {"type": "null"}]},
        {"name": "ok", "type": ["null", "boolean"], "default": None},
        {"name": "empty", "type": "bytes", "default": "\u00ff"},
    ],
}


def foreign_datum(rng: random.Random) -> dict[str, Any]:
    cost = rng.choice([0, -1, 10**20 - 1, -(10**20) + 1, rng.randint(-(10**20) + 1, 10**20 - 1)])
    return {
        "id": rng.randint(-(2**63), 2**63 - 1),
        "name": rng.choice([None, "", "Zoë", "名前"]),
        "tiny": rng.randint(-128, 127),
        "colour": rng.choice(["RED", "GREEN", "BLUE"]),
        "maybe_colour": rng.choice([None, "DARK", "LIGHT"]),
        "hash": bytes(rng.randrange(256) for _ in range(4)),
        "cost": cost.to_bytes(9, "big", signed=True),
        "micros": rng.randint(-(2**62), 2**62),
        "tmicros": rng.choice([None, 0, 86_399_999_999]),
        "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e",
        "ratio": rng.choice([None, 0.25, float("nan"), float("inf")]),
        "ok": rng.choice([None, True, False]),
        "empty": b"",
    }


@pytest.mark.parametrize("meta", [True, False])
def test_foreign_schemas_with_enums_fixed_and_unmapped_logical_types_read_as_the_decoded_path(meta: bool) -> None:
    rng = random.Random(99)
    registry = Registry()
    raws = write_foreign(registry, FOREIGN, [foreign_datum(rng) for _ in range(300)])
    settings = {"connect.meta.data": str(meta).lower()}
    table = read_avro_values(raws, FOREIGN, connect_meta_data=meta)
    assert_same_table(table, decoded_table(registry, raws, **settings))
    assert table is not None
    assert table.schema.field("tiny").type == pa.int8()
    assert table.schema.field("cost").type == pa.decimal128(20, 4)
    assert table.schema.field("micros").type == pa.int64()
    parquet = io.BytesIO()
    pq.write_table(table, parquet)  # what the S3 sink does with it
    assert_same_table(pq.read_table(io.BytesIO(parquet.getvalue())), table)


HEADER = b"\x00\x00\x00\x00\x01"


def record(*types: Any) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(types)]}


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes([*out, z])


def test_truncated_bodies_trailing_bytes_other_ids_and_tombstones_are_refused() -> None:
    registry = Registry()
    values = [random_value(random.Random(i)) for i in range(4)]
    raws: list[Any] = registry.converter().from_connect_batch(TOPIC, [SCHEMA] * 4, values)
    avro = AvroData().avro_schema(SCHEMA)
    assert read_avro_values(raws, avro) is not None
    good = raws[0]
    for cut in range(len(good)):
        assert read_avro_values([raws[1], good[:cut]], avro) is None
    assert read_avro_values([raws[1], good + b"\x00"], avro) is None
    assert read_avro_values([raws[1], b"\x01" + good[1:]], avro) is None
    assert read_avro_values([raws[1], good[:4] + b"\x07" + good[5:]], avro) is None
    assert read_avro_values([raws[1], None], avro) is None
    assert read_avro_values([raws[1], bytearray(good)], avro) is None
    assert read_avro_values([], avro) is None


DECIMAL_38 = {"type": "bytes", "logicalType": "decimal", "precision": 64, "scale": 2}
DECIMAL_9 = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
ENUM = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}


@pytest.mark.parametrize(
    ("avro", "good", "bad"),
    [
        ("string", b"\x04\xc3\xa9", b"\x02\xff"),  # not UTF-8
        ("string", b"\x00", b"\x06\xed\xa0\x80"),  # a surrogate in UTF-8 form
        ("string", b"\x02a", b"\x01a"),  # a negative length
        ("boolean", b"\x01", b"\x02"),
        (["null", "int"], b"\x02\x02", b"\x04\x02"),  # union branch 2
        (["int", "null"], b"\x02", b"\x01"),  # union branch -1
        ("int", varint(2**31 - 1), varint(2**31)),
        ("int", varint(-(2**31)), varint(-(2**31) - 1)),
        ({"type": "int", "connect.type": "int8"}, varint(127), varint(128)),
        ({"type": "int", "connect.type": "int16"}, varint(-32768), varint(-32769)),
        ("long", varint(-(2**63)), b"\xff" * 10 + b"\x01"),  # a varint longer than 64 bits
        (ENUM, b"\x04", b"\x06"),
        (ENUM, b"\x00", b"\x01"),  # index -1
        ({"type": "fixed", "name": "F", "size": 3}, b"abc", b"ab"),
        ({"type": "int", "logicalType": "date"}, varint(2_932_896), varint(2_932_897)),  # after 9999-12-31
        ({"type": "int", "logicalType": "date"}, varint(-719_162), varint(-719_163)),  # before 0001-01-01
        ({"type": "int", "logicalType": "time-millis"}, varint(86_399_999), varint(86_400_000)),
        ({"type": "int", "logicalType": "time-millis"}, varint(0), varint(-1)),
        ({"type": "long", "logicalType": "timestamp-millis"}, varint(-62_135_596_800_000), varint(-62_135_596_800_001)),
        ({"type": "long", "logicalType": "timestamp-millis"}, varint(253_402_300_799_999), varint(253_402_300_800_000)),
        (DECIMAL_38, b"\x18" + (10**28 - 1).to_bytes(12, "big"), b"\x18" + (10**28).to_bytes(12, "big")),
        (
            DECIMAL_38,
            b"\x18" + (1 - 10**28).to_bytes(12, "big", signed=True),
            b"\x18" + (-(10**28)).to_bytes(12, "big", signed=True),
        ),
        (DECIMAL_38, b"\x22" + b"\xff" * 16 + b"\x85", b"\x22" + b"\x7f" + b"\xff" * 16),  # 17 bytes
        (DECIMAL_9, b"\x08" + (10**9 - 1).to_bytes(4, "big"), b"\x08" + (10**9).to_bytes(4, "big")),
    ],
)
def test_values_the_decoded_path_refuses_or_reads_otherwise_refuse_the_batch(
    avro: Any, good: bytes, bad: bytes
) -> None:
    schema = record("long", avro)
    head = HEADER + varint(5)
    assert read_avro_values([head + good], schema) is not None
    assert read_avro_values([head + good, head + bad], schema) is None


def test_beyond_28_digits_the_decoded_path_rounds_a_decimal_so_the_reader_leaves_it() -> None:
    registry = Registry()
    schema = record({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0})
    unscaled = 10**30 + 1
    raws = write_foreign(registry, schema, [{"f0": unscaled.to_bytes(13, "big")}])
    _, values = registry.converter().to_connect_batch(TOPIC, raws)
    assert values[0]["f0"] != unscaled  # rounded to 28 significant digits
    assert read_avro_values(raws, schema) is None


@pytest.mark.parametrize(
    "avro",
    [
        record({"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}),
        record({"type": "array", "items": "int"}),
        record({"type": "map", "values": "string"}),
        record(["null", "int", "string"]),
        record(["int", "string"]),
        record(["null", "null"]),
        record(),
        record({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}),
        record({"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 3}),
        record(
            {
                "type": "bytes",
                "logicalType": "decimal",
                "precision": 9,
                "scale": 2,
                "connect.parameters": {"scale": "3"},
            }
        ),
        record({"type": "int", "connect.name": "org.apache.kafka.connect.data.Date"}),
        {"type": "record", "name": "R", "fields": [{"name": "not-a-name", "type": "int"}]},  # fastavro refuses it
        {"type": "array", "items": "int"},
        "string",
    ],
)
def test_schemas_it_does_not_read_exactly_are_left_to_the_decoded_path(avro: Any) -> None:
    assert read_avro_values([HEADER + b"\x02\x02\x02\x02"], avro) is None


def test_threads_read_batches_at_once_and_a_schema_parsed_again_reads_the_same() -> None:
    registry = Registry()
    writer = registry.converter()
    batches = [
        writer.from_connect_batch(
            TOPIC, [SCHEMA] * 200, [random_value(random.Random(s * 1000 + i)) for i in range(200)]
        )
        for s in range(8)
    ]
    text = json.dumps(AvroData().avro_schema(SCHEMA))
    expected = [decoded_table(registry, raws) for raws in batches]  # type: ignore[arg-type]
    with ThreadPoolExecutor(4) as pool:  # the reader releases the GIL while it decodes
        tables = list(pool.map(lambda raws: read_avro_values(raws, json.loads(text)), batches))
    for table, want in zip(tables, expected):
        assert_same_table(table, want)


def random_float(rng: random.Random) -> float:
    return rng.choice(
        [
            rng.random() * 10.0 ** rng.randint(-320, 300) * rng.choice([1, -1]),
            float(rng.randint(-(10**17), 10**17)),
            rng.choice([0.0, -0.0, 1e-5, 1e-6, 1e15, 1e16, 9.5e15, 5e-324, 1.7976931348623157e308, 0.1]),
            struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0],  # any bits: NaNs too
        ]
    )


DOCUMENT = Schema.struct(
    [
        *((f.name, f.schema) for f in SCHEMA.fields),
        ("wide", Schema(Type.FLOAT64)),
        ("narrow", Schema(Type.FLOAT32, optional=True)),
        ("control", Schema(Type.STRING)),
        ("fine", Decimal.schema(9, optional=True)),
    ],
    name="test.Document",
)


def document_value(rng: random.Random) -> dict[str, Any]:
    narrow = struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0]
    return {
        **random_value(rng),
        "wide": random_float(rng),
        "narrow": rng.choice([None, narrow, 0.1, 1e-7]),
        "control": "".join(
            chr(rng.choice([*range(0x21), 0x7F, 0x2028, 0xFFFF, 0x10FFFF, 0x5C, 0x2F])) for _ in range(5)
        ),
        "fine": rng.choice([None, decimal.Decimal(rng.randint(-(10**27), 10**27)).scaleb(-9)]),
    }


@pytest.mark.parametrize("seed", [5, 6])
def test_documents_are_the_elasticsearch_sinks_documents_of_the_decoded_values(seed: int) -> None:
    rng = random.Random(seed)
    registry = Registry()
    values = [document_value(rng) for _ in range(500)]
    raws: list[Any] = registry.converter().from_connect_batch(TOPIC, [DOCUMENT] * 500, values)
    raws[3] = None  # a tombstone stays one
    _, decoded = registry.converter().to_connect_batch(TOPIC, raws)
    expected = [None if v is None else document_bytes(v) for v in decoded]
    assert avro_documents(raws, AvroData().avro_schema(DOCUMENT)) == expected
