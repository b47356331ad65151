"""Turning a batch of sink records into table rows: which columns, which primary key, which values.

The rules are Confluent's (``FieldsMetadata``): ``pk.mode`` decides where the key columns come
from, ``fields.whitelist`` limits the value fields, and struct values (or, schemaless, dicts) give
one column per field. Values are extracted a column at a time with C-level ``map`` calls and
zipped into row tuples, so a row costs no Python-level loop unless a column needs conversion.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    STRING_SCHEMA,
    DataError,
    Schema,
    SinkRecord,
    SinkRecordBatch,
    TopicPartition,
    Type,
    UnwritableRecordError,
)
from sluice.connectors.jdbc_common.dialects import Column
from sluice.connectors.jdbc_common.types import infer_field_schema, value_adapter
from sluice.connectors.sink.jdbc.config import DEFAULT_KEY_FIELD, KAFKA_PK_FIELDS, JdbcSinkConfig, PkMode

log = logging.getLogger(__name__)

_PLAIN = frozenset({str, int, float, bool, type(None)})


class TopicRecords:
    """A sink batch (or a ``batch.size`` chunk of one) as the columns the row builder reads."""

    __slots__ = (
        "topic",
        "_values",
        "_value_schemas",
        "_keys",
        "_key_schemas",
        "_partitions",
        "_offsets",
        "_source",
        "_whole",
    )

    def __init__(self, topic: str, source: SinkRecordBatch) -> None:
        self.topic = topic
        self._source = source
        self._whole = True
        # Values and keys are read from the batch on first use: a batch with raw values (and keys)
        # may be written from its bytes without ever decoding them (see json_path.py).
        self._values: list[Any] | None = None
        self._value_schemas: list[Schema | None] | None = None
        self._keys: list[Any] | None = None
        self._key_schemas: list[Schema | None] | None = None
        self._partitions: list[int] | None = None
        self._offsets: list[int] | None = None

    @property
    def values(self) -> list[Any]:
        if self._values is None:
            self._values = self._source.values
        return self._values

    @property
    def value_schemas(self) -> list[Schema | None]:
        if self._value_schemas is None:
            self._value_schemas = self._source.value_schemas
        return self._value_schemas

    @property
    def keys(self) -> list[Any]:
        if self._keys is None:
            self._keys = self._source.keys
        return self._keys

    @property
    def key_schemas(self) -> list[Schema | None]:
        if self._key_schemas is None:
            self._key_schemas = self._source.key_schemas
        return self._key_schemas

    @property
    def batch(self) -> SinkRecordBatch | None:
        """The whole consumed batch these records are, if they are one (not a chunk of it)."""
        return self._source if self._whole else None

    @property
    def consumed_topic(self) -> str:
        """The topic the records were consumed from (for offsets), before any renaming transform."""
        return self._source.original_topic

    @property
    def partitions(self) -> list[int]:
        if self._partitions is None:
            self._partitions = self._source.partitions
        return self._partitions

    @property
    def offsets(self) -> list[int]:
        if self._offsets is None:
            self._offsets = self._source.offsets
        return self._offsets

    def __len__(self) -> int:
        return len(self._source) if self._whole else len(self.keys)

    def slice(self, start: int, stop: int) -> TopicRecords:
        """Records ``start:stop`` as their own :class:`TopicRecords` (for ``batch.size`` chunks)."""
        if start == 0 and stop >= len(self):
            return self
        part = TopicRecords.__new__(TopicRecords)
        part.topic = self.topic
        part._source = self._source
        part._whole = False
        part._values = self.values[start:stop]
        part._value_schemas = self.value_schemas[start:stop]
        part._keys = self.keys[start:stop]
        part._key_schemas = self.key_schemas[start:stop]
        part._partitions = self.partitions[start:stop]
        part._offsets = self.offsets[start:stop]
        return part

    def record(self, index: int) -> SinkRecord:
        """Record ``index`` as a :class:`SinkRecord` (for the errant record reporter)."""
        record = SinkRecord(
            self.topic,
            self.partitions[index],
            self.offsets[index],
            self.values[index],
            self.value_schemas[index],
            self.keys[index],
            self.key_schemas[index],
        )
        consumed = self.consumed_topic
        if consumed != self.topic:  # routed: the record keeps where it was consumed (KIP-793)
            record = record.replace(
                original_topic=consumed, original_partition=record.partition, original_offset=record.kafka_offset
            )
        return record

    def coordinates(self, index: int) -> str:
        """``topic/partition/offset`` of record ``index``, for error messages."""
        return f"topic {self.topic!r} partition {self.partitions[index]} offset {self.offsets[index]}"


@dataclass
class Segment:
    """Consecutive records that share a value schema: written with the same statement."""

    start: int
    stop: int
    value_schema: Schema | None
    key_schema: Schema | None
    tombstones: bool = False  # a run of tombstones only (insert and update modes keep them apart)


class Rows:
    """What to write for one segment.

    The values are kept as columns (``value_lists``), which is what the column-wise writers
    (PostgreSQL COPY) need; the row tuples the other writers take are built only when asked for.
    """

    def __init__(
        self,
        columns: list[Column],
        key_count: int,
        value_lists: list[list[Any]],
        row_records: list[int],
        kinds: list[frozenset[type] | None] | None = None,
    ) -> None:
        self.columns = columns
        self.key_count = key_count  # the first ``key_count`` columns form the primary key
        self.value_lists: list[list[Any]] | None = value_lists
        # Per column, the set of Python types of its values when already known (saves a pass).
        self.kinds = kinds
        self.row_records = row_records  # record index of each row (for error messages)
        self._rows: list[tuple[Any, ...]] | None = None
        self.deletes: list[tuple[Any, ...]] = []
        self.delete_records: list[int] = []
        self.delete_columns: list[Column] = []
        #: Record indexes of tombstones that are not applied (``delete.enabled=false``).
        self.ignored: list[int] = []

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        """The rows as tuples (built on first use)."""
        if self._rows is None:
            lists = self.value_lists
            self._rows = list(zip(*lists)) if lists else [() for _ in self.row_records]
        return self._rows

    @rows.setter
    def rows(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows
        self.value_lists = None
        self.kinds = None

    def __len__(self) -> int:
        return len(self.row_records)

    def column_values(self) -> list[list[Any]] | list[tuple[Any, ...]]:
        """The values of ``rows`` column by column."""
        if self.value_lists is not None:
            return self.value_lists
        return list(zip(*self.rows))

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def key_names(self) -> list[str]:
        return [c.name for c in self.columns[: self.key_count]]


def segments(records: TopicRecords, *, split_tombstones: bool) -> list[Segment]:
    """Split into runs with one value schema; tombstones join the run they appear in, unless
    ``split_tombstones`` (insert and update modes, where deletes must keep their place)."""
    values, schemas, key_schemas = records.values, records.value_schemas, records.key_schemas
    n = len(values)
    if n == 0:
        return []
    first = schemas[0]
    if None not in values and schemas.count(first) == n:  # the common case, decided in C
        return [Segment(0, n, first, key_schemas[0])]
    out: list[Segment] = []
    start = 0
    current: Schema | None = None
    has_schema = False
    tomb_run: bool | None = None
    for i in range(n):
        is_tomb = values[i] is None
        schema = schemas[i]
        if split_tombstones:
            if tomb_run is not None and is_tomb != tomb_run:
                out.append(Segment(start, i, current, key_schemas[start], tombstones=bool(tomb_run)))
                start, has_schema = i, False
            tomb_run = is_tomb
        if not is_tomb:
            if has_schema and schema is not current and schema != current:
                out.append(Segment(start, i, current, key_schemas[start], tombstones=False))
                start = i
            current, has_schema = schema, True
    out.append(Segment(start, n, current, key_schemas[start], tombstones=bool(split_tombstones and tomb_run)))
    return out


class RowBuilder:
    """Builds :class:`Rows` for segments according to the sink's ``pk.*`` and ``fields.whitelist``."""

    def __init__(self, config: JdbcSinkConfig, backend: str, tz: _dt.tzinfo) -> None:
        self.config = config
        self.backend = backend
        self.tz = tz
        self._whitelist = set(config.fields_whitelist)

    def build(self, records: TopicRecords, seg: Segment, *, dedupe: bool) -> Rows:
        self._fields_cache: tuple[int, list[tuple[str, Schema]]] | None = None
        self._columns_cache: tuple[int, dict[str, list[Any]] | None] | None = None
        values = records.values[seg.start : seg.stop]
        if None not in values:  # no tombstones: decided in C
            live, dead = list(range(seg.start, seg.stop)), []
        else:
            live = [i for i in range(seg.start, seg.stop) if records.values[i] is not None]
            dead = [i for i in range(seg.start, seg.stop) if records.values[i] is None]
            values = [records.values[i] for i in live]
        key_cols, key_columns = self._key_columns(records, seg, live, values=values)
        value_cols, value_columns, value_kinds = self._value_columns(
            records, seg, values, live, {c.name for c in key_columns}
        )
        kinds: list[frozenset[type] | None] = [None] * len(key_cols)
        result = Rows(key_columns + value_columns, len(key_columns), key_cols + value_cols, live, kinds + value_kinds)
        if dead and self.config.delete_enabled:
            dead_keys, result.delete_columns = self._key_columns(records, seg, dead, for_delete=True)
            result.deletes = list(zip(*dead_keys))
            result.delete_records = dead
        elif dead:
            result.ignored = dead
        if dedupe and result.key_count:
            _dedupe(result, records)
        return result

    def _column(self, values: list[Any], name: str) -> list[Any]:
        """The values of field ``name``, taken from the columns split off already when possible."""
        cached = self._columns_cache
        if cached is not None and cached[0] == id(values) and cached[1] is not None:
            column = cached[1].get(name)
            if column is not None:
                return column
        return _field_column(values, name)

    # -- key columns -----------------------------------------------------------------------------

    def _key_columns(
        self,
        records: TopicRecords,
        seg: Segment,
        idx: list[int],
        *,
        for_delete: bool = False,
        values: list[Any] | None = None,
    ) -> tuple[list[list[Any]], list[Column]]:
        mode = self.config.pk_mode
        if mode is PkMode.NONE:
            return [], []
        if mode is PkMode.KAFKA:
            names = self.config.pk_fields or list(KAFKA_PK_FIELDS)
            partitions, offsets = records.partitions, records.offsets
            cols: list[list[Any]] = [
                [records.topic] * len(idx),
                [partitions[i] for i in idx],
                [offsets[i] for i in idx],
            ]
            schemas = [STRING_SCHEMA, INT32_SCHEMA, INT64_SCHEMA]
            return cols, [Column(n, s, True) for n, s in zip(names, schemas)]
        if mode is PkMode.RECORD_KEY:
            return self._record_key_columns(records, seg, idx)
        # record_value
        if for_delete or not idx:  # no rows (a run of tombstones): no value fields to take them from
            return [], []
        if values is None:
            values = [records.values[i] for i in idx]
        fields = self._value_fields(seg.value_schema, values, records, idx)
        wanted = self.config.pk_fields or [name for name, _ in fields]
        by_name = dict(fields)
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise DataError(
                f"pk.fields {missing} are not fields of the record value ({records.coordinates(idx[0])}); "
                f"value fields: {sorted(by_name)}"
            )
        columns = [Column(n, by_name[n], True) for n in wanted]
        return [self._column(values, n) for n in wanted], columns

    def _record_key_columns(
        self, records: TopicRecords, seg: Segment, idx: list[int]
    ) -> tuple[list[list[Any]], list[Column]]:
        if not idx:
            return [], []
        keys = [records.keys[i] for i in idx]
        schema = seg.key_schema
        if None in keys:
            bad = idx[keys.index(None)]
            raise DataError(f"pk.mode=record_key but the record has a null key ({records.coordinates(bad)})")
        if schema is not None and schema.type is Type.STRUCT:
            fields = [(f.name, f.schema) for f in schema.fields]
        elif schema is None and isinstance(keys[0], dict):
            fields = [(name, infer_field_schema(k.get(name) for k in keys)) for name in _union_keys(keys)]
        else:
            name = self.config.pk_fields[0] if self.config.pk_fields else DEFAULT_KEY_FIELD
            key_schema = schema if schema is not None else infer_field_schema(keys)
            adapt = value_adapter(key_schema, self.backend, self.tz)
            column = keys if adapt is None else list(map(adapt, keys))
            return [column], [Column(name, key_schema.with_(optional=False), True)]
        by_name = dict(fields)
        wanted = self.config.pk_fields or [n for n, _ in fields]
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise DataError(f"pk.fields {missing} are not fields of the record key ({records.coordinates(idx[0])})")
        cols = []
        for n in wanted:
            col = _field_column(keys, n)
            adapt = value_adapter(by_name[n], self.backend, self.tz)
            cols.append(col if adapt is None else list(map(adapt, col)))
        return cols, [Column(n, by_name[n].with_(optional=False), True) for n in wanted]

    # -- value columns ---------------------------------------------------------------------------

    def _value_fields(
        self, schema: Schema | None, values: list[Any], records: TopicRecords, idx: list[int]
    ) -> list[tuple[str, Schema]]:
        cached = self._fields_cache
        if cached is not None and cached[0] == id(values):
            return cached[1]
        fields = self._compute_value_fields(schema, values, records, idx)
        self._fields_cache = (id(values), fields)
        return fields

    def _compute_value_fields(
        self, schema: Schema | None, values: list[Any], records: TopicRecords, idx: list[int]
    ) -> list[tuple[str, Schema]]:
        if schema is not None:
            if schema.type is not Type.STRUCT:
                raise DataError(
                    f"The JDBC sink needs struct (or schemaless map) record values, got a {schema.type.value} schema "
                    f"({records.coordinates(idx[0])})"
                )
            return [(f.name, f.schema) for f in schema.fields]
        bad = None if set(map(type, values)) == {dict} else next(i for i, v in enumerate(values) if type(v) is not dict)
        if bad is not None:
            raise UnwritableRecordError(
                f"The JDBC sink needs struct or map record values, got {type(values[bad]).__name__} "
                f"({records.coordinates(idx[bad])}); use a converter with schemas or JSON objects",
                records.record(idx[bad]),
            )
        by_name = _uniform_columns(values)
        self._columns_cache = (id(values), by_name)
        if by_name is not None:
            return [(name, infer_field_schema(column)) for name, column in by_name.items()]
        return [(name, infer_field_schema(v.get(name) for v in values)) for name in _union_keys(values)]

    def _value_columns(
        self, records: TopicRecords, seg: Segment, values: list[Any], idx: list[int], key_names: set[str]
    ) -> tuple[list[list[Any]], list[Column], list[frozenset[type] | None]]:
        """The value columns, and per column the Python types of its values (``None``: not known)."""
        if not values:
            return [], [], []
        fields = self._value_fields(seg.value_schema, values, records, idx)
        schemaless = seg.value_schema is None
        cols: list[list[Any]] = []
        columns: list[Column] = []
        kinds: list[frozenset[type] | None] = []
        for name, schema in fields:
            if name in key_names or (self._whitelist and name not in self._whitelist):
                continue
            col = self._column(values, name)
            kind: frozenset[type] | None = frozenset(map(type, col))
            if schemaless:
                adapt = None if kind is not None and kind <= _PLAIN else value_adapter(None, self.backend, self.tz)
            else:
                adapt = value_adapter(schema, self.backend, self.tz)
            if adapt is not None:
                col, kind = list(map(adapt, col)), None
            cols.append(col)
            kinds.append(kind)
            columns.append(Column(name, schema, False))
        return cols, columns, kinds


def _field_column(values: list[Any], name: str) -> list[Any]:
    try:
        return list(map(itemgetter(name), values))
    except (KeyError, TypeError):
        return [v.get(name) if isinstance(v, dict) else None for v in values]


def _uniform_columns(dicts: list[dict[str, Any]]) -> dict[str, list[Any]] | None:
    """Every field as a column, when all the dicts have the same keys (the usual case); else ``None``.

    Equal sizes plus every key of the first dict present in all of them (``itemgetter`` raises
    otherwise) means equal key sets, which costs one ``len`` per record instead of comparing
    key sets, and the columns come out of the same check.
    """
    first = dicts[0]
    if set(map(len, dicts)) != {len(first)}:
        return None
    try:
        return {name: list(map(itemgetter(name), dicts)) for name in first}
    except (KeyError, TypeError):
        return None


def _union_keys(dicts: list[Any]) -> list[str]:
    first = dicts[0]
    if all(map(first.keys().__eq__, map(dict.keys, dicts))):  # the common case, decided in C
        return list(first)
    names = dict.fromkeys(first)
    for d in dicts:
        if d.keys() != first.keys():
            names.update(dict.fromkeys(d))
    return list(names)


def _dedupe(rows: Rows, records: TopicRecords) -> None:
    """Keep the last operation per primary key: an upsert cannot touch a row twice in one statement,
    and an update from a staging table would apply an arbitrary one of several rows for a key."""
    k = rows.key_count
    lists = rows.value_lists
    if lists is not None and not rows.deletes:
        # The common case, decided in C on the key columns: no key appears twice.
        keys: list[Any] = lists[0] if k == 1 else list(zip(*lists[:k]))
        if len(set(keys)) == len(keys):
            return
    row_keys = [r[:k] for r in rows.rows]
    if not rows.deletes and len(set(row_keys)) == len(row_keys):
        return
    last: dict[tuple[Any, ...], tuple[int, bool, int]] = {}  # key → (record index, is delete, position)
    for pos, (key, rec) in enumerate(zip(row_keys, rows.row_records)):
        prev = last.get(key)
        if prev is None or prev[0] < rec:
            last[key] = (rec, False, pos)
    for pos, (key, rec) in enumerate(zip(rows.deletes, rows.delete_records)):
        prev = last.get(key)
        if prev is None or prev[0] < rec:
            last[key] = (rec, True, pos)
    keep = sorted(last.values())
    rows.rows = [rows.rows[pos] for _, dele, pos in keep if not dele]
    rows.row_records = [rec for rec, dele, _ in keep if not dele]
    rows.deletes = [rows.deletes[pos] for _, dele, pos in keep if dele]
    rows.delete_records = [rec for rec, dele, _ in keep if dele]


def first_offsets(groups: list[TopicRecords]) -> dict[TopicPartition, int]:
    """The lowest offset of each partition in ``groups``."""
    first: dict[TopicPartition, int] = {}
    for group in groups:
        for partition, offset in zip(group.partitions, group.offsets):
            tp = TopicPartition(group.consumed_topic, partition)
            if offset < first.get(tp, offset + 1):
                first[tp] = offset
    return first


def log_ignored_tombstones(ignored: Mapping[str, list[int]]) -> int:
    """Log the tombstones a committed write did not apply (``delete.enabled=false``), one line per
    topic with their offsets (``ignored``: topic → offsets); return how many there were."""
    for topic, offsets in ignored.items():
        log.warning(
            "Ignored %d tombstone(s) (null values) of topic %s, at offsets %s: delete.enabled is false",
            len(offsets),
            topic,
            _offset_list(offsets),
        )
    return sum(map(len, ignored.values()))


def _offset_list(offsets: list[int], shown: int = 10) -> str:
    """``offsets`` for a log line: the first few, and how many more."""
    text = ", ".join(map(str, offsets[:shown]))
    return text if len(offsets) <= shown else f"{text} and {len(offsets) - shown} more"
