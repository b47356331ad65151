"""Batches of Confluent-wire-format Avro values read straight into Arrow tables by Sluice's native reader.

Sinks that write columns (the JDBC sink's COPY path, the S3 sink's Parquet) take a batch of
consumed Avro values of one writer schema and need it as Arrow columns. The ordinary path decodes
each value into a Connect struct (fastavro or ``sluice_native.AvroRecordReader``, then
:mod:`sluice.converters.avro_decode`'s logical-type conversion) and builds columns from those
dicts; :func:`read_avro_values` has the native reader (``sluice_native.read_avro_arrow``, Rust)
decode the bodies column by column with the GIL released and no Python object per record, and
wraps the Arrow buffers it returns without copying. :func:`avro_documents` has it write each
value's JSON document instead (the Elasticsearch sink's documents), byte for byte what
``orjson.dumps`` writes for the decoded value.

The table is the one the ordinary path gives when its Connect values are converted with the
Connect → Arrow mapping of the S3 sink's Parquet format: one column per field, in the writer's
order, named as the field, nullable exactly when the field is a union with null
(``["null", T]`` or ``[T, "null"]``), typed by the field's Connect schema:

=====================================================  =========================================
Avro field type (its Connect type)                      Arrow type
=====================================================  =========================================
``int`` with ``connect.type`` ``int8`` / ``int16``      ``int8`` / ``int16``
``int``                                                 ``int32``
``long``                                                ``int64`` (``timestamp-micros`` and other
                                                        logical types Connect does not map stay
                                                        ``int64``/``int32``)
``float`` / ``double``                                  ``float32`` / ``float64``
``boolean``                                             ``bool``
``string``, ``enum`` (the symbol)                       ``string``
``bytes``, ``fixed``                                    ``binary``
``bytes``/``fixed`` ``decimal`` (Connect Decimal)       ``decimal128(p, scale)``, ``p`` the Connect
                                                        schema's ``connect.decimal.precision``
                                                        (written only when not 64), else 38
``int`` ``date`` (Connect Date)                         ``date32``
``int`` ``time-millis`` (Connect Time)                  ``time32('ms')``
``long`` ``timestamp-millis`` (Connect Timestamp)       ``timestamp('ms', tz='UTC')``
=====================================================  =========================================

Defaults in the writer's schema play no part: a present value is read as written, a null stays
null. There is no reader schema (no schema evolution): the batch is read with its writer's schema.

It returns ``None`` (the caller decodes the batch the ordinary way, which reports what is wrong)
for a schema that is not a record of such fields (nested records, arrays, maps, other unions), a
Connect schema the decoder builds differently from what the Avro types say (a ``connect.name``
naming a logical type the field does not have, a decimal whose ``scale`` parameter differs from
its Avro scale, a precision above 38 or below the scale), and for a batch with a tombstone, a
value not in the wire format or with another schema id, a malformed or truncated body, bytes
after the record, invalid UTF-8, an int beyond its Connect type, a boolean byte other than 0 or
1, an enum index beyond its symbols, a date or timestamp outside years 1 to 9999, a time outside
one day, or a decimal with more digits than its precision or than Python's default decimal
context keeps (28 significant digits: beyond those the ordinary path rounds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.converters.avro_decode import ToConnect
from sluice.converters.avro_schema import DECIMAL_PRECISION_PARAM, strip_logical_types

try:
    import fastavro
except ImportError:  # pragma: no cover - comes with the avro and s3 extras, as the converter needs it
    fastavro = None  # type: ignore[assignment]
try:
    import pyarrow as pa
except ImportError:  # pragma: no cover - every extra that writes columns brings pyarrow
    pa = None
try:
    import sluice_native
except ImportError:  # pragma: no cover - tests hide the module to exercise the callers' fallbacks
    sluice_native = None

__all__ = ["available", "avro_documents", "read_avro_values"]

#: The Arrow precision of a Connect Decimal without ``connect.decimal.precision`` (as the S3 sink's Parquet).
DEFAULT_ARROW_PRECISION = 38

_LOGICAL_NAMES = frozenset((Decimal.LOGICAL_NAME, Date.LOGICAL_NAME, Time.LOGICAL_NAME, Timestamp.LOGICAL_NAME))
_PLAIN = {
    # (Avro type, Connect type) → native kind, Arrow type name
    ("int", Type.INT8): ("int8", "int8"),
    ("int", Type.INT16): ("int16", "int16"),
    ("int", Type.INT32): ("int32", "int32"),
    ("long", Type.INT64): ("int64", "int64"),
    ("float", Type.FLOAT32): ("float", "float32"),
    ("double", Type.FLOAT64): ("double", "float64"),
    ("boolean", Type.BOOLEAN): ("boolean", "bool_"),
    ("string", Type.STRING): ("string", "string"),
    ("bytes", Type.BYTES): ("bytes", "binary"),
}
_LOGICAL: dict[tuple[str, Any], tuple[str, str]] = {
    # (Avro type, logicalType) → the Connect logical name the decoder converts to, native kind
    ("int", "date"): (Date.LOGICAL_NAME, "date"),
    ("int", "time-millis"): (Time.LOGICAL_NAME, "time-millis"),
    ("long", "timestamp-millis"): (Timestamp.LOGICAL_NAME, "timestamp-millis"),
}
_PLAN_CACHE_SIZE = 64

# One field of the native plan: (kind, null, size, precision, symbols); see sluice_native.read_avro_arrow.
_Field = tuple[str, str, int, int, list[bytes]]


class _Plan(NamedTuple):
    fields: list[_Field]
    types: list[Any]
    schema: Any
    #: Per field: its name as JSON text and its decimal scale (0 for other fields), for documents.
    json_keys: list[tuple[bytes, int]]


def available() -> bool:
    """Whether the native reader is installed (``make setup`` builds it; callers fall back without it)."""
    return (
        pa is not None
        and fastavro is not None
        and sluice_native is not None
        and hasattr(sluice_native, "read_avro_arrow")
    )


# Plans by id() of the writer-schema object; the entry keeps the object so an id is never reused under it.
_plans: dict[tuple[int, bool], tuple[Any, _Plan | None]] = {}
_plans_by_text: dict[tuple[bytes, bool], _Plan | None] = {}


def read_avro_values(raws: list[bytes], writer_schema: dict[str, Any], *, connect_meta_data: bool = True) -> Any:
    """``raws`` (Confluent wire format, one schema id) as an Arrow table, or ``None`` when the ordinary
    decoder must read them (see the module docstring), when ``raws`` is empty, or when the native
    reader is not installed.

    ``writer_schema`` is the Avro schema (parsed JSON) the values were written with;
    ``connect_meta_data`` is the converter's setting of that name (it shapes the Connect schema).
    Plans are cached by the schema's JSON text (and by the identity of the object, which must then
    not change).
    """
    if not raws or not available():
        return None
    plan = _plan_for(writer_schema, connect_meta_data)
    if plan is None:
        return None
    parsed = sluice_native.read_avro_arrow(raws if type(raws) is list else list(raws), plan.fields)
    if parsed is None:
        return None
    rows, columns = parsed
    arrays = []
    for (validity, values, offsets), arrow_type in zip(columns, plan.types):
        valid = None if validity is None else pa.py_buffer(validity)
        data = pa.py_buffer(values)
        buffers = [valid, data] if offsets is None else [valid, pa.py_buffer(offsets), data]
        arrays.append(pa.Array.from_buffers(arrow_type, rows, buffers))
    return pa.Table.from_arrays(arrays, schema=plan.schema)


def avro_documents(
    raws: list[bytes | None], writer_schema: dict[str, Any], *, connect_meta_data: bool = True
) -> list[bytes | None] | None:
    """Each of ``raws`` (Confluent wire format, one schema id; ``None`` for a tombstone) as the JSON
    object ``orjson.dumps`` writes for its decoded Connect value, decimals as floats and bytes as
    base64 (the Elasticsearch sink's documents), with ``None`` for a tombstone; or ``None`` when the
    ordinary decoder must read them, under the same rules as :func:`read_avro_values`."""
    if not raws or not available():
        return None
    plan = _plan_for(writer_schema, connect_meta_data)
    if plan is None:
        return None
    documents: list[bytes | None] | None = sluice_native.read_avro_arrow(
        raws if type(raws) is list else list(raws), plan.fields, plan.json_keys
    )
    return documents


def _plan_for(writer_schema: Any, meta: bool) -> _Plan | None:
    key = (id(writer_schema), meta)
    cached = _plans.get(key)
    if cached is not None and cached[0] is writer_schema:
        return cached[1]
    try:  # a schema parsed again for each batch (same text, new object) still finds its plan
        text_key = (orjson.dumps(writer_schema), meta)
    except TypeError:
        return build_plan(writer_schema, connect_meta_data=meta)
    if text_key in _plans_by_text:
        plan = _plans_by_text[text_key]
    else:
        plan = build_plan(writer_schema, connect_meta_data=meta)
        if len(_plans_by_text) >= _PLAN_CACHE_SIZE:
            _plans_by_text.clear()
        _plans_by_text[text_key] = plan
    if len(_plans) >= _PLAN_CACHE_SIZE:
        _plans.clear()
    _plans[key] = (writer_schema, plan)
    return plan


def build_plan(writer_schema: Any, *, connect_meta_data: bool = True) -> _Plan | None:
    """The native reader's plan and the Arrow schema for ``writer_schema``, or ``None`` when it is
    not a record of fields this reader reads exactly as the ordinary decoder does."""
    if not isinstance(writer_schema, Mapping) or writer_schema.get("type") != "record":
        return None
    avro_fields = writer_schema.get("fields")
    if not isinstance(avro_fields, Sequence) or not avro_fields:
        return None
    try:
        fastavro.parse_schema(strip_logical_types(writer_schema))  # as the converter does before reading
        connect, _ = ToConnect(connect_meta_data).convert(writer_schema, None)
    except Exception:  # noqa: BLE001 - a schema the converter refuses is for the ordinary path to report
        return None
    if connect.type is not Type.STRUCT or len(connect.fields) != len(avro_fields):
        return None
    fields: list[_Field] = []
    types: list[Any] = []
    arrow_fields = []
    json_keys: list[tuple[bytes, int]] = []
    for avro_field, connect_field in zip(avro_fields, connect.fields):
        if not isinstance(avro_field, Mapping) or avro_field.get("name") != connect_field.name:
            return None
        planned = _field_plan(avro_field.get("type"), connect_field.schema)
        if planned is None:
            return None
        fields.append(planned[0])
        types.append(planned[1])
        scale = planned[1].scale if pa.types.is_decimal(planned[1]) else 0
        json_keys.append((orjson.dumps(connect_field.name), scale))
        arrow_fields.append(pa.field(connect_field.name, planned[1], nullable=connect_field.schema.optional))
    return _Plan(fields, types, pa.schema(arrow_fields), json_keys)


def _is_null(branch: Any) -> bool:
    return branch == "null" or (isinstance(branch, Mapping) and branch.get("type") == "null")


def _field_plan(avro: Any, schema: Schema) -> tuple[_Field, Any] | None:
    """One field's native plan entry and Arrow type, or ``None`` if this reader does not take it."""
    null = "no"
    if isinstance(avro, list):
        if len(avro) != 2 or _is_null(avro[0]) == _is_null(avro[1]):
            return None
        null = "first" if _is_null(avro[0]) else "second"
        avro = avro[1] if null == "first" else avro[0]
    if schema.optional != (null != "no"):
        return None
    attrs: Mapping[str, Any] = avro if isinstance(avro, Mapping) else {}
    base = attrs.get("type") if isinstance(avro, Mapping) else avro
    if not isinstance(base, str):
        return None
    logical = attrs.get("logicalType")
    if base in ("bytes", "fixed") and logical == "decimal":
        return _decimal_plan(attrs, base, null, schema)
    size = -1
    symbols: list[bytes] = []
    if (base, logical) in _LOGICAL:
        name, kind = _LOGICAL[base, logical]
        if schema.name != name:
            return None
        arrow_type = {"date": pa.date32(), "time-millis": pa.time32("ms")}.get(kind) or pa.timestamp("ms", tz="UTC")
        return (kind, null, size, 0, symbols), arrow_type
    if schema.name in _LOGICAL_NAMES:
        return None  # a logical name without the logical type: the decoder leaves the value as Avro's
    if base == "enum":
        if schema.type is not Type.STRING or not isinstance(attrs.get("symbols"), list):
            return None
        try:
            symbols = [s.encode() for s in attrs["symbols"]]
        except (AttributeError, UnicodeEncodeError):
            return None
        return ("enum", null, size, 0, symbols), pa.string()
    if base == "fixed":
        size = attrs.get("size")  # type: ignore[assignment]
        if schema.type is not Type.BYTES or type(size) is not int or size < 0:
            return None
        return ("fixed", null, size, 0, symbols), pa.binary()
    plain = _PLAIN.get((base, schema.type))
    if plain is None:
        return None
    return (plain[0], null, size, 0, symbols), getattr(pa, plain[1])()


def _decimal_plan(attrs: Mapping[str, Any], base: str, null: str, schema: Schema) -> tuple[_Field, Any] | None:
    """A decimal field's plan: the decoder's scale must be the Connect schema's, the precision Arrow's."""
    if schema.name != Decimal.LOGICAL_NAME or schema.type is not Type.BYTES:
        return None
    scale = attrs.get("scale", 0)
    params = schema.parameters or {}
    try:
        precision = int(params.get(DECIMAL_PRECISION_PARAM, DEFAULT_ARROW_PRECISION))
        same_scale = Decimal.scale(schema) == scale
    except Exception:  # noqa: BLE001 - a parameter that is not an integer: the ordinary path reports it
        return None
    if type(scale) is not int or not same_scale or not 0 <= scale <= precision <= 38 or precision < 1:
        return None
    size = -1
    if base == "fixed":
        size = attrs.get("size")  # type: ignore[assignment]
        if type(size) is not int or size < 0:
            return None
    return ("decimal", null, size, precision, []), pa.decimal128(precision, scale)
