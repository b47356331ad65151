from __future__ import annotations

import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    DataError,
    Schema,
)
from sluice.transforms import ExtractNewRecordState

from .support import configured, sink

ROW = Schema.struct(
    [("id", INT32_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA)], name="srv.public.users.Value", optional=True
)
SOURCE = Schema.struct(
    [("db", STRING_SCHEMA), ("table", STRING_SCHEMA), ("lsn", OPTIONAL_INT64_SCHEMA), ("ts_ms", INT64_SCHEMA)],
    name="io.debezium.connector.postgresql.Source",
)
ENVELOPE = Schema.struct(
    [("before", ROW), ("after", ROW), ("source", SOURCE), ("op", STRING_SCHEMA), ("ts_ms", OPTIONAL_INT64_SCHEMA)],
    name="srv.public.users.Envelope",
)
SRC = {"db": "app", "table": "users", "lsn": 123, "ts_ms": 1000}


def event(op: str, before: dict | None, after: dict | None) -> dict:
    return {"before": before, "after": after, "source": SRC, "op": op, "ts_ms": 2000}


def test_keeps_after_with_and_without_schema() -> None:
    t = configured(ExtractNewRecordState)
    out = t.apply(sink(event("c", None, {"id": 1, "name": "a"}), ENVELOPE, key={"id": 1}))
    assert out.value == {"id": 1, "name": "a"} and out.value_schema == ROW and out.key == {"id": 1}
    out = t.apply(sink(event("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"})))
    assert out.value == {"id": 1, "name": "b"} and out.value_schema is None


def test_default_mode_turns_deletes_into_tombstones_and_keeps_tombstones() -> None:
    t = configured(ExtractNewRecordState)
    out = t.apply(sink(event("d", {"id": 1, "name": "a"}, None), ENVELOPE, key={"id": 1}))
    assert out.value is None and out.key == {"id": 1}
    tombstone = sink(None, key={"id": 1})
    assert t.apply(tombstone) is tombstone


@pytest.mark.parametrize(
    ("mode", "delete_value", "tombstone_kept"),
    [
        ("drop", "dropped", False),
        ("tombstone", None, True),
        ("rewrite", {"id": 1, "name": "a", "__deleted": "true"}, False),
        ("rewrite-with-tombstone", {"id": 1, "name": "a", "__deleted": "true"}, True),
        ("delete-to-tombstone", None, False),
    ],
)
def test_delete_tombstone_handling_modes(mode: str, delete_value: object, tombstone_kept: bool) -> None:
    t = configured(ExtractNewRecordState, delete_tombstone_handling_mode=mode)
    out = t.apply(sink(event("d", {"id": 1, "name": "a"}, None)))
    assert (out.value if out is not None else "dropped") == delete_value
    assert (t.apply(sink(None)) is not None) == tombstone_kept


def test_rewrite_adds_deleted_field_to_every_row_with_schema() -> None:
    t = configured(ExtractNewRecordState, delete_tombstone_handling_mode="rewrite")
    created = t.apply(sink(event("c", None, {"id": 2, "name": "b"}), ENVELOPE))
    deleted = t.apply(sink(event("d", {"id": 2, "name": "b"}, None), ENVELOPE))
    assert created.value["__deleted"] == "false" and deleted.value["__deleted"] == "true"
    assert created.value_schema is deleted.value_schema
    assert created.value_schema.field("__deleted").schema == OPTIONAL_STRING_SCHEMA


def test_legacy_keys() -> None:
    legacy = configured(ExtractNewRecordState, delete_handling_mode="rewrite", drop_tombstones="false")
    assert legacy.apply(sink(event("d", {"id": 1}, None))).value == {"id": 1, "__deleted": "true"}
    assert legacy.apply(sink(None)) is not None
    dropped = configured(ExtractNewRecordState, drop_tombstones="true")
    assert dropped.apply(sink(None)) is None and dropped.apply(sink(event("d", {"id": 1}, None))) is None


def test_add_fields_and_headers() -> None:
    t = configured(ExtractNewRecordState, add_fields="op,table,lsn,source.ts_ms", add_headers="op,db")
    out = t.apply(sink(event("u", None, {"id": 3, "name": "c"}), ENVELOPE, headers=(("h", 1),)))
    assert out.value == {"id": 3, "name": "c", "__op": "u", "__table": "users", "__lsn": 123, "__source_ts_ms": 1000}
    assert out.headers == (("h", 1), ("__op", "u"), ("__db", "app"))
    assert out.value_schema == Schema.struct(
        [
            ("id", INT32_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("__op", OPTIONAL_STRING_SCHEMA),
            ("__table", OPTIONAL_STRING_SCHEMA),
            ("__lsn", OPTIONAL_INT64_SCHEMA),
            ("__source_ts_ms", OPTIONAL_INT64_SCHEMA),
        ],
        name="srv.public.users.Value",
        optional=True,
    )
    custom = configured(ExtractNewRecordState, add_fields="op", add_fields_prefix="cdc_")
    assert custom.apply(sink(event("r", None, {"id": 1}))).value == {"id": 1, "cdc_op": "r"}


def test_non_envelopes_pass_through_and_errors() -> None:
    t = configured(ExtractNewRecordState, add_fields="nope")
    heartbeat = sink({"ts_ms": 1}, Schema.struct([("ts_ms", INT64_SCHEMA)], name="io.debezium.Heartbeat"))
    assert t.apply(heartbeat) is heartbeat
    plain = sink({"id": 1})
    assert t.apply(plain) is plain
    with pytest.raises(DataError, match="nope"):
        t.apply(sink(event("c", None, {"id": 1, "name": None}), ENVELOPE))
    with pytest.raises(ConfigError) as err:
        configured(ExtractNewRecordState, delete_tombstone_handling_mode="keep")
    assert err.value.key == "delete.tombstone.handling.mode"
