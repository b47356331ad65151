"""JSON lines and raw bytes: the formats written value by value through an optional gzip stream.

JSON lines are written as Connect's JsonConverter writes values without schemas, as Confluent's
``JsonFormat`` configures it: bytes as base64, Timestamp/Date/Time as ms/days/ms, and Decimal as
``json.decimal.format`` says, ``BASE64`` (the default: base64 of the unscaled value's minimal
big-endian two's complement, Java's ``BigInteger.toByteArray``) or ``NUMERIC`` (a JSON number);
raw bytes are joined by a separator.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import gzip
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from sluice.connectors.api import DataError, Schema
from sluice.connectors.api.schema import Date, Time, Timestamp
from sluice.connectors.s3_common.object_format import ObjectWriter, Output, RecordFormat, spans_lines

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME


def json_default(value: Any) -> Any:
    """What orjson cannot encode itself, as Connect's JsonConverter (schemas disabled) writes it,
    with Decimals as JSON numbers (``decimal.format=NUMERIC``)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(str(value).encode("ascii"))
    if isinstance(value, dt.datetime):
        return Timestamp.to_int(value)
    if isinstance(value, dt.date):
        return Date.to_int(value)
    if isinstance(value, dt.time):
        return Time.to_int(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


def json_default_base64(value: Any) -> Any:
    """:func:`json_default` with Decimals as Connect's default ``decimal.format=BASE64`` writes
    them: the base64 of the unscaled value (the Decimal's own digits at its own scale, which is the
    schema's for every Decimal a converter decoded) as Java's ``BigInteger.toByteArray`` gives it."""
    if isinstance(value, decimal.Decimal):
        return decimal_base64(value)
    return json_default(value)


def decimal_base64(value: decimal.Decimal) -> str:
    """A Decimal as ``decimal.format=BASE64`` writes it (see :func:`json_default_base64`)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise TypeError(f"cannot encode the Decimal {value} as JSON")
    unscaled = int("".join(map(str, digits)) or "0")
    if sign:
        unscaled = -unscaled
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


def encode_json_lines(values: Sequence[Any], decimal_format: str = "BASE64") -> bytes:
    """``values`` as JSON lines, each followed by a newline (Decimals as ``decimal_format`` says)."""
    dumps = orjson.dumps
    default = json_default if decimal_format == "NUMERIC" else json_default_base64
    try:
        lines = [dumps(v, default=default, option=_JSON_OPTIONS) for v in values]
    except TypeError as exc:
        raise DataError(f"JsonFormat cannot encode a value: {exc}") from None
    lines.append(b"")
    return b"\n".join(lines)


class _Compressed(ObjectWriter):
    """Base of line/byte writers with optional gzip."""

    def __init__(self, out: Output, compression: str, level: int) -> None:
        self.out = out
        self._gzip = zlib.compressobj(level if level >= 0 else 6, zlib.DEFLATED, 31) if compression == "gzip" else None

    def _emit(self, data: bytes) -> None:
        if self._gzip is not None:
            data = self._gzip.compress(data)
        if data:
            self.out.write(data)

    def close(self) -> None:
        if self._gzip is not None:
            tail = self._gzip.flush()
            self._gzip = None
            if tail:
                self.out.write(tail)


class JsonLinesWriter(_Compressed):
    def __init__(self, out: Output, compression: str, level: int, decimal_format: str = "BASE64") -> None:
        super().__init__(out, compression, level)
        self.decimal_format = decimal_format

    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        self._emit(encode_json_lines(values, self.decimal_format))

    def write_raw_json(self, raws: Sequence[bytes | None]) -> None:
        """The consumed JSON bytes as they are, one per line: no decoding, no encoding.

        A value spread over several lines (pretty-printed JSON) is the one exception: it is
        re-encoded on one line, as :meth:`write` would write it. The choice depends only on the
        record, so a replay writes the same bytes. A tombstone is a ``null`` line.
        """
        lines: list[bytes] = raws if isinstance(raws, list) else list(raws)  # type: ignore[assignment,arg-type]
        if None in lines:
            lines = [b"null" if v is None else v for v in lines]
        if spans_lines(lines):
            lines = [_one_line(v) for v in lines]
        # One write (the batch is in the object entirely or not at all), and the final newline
        # joined in rather than concatenated: ``blob + b"\n"`` would copy the whole batch again.
        self._emit(b"\n".join([*lines, b""]))


def _one_line(raw: bytes) -> bytes:
    if b"\n" not in raw:
        return raw
    return orjson.dumps(orjson.loads(raw), option=_JSON_OPTIONS)


class JsonFormat(RecordFormat):
    name = "json"

    def __init__(self, compression: str = "none", level: int = -1, decimal_format: str = "BASE64") -> None:
        self.compression = compression
        self.level = level
        #: ``json.decimal.format``: how Decimals are written (``BASE64`` or ``NUMERIC``).
        self.decimal_format = decimal_format
        self.extension = ".json.gz" if compression == "gzip" else ".json"

    def writer(self, out: Output, key: str) -> ObjectWriter:
        return JsonLinesWriter(out, self.compression, self.level, self.decimal_format)

    def read(self, data: bytes) -> Iterator[Any]:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        for line in data.split(b"\n"):
            if line:
                yield orjson.loads(line)


# -- raw bytes ------------------------------------------------------------------------------------


class BytesWriter(_Compressed):
    def __init__(self, out: Output, compression: str, level: int, separator: bytes) -> None:
        super().__init__(out, compression, level)
        self.separator = separator

    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        chunks: list[bytes] = []
        for value in values:
            if isinstance(value, (bytes, bytearray, memoryview)):
                chunks.append(bytes(value))
            elif isinstance(value, str):
                chunks.append(value.encode("utf-8"))
            elif value is None:
                chunks.append(b"")
            else:
                raise DataError(f"ByteArrayFormat needs bytes or string values, got {type(value).__name__}")
        chunks.append(b"")
        self._emit(self.separator.join(chunks))


class ByteArrayFormat(RecordFormat):
    name = "bytearray"

    def __init__(
        self, compression: str = "none", level: int = -1, extension: str = ".bin", separator: bytes = b"\n"
    ) -> None:
        self.compression = compression
        self.level = level
        self.separator = separator
        self.extension = extension + (".gz" if compression == "gzip" else "")

    def writer(self, out: Output, key: str) -> ObjectWriter:
        return BytesWriter(out, self.compression, self.level, self.separator)

    def read(self, data: bytes) -> Iterator[Any]:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        if not self.separator:
            yield data
            return
        items = data.split(self.separator)
        if items and items[-1] == b"":
            items.pop()
        yield from items
