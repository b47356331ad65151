"""Index mappings built from Connect schemas (``schema.ignore=false``), and Connect's index naming.

The types follow Confluent's ``Mapping``: integers keep their width (byte/short/integer/long),
float32/float64 become float/double, strings become ``text`` with a ``keyword`` sub-field (what
dynamic mapping would do, so term queries and aggregations work), bytes become ``binary``,
Decimal becomes ``double``, Date and Timestamp become ``date``, structs become objects with
``properties`` and arrays take their element's mapping (every field of Elasticsearch may hold an
array). Maps become plain objects (their keys are data, not a fixed set of fields). A primitive
field's schema default becomes its ``null_value`` where the field type allows one.
"""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type

#: Connect's Time values are written as ``HH:mm:ss`` with microseconds when there are some.
TIME_FORMAT = "HH:mm:ss.SSSSSS||HH:mm:ss||strict_date_optional_time||epoch_millis"

_PRIMITIVES: dict[Type, str] = {
    Type.INT8: "byte",
    Type.INT16: "short",
    Type.INT32: "integer",
    Type.INT64: "long",
    Type.FLOAT32: "float",
    Type.FLOAT64: "double",
    Type.BOOLEAN: "boolean",
    Type.BYTES: "binary",
}

_NULL_VALUE_TYPES = frozenset({"byte", "short", "integer", "long", "float", "double", "boolean"})

MAX_INDEX_NAME_BYTES = 255


def index_name(topic: str) -> str:
    """Connect's index for ``topic``: lower case, at most 255 bytes, no leading ``-``/``_``/``+``,
    and ``.``/``..`` (which the server refuses) spelled ``dot``/``dotdot``."""
    name = topic.lower()
    if len(name.encode()) > MAX_INDEX_NAME_BYTES:
        name = name.encode()[:MAX_INDEX_NAME_BYTES].decode(errors="ignore")
    while name[:1] in ("-", "_", "+"):
        name = name[1:]
    if name in (".", ".."):
        name = name.replace(".", "dot")
    return name


def mapping_for(schema: Schema | None) -> dict[str, Any] | None:
    """The ``mappings`` body for documents of ``schema``, or ``None`` when only dynamic mapping can
    apply (no schema, or a value that is not a struct)."""
    if schema is None or schema.type is not Type.STRUCT:
        return None
    return {"properties": {f.name: field_mapping(f.schema) for f in schema.fields}}


def field_mapping(schema: Schema) -> dict[str, Any]:
    """The mapping of one field."""
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        return _with_null_value({"type": "double"}, schema, float)
    if name in (Date.LOGICAL_NAME, Timestamp.LOGICAL_NAME):
        return {"type": "date"}
    if name == Time.LOGICAL_NAME:
        return {"type": "date", "format": TIME_FORMAT}
    kind = schema.type
    if kind is Type.STRUCT:
        return {"properties": {f.name: field_mapping(f.schema) for f in schema.fields}}
    if kind is Type.ARRAY:
        assert schema.value_schema is not None
        return field_mapping(schema.value_schema)
    if kind is Type.MAP:
        return {"type": "object"}
    if kind is Type.STRING:
        return {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    return _with_null_value({"type": _PRIMITIVES[kind]}, schema, None)


def _with_null_value(mapping: dict[str, Any], schema: Schema, cast: Any) -> dict[str, Any]:
    if schema.default is not None and mapping["type"] in _NULL_VALUE_TYPES:
        mapping["null_value"] = cast(schema.default) if cast is not None else schema.default
    return mapping
