"""The native row decoder: a rows event's body → the ``before``/``after`` values of its changes.

``mysql-replication`` still reads the stream (connection, table maps, GTIDs, rotates, queries) and
each rows event's header and columns-present bitmaps; the row images themselves, which it decodes
column by column in Python (most of the source's CPU), are decoded all at once by
``sluice_native.BinlogRowsDecoder`` (``native/src/binlog_rows.rs``) straight into the values
:meth:`~.tables.Table.row` would build from the library's: the Connect values of each captured
column's conversion (:attr:`~.types.ColumnType.native` names it), nulls, fallbacks and empty SETs
included.

:func:`decoder_for` describes a table map to it, or returns ``None`` when a captured column needs a
conversion it does not do (``time.precision.mode=connect``, ``decimal.handling.mode`` other than
``precise``, ``binary.handling.mode`` other than ``bytes``, MySQL's binary JSON, a character set
other than UTF-8, ENUM/SET labels missing from the table map), in which case the table's events
take the Python path. :func:`decode` returns ``None`` for an event it cannot read the same way (a
surprise in the bytes, an event the library did not parse whole), which then takes the Python path
on its own; the tests decode the same events both ways and compare them.
"""

from __future__ import annotations

import logging
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from sluice.connectors.source.binlog_cdc.tables import Table

log = logging.getLogger(__name__)

try:
    from sluice_native import BinlogRowsDecoder
except ImportError:  # built by `make setup`; without it every event takes the Python path
    BinlogRowsDecoder = None

_TEXT_CHARSETS = frozenset({None, "utf8", "utf8mb3", "utf8mb4"})
_BINARY_CHARSETS = frozenset({None, "binary"})
#: The exact event classes the decoder reads (not MySQL's partial JSON updates, a subclass).
_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)


def available() -> bool:
    return BinlogRowsDecoder is not None


class RowDecoders:
    """The native decoder of each captured table's table map, reused while the table and its map
    stay the same (a changed definition normally gets a new table id, but not always). Thread: the
    task thread."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[Table, list[Any], Any]] = {}

    def table_map(self, table_id: int, table: Table | None, map_columns: list[Any]) -> None:
        """A table map event: ``table`` (``None``: not captured) has these columns now."""
        if table is None or BinlogRowsDecoder is None:
            self._known.pop(table_id, None)
            return
        layout = [(c.name, c.character_set_name, _metadata(c)) for c in map_columns]
        known = self._known.get(table_id)
        if known is None or known[0] is not table or known[1] != layout:
            self._known[table_id] = (table, layout, decoder_for(table, map_columns))

    def rows(self, event: Any) -> list[Any] | None:
        """The rows of a rows event as :func:`decode` gives them (``None``: decode it in Python)."""
        known = self._known.get(event.table_id)
        return decode(known[2], event) if known is not None and known[2] is not None else None


def _metadata(column: Any) -> tuple[int, int, int, bool, list[str]]:
    """A table map column as the decoder takes it: ``(type, a, b, unsigned, labels)``."""
    kind = column.type
    a = b = 0
    labels: list[str] = []
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        a = column.max_length
    elif kind in (FIELD_TYPE.BLOB, FIELD_TYPE.JSON, FIELD_TYPE.GEOMETRY):
        a = column.length_size
    elif kind == FIELD_TYPE.NEWDECIMAL:
        a, b = column.precision, column.decimals
    elif kind in (FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIME2):
        a = column.fsp
    elif kind == FIELD_TYPE.BIT:
        a = column.bits
    elif kind == FIELD_TYPE.ENUM:
        a, labels = column.size, list(column.enum_values or [])
    elif kind == FIELD_TYPE.SET:
        a, labels = column.size, list(column.set_values or [])
    return kind, int(a), int(b), bool(column.unsigned), labels


def decoder_for(table: Table, map_columns: list[Any]) -> Any:
    """A ``BinlogRowsDecoder`` for ``table``'s rows under this table map, or ``None`` (Python path)."""
    if BinlogRowsDecoder is None:
        return None
    names = [c.name for c in map_columns]
    if None in names or len(set(names)) != len(names):
        return None
    index = {name: i for i, name in enumerate(names)}
    outputs = []
    for column in table.columns:
        ctype = column.ctype
        i = index.get(column.name, -1)
        if i >= 0:
            if not ctype.native:
                return _python(table, column.name, "no native conversion")
            charset = map_columns[i].character_set_name
            binary = ctype.native == "bytes" or ctype.native.startswith("pad:")
            if (ctype.native == "text" and charset not in _TEXT_CHARSETS) or (
                binary and charset not in _BINARY_CHARSETS
            ):
                return _python(table, column.name, f"character set {charset}")
            if ctype.native == "set" and ",".join(map_columns[i].set_values or ()) != (
                ctype.schema.parameters or {}
            ).get("allowed"):
                return _python(table, column.name, "SET members unlike the table's")
        fallback = None if column.optional else ctype.fallback
        outputs.append((column.name, i, ctype.native, fallback))
    try:
        return BinlogRowsDecoder([_metadata(c) for c in map_columns], outputs)
    except ValueError as e:
        return _python(table, "", str(e))


def _python(table: Table, column: str, why: str) -> None:
    log.debug("Table %s: rows decoded in Python (%s%s)", table.qualified, f"column {column}: " if column else "", why)
    return None


def decode(decoder: Any, event: Any) -> list[Any] | None:
    """The event's rows: dicts (write, delete) or ``(before, after)`` pairs (update), as
    :meth:`~.tables.Table.row` would give them; ``None``: decode it the Python way."""
    if type(event) not in _EVENTS or not event.complete or event.number_of_columns != len(event.columns):
        return None
    wrapper = event.packet
    # The library's own decoding moved past the row images already (the signal table's rows), or
    # its wrapper holds bytes it pushed back (only while decoding a DECIMAL): its rows stand.
    pushed_back: bytes = getattr(wrapper, "_BinLogPacketWrapper__data_buffer", b"")
    if getattr(event, "_RowsEvent__rows", None) is not None or pushed_back:
        return None
    packet = wrapper.packet  # PyMySQL's packet: the event's bytes, read up to the row images
    start = packet._position
    end = start + event.event_size - wrapper.read_bytes
    after = event.columns_present_bitmap2 if type(event) is UpdateRowsEvent else None
    try:
        rows: list[Any] = decoder.decode(packet._data, start, end, event.columns_present_bitmap, after)
    except ValueError as e:
        log.debug("A rows event decoded in Python (%s)", e)
        return None
    return rows
