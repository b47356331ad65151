"""What every built-in transform shares: configuration, ``$Key``/``$Value`` plumbing, schema caches.

Connect writes each SMT as an abstract class with ``Key`` and ``Value`` subclasses that say which
half of the record they work on. :class:`KeyOrValueTransformation` does the same through the
``operates_on_key`` class flag, so the transform body is written once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from pydantic import BeforeValidator

from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.records import SinkRecord, SinkRecordBatch, SourceRecord
from sluice.connectors.api.schema import Schema, Type
from sluice.connectors.api.transform import Predicate, R, Transformation

__all__ = [
    "MIXED",
    "BuiltinPredicate",
    "BuiltinTransformation",
    "DerivedSinkRecordBatch",
    "CommaList",
    "KeyOrValueTransformation",
    "RawRewrittenBatch",
    "SchemaCache",
    "copy_struct_schema",
    "field_path",
    "fill_default",
    "require_map",
    "require_schema",
    "require_struct",
    "uniform",
    "with_key",
    "with_column",
    "with_topic",
    "with_value",
]

#: Keys the runtime may leave in a transform's settings; they belong to the runtime, not the SMT.
RUNTIME_KEYS = frozenset({"type", "predicate", "negate", "plugin.version"})

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _split_list(raw: Any) -> Any:
    """Connect's LIST type: a comma-separated string (blanks dropped) or an actual list."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


#: A Connect ``LIST`` setting (``"a, b,c"`` → ``("a", "b", "c")``).
CommaList = Annotated[tuple[str, ...], BeforeValidator(_split_list)]


class SchemaCache(Generic[K, V]):
    """A small bounded map from an input schema to what a transform derived from it.

    Connect keeps an LRU of 16 entries per transform; records of a topic share one schema object,
    so a hit is a dict lookup that stops at the identity check.
    """

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int = 64) -> None:
        self._entries: dict[K, V] = {}
        self._limit = limit

    def get(self, key: K, build: Callable[[K], V]) -> V:
        try:
            return self._entries[key]
        except KeyError:
            pass
        value = build(key)
        if len(self._entries) >= self._limit:
            # Evict the oldest entry; dicts keep insertion order.
            del self._entries[next(iter(self._entries))]
        self._entries[key] = value
        return value


class BuiltinTransformation(Transformation):
    """Base of Sluice's built-in SMTs: parses ``Config`` once in :meth:`configure`.

    Subclasses declare ``Config`` and implement :meth:`_configured`, which turns the validated
    settings into plain attributes, so nothing is looked up in pydantic per record.
    """

    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ()

    def configure(self, config: Mapping[str, Any]) -> None:
        """Validate ``config`` (``transforms.<alias>.*`` without the prefix); raise :class:`ConfigError` naming the key."""
        self.config = self.Config.parse(config, ignore=RUNTIME_KEYS)
        self._configured(self.config)

    def _configured(self, config: Any) -> None:
        """Derive the per-record state from the validated settings."""

    @property
    def label(self) -> str:
        """The name used in error messages (Connect's class name when there is one)."""
        return self.aliases[0].rsplit(".", 1)[-1] if self.aliases else type(self).__name__


class KeyOrValueTransformation(BuiltinTransformation):
    """An SMT with ``$Key`` and ``$Value`` variants; ``operates_on_key`` picks the half."""

    operates_on_key: ClassVar[bool] = False

    def operating(self, record: SourceRecord | SinkRecord) -> tuple[Schema | None, Any]:
        """The schema and data this variant transforms."""
        if self.operates_on_key:
            return record.key_schema, record.key
        return record.value_schema, record.value

    def updated(self, record: R, schema: Schema | None, data: Any) -> R:
        """``record`` with the operated-on half replaced."""
        if self.operates_on_key:
            return with_key(record, schema, data)
        return with_value(record, schema, data)

    @property
    def part(self) -> str:
        return "key" if self.operates_on_key else "value"


class BuiltinPredicate(Predicate):
    """Base of Sluice's built-in predicates."""

    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ()

    def configure(self, config: Mapping[str, Any]) -> None:
        """Validate ``config`` (``predicates.<alias>.*`` without the prefix)."""
        self.config = self.Config.parse(config, ignore=RUNTIME_KEYS)
        self._configured(self.config)

    def _configured(self, config: Any) -> None:
        """Derive the per-record state from the validated settings."""


# -- record copies --------------------------------------------------------------------------------
# ``NamedTuple._replace`` builds a keyword map and walks every field; on the hot path a transform
# changes one or two known positions, which costs about half as much done directly.

_new_tuple = tuple.__new__
_SOURCE_FIELDS: tuple[str, ...] = SourceRecord._fields
_SINK_FIELDS: tuple[str, ...] = SinkRecord._fields
_VALUE_AT: dict[type, int] = {SourceRecord: _SOURCE_FIELDS.index("value"), SinkRecord: _SINK_FIELDS.index("value")}
_KEY_AT: dict[type, int] = {SourceRecord: _SOURCE_FIELDS.index("key"), SinkRecord: _SINK_FIELDS.index("key")}


def with_value(record: R, schema: Schema | None, value: Any) -> R:
    """``record`` with a new value and value schema."""
    cls = type(record)
    i = _VALUE_AT.get(cls)
    if i is None:
        return record.replace(value_schema=schema, value=value)
    items = list(record)
    items[i] = value
    items[i + 1] = schema
    return _new_tuple(cls, items)


def with_key(record: R, schema: Schema | None, key: Any) -> R:
    """``record`` with a new key and key schema."""
    cls = type(record)
    i = _KEY_AT.get(cls)
    if i is None:
        return record.replace(key_schema=schema, key=key)
    items = list(record)
    items[i] = key
    items[i + 1] = schema
    return _new_tuple(cls, items)


_ORIGINAL_AT = _SINK_FIELDS.index("original_topic")


def with_topic(record: R, topic: str) -> R:
    """``record`` routed to ``topic``; a sink record keeps its consumed coordinates in
    ``original_topic``/``original_partition``/``original_offset`` (KIP-793), which is what its
    sink commits offsets for."""
    cls = type(record)
    if cls not in _VALUE_AT:
        return record.replace(topic=topic)
    items = list(record)
    if cls is SinkRecord and items[_ORIGINAL_AT] is None:
        items[_ORIGINAL_AT : _ORIGINAL_AT + 3] = items[0:3]
    items[0] = topic
    return _new_tuple(cls, items)


# -- columnar batches -----------------------------------------------------------------------------
# A transform that can work on whole columns of a SinkRecordBatch (one topic, values and keys
# already lists) overrides ``apply_columns``; the chain then never builds a record object, which
# costs more than the transform itself.

_COLUMN_PROPERTIES = {
    "partition": "partitions",
    "kafka_offset": "offsets",
    "timestamp": "timestamps",
    "timestamp_type": "timestamp_types",
    "headers": "headers",
}


class DerivedSinkRecordBatch(SinkRecordBatch):
    """A batch a columnar transform produced from a consumed one.

    Columns it did not change are read from the parent on demand; ``original_topic`` stays the
    topic the records were consumed from (KIP-793), so a sink that commits per consumed partition
    is not misled by a topic-renaming transform.
    """

    __slots__ = ("fresh",)

    def __init__(
        self,
        parent: SinkRecordBatch,
        *,
        topic: str | None = None,
        values: list[Any] | None = None,
        value_schemas: list[Schema | None] | None = None,
        keys: list[Any] | None = None,
        key_schemas: list[Schema | None] | None = None,
        fresh: str | None = None,
    ) -> None:
        super().__init__(
            parent.topic if topic is None else topic,
            parent.values if values is None else values,
            parent.value_schemas if value_schemas is None else value_schemas,
            parent.keys if keys is None else keys,
            parent.key_schemas if key_schemas is None else key_schemas,
            lambda name: getattr(parent, _COLUMN_PROPERTIES[name]),
            original_topic=parent.original_topic,
        )
        #: ``"values"`` or ``"keys"`` when that column holds maps the transform that made this batch
        #: built itself and nothing else refers to: the next columnar step may change them in place.
        self.fresh = fresh


class RawRewrittenBatch(SinkRecordBatch):
    """A batch whose raw values a transform rewrote (:meth:`Transformation.keeps_raw_values`).

    It holds the records of ``parent`` at the indices ``kept`` (``None``: all of them), in order,
    with ``raw_values`` in the parent's raw format. Keys and the other columns are the parent's
    (raw keys stay raw); ``decode`` gives ``(value_schemas, values)`` of the records the
    transform made, and runs only if the task reads them.
    """

    __slots__ = ()

    def __init__(
        self,
        parent: SinkRecordBatch,
        raw_values: list[bytes | None],
        kept: list[int] | None,
        decode: Callable[[], tuple[list[Schema | None], list[Any]]],
    ) -> None:
        def pick(column: list[Any]) -> list[Any]:
            return column if kept is None else [column[i] for i in kept]

        raw_keys = parent.raw_keys
        super().__init__(
            parent.topic,
            None,
            None,
            pick(parent.keys) if raw_keys is None else None,
            pick(parent.key_schemas) if raw_keys is None else None,
            lambda name: pick(getattr(parent, _COLUMN_PROPERTIES[name])),
            original_topic=parent.original_topic,
            raw_values=raw_values,
            decode=decode,
            raw_format=parent.raw_format,
            writer_schema=parent.writer_schema,
            raw_keys=None if raw_keys is None else pick(raw_keys),
            decode_keys=None if raw_keys is None else lambda: (pick(parent.key_schemas), pick(parent.keys)),
            raw_key_format=parent.raw_key_format,
            key_writer_schema=parent.key_writer_schema,
        )


def with_column(
    batch: Any,
    on_key: bool,
    out: list[Any],
    schemas: list[Schema | None],
    schema: Schema | None,
    new_schema: Schema | None,
    column: list[Any],
) -> DerivedSinkRecordBatch:
    """The batch with one column replaced: ``out``, under ``new_schema`` (null entries keep ``schema``);
    without a ``new_schema`` (schemaless) the column's schemas stay as they were."""
    new_schemas: list[Schema | None] = schemas
    if new_schema is not None:
        new_schemas = [new_schema] * len(out) if None not in column else [schema if d is None else new_schema for d in out]
    if on_key:
        return DerivedSinkRecordBatch(batch, keys=out, key_schemas=new_schemas, fresh="keys")
    return DerivedSinkRecordBatch(batch, values=out, value_schemas=new_schemas, fresh="values")



def uniform(column: list[Any]) -> Any:
    """The one object every entry of ``column`` is (``None`` included), else :data:`MIXED`."""
    if not column:
        return MIXED
    first = column[0]
    if first is None:
        return None if column.count(None) == len(column) else MIXED
    for item in column:
        if item is not first:
            return MIXED
    return first


class _Mixed:
    __slots__ = ()


#: What :func:`uniform` returns when a column holds different objects.
MIXED: Any = _Mixed()


# -- requirements (Connect's ``Requirements``) ---------------------------------------------------


def require_map(data: Any, who: str, purpose: str) -> dict[str, Any]:
    """``data`` as a schemaless map, or a :class:`DataError` saying what was found instead."""
    if not isinstance(data, dict):
        raise DataError(f"{who}: only maps are supported in absence of schema for {purpose}, found {_kind(data)}")
    return data


def require_struct(data: Any, schema: Schema, who: str, purpose: str) -> dict[str, Any]:
    """``data`` as a struct described by ``schema``, or a :class:`DataError`."""
    if schema.type is not Type.STRUCT or not isinstance(data, dict):
        raise DataError(
            f"{who}: only struct values are supported for {purpose}, found {_kind(data)} with schema type {schema.type.value}"
        )
    return data


def require_schema(schema: Schema | None, who: str, purpose: str) -> Schema:
    if schema is None:
        raise DataError(f"{who}: a schema is required for {purpose}")
    return schema


def _kind(data: Any) -> str:
    return "null" if data is None else type(data).__name__


# -- schema building ----------------------------------------------------------------------------


def fill_default(data: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Connect's ``Struct.get``: a null field with a default reads as the default."""
    if any(data.get(f.name) is None and f.schema.default is not None for f in schema.fields):
        data = {f.name: (f.schema.default if data.get(f.name) is None else data.get(f.name)) for f in schema.fields}
    return data



def copy_struct_schema(base: Schema, fields: list[tuple[str, Schema]]) -> Schema:
    """A struct schema with ``base``'s name, version, doc, parameters and optionality, and ``fields``."""
    return Schema.struct(
        fields,
        name=base.name,
        version=base.version,
        doc=base.doc,
        parameters=base.parameters,
        optional=base.optional,
    )


# -- field paths (KIP-821) ----------------------------------------------------------------------


def field_path(spec: str, syntax: str) -> tuple[str, ...]:
    """Split a field reference by ``field.syntax.version``.

    ``V1`` takes the name literally. ``V2`` separates nested fields with dots; a name that contains
    dots is wrapped in backticks (```a.b`.c``), and a backtick inside a wrapped name is escaped
    with a backslash.
    """
    if syntax == "V1":
        return (spec,)
    parts: list[str] = []
    i, n = 0, len(spec)
    while i <= n:
        if i < n and spec[i] == "`":
            j, name = i + 1, []
            while j < n:
                ch = spec[j]
                if ch == "\\" and j + 1 < n and spec[j + 1] == "`":
                    name.append("`")
                    j += 2
                    continue
                if ch == "`" and (j + 1 == n or spec[j + 1] == "."):
                    break
                name.append(ch)
                j += 1
            if j >= n:
                raise ConfigError(f"Incomplete backtick pair in field path [{spec}]", key="field")
            parts.append("".join(name))
            i = j + 2
        else:
            j = spec.find(".", i)
            if j < 0:
                j = n
            parts.append(spec[i:j])
            i = j + 1
    if any(not p for p in parts):
        raise ConfigError(f"Empty field name in field path [{spec}]", key="field")
    return tuple(parts)
