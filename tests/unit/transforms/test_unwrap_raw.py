"""ExtractNewRecordState on raw values (``unwrap_raw.py``): for random Debezium change events of
every Connect type the PostgreSQL source emits, the bytes the raw path writes, read by the
JsonConverter, are the records the record-by-record path gives (keys, values and schemas; the
records it drops, dropped), for every combination of the options it supports. Whatever the raw
path cannot do exactly sends the batch the record way (``apply_columns`` returns ``None``)."""

from __future__ import annotations

import decimal
import itertools
import random
from typing import Any

import orjson
import pytest

from sluice.connectors.api import SinkRecord, SinkRecordBatch, UnusableRawValues, WireFormat
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.transforms import ExtractNewRecordState
from sluice.transforms._support import RawRewrittenBatch
from sluice.worker.runners.sink_batches import ReadColumns, SinkBatchBuilder
from tests.debezium_events import Table, random_table, wire_nulls

from .support import configured

TOPIC = "srv.public.orders"
MODES = ["drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"]
ADDED = ["", "op,table,lsn,source.ts_ms", "op:operation,ts_ms,source.snapshot,transaction.id,db,nothing,ts_us"]


def converter(replace_null: bool = True, is_key: bool = False) -> JsonConverter:
    c = JsonConverter()
    c.configure({"schemas.enable": "true", "replace.null.with.default": str(replace_null).lower()}, is_key)
    return c


def consumed(
    keys: list[bytes | None], values: list[bytes | None], value_converter: JsonConverter
) -> tuple[SinkRecordBatch, SinkRecordBatch]:
    """The batch as the runtime builds it for a raw typed task (raw values and raw keys), and decoded."""
    headers = SimpleHeaderConverter()
    headers.configure({})
    builder = SinkBatchBuilder(converter(is_key=True), value_converter, headers)
    n = len(values)
    columns = ReadColumns([0] * n, list(range(100, 100 + n)), [1_700_000_000_000 + i for i in range(n)], [None] * n)
    wire, key_wire = value_converter.wire_format(), builder.key_converter.wire_format()
    return builder.build(TOPIC, keys, values, columns, wire, key_wire), builder.build(TOPIC, keys, values, columns)


def raw_batch(values: list[bytes | None], replace_null: bool = True) -> SinkRecordBatch:
    """Only the raw batch of ``values`` (which need not decode), without keys."""
    n = len(values)
    columns = ReadColumns([0] * n, list(range(100, 100 + n)), [None] * n, [None] * n)
    c = converter(replace_null)
    headers = SimpleHeaderConverter()
    headers.configure({})
    return SinkBatchBuilder(converter(is_key=True), c, headers).build(
        TOPIC, [None] * n, values, columns, c.wire_format()
    )


def canonical(value: Any) -> Any:
    """``value`` with Decimals as their text (``1.10`` is not ``1.1``) and floats by their bits."""
    if isinstance(value, decimal.Decimal):
        return ("decimal", str(value))
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def record_path(settings: dict[str, str], batch: SinkRecordBatch) -> list[SinkRecord]:
    t = configured_with(settings)
    return [out for out in (t.apply(r) for r in batch) if out is not None]


def configured_with(settings: dict[str, str]) -> ExtractNewRecordState:
    t = ExtractNewRecordState()
    t.configure(settings)
    return t


def events(table: Table, count: int, replace_null: bool) -> tuple[list[bytes | None], list[bytes | None]]:
    """Keys and values as a Debezium connector with JsonConverter writes them, some values with
    members null or left out, and records that are not change events among them."""
    rng = table.rng
    keys_c, values_c = converter(is_key=True), converter()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for key, value in table.events(count):
        keys.append(keys_c.from_connect_data(TOPIC, table.key_schema, key))
        if value is None:
            values.append(None)
            continue
        raw = values_c.from_connect_data(TOPIC, table.envelope_schema, value)
        assert raw is not None
        values.append(wire_nulls(rng, raw, table.row_schema, replace_null=replace_null))
    # A heartbeat-like value and a null payload under a schema: no change events.
    keys += [None, None]
    values += [
        b'{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,'
        b'"name":"io.debezium.connector.common.Heartbeat"},"payload":{"ts_ms":1}}',
        b'{"schema":{"type":"int32","optional":true},"payload":null}',
    ]
    return keys, values


def assert_same(
    settings: dict[str, str], keys: list[bytes | None], values: list[bytes | None], wire_replace: bool
) -> RawRewrittenBatch:
    values_c = converter(wire_replace)
    raw, decoded = consumed(keys, values, values_c)
    out = configured_with(settings).apply_columns(raw)
    assert isinstance(out, RawRewrittenBatch), "the raw path gave up"
    expected = record_path(settings, decoded)
    assert out.raw_values is not None
    schemas, read = values_c.to_connect_batch(TOPIC, out.raw_values)
    assert len(read) == len(expected)
    for i, (schema, value, want) in enumerate(zip(schemas, read, expected)):
        assert (schema, canonical(value)) == (want.value_schema, canonical(want.value)), (
            f"record {i}: {out.raw_values[i]!r}"
        )
    assert out.keys == [r.key for r in expected] and out.key_schemas == [r.key_schema for r in expected]
    assert out.raw_keys == [keys[o - 100] for o in out.offsets]
    assert out.offsets == [r.kafka_offset for r in expected]
    assert out.timestamps == [r.timestamp for r in expected]
    # Read the other way (a task that falls back to values): the records the record path makes.
    assert [canonical(v) for v in out.values] == [canonical(r.value) for r in expected]
    assert out.value_schemas == [r.value_schema for r in expected]
    assert out.raw_format == raw.raw_format and out.original_topic == TOPIC
    return out


@pytest.mark.parametrize(("mode", "added"), list(itertools.product(MODES, ADDED)))
@pytest.mark.parametrize(("replace_null", "wire_replace"), [(True, True), (False, True), (True, False), (False, False)])
def test_raw_rewrite_reads_as_the_record_path(mode: str, added: str, replace_null: bool, wire_replace: bool) -> None:
    settings = {
        "delete.tombstone.handling.mode": mode,
        "add.fields": added,
        "add.fields.prefix": "__" if len(added) % 2 else "meta_",
        "replace.null.with.default": str(replace_null).lower(),
    }
    for seed in range(3):
        rng = random.Random(f"{mode}-{added}-{replace_null}-{wire_replace}-{seed}")
        table = random_table(rng, "orders", columns=rng.randrange(4, 16))
        keys, values = events(table, 60, wire_replace)
        out = assert_same(settings, keys, values, wire_replace)
        kept_tombstones = sum(v is None for v in out.raw_values or ())
        if mode == "rewrite-with-tombstone":
            assert kept_tombstones >= sum(v is None for v in values)


def test_a_batch_of_one_schema_reads_the_schema_once_and_keeps_the_rows_bytes_short() -> None:
    rng = random.Random(7)
    table = random_table(rng, "orders", columns=6)
    keys, values = events(table, 40, True)
    out = assert_same({"add.fields": "op,lsn"}, keys, values, True)
    changed = [v for v in out.raw_values or () if v is not None and b'"__op"' in v]
    assert changed and all(b'"before"' not in v and b'"source"' not in v for v in changed)
    assert len({v[: v.index(b',"payload":')] for v in changed}) == 1


def _envelope(after_fields: str, after: str, *, before: str = "null") -> bytes:
    row = f'{{"type":"struct","fields":[{after_fields}],"optional":true,"name":"s.Value","field":"%s"}}'
    schema = (
        '{"type":"struct","fields":[' + row % "before" + "," + row % "after" + ","
        '{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"s.Envelope"}'
    )
    return f'{{"schema":{schema},"payload":{{"before":{before},"after":{after},"op":"c"}}}}'.encode()


DECIMAL_FIELD = '{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"p"}'


@pytest.mark.parametrize(
    "odd",
    [
        _envelope(DECIMAL_FIELD, '{"p":1.10}'),  # a Decimal as a JSON number: orjson would round it
        _envelope(DECIMAL_FIELD, '{"p":123456789012345678901234}'),  # beyond 64 bits: orjson reads a double
        b'{"schema":null,"payload":{"op":"c","after":{"a":1}}}',  # a schemaless envelope inside
        b'{"schema":{"type":"int32","optional":true},"payload":1,"extra":2}',  # not JsonConverter's layout
        _envelope('{"type":"int32","optional":true,"field":"__deleted"}', '{"__deleted":1}'),  # a clash (rewrite)
    ],
)
def test_what_the_raw_path_cannot_do_exactly_goes_the_record_way(odd: bytes) -> None:
    good = _envelope('{"type":"int32","optional":true,"field":"n"}', '{"n":1}')
    t = configured(ExtractNewRecordState, delete_tombstone_handling_mode="rewrite")
    assert t.apply_columns(raw_batch([good, odd])) is None
    assert t.apply_columns(raw_batch([good])) is not None


def test_a_null_the_converter_refuses_is_not_filled_in() -> None:
    """Without replace.null.with.default the converter refuses a null in a required field with a
    default; the rewrite modes, which write defaults in place of nulls, leave it to the record path
    (whose converter names the error)."""
    defaulted = '{"type":"int32","optional":false,"default":5,"field":"n"}'
    t = configured(ExtractNewRecordState, delete_tombstone_handling_mode="rewrite")
    assert t.apply_columns(raw_batch([_envelope(defaulted, '{"n":null}')], replace_null=False)) is None
    assert t.apply_columns(raw_batch([_envelope(defaulted, '{"n":null}')])) is not None


def test_decimals_written_as_base64_or_integers_stay_raw() -> None:
    raw, decoded = consumed(
        [None, None], [_envelope(DECIMAL_FIELD, '{"p":"AQ=="}'), _envelope(DECIMAL_FIELD, '{"p":12}')], converter()
    )
    out = configured(ExtractNewRecordState).apply_columns(raw)
    assert out is not None and [canonical(v) for v in out.values] == [
        canonical(r.value) for r in record_path({}, decoded)
    ]


def test_only_json_with_schemas_and_base64_decimals_and_plain_settings_keep_raw_values() -> None:
    t = configured(ExtractNewRecordState)
    assert t.keeps_raw_values(WireFormat("json", schemas=True))
    assert not t.keeps_raw_values(WireFormat("json", schemas=True, decimal_format="NUMERIC"))
    assert not t.keeps_raw_values(WireFormat("json"))
    assert not t.keeps_raw_values(WireFormat("avro"))
    for setting in ({"add.headers": "op"}, {"route.by.field": "name"}, {"drop.fields.header.name": "drop"}):
        assert not configured_with(setting).keeps_raw_values(WireFormat("json", schemas=True))


def test_a_decoded_batch_goes_the_record_way() -> None:
    _, decoded = consumed([None], [_envelope('{"type":"int32","optional":true,"field":"n"}', '{"n":1}')], converter())
    assert configured(ExtractNewRecordState).apply_columns(decoded) is None


def test_values_that_do_not_decode_are_given_back_from_the_consumed_batch() -> None:
    """The rewritten batch's values come from the consumed one: a value that does not decode names
    the consumed batch's first offset, so the runtime delivers every record of it again decoded."""
    good = _envelope('{"type":"int32","optional":true,"field":"n"}', '{"n":1}')
    bad = _envelope('{"type":"int32","optional":true,"field":"n"}', '{"n":"x"}')
    out = configured(ExtractNewRecordState).apply_columns(raw_batch([None, good, bad]))
    assert out is not None and out.offsets == [101, 102]
    with pytest.raises(UnusableRawValues) as info:
        out.values  # noqa: B018 - reading decodes
    assert [o for _, o in info.value.offsets.items()] == [100]


def test_the_rows_schema_is_the_one_json_converter_writes_for_the_record() -> None:
    rng = random.Random(3)
    table = random_table(rng, "orders", columns=8)
    keys, values = events(table, 30, True)
    c = converter()
    raw, decoded = consumed(keys, values, c)
    settings = {"add.fields": "op,source.ts_ms"}
    out = configured_with(settings).apply_columns(raw)
    assert out is not None and out.raw_values is not None
    for written, record in zip(out.raw_values, record_path(settings, decoded)):
        if written is None or record.value is None:
            continue
        expected = c.from_connect_data(TOPIC, record.value_schema, record.value)
        assert expected is not None
        assert orjson.loads(written)["schema"] == orjson.loads(expected)["schema"]
