from __future__ import annotations

import pytest

from sluice.connectors.api import INT64_SCHEMA, STRING_SCHEMA, ConfigError, Schema
from sluice.transforms import DropHeaders, HeaderFromKey, HeaderFromValue, InsertHeader

from .support import configured, sink

SCHEMA = Schema.struct([("id", INT64_SCHEMA), ("ts", INT64_SCHEMA), ("name", STRING_SCHEMA)], name="rec")
VALUE = {"id": 1, "ts": 99, "name": "n"}


def test_header_from_copy_and_move_with_schema() -> None:
    copy = configured(HeaderFromValue, fields="id,ts", headers="record_id,ts", operation="copy")
    out = copy.apply(sink(VALUE, SCHEMA, headers=(("h", "x"),)))
    assert out.headers == (("h", "x"), ("record_id", 1), ("ts", 99))
    assert out.value == VALUE and out.value_schema is SCHEMA
    move = configured(HeaderFromValue, fields="id,ts", headers="record_id,ts", operation="move")
    out = move.apply(sink(VALUE, SCHEMA))
    assert out.headers == (("record_id", 1), ("ts", 99))
    assert out.value == {"name": "n"}
    assert out.value_schema == Schema.struct([("name", STRING_SCHEMA)], name="rec")


def test_header_from_without_schema_and_from_key() -> None:
    out = configured(HeaderFromValue, fields="id", headers="rid", operation="move").apply(sink(dict(VALUE)))
    assert out.headers == (("rid", 1),) and out.value == {"ts": 99, "name": "n"}
    out = configured(HeaderFromKey, fields="k", headers="key_k", operation="copy").apply(sink("v", key={"k": "a"}))
    assert out.headers == (("key_k", "a"),) and out.key == {"k": "a"}


def test_header_from_tombstone_and_config_checks() -> None:
    t = configured(HeaderFromValue, fields="id", headers="rid", operation="copy")
    tombstone = sink(None)
    assert t.apply(tombstone) is tombstone
    with pytest.raises(ConfigError, match="same number"):
        configured(HeaderFromValue, fields="a,b", headers="x", operation="copy")
    with pytest.raises(ConfigError) as err:
        configured(HeaderFromValue, fields="a", headers="x", operation="steal")
    assert err.value.key == "operation"


def test_insert_header_appends() -> None:
    t = configured(InsertHeader, header="app.id", value_literal="best-app")
    assert t.apply(sink("v")).headers == (("app.id", "best-app"),)
    assert t.apply(sink("v", headers=(("app.id", "old"),))).headers == (("app.id", "old"), ("app.id", "best-app"))
    assert t.apply(sink(None)).headers == (("app.id", "best-app"),)


def test_drop_headers_removes_every_occurrence() -> None:
    t = configured(DropHeaders, headers="a,b")
    out = t.apply(sink("v", headers=(("a", 1), ("c", 2), ("b", 3), ("a", 4))))
    assert out.headers == (("c", 2),)
    untouched = sink("v", headers=(("c", 1),))
    assert t.apply(untouched) is untouched
    assert t.apply_batch([sink("v"), sink("v", headers=(("a", 1),))])[1].headers == ()
    with pytest.raises(ConfigError):
        configured(DropHeaders, headers="")
