"""The native encoder writes, byte for byte, what the Python decoder and the JsonConverter write.

Every test feeds the same pgoutput messages to two decoders, one on the Python path and one
serializing natively, and compares the (topic, key, value) bytes of every record and the offsets.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from sluice.connectors.api import DataError, Serialization, SourceRecordBatch, WireFormat
from sluice.connectors.source.postgres_cdc import decoder as decoder_module
from sluice.connectors.source.postgres_cdc import native
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder, Relation
from sluice.connectors.source.postgres_cdc.tables import Column, Table
from sluice.connectors.source.postgres_cdc.types import (
    BOOL,
    BYTEA,
    DATE,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    INTERVAL,
    JSONB,
    NUMERIC,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    VARCHAR,
    TypeModes,
    column_type,
)
from sluice.converters.json import JsonConverter
from tests.unit.connectors.postgres_cdc import pgoutput_messages as pg
from tests.unit.connectors.postgres_cdc.test_decoder import decoder

T0 = 1_700_000_000_123_456
NOW_NS = 1_763_000_000_987_654_321


@pytest.fixture(autouse=True)
def _native_and_fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    if not native.available():
        pytest.fail("sluice_native is not installed: run `make setup` (it builds native/ with cargo)")
    monkeypatch.setattr(decoder_module.time, "time_ns", lambda: NOW_NS)


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


# (name, oid, typmod) of the table the random tests use; id is the key.
COLUMNS = [
    ("id", INT8, -1),
    ("small", INT2, -1),
    ("n", INT4, -1),
    ("flag", BOOL, -1),
    ("score", FLOAT8, -1),
    ("name", TEXT, -1),
    ("code", VARCHAR, 14),
    ("amount", NUMERIC, numeric_typmod(12, 2)),
    ("whole", NUMERIC, numeric_typmod(20, 0)),
    ("created", TIMESTAMPTZ, -1),
    ("created3", TIMESTAMPTZ, 3),
    ("created0", TIMESTAMPTZ, 0),
    ("local", TIMESTAMP, -1),
    ("local3", TIMESTAMP, 3),
    ("day", DATE, -1),
    ("uid", UUID, -1),
    ("doc", JSONB, -1),
    ("blob", BYTEA, -1),
    ("clock", TIME, -1),
    ("clock3", TIME, 3),
]


def make_decoder(
    modes: TypeModes,
    columns: list[tuple[str, int, int]],
    optional: dict[str, bool],
    *,
    key: list[str],
    tombstones: bool,
) -> ChangeDecoder:
    def load(relid: int, relation: Relation, is_signal: bool) -> tuple[Table | None, bool]:
        schema, name, identity, cols = relation
        built = [
            Column(n, oid, typmod, optional.get(n, True), column_type(oid, typmod, modes)) for n, oid, typmod in cols
        ]
        return Table(relid, schema, name, built, key, identity, "srv", [True] * len(built)), True

    return decoder(load, tombstones)


def converters(schemas: bool) -> tuple[JsonConverter, JsonConverter]:
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": schemas}, True)
    values.configure({"schemas.enable": schemas}, False)
    return keys, values


def offered(conv: tuple[JsonConverter, JsonConverter]) -> Serialization:
    """What the runtime offers a source task with these converters."""
    return Serialization(conv[0].wire_format(), conv[1].wire_format())


def serialized_batch(item: Any) -> bool:
    return isinstance(item, SourceRecordBatch) and item.serialized


def run(d: ChangeDecoder, messages: list[bytes], conv: tuple[JsonConverter, JsonConverter]) -> tuple[list[Any], int]:
    """Every record as (topic, key bytes, value bytes, last offset of its batch); how many were native."""
    keys, values = conv
    items: list[Any] = []
    for m in messages:
        d.handle(memoryview(m))
        items.extend(d.outbox)
        d.outbox = []
    items.append(d.finish_batch())
    out: list[Any] = []
    encoded = 0
    for item in items:
        if serialized_batch(item):
            encoded += len(item)
            assert item.keys is not None
            for t, k, v in zip([r.topic for r in item], item.keys, item.values):
                out.append((t, k, v, dict(item.last_offset or {})))
            continue
        batch = list(item)
        last = dict(batch[-1].source_offset) if batch else {}
        for r in batch:
            try:
                k = keys.from_connect_data(r.topic, r.key_schema, r.key)
                v = values.from_connect_data(r.topic, r.value_schema, r.value)
            except DataError as exc:  # e.g. a required numeric that is NaN: errors.tolerance decides
                k, v = None, f"DataError: {exc}".encode()
            out.append((r.topic, k, v, last))
    return out, encoded


DEFAULT_MODES = TypeModes()


def compare(messages: list[bytes], *, modes: TypeModes = DEFAULT_MODES, schemas: bool = False, tombstones: bool = True,
            columns: list[tuple[str, int, int]] = COLUMNS, optional: dict[str, bool] | None = None,
            key: list[str] | None = None) -> int:  # fmt: skip
    optional = optional if optional is not None else {"id": False}
    key = ["id"] if key is None else key
    conv = converters(schemas)
    python = make_decoder(modes, columns, optional, key=key, tombstones=tombstones)
    fast = make_decoder(modes, columns, optional, key=key, tombstones=tombstones)
    fast.native = offered(conv)
    expected, none = run(python, messages, conv)
    got, encoded = run(fast, messages, conv)
    assert none == 0
    assert [r[:3] for r in got] == [r[:3] for r in expected]
    # The offset stored after each record's batch: the Python path's batches may end elsewhere, but
    # the position after the last record and the decoders' state are the same.
    assert got[-1][3] == expected[-1][3] if got else True
    assert fast.offset() == python.offset() and fast.safe_lsn == python.safe_lsn
    return encoded


# -- value generators (PostgreSQL's text output) ------------------------------------------------


def pg_fraction(micros: int, digits: int = 6) -> str:
    text = f"{micros:06d}"[:digits].rstrip("0")
    return f".{text}" if text else ""


def gen_value(rng: random.Random, oid: int, typmod: int) -> bytes | None:  # noqa: C901 - one branch per Postgres type
    r = rng.random()
    if oid in (INT2, INT4, INT8):
        bits = {INT2: 15, INT4: 31, INT8: 63}[oid]
        return str(rng.choice([0, -1, 1, 2**bits - 1, -(2**bits), rng.randint(-(2**bits), 2**bits - 1)])).encode()
    if oid == BOOL:
        return rng.choice([b"t", b"f"])
    if oid == FLOAT8:
        choice = rng.random()
        if choice < 0.1:
            return rng.choice(
                [b"0", b"-0", b"Infinity", b"-Infinity", b"NaN", b"1e+20", b"1.5e-05", b"1e-3", b"9999999", b"10000000"]
            )
        x = rng.choice(
            [
                rng.uniform(-1e7, 1e7),
                rng.uniform(-1, 1),
                rng.random() * 10 ** rng.randint(-8, 12),
                float(rng.randint(-99, 99)),
            ]
        )
        text = repr(x)
        return (text[:-2] if text.endswith(".0") else text).encode()  # PostgreSQL prints 3, not 3.0
    if oid in (TEXT, VARCHAR):
        alphabet = [
            "a",
            "Z",
            "0",
            " ",
            '"',
            "\\",
            "\n",
            "\t",
            "\r",
            "\b",
            "\f",
            "\x01",
            "\x1f",
            "\x7f",
            "é",
            "ß",
            "€",
            "中",
            "\u2028",
            "😀",
            "𝄞",
            "/",
        ]
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))).encode()
    if oid == NUMERIC:
        scale = (typmod - 4) & 0xFFFF
        precision = ((typmod - 4) >> 16) & 0xFFFF
        if r < 0.03:
            return b"NaN"
        unscaled = rng.choice(
            [
                0,
                1,
                -1,
                127,
                128,
                -128,
                -129,
                255,
                256,
                32767,
                -32768,
                rng.randint(-(10**precision) + 1, 10**precision - 1),
            ]
        )
        sign = "-" if unscaled < 0 else ""
        digits = f"{abs(unscaled):0{scale + 1}d}"
        return f"{sign}{digits[: len(digits) - scale]}{'.' + digits[len(digits) - scale :] if scale else ''}".encode()
    if oid in (TIMESTAMPTZ, TIMESTAMP):
        digits = typmod if 0 <= typmod <= 6 else 6
        if r < 0.04:
            return rng.choice(
                [
                    b"infinity",
                    b"-infinity",
                    b"0044-03-15 12:00:00 BC" if oid == TIMESTAMP else b"0044-03-15 12:00:00+00 BC",
                ]
            )
        base = rng.choice([0, 86_399, 951_782_400, 4_102_444_799, rng.randint(-2_000_000_000, 9_000_000_000)])
        micros = rng.choice([0, 500_000, 123_000, 100, rng.randint(0, 999_999)])
        micros = int(f"{micros:06d}"[:digits].ljust(6, "0"))
        clock = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(base))
        text = clock + pg_fraction(micros, digits)
        if oid == TIMESTAMPTZ:
            text += rng.choice(["+00"] * 8 + ["+05:30", "-08", "+01"])
        return text.encode()
    if oid == DATE:
        if r < 0.05:
            return rng.choice([b"infinity", b"-infinity", b"0044-03-15 BC"])
        return time.strftime("%Y-%m-%d", time.gmtime(rng.randint(-5_000_000_000, 9_000_000_000))).encode()
    if oid == BYTEA:
        if r < 0.05:
            return rng.choice([b"abc\\000", b"x\\\\y"])  # bytea_output=escape: the Python path
        return b"\\x" + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 7))).hex().encode()
    if oid == TIME:
        digits = typmod if 0 <= typmod <= 6 else 6
        micros = int(f"{rng.randint(0, 999_999):06d}"[:digits].ljust(6, "0"))
        clock = rng.choice(
            ["00:00:00", "23:59:59", "24:00:00", "12:34:56", f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:07"]
        )
        return (clock + pg_fraction(micros, digits)).encode()
    if oid == UUID:
        return b"%08x-0000-4000-8000-%012x" % (rng.getrandbits(32), rng.getrandbits(48))
    if oid == JSONB:
        return rng.choice([b'{"a": 1}', b"[]", b'"x\\"y"', b"null", b'{"k": "\xc3\xa9"}'])
    raise AssertionError(oid)


def gen_row(rng: random.Random, columns: list[tuple[str, int, int]], optional: dict[str, bool], key: int) -> list[Any]:
    row: list[Any] = []
    for name, oid, typmod in columns:
        if name == "id":
            row.append(str(key).encode())
        elif optional.get(name, True) and rng.random() < 0.1:
            row.append(None)
        else:
            row.append(gen_value(rng, oid, typmod))
    return row


def gen_stream(rng: random.Random, count: int, columns: list[tuple[str, int, int]] = COLUMNS,
               optional: dict[str, bool] | None = None, relid: int = 16384) -> list[bytes]:  # fmt: skip
    """A relation, then transactions of random inserts, updates (no, key and full old tuples, key
    changes, unchanged TOAST) and deletes (old key or full row)."""
    optional = optional if optional is not None else {"id": False}
    messages = [pg.relation(relid, "public", "orders", [(n, o, t, n == "id") for n, o, t in columns])]
    rows: dict[int, list[Any]] = {}
    lsn = 1000
    last = 0
    done = 0
    while done < count:
        size = rng.randint(1, 12)
        final = lsn + 100 * (size + 2)
        commit_us = T0 + rng.randint(0, 10**9)
        messages.append(pg.begin(final, commit_us, rng.randint(1, 2**31)))
        for _ in range(size):
            lsn += 100
            op = rng.random()
            if op < 0.5 or not rows:
                last += 1
                rows[last] = gen_row(rng, columns, optional, last)
                messages.append(pg.insert(lsn, relid, rows[last]))
            elif op < 0.8:
                k = rng.choice(list(rows))
                new = gen_row(rng, columns, optional, k)
                shape = rng.random()
                if shape < 0.1:
                    last += 1
                    new = gen_row(rng, columns, optional, last)  # the key changes
                    messages.append(
                        pg.update(lsn, relid, new, old=[rows[k][0]] + [None] * (len(columns) - 1), old_kind=b"K")
                    )
                    del rows[k]
                    rows[last] = new
                    continue
                if shape < 0.2:
                    new[rng.randrange(1, len(columns))] = "u"  # an unchanged TOASTed value
                if shape < 0.5:
                    messages.append(pg.update(lsn, relid, new))
                else:
                    messages.append(pg.update(lsn, relid, new, old=rows[k], old_kind=b"O"))
                rows[k] = [old if v == "u" else v for v, old in zip(new, rows[k])]
            else:
                k = rng.choice(list(rows))
                if rng.random() < 0.5:
                    messages.append(pg.delete(lsn, relid, [rows[k][0]] + [None] * (len(columns) - 1), old_kind=b"K"))
                else:
                    messages.append(pg.delete(lsn, relid, rows[k], old_kind=b"O"))
                del rows[k]
        messages.append(pg.commit(final, final + 8, commit_us))
        lsn = final + 8
        done += size
    return messages


# -- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(16))
def test_random_changes_serialize_identically(seed: int) -> None:
    rng = random.Random(seed)
    modes = TypeModes(
        decimal_handling_mode=rng.choice(["precise", "precise", "double", "string"]),
        time_precision_mode="connect" if seed >= 14 else ("adaptive", "adaptive_time_microseconds")[seed % 2],
    )
    optional = {name: rng.random() < 0.6 for name, _, _ in COLUMNS}
    optional["id"] = False
    messages = gen_stream(rng, 600, optional=optional)
    encoded = compare(messages, modes=modes, schemas=seed % 2 == 1, tombstones=seed % 3 != 0, optional=optional)
    assert encoded > 0  # the native path really ran (connect-mode Date, Time and Timestamp too)


def test_the_common_table_is_encoded_natively_every_time() -> None:
    """No unusual values: every record is serialized natively, none falls back."""
    columns = [
        ("id", INT8, -1),
        ("name", TEXT, -1),
        ("amount", NUMERIC, numeric_typmod(12, 2)),
        ("at", TIMESTAMPTZ, -1),
    ]
    messages = [pg.relation(1, "public", "t", [(n, o, t, n == "id") for n, o, t in columns]), pg.begin(5000, T0, 7)]
    for i in range(1, 200):
        messages.append(
            pg.insert(
                1000 + i,
                1,
                [str(i).encode(), b"n%d" % i, b"%d.%02d" % (i, i % 100), b"2024-01-02 03:04:05.%06d+00" % i],
            )
        )
    messages.append(pg.delete(1500, 1, [b"5", None, None, None]))
    messages.append(pg.commit(5000, 5008, T0))
    optional = {"id": False, "name": False, "amount": False, "at": True}
    assert compare(messages, columns=columns, optional=optional) == 199 + 2  # and the delete's tombstone


def test_a_table_with_a_column_the_encoder_does_not_cover_takes_the_python_path() -> None:
    columns = [("id", INT4, -1), ("span", INTERVAL, -1)]
    messages = [
        pg.relation(1, "public", "t", [(n, o, t, n == "id") for n, o, t in columns]),
        pg.begin(5000, T0, 7),
        pg.insert(1001, 1, [b"1", b"1 day 02:00:00"]),
        pg.commit(5000, 5008, T0),
    ]
    assert compare(messages, columns=columns) == 0


def test_without_a_primary_key_records_have_no_key_and_deletes_no_tombstone() -> None:
    columns = [("id", INT4, -1), ("name", TEXT, -1)]
    messages = [
        pg.relation(1, "public", "t", [(n, o, t, False) for n, o, t in columns], identity=b"f"),
        pg.begin(5000, T0, 7),
        pg.insert(1001, 1, [b"1", b"a"]),
        pg.update(1002, 1, [b"1", b"b"], old=[b"1", b"a"], old_kind=b"O"),
        pg.delete(1003, 1, [b"1", b"b"], old_kind=b"O"),
        pg.commit(5000, 5008, T0),
    ]
    assert compare(messages, columns=columns, key=[]) == 3


@pytest.mark.parametrize("schemas", [False, True])
def test_switching_between_paths_keeps_order_and_offsets(schemas: bool) -> None:
    """Python-built records (unchanged TOAST) between native ones: each run is its own batch, and the
    offset stored after each batch is the position of its last record."""
    columns = [("id", INT4, -1), ("name", TEXT, -1)]
    messages = [pg.relation(1, "public", "t", [(n, o, t, n == "id") for n, o, t in columns]), pg.begin(5000, T0, 7)]
    messages += [pg.insert(1001, 1, [b"1", b"a"]), pg.insert(1002, 1, [b"2", b"b"])]
    messages += [pg.update(1003, 1, [b"1", "u"]), pg.update(1004, 1, [b"2", "u"])]
    messages += [pg.insert(1005, 1, [b"3", b"c"]), pg.commit(5000, 5008, T0)]
    d = make_decoder(TypeModes(), columns, {"id": False}, key=["id"], tombstones=True)
    d.native = offered(converters(schemas))
    for m in messages[:-1]:
        d.handle(memoryview(m))
    batches = [*d.outbox, d.finish_batch()]
    assert [serialized_batch(b) for b in batches] == [True, False, True]
    assert [len(b) for b in batches] == [2, 2, 1]
    lsns = [(b.last_offset if serialized_batch(b) else b[-1].source_offset)["lsn"] for b in batches]
    assert lsns == [1002, 1004, 1005]
    assert compare(messages, columns=columns, schemas=schemas) == 3


def test_the_task_declines_wire_formats_the_encoder_does_not_write() -> None:
    json, enveloped = WireFormat("json"), WireFormat("json", schemas=True)
    assert native.serializes_for(Serialization(json, json))
    assert native.serializes_for(Serialization(json, enveloped))
    assert not native.serializes_for(Serialization(json, WireFormat("json", decimal_format="NUMERIC")))
    assert not native.serializes_for(Serialization(WireFormat("string"), json))
    assert not native.serializes_for(None)  # the runtime offers nothing (a transform, say)


# -- snapshot chunks ------------------------------------------------------------------------------


def serialized(conv: tuple[JsonConverter, JsonConverter], r: Any) -> tuple[str, bytes | None, bytes | None]:
    """A record's (topic, key, value) bytes; a value the converter refuses as its error text."""
    keys, values = conv
    try:
        return (
            r.topic,
            keys.from_connect_data(r.topic, r.key_schema, r.key),
            values.from_connect_data(r.topic, r.value_schema, r.value),
        )
    except DataError as exc:
        return r.topic, None, f"DataError: {exc}".encode()


_COPY_ESCAPES = {92: b"\\\\", 10: b"\\n", 13: b"\\r", 9: b"\\t", 8: b"\\b", 12: b"\\f", 11: b"\\v"}


def copy_text(rows: list[list[Any]]) -> bytes:
    """Rows as ``COPY … TO STDOUT`` writes them (text format)."""

    def field(v: bytes | None) -> bytes:
        if v is None:
            return b"\\N"
        return b"".join(_COPY_ESCAPES.get(c, bytes([c])) for c in v)

    return b"".join(b"\t".join(field(v) for v in row) + b"\n" for row in rows)


def emit_chunk(
    monkeypatch: pytest.MonkeyPatch, conv: Any, text: bytes, modes: TypeModes, optional: dict[str, bool], *, last: bool
) -> list[Any]:
    """What ``ChunkedSnapshot`` hands out for one chunk whose COPY returned ``text``."""
    from sluice.connectors.cdc.chunks import ChunkWindow
    from sluice.connectors.cdc.snapshot import INITIAL
    from sluice.connectors.source.postgres_cdc import snapshot as snapshot_module

    d = make_decoder(modes, COLUMNS, optional, key=["id"], tombstones=True)
    d.native = offered(conv) if conv is not None else None
    d.handle(memoryview(pg.relation(16384, "public", "orders", [(n, o, t, n == "id") for n, o, t in COLUMNS])))
    table = d.tables[16384]
    assert table is not None
    snap = snapshot_module.postgres_snapshot(d, lambda q: table, chunk_size=10**6, incremental_chunk_size=10)
    snap.pending = [[table.qualified, INITIAL]] + ([] if last else [["public.other", INITIAL]])
    window = ChunkWindow("w1", table, INITIAL)
    monkeypatch.setattr(snapshot_module, "_await_commits_result", lambda conn: None)  # the results before the COPY
    monkeypatch.setattr(snapshot_module, "copy_result", lambda conn: text)
    snap.reader.read_chunk(None, window, 10**6)
    snap._emit(window, 5000)
    return d.outbox


@pytest.mark.parametrize("seed", range(8))
def test_snapshot_chunks_serialize_identically(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(1000 + seed)
    modes = TypeModes(
        decimal_handling_mode=rng.choice(["precise", "double", "string"]),
        time_precision_mode=("adaptive", "adaptive_time_microseconds")[seed % 2],
    )
    optional = {name: rng.random() < 0.6 for name, _, _ in COLUMNS}
    optional["id"] = False
    # Clean chunks (every row plain) and dirty ones (some value the encoder declines).
    clean = seed % 2 == 0
    probe = make_decoder(modes, COLUMNS, optional, key=["id"], tombstones=True)
    probe.native = offered(converters(False))
    probe.handle(memoryview(pg.relation(1, "public", "p", [(n, o, t, n == "id") for n, o, t in COLUMNS])))
    probe.handle(memoryview(pg.begin(10**6, T0, 1)))

    def natively(row: list[Any]) -> bool:
        before = len(probe.encoded)
        probe.handle(memoryview(pg.insert(1000, 1, row)))
        probe.records.clear()
        probe.outbox.clear()
        return len(probe.encoded) > before

    rows: list[list[Any]] = []
    while len(rows) < 300:
        row = gen_row(rng, COLUMNS, optional, len(rows) + 1)
        if not clean or natively(row):
            rows.append(row)
    text = copy_text(rows)
    conv = converters(seed % 4 < 2)
    python = emit_chunk(monkeypatch, None, text, modes, optional, last=seed % 3 == 0)
    fast = emit_chunk(monkeypatch, conv, text, modes, optional, last=seed % 3 == 0)
    assert [serialized_batch(b) for b in fast] == [clean]
    expected = [serialized(conv, r) for r in python[0]]
    if serialized_batch(fast[0]):
        got = list(zip([r.topic for r in fast[0]], fast[0].keys, fast[0].values))
    else:
        got = [serialized(conv, r) for r in fast[0]]
    assert got == expected and len(got) == 300
    assert fast[0].last_offset == python[0].last_offset


def test_binary_and_interval_modes_that_change_the_encoding_take_the_python_path() -> None:
    from sluice.connectors.source.postgres_cdc import native
    from sluice.connectors.source.postgres_cdc import types as pgtypes
    from sluice.connectors.source.postgres_cdc.tables import Column

    def kind(oid: int, modes: pgtypes.TypeModes) -> str | None:
        return native.column_kind(Column("c", oid, -1, True, pgtypes.column_type(oid, -1, modes)))

    assert kind(pgtypes.BYTEA, pgtypes.TypeModes()) == "bytea"
    for mode in ("base64", "base64-url-safe", "hex"):
        assert kind(pgtypes.BYTEA, pgtypes.TypeModes(binary_handling_mode=mode)) is None
    assert kind(pgtypes.INTERVAL, pgtypes.TypeModes(interval_handling_mode="string")) is None
