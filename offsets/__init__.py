"""Source-offset storage: the :class:`OffsetStore` protocol and its memory and file stores.

Keys and values use Kafka Connect's offsets-topic format (see :func:`offset_key`), so stores are
interchangeable and a future Kafka-topic store shares the helpers.
"""

from __future__ import annotations

from sluice.offsets.base import (
    OffsetStore,
    OffsetStoreError,
    StoreOffsetReader,
    decode_offset,
    encode_offset,
    offset_key,
    parse_offset_key,
    partition_identity,
)
from sluice.offsets.file import FileOffsetStore
from sluice.offsets.memory import MemoryOffsetStore

__all__ = [
    "FileOffsetStore",
    "MemoryOffsetStore",
    "OffsetStore",
    "OffsetStoreError",
    "StoreOffsetReader",
    "decode_offset",
    "encode_offset",
    "offset_key",
    "parse_offset_key",
    "partition_identity",
]
