"""Raw JSON values checked as whole documents without being parsed: for a sink that keeps a
record's bytes as they are (the S3 sink's raw JSON path) yet must refuse one that is not JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import msgspec

#: Validates a JSON array and returns each element's bytes, building no Python object per value.
_RAW_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


def first_malformed(datas: Sequence[bytes | None]) -> int | None:
    """The index of the first value that is not one complete JSON document (``None`` counts as
    JSON null), or ``None`` when every value is: checked in one pass without building any object.

    The values are joined into one JSON array and validated with msgspec's ``Raw`` decoder, about
    a quarter of the cost of parsing them. Each element must span exactly its own value (same
    length, so no value spilled into its neighbour and none had stray whitespace, which Jackson
    would read differently when empty) and the whole must be valid UTF-8. Only when that fails are
    the values looked at one by one, to name the first bad one.
    """
    parts = [b"null" if d is None else d for d in datas] if None in datas else cast("Sequence[bytes]", datas)
    if _all_documents(parts):
        return None
    for i, part in enumerate(parts):
        if not _all_documents([part]):
            return i
    return None  # each is fine alone: only their join was not (cannot happen with valid documents)


def _all_documents(parts: Sequence[bytes]) -> bool:
    blob = b"".join((b"[", b",".join(parts), b"]"))
    try:
        elements = _RAW_ARRAY.decode(blob)
        if not blob.isascii():  # a vectorised scan; only non-ASCII text needs the UTF-8 check
            blob.decode("utf-8")
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return len(elements) == len(parts) and list(map(len, elements)) == list(map(len, parts))
