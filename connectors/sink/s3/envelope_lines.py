"""JSON lines from JSON with schemas: each envelope's payload as consumed, when it is what decoding writes.

Confluent's ``JsonFormat`` writes a value as Connect's JsonConverter does with
``schemas.enable=false`` (see :mod:`~sluice.connectors.s3_common.line_formats`). With the worker's
value converter a JsonConverter with ``schemas.enable=true``, each consumed value is the envelope
``{"schema": …, "payload": …}``, and the line the decoded path writes for it has the JSON value of
its payload whenever decoding the payload changes nothing JSON can tell:

* every field of the schema is a member of the payload (decoding writes a missing one as null or
  its default) and no member is left over (decoding drops it);
* a member is null only where decoding keeps it null (not a field with a default under
  ``replace.null.with.default``, which decoding writes as the default);
* every value reads back as itself: integers, booleans, strings, Dates, Times and Timestamps do;
  Decimals and bytes must be base64 as Java writes it (canonical, and for a Decimal the unscaled
  value's minimal two's complement, ``BigInteger.toByteArray``), and with ``json.decimal.format``
  ``NUMERIC`` a schema with a Decimal is decoded; a float32/float64 member must be strictly
  within ±2^53 (an integer beyond that in a float field would be rounded by decoding).

:class:`EnvelopeLines` checks exactly that, a batch at a time: the native parser reads the
payloads into columns of JSON's own types and hands back the one schema text
(:func:`sluice.converters.json_arrow.read_envelopes`), which is parsed as the converter does (once
per distinct text, :class:`~sluice.converters.connect_arrow.EnvelopeReader`); then each field's
column is checked against its schema with a few Arrow and NumPy calls: its JSON type (an integer
for the integer types, Date, Time and Timestamp, in the range decoding accepts; a number for
float32/float64; a string for strings, bytes and Decimals; a boolean), its nulls, its base64. A
batch that passes is written as its payloads' bytes, sliced out of the envelopes (JsonConverter
writes the envelope without whitespace, so every payload starts at the same place: after the
schema text and ``,"payload":``, and ends before the envelope's last brace): no Python object is
built per record. Any other batch (several schemas, nested fields, a value that fails any check,
an envelope spelled otherwise) is decoded and written as before, so the lines hold the same JSON
values either way, spelled as the producer spelled them on this path (spacing, member order,
number and string spelling) and as orjson spells them on the other. A check that refuses
something decoding would take only costs that batch the decoded path; each one errs that way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from typing import Any, NamedTuple

import orjson

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type, WireFormat
from sluice.converters import json_arrow
from sluice.converters.connect_arrow import EnvelopeReader

try:  # the S3 extra brings pyarrow and NumPy; without them every batch is decoded
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError:  # pragma: no cover
    pa = None

__all__ = ["EnvelopeLines"]

_ENVELOPE_START = b'{"schema":'
_PAYLOAD = b',"payload":'
_ENVELOPE_END = b"}}"
_EXACT_FLOAT = 2**53
_PLANS = 64  # schema texts remembered
#: The integers each integral type takes, as decoding takes them (Date and Timestamp: what Python's
#: date and datetime hold, years 1 to 9999).
_INTEGERS: dict[Type | str, tuple[int, int]] = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
    Date.LOGICAL_NAME: (-719_162, 2_932_896),
    Time.LOGICAL_NAME: (0, 86_399_999),
    Timestamp.LOGICAL_NAME: (-62_135_596_800_000, 253_402_300_799_999),
}
#: Base64's alphabet as sextets, ``=`` as 64, anything else 255.
_SEXTETS: Any = None
if pa is not None:
    _SEXTETS = np.full(256, 255, dtype=np.uint8)
    _SEXTETS[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")] = np.arange(64)
    _SEXTETS[ord("=")] = 64


class _Field(NamedTuple):
    """What a payload member must be for its bytes to be what decoding writes."""

    name: str
    #: ``"int"`` (in ``bounds``), ``"float"``, ``"string"``, ``"boolean"``, ``"bytes"`` (canonical
    #: base64) or ``"decimal"`` (canonical and minimal base64).
    kind: str
    bounds: tuple[int, int]
    #: Whether decoding keeps a null null (else it writes the field's default, or refuses it).
    null_stays: bool
    #: The member with a null value as JsonConverter spells it, first in the payload and after another.
    null_first: bytes
    null_after: bytes


class _Plan(NamedTuple):
    """A schema text's value schema, the bytes every envelope of it starts with, and its fields' checks."""

    schema: Schema
    prefix: bytes
    fields: tuple[_Field, ...]
    names: frozenset[str]


class EnvelopeLines:
    """Turns batches of JsonConverter envelopes into the JSON lines decoding would write (one per
    task; task thread). ``decimal_format`` is the sink's ``json.decimal.format``."""

    def __init__(self, decimal_format: str = "BASE64") -> None:
        self.decimal_format = decimal_format
        self._reader: EnvelopeReader | None = None
        self._plans: OrderedDict[bytes, _Plan | None] = OrderedDict()

    def read(self, raws: Sequence[bytes | None], wire: WireFormat) -> tuple[list[bytes | None], Schema] | None:
        """``raws`` as the payloads' bytes (a tombstone stays ``None``) and their value schema, or
        ``None``: decode them (see the module docstring)."""
        if pa is None or wire.kind != "json" or not wire.schemas or not raws:
            return None
        values: Sequence[bytes] = raws if None not in raws else [r for r in raws if r is not None]  # type: ignore[assignment]
        if not values or type(values[0]) is not bytes or not values[0].startswith(_ENVELOPE_START):
            return None
        envelopes = json_arrow.read_envelopes(values if type(values) is list else list(values))
        if envelopes is None or envelopes.table is None or len(envelopes.schemas) != 1:
            return None
        plan = self._plan(envelopes.schemas[0], wire.replace_null_with_default)
        if plan is None:
            return None
        try:  # JsonConverter's spelling: the payload right after the schema, and nothing after it
            if not all(map(bytes.startswith, values, repeat(plan.prefix))) or not all(
                map(bytes.endswith, values, repeat(_ENVELOPE_END))
            ):
                return None
        except TypeError:  # not bytes
            return None
        table = envelopes.table
        if not plan.names.issuperset(table.column_names):
            return None  # a member the schema lacks, which decoding drops
        start = len(plan.prefix)
        payloads = [raw[start:-1] for raw in values]
        blob = _Blob(payloads)
        if not all(_member_as_decoded(table, field, blob) for field in plan.fields):
            return None
        if values is not raws:
            it = iter(payloads)
            return [None if raw is None else next(it) for raw in raws], plan.schema
        return payloads, plan.schema  # type: ignore[return-value]

    def _plan(self, text: bytes, replace_null_with_default: bool) -> _Plan | None:
        """The plan of the schema text ``text`` (cached; ``None``: such values are decoded)."""
        reader = self._reader
        if reader is None or reader.replace_null_with_default != replace_null_with_default:
            reader = self._reader = EnvelopeReader(replace_null_with_default)
            self._plans.clear()  # their null checks depend on the setting
        if text in self._plans:
            return self._plans[text]
        schema = reader.schema(text)
        plan = None if schema is None else _make_plan(text, schema, replace_null_with_default, self.decimal_format)
        self._plans[text] = plan
        if len(self._plans) > _PLANS:
            self._plans.popitem(last=False)
        return plan


def _make_plan(text: bytes, schema: Schema, replace_null_with_default: bool, decimal_format: str) -> _Plan | None:
    if schema.type is not Type.STRUCT or not schema.fields or (schema.optional and schema.default is not None):
        return None
    fields = []
    for field in schema.fields:
        kind = _kind(field.schema, decimal_format)
        if kind is None:
            return None  # nested, or a type this does not check: decoded
        field_schema = field.schema
        name = orjson.dumps(field.name)
        fields.append(
            _Field(
                field.name,
                kind,
                _bounds(field_schema),
                field_schema.optional and not (field_schema.default is not None and replace_null_with_default),
                b"{" + name + b":null",
                b"," + name + b":null",
            )
        )
    names = frozenset(field.name for field in schema.fields)
    return _Plan(schema, _ENVELOPE_START + text + _PAYLOAD, tuple(fields), names)


def _bounds(schema: Schema) -> tuple[int, int]:
    """The integers a field of an integral ``schema`` takes (any other: unused)."""
    logical = _INTEGERS.get(schema.name) if schema.name is not None else None
    return logical or _INTEGERS.get(schema.type, (0, 0))


def _kind(schema: Schema, decimal_format: str) -> str | None:
    """What a field of ``schema`` is checked as (``None``: its values are decoded)."""
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        # The lines hold numbers with NUMERIC, the envelopes base64.
        return "decimal" if decimal_format == "BASE64" and schema.type is Type.BYTES else None
    if name in (Date.LOGICAL_NAME, Time.LOGICAL_NAME, Timestamp.LOGICAL_NAME):
        return "int" if schema.type is (Type.INT64 if name == Timestamp.LOGICAL_NAME else Type.INT32) else None
    if schema.type in _INTEGERS:
        return "int"
    return {
        Type.FLOAT32: "float",
        Type.FLOAT64: "float",
        Type.STRING: "string",
        Type.BOOLEAN: "boolean",
        Type.BYTES: "bytes",
    }.get(schema.type)


class _Blob:
    """A batch's payloads joined, made once if a check needs it."""

    def __init__(self, payloads: list[bytes]) -> None:
        self.payloads = payloads
        self._joined: bytes | None = None

    def count(self, pattern: bytes) -> int:
        if self._joined is None:
            self._joined = b"\n".join(self.payloads)
        return self._joined.count(pattern)


def _member_as_decoded(table: Any, field: _Field, payloads: _Blob) -> bool:
    """Whether every payload has the member ``field``, decoding takes each of its values, and
    writes it back as it is (see the module docstring)."""
    if field.name not in table.column_names:
        return False  # missing from every payload
    column = table.column(field.name)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    parsed = column.type
    if column.null_count:
        if not field.null_stays:
            return False
        # A null is an explicit ``null`` or a missing member: JsonConverter writes the first,
        # without spaces. In a flat payload whose quotes the parser checked, the member's name in
        # quotes after a brace or a comma can only be that member (a quote inside a string is
        # escaped, and one that closes a string is never followed by a name), and no payload has a
        # member twice: the explicit nulls are the occurrences of ``{"name":null`` and
        # ``,"name":null`` in the payloads, which must be as many as the nulls.
        if payloads.count(field.null_first) + payloads.count(field.null_after) != column.null_count:
            return False
        if column.null_count == len(column):
            return True  # of JSON's null type
    kind = field.kind
    if kind == "int" or kind == "float":
        if not (pa.types.is_int64(parsed) or (kind == "float" and pa.types.is_float64(parsed))):
            return False  # decoding refuses the value, or reads an integral double as an integer
        extremes = pc.min_max(column)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        if kind == "int":
            return field.bounds[0] <= low and high <= field.bounds[1]
        # Strictly inside: the parser reads an integer among doubles as a double, 2^53 + 1 as 2^53.
        return -_EXACT_FLOAT < low and high < _EXACT_FLOAT
    if kind == "boolean":
        return pa.types.is_boolean(parsed)
    if not pa.types.is_string(parsed):
        return False
    return kind == "string" or _canonical_base64(column, minimal=kind == "decimal")


def _canonical_base64(column: Any, minimal: bool) -> bool:
    """Whether every string of ``column`` is base64 as Java's encoder writes it (padded, no stray
    bits; with ``minimal`` also a two's complement without a redundant sign byte, as
    ``BigInteger.toByteArray`` gives it, never empty), so that decoding and encoding it again gives
    the same text. With NumPy over the column's character buffer."""
    if not pa.types.is_string(column.type):
        return False
    n = len(column)
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * column.offset)
    valid = _validity(column)
    lengths = np.diff(offsets)
    if lengths[~valid].any():
        return False  # a null with characters behind it (never so from the parser): decode
    starts, ends, lengths = offsets[:-1][valid], offsets[1:][valid], lengths[valid]
    if (lengths % 4).any() or (minimal and not lengths.all()):
        return False
    if not lengths.any():
        return True
    data = column.buffers()[2]
    chars = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    sextets = _SEXTETS[chars[offsets[0] : offsets[-1]]]
    if (sextets == 255).any():
        return False  # not base64's alphabet
    keep = lengths > 0
    starts, ends, lengths = starts[keep], ends[keep], lengths[keep]
    last_pad = chars[ends - 1] == ord("=")
    pads = last_pad.astype(np.int64) + (last_pad & (chars[ends - 2] == ord("=")))
    if int((sextets == 64).sum()) != int(pads.sum()):
        return False  # padding other than one or two at the end
    last = _SEXTETS[chars[ends - 1 - pads]]
    if (last & np.where(pads == 2, 15, np.where(pads == 1, 3, 0))).any():
        return False  # stray bits: decodes to bytes that encode otherwise
    if minimal:
        size = lengths // 4 * 3 - pads
        s0, s1, s2 = (_SEXTETS[chars[starts + i]].astype(np.int64) & 63 for i in range(3))
        b0 = (s0 << 2 | s1 >> 4) & 255
        b1 = ((s1 & 15) << 4 | s2 >> 2) & 255
        if ((size >= 2) & (((b0 == 0) & (b1 < 128)) | ((b0 == 255) & (b1 >= 128)))).any():
            return False  # a redundant sign byte: decoding drops it
    return True


def _validity(column: Any) -> Any:
    """Which values of ``column`` are not null, as NumPy booleans, from its validity bitmap
    (Arrow's own conversion of a boolean array to NumPy imports pandas, once, in a process that
    otherwise never loads it)."""
    n = len(column)
    if pa.types.is_null(column.type):
        return np.zeros(n, dtype=bool)
    bitmap = column.buffers()[0]
    if bitmap is None or not column.null_count:
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[column.offset : column.offset + n].astype(bool)
