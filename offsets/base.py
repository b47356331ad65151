"""The offset-store protocol, Kafka Connect's offset key format and the task-facing reader.

Source offsets are opaque JSON mappings owned by the runtime. Every store keys them exactly as Kafka
Connect keys its ``offset.storage.topic``: the compact JSON of ``["<connector>", {<source
partition>}]`` (what Connect's ``JsonConverter`` with ``schemas.enable=false`` writes), with the
compact JSON of the offset map as the value. Keeping that format in every store means a file
written by a standalone worker can be replayed into a Kafka offsets topic (and back) unchanged,
and Connect tools that read the topic understand Sluice's records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import orjson

from sluice.connectors.api.errors import ConnectError

#: A source partition or offset as tasks see it: a JSON-able mapping.
JsonMap = Mapping[str, Any]


class OffsetStoreError(ConnectError):
    """An offset store cannot load, parse or persist its data (the message names the location)."""


def offset_key(connector: str, partition: JsonMap) -> bytes:
    """The offsets-topic key of ``partition``: ``b'["<connector>",{<partition>}]'``.

    Compact JSON, UTF-8 and unescaped non-ASCII like Jackson writes it; the partition's keys keep
    the order the task built them in.
    """
    if not isinstance(connector, str) or not connector:
        raise ValueError("An offset key needs a non-empty connector name")
    if not isinstance(partition, Mapping):
        raise TypeError(f"A source partition must be a mapping, not {type(partition).__name__}")
    try:
        return orjson.dumps([connector, partition])
    except TypeError as exc:
        raise TypeError(f"Source partition {partition!r} is not JSON-serializable: {exc}") from None


def parse_offset_key(key: bytes | bytearray | memoryview | str) -> tuple[str, dict[str, Any]]:
    """Split an offsets-topic key back into ``(connector, partition)``; ``ValueError`` if malformed."""
    try:
        decoded = orjson.loads(key)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"Offset key is not valid JSON: {exc}") from None
    if (
        not isinstance(decoded, list)
        or len(decoded) != 2
        or not isinstance(decoded[0], str)
        or not isinstance(decoded[1], dict)
    ):
        raise ValueError(f'Offset key must be a JSON array ["<connector>", {{<partition>}}], got {decoded!r}')
    return decoded[0], decoded[1]


def encode_offset(offset: JsonMap) -> bytes:
    """The offsets-topic value of ``offset``: its compact JSON."""
    if not isinstance(offset, Mapping):
        raise TypeError(f"A source offset must be a mapping or None, not {type(offset).__name__}")
    try:
        return orjson.dumps(offset)
    except TypeError as exc:
        raise TypeError(f"Source offset {offset!r} is not JSON-serializable: {exc}") from None


def decode_offset(value: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """Parse an offsets-topic value; ``ValueError`` if it is not a JSON object."""
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"Offset value is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"Offset value must be a JSON object, got {decoded!r}")
    return decoded


def partition_identity(partition: JsonMap) -> bytes:
    """A lookup key for ``partition`` that ignores the order of its keys.

    Connect itself matches partitions by their serialized bytes, which only works because Java
    rebuilds a ``HashMap`` in the same order every time. Python dicts keep insertion order, so two
    tasks (or a Java worker and a Python one) may spell the same partition differently; sorting
    the keys makes them the same entry.
    """
    try:
        return orjson.dumps(partition, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise TypeError(f"Source partition {partition!r} is not JSON-serializable: {exc}") from None


@runtime_checkable
class OffsetStore(Protocol):
    """Durable storage of source-connector offsets, one namespace per connector.

    Implementations: :class:`~offsets.memory.MemoryOffsetStore` (tests, throw-away runs),
    :class:`~offsets.file.FileOffsetStore` (standalone workers) and, later, a Kafka-topic store
    (distributed workers) using :func:`offset_key` and :func:`encode_offset` for its records.

    Every method is thread-safe: the runtime's offset-commit thread writes while task threads read.
    """

    def start(self) -> None:
        """Load the stored offsets; call once before any other method."""

    def stop(self) -> None:
        """Release resources. Offsets are already durable after each :meth:`put`."""

    def get(self, connector: str, partitions: Sequence[JsonMap]) -> list[JsonMap | None]:
        """The stored offsets of ``partitions``, in order, ``None`` where there is none.

        The returned mappings are the caller's to keep; changing them does not change the store.
        """

    def put(self, connector: str, offsets: Sequence[tuple[JsonMap, JsonMap | None]]) -> None:
        """Store ``(partition, offset)`` pairs; ``None`` as the offset deletes the partition's entry.

        Atomic as a whole: after a failure (an unserializable offset, a full disk) no pair has been
        applied. A later pair for the same partition wins over an earlier one.
        """

    def all(self, connector: str) -> list[tuple[JsonMap, JsonMap]]:
        """Every ``(partition, offset)`` stored for ``connector`` (the REST ``GET .../offsets``)."""

    def delete(self, connector: str) -> None:
        """Forget every offset of ``connector`` (the connector was deleted or its offsets reset)."""

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Wait until every offset stored anywhere before this call can be read here: a store that
        other writers share (the offsets topic, which transactional tasks write themselves) catches
        up; a store only this process writes has nothing to wait for."""


class StoreOffsetReader:
    """The :class:`~connectors.api.task.OffsetReader` a source task gets: one connector's view of a store."""

    __slots__ = ("_store", "_connector")

    def __init__(self, store: OffsetStore, connector: str) -> None:
        self._store = store
        self._connector = connector

    @property
    def connector(self) -> str:
        """The connector whose offsets this reader sees."""
        return self._connector

    def offset(self, partition: JsonMap) -> JsonMap | None:
        """The last stored offset of ``partition``, or ``None``. Thread: the task thread."""
        return self._store.get(self._connector, [partition])[0]

    def offsets(self, partitions: Sequence[JsonMap]) -> list[JsonMap | None]:
        """The stored offsets of ``partitions`` in order (``None`` where absent). Thread: the task thread."""
        return self._store.get(self._connector, partitions)
