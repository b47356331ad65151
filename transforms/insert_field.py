"""InsertField: add the record's topic, partition, offset, timestamp or a static value as fields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import DataError
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
    KeyOrValueTransformation,
    SchemaCache,
    copy_struct_schema,
    fill_default,
    require_map,
    require_struct,
    uniform,
    with_column,
    with_value,
)

__all__ = ["InsertField", "InsertFieldConfig", "InsertFieldKey", "InsertFieldValue"]

_PKG = "org.apache.kafka.connect.transforms"


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
            struct = fill_default(struct, schema)
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
        column, schemas = (
            (batch.keys, batch.key_schemas) if self.operates_on_key else (batch.values, batch.value_schemas)
        )
        schema = uniform(schemas)
        if schema is MIXED or (schema is not None and schema.type is not Type.STRUCT):
            return None
        with_schema = schema is not None
        inserts = self._column_inserts(batch, with_schema)
        fill = self._replace_null and with_schema and any(f.schema.default is not None for f in schema.fields)
        out: list[Any] = []
        append = out.append
        constant_only = not any(is_column for _, _, is_column in inserts)
        if (
            constant_only
            and not fill
            and getattr(batch, "fresh", None) == ("keys" if self.operates_on_key else "values")
        ):
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
                    append({**(fill_default(data, schema) if fill else data), **constants})
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
                data = dict(fill_default(data, schema) if fill else data)
                for name, value, is_column in inserts:
                    if is_column:
                        item = value[i]
                        if item is not None:
                            data[name] = item
                    else:
                        data[name] = value
                append(data)
        new_schema = self._schemas.get(schema, self._updated_schema) if with_schema else None
        return with_column(batch, self.operates_on_key, out, schemas, schema, new_schema, column)


    def _column_inserts(self, batch: SinkRecordBatch, with_schema: bool) -> list[tuple[str, Any, bool]]:
        """``(name, constant or column, is a column)`` of each inserted field, in :meth:`_insert`'s order."""
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
        return inserts


class InsertFieldKey(InsertField):
    """InsertField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.InsertField$Key",)


class InsertFieldValue(InsertField):
    """InsertField on the record value."""

    aliases = (f"{_PKG}.InsertField$Value",)


# A plugin's class name (the "class" of GET /connector-plugins, a name a transform's "type" may use)
# is its module and qualified name: these keep the one they had before the module was split out.
for _plugin in (InsertField, InsertFieldKey, InsertFieldValue):
    _plugin.__module__ = "sluice.transforms.field"
