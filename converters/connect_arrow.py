"""Raw JSON with schemas as Arrow columns typed by their Connect schema, exactly as decoding would.

The sinks that write columns (the JDBC sink's COPY path, the S3 sink's Parquet) read a batch of
JsonConverter envelopes (``schemas.enable=true``) with the native parser
(:func:`sluice.converters.json_arrow.read_envelopes`): the payloads become Arrow columns of JSON's
own types (int64, double, bool, string), and each distinct ``schema`` text comes once.
:class:`EnvelopeReader` parses that text as the converter would (once per distinct text) and
turns the columns into what decoding the records gives, field by field in the schema's order:

========================  =================================  ============================
Connect type              JSON payload                       Arrow column
========================  =================================  ============================
int8, int16, int32, int64 integer, in the type's range       int8, int16, int32, int64
float32, float64          number                             float32, float64
boolean, string           boolean, string                    bool, string
bytes                     base64 string                      binary
Decimal (scale s)         base64 string of the unscaled int  decimal128(precision, s)
Date                      integer days since 1970-01-01      date32
Time                      integer milliseconds of the day    time32[ms]
Timestamp                 integer milliseconds since 1970    timestamp[ms, tz=UTC]
========================  =================================  ============================

(the Arrow types are those the S3 sink's Parquet writer gives the decoded values). A null, or a
missing member, is the field's default when it has one and ``replace.null.with.default`` is on,
else null for an optional field. Whatever decoding would refuse, or could decode differently, makes
the whole batch ``None`` and the caller decodes it, so the records and the errors are the same as
on the decoded path: a batch with more than one schema, a schema that is not a struct of those
types (nested structs, arrays and maps included), a payload member the schema does not have, a
value of another JSON type (an integral double for an integer field, a number for a Decimal), a
value out of range, a null in a required field without a default.
"""

from __future__ import annotations

import binascii
import decimal
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.converters import json_arrow
from sluice.converters.json_read import _Decoders

try:  # every extra that writes columns brings pyarrow (and NumPy)
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError:  # pragma: no cover
    pa = None
try:  # the native Avro reader; without it Avro batches are decoded
    from sluice.converters.avro_arrow import read_avro_values
except ImportError:  # pragma: no cover - depends on the build
    read_avro_values = None  # type: ignore[assignment]

__all__ = ["EnvelopeReader", "arrow_type", "read_avro_batch", "typed_table"]

_INT_RANGES = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
#: Days and milliseconds since the epoch that Python's date and datetime hold (years 1 to 9999).
_DATE_RANGE = (-719_162, 2_932_896)
_TIMESTAMP_RANGE = (-62_135_596_800_000, 253_402_300_799_999)
_MILLIS_PER_DAY = 86_400_000
_CACHED_SCHEMAS = 64
#: Base64's alphabet as a lookup table (255: not in it), its zero digit and its padding.
_BASE64: Any = None
if pa is not None:
    _BASE64 = np.full(256, 255, dtype=np.uint8)
    _BASE64[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")] = np.arange(64)
_BASE64_ZERO, _PAD = ord("A"), ord("=")
#: Wide enough that moving the decimal point never rounds a 38-digit value (as the converter's own context).
_EXACT = decimal.Context(prec=100, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def arrow_type(schema: Schema) -> Any:
    """The Arrow type of a flat Connect field schema, or ``None`` for one :func:`typed_table` does not read."""
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        precision = int((schema.parameters or {}).get("connect.decimal.precision", 38))
        scale = Decimal.scale(schema)
        return pa.decimal128(precision, scale) if 0 < precision <= 38 and 0 <= scale <= precision else None
    if name == Date.LOGICAL_NAME:
        return pa.date32()
    if name == Time.LOGICAL_NAME:
        return pa.time32("ms")
    if name == Timestamp.LOGICAL_NAME:
        return pa.timestamp("ms", tz="UTC")
    simple = {
        Type.INT8: pa.int8(),
        Type.INT16: pa.int16(),
        Type.INT32: pa.int32(),
        Type.INT64: pa.int64(),
        Type.FLOAT32: pa.float32(),
        Type.FLOAT64: pa.float64(),
        Type.BOOLEAN: pa.bool_(),
        Type.STRING: pa.string(),
        Type.BYTES: pa.binary(),
    }
    return simple.get(schema.type)


class EnvelopeReader:
    """Reads batches of envelopes into typed tables; parses each distinct schema text once (cached)."""

    def __init__(self, replace_null_with_default: bool = True) -> None:
        self.replace_null_with_default = replace_null_with_default
        # The converter's own schema reader (Connect's asConnectSchema), with its null setting.
        self._decoders = _Decoders(replace_null_with_default)
        self._schemas: OrderedDict[bytes, Schema | None] = OrderedDict()

    def read(self, raws: Sequence[bytes | None]) -> tuple[Any, Schema] | None:
        """``raws`` as ``(table, value schema)``, the table's columns the schema's fields; ``None``
        when the batch must be decoded instead (see the module docstring)."""
        if pa is None or not raws or None in raws:
            return None
        envelopes = json_arrow.read_envelopes(raws)  # type: ignore[arg-type]
        if envelopes is None or len(envelopes.schemas) != 1:
            return None  # not envelopes of flat payloads, or records of several schemas
        schema = self.schema(envelopes.schemas[0])
        if schema is None or envelopes.table is None:
            return None
        table = typed_table(envelopes.table, schema, self.replace_null_with_default)
        return None if table is None else (table, schema)

    def schema(self, text: bytes) -> Schema | None:
        """The Connect schema of an envelope's schema text, as the converter reads it (``None``: not a valid one)."""
        schemas = self._schemas
        if text in schemas:
            return schemas[text]
        try:
            schema: Schema | None = self._decoders.schema(orjson.loads(text))
        except Exception:  # noqa: BLE001 - not JSON, not a schema, a default the converter reads exactly: decoding decides
            schema = None
        schemas[text] = schema
        if len(schemas) > _CACHED_SCHEMAS:
            schemas.popitem(last=False)
        return schema


def typed_table(table: Any, schema: Schema, replace_null_with_default: bool = True) -> Any | None:
    """The payload columns ``table`` typed as the struct ``schema`` says, or ``None`` (see the module)."""
    if schema.type is not Type.STRUCT or schema.optional and schema.default is not None:
        return None
    names = {f.name for f in schema.fields}
    if any(name not in names for name in table.column_names):
        return None  # the converter would drop the member: leave that to it
    arrays, fields = [], []
    for field in schema.fields:
        kind = arrow_type(field.schema)
        if kind is None:
            return None
        parsed = table.column(field.name) if field.name in table.column_names else pa.nulls(table.num_rows)
        column = _typed_column(
            parsed.combine_chunks() if isinstance(parsed, pa.ChunkedArray) else parsed, field.schema, kind
        )
        if column is None:
            return None
        column = _nulls_as_decoded(column, field.schema, kind, replace_null_with_default)
        if column is None:
            return None
        arrays.append(column)
        fields.append(pa.field(field.name, kind, nullable=field.schema.optional))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _typed_column(column: Any, schema: Schema, kind: Any) -> Any | None:
    """One parsed column as the Arrow type ``kind`` of ``schema``, or ``None``."""
    parsed = column.type
    if pa.types.is_null(parsed):
        return pa.nulls(len(column), kind)
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        short = _short_decimals(column, kind)
        if short is not None:
            return short
        return _from_base64(column, _decimal_of(Decimal.scale(schema), kind.precision), kind)
    if schema.type is Type.BYTES and name is None:
        return _from_base64(column, _same, kind)
    if name == Date.LOGICAL_NAME:
        return _ints_as(column, _DATE_RANGE, pa.int32(), kind)
    if name == Time.LOGICAL_NAME:
        return _ints_as(column, (0, _MILLIS_PER_DAY - 1), pa.int32(), kind)
    if name == Timestamp.LOGICAL_NAME:
        return _ints_as(column, _TIMESTAMP_RANGE, pa.int64(), kind)
    if schema.type in _INT_RANGES:
        return _ints_as(column, _INT_RANGES[schema.type], kind, kind)
    if schema.type in (Type.FLOAT32, Type.FLOAT64):
        if not (pa.types.is_int64(parsed) or pa.types.is_float64(parsed)):
            return None
        # An integer becomes float(n), a double stays; float32 rounds as building it from Python floats does.
        return column.cast(pa.float64(), safe=False).cast(kind, safe=False)
    if (schema.type is Type.BOOLEAN and pa.types.is_boolean(parsed)) or (
        schema.type is Type.STRING and pa.types.is_string(parsed)
    ):
        return column
    return None


def _ints_as(column: Any, bounds: tuple[int, int], storage: Any, kind: Any) -> Any | None:
    """An integer column in ``bounds`` as ``kind`` (stored as the integer type ``storage``)."""
    if not pa.types.is_int64(column.type):
        return None
    if column.null_count < len(column):
        low, high = bounds
        extremes = pc.min_max(column)
        if not low <= extremes["min"].as_py() <= extremes["max"].as_py() <= high:
            return None
    narrowed = column.cast(storage)
    return narrowed if storage == kind else narrowed.view(kind)


def _same(data: bytes) -> bytes:
    return data


def _decimal_of(scale: int, precision: int) -> Callable[[bytes], decimal.Decimal | None]:
    """The Decimal an unscaled two's-complement integer stands for (``None``: more digits than ``precision``)."""
    limit = 10**precision

    def convert(data: bytes) -> decimal.Decimal | None:
        unscaled = int.from_bytes(data, "big", signed=True)
        if not -limit < unscaled < limit:
            return None
        return decimal.Decimal(unscaled).scaleb(-scale, _EXACT)

    return convert


def _from_base64(column: Any, convert: Callable[[bytes], Any], kind: Any) -> Any | None:
    """A column of base64 strings decoded value by value (bytes and Decimals are rare and short)."""
    if not pa.types.is_string(column.type):
        return None
    values: list[Any] = []
    try:
        for text in column.to_pylist():
            if text is None:
                values.append(None)
                continue
            value = convert(binascii.a2b_base64(text, strict_mode=True))
            if value is None:
                return None
            values.append(value)
        return pa.array(values, kind)
    except (binascii.Error, ValueError, pa.ArrowException):
        return None


def _short_decimals(column: Any, kind: Any) -> Any | None:
    """A column of base64 Decimals decoded at once with NumPy, exactly as :func:`_from_base64`
    decodes them value by value, or ``None`` (decode them so) unless every value is a canonical
    base64 string of 1 to 8 bytes (4, 8 or 12 characters, padding only at the end, no stray bits)
    of at most ``kind.precision`` digits: the usual money and quantity columns."""
    n = len(column)
    if not pa.types.is_string(column.type) or not n or column.buffers()[2] is None:
        return None
    ends = np.frombuffer(column.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * column.offset)
    starts, lengths = ends[:-1], np.diff(ends)
    valid = np.ones(n, dtype=bool)
    if column.null_count:  # from the bitmap: Arrow's own conversion of booleans to NumPy imports pandas
        bits = np.unpackbits(np.frombuffer(column.buffers()[0], dtype=np.uint8), bitorder="little")
        valid = bits[column.offset : column.offset + n].astype(bool)
    lengths = np.where(valid, lengths, 4)  # a null reads as "AAAA" (zero), then is null again
    if (lengths % 4).any() or (lengths > 12).any() or not lengths.all():
        return None
    data = np.frombuffer(column.buffers()[2], dtype=np.uint8)
    width = np.arange(12)
    inside = (width < lengths[:, None]) & valid[:, None]
    chars = np.where(inside, data[np.minimum(starts[:, None] + width, len(data) - 1)], _BASE64_ZERO)
    rows = np.arange(n)
    last = chars[rows, lengths - 1] == _PAD
    pads = last.astype(np.int64) + (last & (chars[rows, lengths - 2] == _PAD))
    sextets = _BASE64[np.where(chars == _PAD, _BASE64_ZERO, chars)].astype(np.int64)
    if (sextets > 63).any() or ((chars == _PAD).sum(axis=1) != pads).any():
        return None  # not the alphabet, or padding other than one or two at the end
    stray = sextets[rows, lengths - 1 - pads] & np.where(pads == 2, 15, np.where(pads == 1, 3, 0))
    size = lengths // 4 * 3 - pads
    if stray.any() or (size > 8).any():
        return None
    quads = sextets.reshape(n, 3, 4)
    blocks = quads[:, :, 0] << 18 | quads[:, :, 1] << 12 | quads[:, :, 2] << 6 | quads[:, :, 3]
    raw = np.stack([blocks >> 16 & 255, blocks >> 8 & 255, blocks & 255], axis=2).reshape(n, 9)
    fill = np.where(raw[:, 0] >= 128, 255, 0)  # sign extension of each big-endian two's complement
    source = np.arange(8) - (8 - size[:, None])
    padded = np.where(source >= 0, raw[rows[:, None], np.maximum(source, 0)], fill[:, None]).astype(np.uint8)
    unscaled = padded.view(">i8").ravel().astype(np.int64)
    limit = 10**kind.precision
    if limit <= 2**63 and not ((unscaled > -limit) & (unscaled < limit)).all():
        return None  # more digits than the precision: decoding refuses the batch
    words = np.stack([unscaled, unscaled >> 63], axis=1).astype("<i8")  # 128 bits, little-endian
    validity = column.is_valid().buffers()[1] if column.null_count else None
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(words)])


def _nulls_as_decoded(column: Any, schema: Schema, kind: Any, replace_null_with_default: bool) -> Any | None:
    """Nulls as decoding gives them: the default if there is one (and nulls are replaced), null
    for an optional field; a null in a required field without a default makes ``None``."""
    if not column.null_count:
        return column
    if schema.default is not None and replace_null_with_default:
        try:
            return pc.fill_null(column, pa.scalar(schema.default, kind))
        except (pa.ArrowException, TypeError, ValueError):
            return None
    return column if schema.optional else None


def read_avro_batch(raws: Sequence[bytes | None], writer_schema: Callable[[int], Any] | None) -> Any | None:
    """``raws`` (Confluent's Avro wire format) as an Arrow table decoded as the Avro converter
    decodes them, or ``None`` (the caller decodes them): when the native Avro reader is not
    installed, a value is a tombstone or not in the wire format, the values name more than one
    writer schema, or the reader cannot decode them exactly as the converter would."""
    if read_avro_values is None or writer_schema is None or not raws or None in raws:
        return None
    values = cast("list[bytes]", list(raws))
    header = values[0][:5]
    if len(header) < 5 or header[0] != 0 or not all(raw[:5] == header for raw in values):
        return None  # not the wire format, or several schema ids: the converter sorts them out
    try:
        schema = writer_schema(int.from_bytes(header[1:5], "big"))
    except DataError:
        return None
    return read_avro_values(values, schema)
