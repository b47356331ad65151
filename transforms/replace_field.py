"""ReplaceField: drop, keep or rename the fields of a key or value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import ConfigError
from sluice.connectors.api.records import SinkRecordBatch
from sluice.connectors.api.schema import Schema, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    MIXED,
    CommaList,
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

__all__ = ["ReplaceField", "ReplaceFieldConfig", "ReplaceFieldKey", "ReplaceFieldValue"]

_PKG = "org.apache.kafka.connect.transforms"


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
            struct = fill_default(struct, schema)
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
        column, schemas = (
            (batch.keys, batch.key_schemas) if self.operates_on_key else (batch.values, batch.value_schemas)
        )
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
                        data = fill_default(data, schema)
                    append({new: data.get(old) for old, new in moves})
                elif data is None:
                    append(None)
                else:
                    return None
        return with_column(batch, self.operates_on_key, out, schemas, schema, new_schema, column)


class ReplaceFieldKey(ReplaceField):
    """ReplaceField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.ReplaceField$Key",)


class ReplaceFieldValue(ReplaceField):
    """ReplaceField on the record value."""

    aliases = (f"{_PKG}.ReplaceField$Value",)


# A plugin's class name (the "class" of GET /connector-plugins, a name a transform's "type" may use)
# is its module and qualified name: these keep the one they had before the module was split out.
for _plugin in (ReplaceField, ReplaceFieldKey, ReplaceFieldValue):
    _plugin.__module__ = "sluice.transforms.field"
