"""Field-level SMTs: ExtractField, HoistField, InsertField, MaskField, ReplaceField, ValueToKey."""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.records import SinkRecord, SinkRecordBatch
from sluice.connectors.api.schema import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT32_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Schema,
    Timestamp,
    Type,
)
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    MIXED,
    BuiltinTransformation,
    CommaList,
    DerivedSinkRecordBatch,
    KeyOrValueTransformation,
    SchemaCache,
    copy_struct_schema,
    field_path,
    require_map,
    require_struct,
    uniform,
    with_key,
    with_value,
)

__all__ = [
    "ExtractField",
    "ExtractFieldKey",
    "ExtractFieldValue",
    "HoistField",
    "HoistFieldKey",
    "HoistFieldValue",
    "InsertField",
    "InsertFieldKey",
    "InsertFieldValue",
    "MaskField",
    "MaskFieldKey",
    "MaskFieldValue",
    "ReplaceField",
    "ReplaceFieldKey",
    "ReplaceFieldValue",
    "ValueToKey",
]

_PKG = "org.apache.kafka.connect.transforms"

SyntaxVersion = Literal["V1", "V2"]


def _fill_default(data: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Connect's ``Struct.get``: a null field with a default reads as the default."""
    if any(data.get(f.name) is None and f.schema.default is not None for f in schema.fields):
        data = {f.name: (f.schema.default if data.get(f.name) is None else data.get(f.name)) for f in schema.fields}
    return data


# -- ExtractField --------------------------------------------------------------------------------


class ExtractFieldConfig(PluginConfig):
    """Settings of ExtractField."""

    field: str = Field(description="Field name to extract (a dotted path with field.syntax.version=V2).")
    field_syntax_version: SyntaxVersion = Field("V1", description="V1: names as written; V2: dotted nested paths.")
    replace_null_with_default: bool = Field(True, description="Use the field's default when its value is null.")


class ExtractField(KeyOrValueTransformation):
    """Replace the key or value with one of its fields (``ExtractField$Key`` / ``$Value``)."""

    Config = ExtractFieldConfig

    def _configured(self, config: ExtractFieldConfig) -> None:
        self._path = field_path(config.field, config.field_syntax_version)
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _field_schema(self, schema: Schema) -> Schema:
        current = schema
        for name in self._path:
            if current.type is not Type.STRUCT:
                raise DataError(f"{self.label}: {'.'.join(self._path)} is not a path of struct fields")
            f = current.field(name)
            if f is None:
                raise DataError(f"{self.label}: unknown field {'.'.join(self._path)} in the {self.part} schema")
            current = f.schema
        return current

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if schema is None:
            if data is None:
                return self.updated(record, None, None)
            current = require_map(data, self.label, "field extraction")
            for name in self._path[:-1]:
                nested = current.get(name)
                if not isinstance(nested, dict):
                    return self.updated(record, None, None)
                current = nested
            return self.updated(record, None, current.get(self._path[-1]))
        field_schema = self._schemas.get(schema, self._field_schema)
        if data is None:
            return self.updated(record, field_schema, None)
        current = require_struct(data, schema, self.label, "field extraction")
        value: Any = current
        for name in self._path:
            value = value.get(name) if value is not None else None
        if value is None and self._replace_null:
            value = field_schema.default
        return self.updated(record, field_schema, value)


class ExtractFieldKey(ExtractField):
    """ExtractField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.ExtractField$Key",)


class ExtractFieldValue(ExtractField):
    """ExtractField on the record value."""

    aliases = (f"{_PKG}.ExtractField$Value",)


# -- HoistField ----------------------------------------------------------------------------------


class HoistFieldConfig(PluginConfig):
    """Settings of HoistField."""

    field: str = Field(description="Name of the single field of the resulting struct or map.")


class HoistField(KeyOrValueTransformation):
    """Wrap the key or value in a struct (with a schema) or a map (without) of one field."""

    Config = HoistFieldConfig

    def _configured(self, config: HoistFieldConfig) -> None:
        self._field = config.field
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _wrap_schema(self, schema: Schema) -> Schema:
        return Schema.struct([(self._field, schema)])

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if schema is None:
            return self.updated(record, None, {self._field: data})
        return self.updated(record, self._schemas.get(schema, self._wrap_schema), {self._field: data})


class HoistFieldKey(HoistField):
    """HoistField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.HoistField$Key",)


class HoistFieldValue(HoistField):
    """HoistField on the record value."""

    aliases = (f"{_PKG}.HoistField$Value",)


# -- InsertField ---------------------------------------------------------------------------------


class InsertFieldConfig(PluginConfig):
    """Settings of InsertField; a name ending in ``!`` makes the field required, ``?`` (the default) optional."""

    topic_field: str | None = Field(None, description="Field for the record's topic.")
    partition_field: str | None = Field(None, description="Field for the record's partition.")
    offset_field: str | None = Field(None, description="Field for the record's Kafka offset (sink connectors only).")
    timestamp_field: str | None = Field(None, description="Field for the record's timestamp.")
    static_field: str | None = Field(None, description="Field for a fixed value.")
    static_value: str | None = Field(None, description="The fixed value of static.field.")
    replace_null_with_default: bool = Field(True, description="Use a field's default when its value is null.")

    @model_validator(mode="after")
    def _check(self) -> InsertFieldConfig:
        if not any(
            (self.topic_field, self.partition_field, self.offset_field, self.timestamp_field, self.static_field)
        ):
            raise ValueError("No field insertion configured")
        if self.static_field and self.static_value is None:
            raise ValueError(f"No value specified for static field: {self.static_field}")
        return self


def _insertion(spec: str | None) -> tuple[str, bool] | None:
    """``name!`` → required, ``name?`` or ``name`` → optional."""
    if not spec:
        return None
    if spec.endswith("?"):
        return spec[:-1], True
    if spec.endswith("!"):
        return spec[:-1], False
    return spec, True


_OPTIONAL_TIMESTAMP = Timestamp.OPTIONAL_SCHEMA


class InsertField(KeyOrValueTransformation):
    """Add the topic, partition, offset, timestamp or a static value as fields.

    Tombstones pass through. ``offset.field`` needs a sink record (Connect raises for source
    records, and so does Sluice). Without a schema the timestamp is inserted as epoch milliseconds;
    with one, as a ``Timestamp``.
    """

    Config = InsertFieldConfig

    def _configured(self, config: InsertFieldConfig) -> None:
        self._topic = _insertion(config.topic_field)
        self._partition = _insertion(config.partition_field)
        self._offset = _insertion(config.offset_field)
        self._timestamp = _insertion(config.timestamp_field)
        self._static = _insertion(config.static_field)
        self._static_value = config.static_value
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _updated_schema(self, schema: Schema) -> Schema:
        fields = [(f.name, f.schema) for f in schema.fields]
        for spec, required, optional in (
            (self._topic, STRING_SCHEMA, OPTIONAL_STRING_SCHEMA),
            (self._partition, INT32_SCHEMA, OPTIONAL_INT32_SCHEMA),
            (self._offset, INT64_SCHEMA, OPTIONAL_INT64_SCHEMA),
            (self._timestamp, Timestamp.SCHEMA, _OPTIONAL_TIMESTAMP),
            (self._static, STRING_SCHEMA, OPTIONAL_STRING_SCHEMA),
        ):
            if spec is not None:
                fields.append((spec[0], optional if spec[1] else required))
        return copy_struct_schema(schema, fields)

    def _insert(self, record: SinkRecord | Any, data: dict[str, Any], with_schema: bool) -> dict[str, Any]:
        if self._topic is not None:
            data[self._topic[0]] = record.topic
        if self._partition is not None and record.partition is not None:
            data[self._partition[0]] = record.partition
        if self._offset is not None:
            if not isinstance(record, SinkRecord):
                raise DataError(f"{self.label}: offset.field needs a sink record; found a {type(record).__name__}")
            data[self._offset[0]] = record.kafka_offset
        if self._timestamp is not None and record.timestamp is not None:
            data[self._timestamp[0]] = Timestamp.from_int(record.timestamp) if with_schema else record.timestamp
        if self._static is not None:
            data[self._static[0]] = self._static_value
        return data

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        if schema is None:
            inserted = self._insert(record, dict(require_map(data, self.label, "field insertion")), False)
            return self.updated(record, None, inserted)
        struct = require_struct(data, schema, self.label, "field insertion")
        if self._replace_null:
            struct = _fill_default(struct, schema)
        new_schema = self._schemas.get(schema, self._updated_schema)
        return self.updated(record, new_schema, self._insert(record, dict(struct), True))

    def apply_batch(self, records: Sequence[R]) -> list[R]:
        """The schemaless value case without per-record method dispatch."""
        if self.operates_on_key or self._offset is not None or self._timestamp is not None:
            return super().apply_batch(records)
        topic_name = self._topic[0] if self._topic is not None else None
        partition_name = self._partition[0] if self._partition is not None else None
        static_name = self._static[0] if self._static is not None else None
        static_value = self._static_value
        apply = self.apply
        out: list[R] = []
        append = out.append
        for record in records:
            value = record.value
            if record.value_schema is not None or type(value) is not dict:
                append(apply(record))
                continue
            value = value.copy()
            if topic_name is not None:
                value[topic_name] = record.topic
            if partition_name is not None and record.partition is not None:
                value[partition_name] = record.partition
            if static_name is not None:
                value[static_name] = static_value
            append(with_value(record, None, value))
        return out


    def apply_columns(self, batch: SinkRecordBatch) -> SinkRecordBatch | None:
        """Insert into whole columns: constants once per batch, partition/offset/timestamp from
        the batch's columns; ``None`` (the record path) for mixed schemas or non-map data."""
        column, schemas = (batch.keys, batch.key_schemas) if self.operates_on_key else (batch.values, batch.value_schemas)
        schema = uniform(schemas)
        if schema is MIXED or (schema is not None and schema.type is not Type.STRUCT):
            return None
        with_schema = schema is not None
        # (name, constant or column, is a column) in _insert's order.
        inserts: list[tuple[str, Any, bool]] = []
        if self._topic is not None:
            inserts.append((self._topic[0], batch.topic, False))
        if self._partition is not None:
            inserts.append((self._partition[0], batch.partitions, True))
        if self._offset is not None:
            inserts.append((self._offset[0], batch.offsets, True))
        if self._timestamp is not None:
            ts: list[Any] = batch.timestamps
            if with_schema:
                ts = [None if t is None else Timestamp.from_int(t) for t in ts]
            inserts.append((self._timestamp[0], ts, True))
        if self._static is not None:
            inserts.append((self._static[0], self._static_value, False))
        fill = self._replace_null and with_schema and any(f.schema.default is not None for f in schema.fields)
        out: list[Any] = []
        append = out.append
        constant_only = not any(is_column for _, _, is_column in inserts)
        if constant_only and not fill and getattr(batch, "fresh", None) == ("keys" if self.operates_on_key else "values"):
            # The maps were built by the step before and nobody else holds them: no second copy.
            if not all(type(data) is dict or data is None for data in column):
                return None
            constants = {name: value for name, value, _ in inserts}
            for data in column:
                if data is not None:
                    data.update(constants)
            out = column
        elif constant_only:
            constants = {name: value for name, value, _ in inserts}
            for data in column:
                if type(data) is dict:
                    append({**(_fill_default(data, schema) if fill else data), **constants})
                elif data is None:
                    append(None)
                else:
                    return None
        else:
            for i, data in enumerate(column):
                if type(data) is not dict:
                    if data is not None:
                        return None
                    append(None)
                    continue
                data = dict(_fill_default(data, schema) if fill else data)
                for name, value, is_column in inserts:
                    if is_column:
                        item = value[i]
                        if item is not None:
                            data[name] = item
                    else:
                        data[name] = value
                append(data)
        new_schema = self._schemas.get(schema, self._updated_schema) if with_schema else None
        return _derived_batch(batch, self.operates_on_key, out, schemas, schema, new_schema, column)


class InsertFieldKey(InsertField):
    """InsertField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.InsertField$Key",)


class InsertFieldValue(InsertField):
    """InsertField on the record value."""

    aliases = (f"{_PKG}.InsertField$Value",)


# -- MaskField -----------------------------------------------------------------------------------


class MaskFieldConfig(PluginConfig):
    """Settings of MaskField."""

    fields: CommaList = Field(description="Names of the fields to mask.", min_length=1)
    replacement: str | None = Field(
        None,
        description="Replacement for numeric and string fields; without it a field becomes its type's empty value.",
    )


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _empty_like(value: Any) -> Any:
    """Connect's masked value: the type's zero or empty value."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, decimal.Decimal):
        return decimal.Decimal(0)
    if isinstance(value, str):
        return ""
    if isinstance(value, _dt.datetime):
        return _EPOCH
    if isinstance(value, _dt.date):
        return _EPOCH.date()
    if isinstance(value, _dt.time):
        return _dt.time(0)
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    raise DataError(f"MaskField: cannot mask value of type {type(value).__name__}")


class MaskField(KeyOrValueTransformation):
    """Replace fields with their type's empty value (or ``replacement``); the schema is unchanged."""

    Config = MaskFieldConfig

    def _configured(self, config: MaskFieldConfig) -> None:
        self._fields = frozenset(config.fields)
        self._replacement = config.replacement

    def _masked(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        if self._replacement is None:
            return _empty_like(value)
        replacement = self._replacement
        try:
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, int):
                return int(replacement)
            if isinstance(value, float):
                return float(replacement)
            if isinstance(value, decimal.Decimal):
                return decimal.Decimal(replacement)
            if isinstance(value, str):
                return replacement
        except (ValueError, ArithmeticError):
            raise DataError(
                f"{self.label}: cannot use replacement {replacement!r} for field {name} of type {type(value).__name__}"
            ) from None
        except TypeError:
            pass
        raise DataError(
            f"{self.label}: cannot mask field {name} of type {type(value).__name__} with a custom replacement"
        )

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        if schema is None:
            masked = dict(require_map(data, self.label, "masking"))
            for name in self._fields:
                if name in masked:
                    masked[name] = self._masked(name, masked[name])
            return self.updated(record, None, masked)
        struct = require_struct(data, schema, self.label, "masking")
        masked = {
            f.name: self._masked(f.name, struct.get(f.name)) if f.name in self._fields else struct.get(f.name)
            for f in schema.fields
        }
        return self.updated(record, schema, masked)


class MaskFieldKey(MaskField):
    """MaskField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.MaskField$Key",)


class MaskFieldValue(MaskField):
    """MaskField on the record value."""

    aliases = (f"{_PKG}.MaskField$Value",)


# -- ReplaceField --------------------------------------------------------------------------------


class ReplaceFieldConfig(PluginConfig):
    """Settings of ReplaceField (``whitelist``/``blacklist`` are Connect's legacy names)."""

    exclude: CommaList = Field((), description="Fields to drop; takes precedence over include.")
    include: CommaList = Field((), description="Fields to keep; empty keeps all.")
    renames: CommaList = Field((), description="Renames as old:new pairs.")
    whitelist: CommaList = Field((), description="Deprecated name of include.")
    blacklist: CommaList = Field((), description="Deprecated name of exclude.")
    replace_null_with_default: bool = Field(True, description="Use a field's default when its value is null.")


class ReplaceField(KeyOrValueTransformation):
    """Drop, keep or rename fields; ``exclude`` wins over ``include``."""

    Config = ReplaceFieldConfig

    def _configured(self, config: ReplaceFieldConfig) -> None:
        self._exclude = frozenset(config.exclude or config.blacklist)
        self._include = frozenset(config.include or config.whitelist)
        renames: dict[str, str] = {}
        for pair in config.renames:
            old, sep, new = pair.partition(":")
            if not sep or not old.strip() or not new.strip():
                raise ConfigError(f"Invalid rename mapping {pair!r}: expected old:new", key="renames")
            renames[old.strip()] = new.strip()
        self._renames = renames
        self._replace_null = config.replace_null_with_default
        self._plans: SchemaCache[Schema, tuple[Schema, tuple[tuple[str, str], ...]]] = SchemaCache()
        self._name_plans: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {}

    def _keep(self, name: str) -> bool:
        return name not in self._exclude and (not self._include or name in self._include)

    def _plan(self, schema: Schema) -> tuple[Schema, tuple[tuple[str, str], ...]]:
        kept = [f for f in schema.fields if self._keep(f.name)]
        moves = tuple((f.name, self._renames.get(f.name, f.name)) for f in kept)
        new_schema = copy_struct_schema(schema, [(new, f.schema) for f, (_, new) in zip(kept, moves)])
        return new_schema, moves

    def _moves_for(self, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        # Schemaless records of one topic usually share their field names: plan once per shape.
        moves = self._name_plans.get(names)
        if moves is None:
            moves = tuple((n, self._renames.get(n, n)) for n in names if self._keep(n))
            if len(self._name_plans) > 256:
                self._name_plans.clear()
            self._name_plans[names] = moves
        return moves

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        if schema is None:
            require_map(data, self.label, "field replacement")
            moves = self._moves_for(tuple(data))
            return self.updated(record, None, {new: data[old] for old, new in moves})
        struct = require_struct(data, schema, self.label, "field replacement")
        if self._replace_null:
            struct = _fill_default(struct, schema)
        new_schema, moves = self._plans.get(schema, self._plan)
        return self.updated(record, new_schema, {new: struct.get(old) for old, new in moves})

    def apply_batch(self, records: Sequence[R]) -> list[R]:
        """The schemaless value case with the per-shape plan inlined."""
        if self.operates_on_key:
            return super().apply_batch(records)
        apply = self.apply
        plans = self._name_plans
        out: list[R] = []
        append = out.append
        for record in records:
            value = record.value
            if record.value_schema is not None or type(value) is not dict:
                append(apply(record))
                continue
            moves = plans.get(tuple(value))
            if moves is None:
                moves = self._moves_for(tuple(value))
            append(with_value(record, None, {new: value[old] for old, new in moves}))
        return out


    def apply_columns(self, batch: SinkRecordBatch) -> SinkRecordBatch | None:
        """Replace fields in whole columns (one plan per schema or per map shape); ``None`` (the
        record path) for mixed schemas or non-map data."""
        column, schemas = (batch.keys, batch.key_schemas) if self.operates_on_key else (batch.values, batch.value_schemas)
        schema = uniform(schemas)
        if schema is MIXED:
            return None
        out: list[Any] = []
        append = out.append
        if schema is None:
            exclude = tuple(self._exclude)
            if not self._include and not self._renames:
                # Only drops: a C-level copy and a pop per dropped name keep the field order.
                for data in column:
                    if type(data) is dict:
                        data = data.copy()
                        for name in exclude:
                            data.pop(name, None)
                        append(data)
                    elif data is None:
                        append(None)
                    else:
                        return None
            else:
                plans, moves_for = self._name_plans, self._moves_for
                for data in column:
                    if type(data) is dict:
                        shape = tuple(data)
                        moves = plans.get(shape) or moves_for(shape)
                        append({new: data[old] for old, new in moves})
                    elif data is None:
                        append(None)
                    else:
                        return None
            new_schema = None
        else:
            if schema.type is not Type.STRUCT:
                return None
            new_schema, moves = self._plans.get(schema, self._plan)
            fill = self._replace_null and any(f.schema.default is not None for f in schema.fields)
            for data in column:
                if type(data) is dict:
                    if fill:
                        data = _fill_default(data, schema)
                    append({new: data.get(old) for old, new in moves})
                elif data is None:
                    append(None)
                else:
                    return None
        return _derived_batch(batch, self.operates_on_key, out, schemas, schema, new_schema, column)


class ReplaceFieldKey(ReplaceField):
    """ReplaceField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.ReplaceField$Key",)


class ReplaceFieldValue(ReplaceField):
    """ReplaceField on the record value."""

    aliases = (f"{_PKG}.ReplaceField$Value",)


# -- ValueToKey ----------------------------------------------------------------------------------


class ValueToKeyConfig(PluginConfig):
    """Settings of ValueToKey."""

    fields: CommaList = Field(description="Value fields that make up the key.", min_length=1)
    replace_null_with_default: bool = Field(True, description="Use a field's default when its value is null.")


class ValueToKey(BuiltinTransformation):
    """Replace the key with a struct (or map) of fields taken from the value.

    As in Connect, a tombstone has no value to take fields from and is a data error; route
    tombstones around this transform with the ``RecordIsTombstone`` predicate and ``negate``.
    """

    Config = ValueToKeyConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.ValueToKey",)

    def _configured(self, config: ValueToKeyConfig) -> None:
        self._fields = config.fields
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _key_schema(self, schema: Schema) -> Schema:
        fields = []
        for name in self._fields:
            f = schema.field(name)
            if f is None:
                raise DataError(f"{self.label}: field {name} does not exist in the value schema")
            fields.append((name, f.schema))
        return Schema.struct(fields)

    def apply(self, record: R) -> R:
        if record.value_schema is None:
            value = require_map(record.value, self.label, "copying fields from value to key")
            return with_key(record, None, {name: value.get(name) for name in self._fields})
        struct = require_struct(record.value, record.value_schema, self.label, "copying fields from value to key")
        key_schema = self._schemas.get(record.value_schema, self._key_schema)
        key = {}
        for f in key_schema.fields:
            v = struct.get(f.name)
            key[f.name] = f.schema.default if v is None and self._replace_null else v
        return with_key(record, key_schema, key)


def _derived_batch(
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
