from __future__ import annotations

import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    Schema,
    SchemaAndValue,
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
    # As in Debezium, the unwrapped row's schema is required although after's is optional.
    assert out.value == {"id": 1, "name": "a"} and out.value_schema == ROW.with_(optional=False)
    assert out.key == {"id": 1}
    out = t.apply(sink(event("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"})))
    assert out.value == {"id": 1, "name": "b"} and out.value_schema is None


def test_default_mode_turns_deletes_into_null_values_and_drops_tombstones() -> None:
    t = configured(ExtractNewRecordState)
    out = t.apply(sink(event("d", {"id": 1, "name": "a"}, None), ENVELOPE, key={"id": 1}))
    assert out.value is None and out.value_schema == ROW and out.key == {"id": 1}
    assert t.apply(sink(None, key={"id": 1})) is None
    assert t.apply(sink(event("t", None, None), ENVELOPE)) is None  # truncate


@pytest.mark.parametrize(
    ("mode", "delete_value", "tombstone_kept"),
    [
        ("drop", "dropped", False),
        ("tombstone", None, False),
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
    assert created.value_schema == deleted.value_schema
    assert created.value_schema.field("__deleted").schema == OPTIONAL_STRING_SCHEMA


def test_keys_debezium_3_ignores_are_accepted_without_effect(caplog: pytest.LogCaptureFixture) -> None:
    legacy = configured(
        ExtractNewRecordState, delete_handling_mode="rewrite", drop_tombstones="false", operation_header="true"
    )
    assert legacy.apply(sink(event("d", {"id": 1}, None))).value is None
    assert legacy.apply(sink(None)) is None
    assert legacy.apply(sink(event("c", None, {"id": 1}))).headers is None
    assert "operation.header=true has no effect" in caplog.text and "use add.headers=op" in caplog.text


def test_add_fields_and_headers() -> None:
    t = configured(ExtractNewRecordState, add_fields="op,table,lsn,source.ts_ms", add_headers="op,db,id")
    out = t.apply(sink(event("u", None, {"id": 3, "name": "c"}), ENVELOPE, headers=(("h", 1),)))
    assert out.value == {"id": 3, "name": "c", "__op": "u", "__table": "users", "__lsn": 123, "__source_ts_ms": 1000}
    # Headers carry the field's schema, made optional; a field the envelope lacks (transaction.id) adds none.
    assert out.headers == (
        ("h", 1),
        ("__op", SchemaAndValue(OPTIONAL_STRING_SCHEMA, "u")),
        ("__db", SchemaAndValue(OPTIONAL_STRING_SCHEMA, "app")),
    )
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
    )
    custom = configured(ExtractNewRecordState, add_fields="op:OPERATION", add_fields_prefix="cdc_")
    assert custom.apply(sink(event("r", None, {"id": 1}))).value == {"id": 1, "cdc_OPERATION": "r"}
    plain = configured(ExtractNewRecordState, add_headers="op,source.ts_ms:TS", add_headers_prefix="")
    assert plain.apply(sink(event("c", None, {"id": 1}))).headers == (("op", "c"), ("TS", 1000))


def test_route_by_field_and_drop_fields_header() -> None:
    routed = configured(ExtractNewRecordState, route_by_field="name", delete_tombstone_handling_mode="rewrite")
    assert routed.apply(sink(event("c", None, {"id": 1, "name": "t1"}), ENVELOPE)).topic == "t1"
    assert routed.apply(sink(event("d", {"id": 1, "name": "t2"}, None), ENVELOPE)).topic == "t2"
    assert routed.apply(sink(event("c", None, {"id": 1, "name": None}), ENVELOPE)).topic == "test"
    drop = configured(ExtractNewRecordState, drop_fields_header_name="drop")
    listed = (("drop", ["name", "id"]),)
    out = drop.apply(sink(event("c", None, {"id": 1, "name": "a"}), ENVELOPE, headers=listed))
    assert out.value == {"id": 1}  # id is required: kept while drop.fields.keep.schema.compatible=true
    everything = configured(ExtractNewRecordState, drop_fields_header_name="drop", drop_fields_keep_schema_compatible="false")
    assert everything.apply(sink(event("c", None, {"id": 1, "name": "a"}), ENVELOPE, headers=listed)).value == {}


def test_non_envelopes_pass_through_and_errors() -> None:
    t = configured(ExtractNewRecordState, add_fields="nope")
    heartbeat = sink({"ts_ms": 1}, Schema.struct([("ts_ms", INT64_SCHEMA)], name="io.debezium.Heartbeat"))
    assert t.apply(heartbeat) is heartbeat
    plain = sink({"id": 1})
    assert t.apply(plain) is plain
    # A field missing from the envelope adds nothing (as in Debezium).
    assert t.apply(sink(event("c", None, {"id": 1, "name": None}), ENVELOPE)).value == {"id": 1, "name": None}
    with pytest.raises(ConfigError) as err:
        configured(ExtractNewRecordState, delete_tombstone_handling_mode="keep")
    assert err.value.key == "delete.tombstone.handling.mode"
    with pytest.raises(ConfigError) as err:
        configured(ExtractNewRecordState, add_headers="a:b:c")
    assert err.value.key == "add.headers"
    with pytest.raises(ConfigError) as err:
        configured(ExtractNewRecordState, operation_headers="true")
    assert "operation.headers" in str(err.value)
