"""Parsed JSON → Connect values and schemas, for :mod:`sluice.converters.json`: the per-schema readers
and the parsing of JSON schemas."""

from __future__ import annotations

import binascii
import datetime as _dt
import decimal
import math
from collections.abc import Callable
from typing import Any

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Field, Schema, Time, Timestamp, Type
from sluice.converters.json_text import _INF
from sluice.converters.json_write import (
    _EPOCH,
    _EPOCH_ORDINAL,
    _EXACT,
    _INT_RANGES,
    _TYPES_BY_NAME,
    _decimal_scale,
    _generate,
    _identity_loop_ok,
    _Node,
)


def _node_type(j: Any) -> str:
    """Jackson's node type name for a parsed JSON value (for error messages)."""
    if j is None:
        return "NULL"
    if isinstance(j, bool):
        return "BOOLEAN"
    if isinstance(j, (int, float, decimal.Decimal)):
        return "NUMBER"
    if isinstance(j, str):
        return "STRING"
    return "ARRAY" if isinstance(j, list) else "OBJECT"


class _Decoders:
    """Builds parsed JSON → Connect value converters and parses JSON schemas."""

    def __init__(self, replace_null_with_default: bool):
        self.replace_null = replace_null_with_default

    def null_handler(self, schema: Schema) -> Callable[[], Any]:
        if schema.default is not None and self.replace_null:
            default = schema.default
            return lambda: default
        if schema.optional:
            return lambda: None
        message = f"Invalid null value for required {schema.type.name} field"

        def required() -> Any:
            raise DataError(message)

        return required

    def schema(self, j: Any) -> Schema:  # noqa: C901 - one branch per JSON schema type
        """Connect's ``asConnectSchema``: a JSON schema object → :class:`Schema`."""
        if not isinstance(j, dict):
            raise DataError(f"Schema must be a JSON object, but found {_node_type(j)}")
        type_name = j.get("type")
        if not isinstance(type_name, str):
            raise DataError("Schema must contain 'type' field")
        t = _TYPES_BY_NAME.get(type_name)
        if t is None:
            raise DataError(f"Unknown schema type: {type_name}")
        parts: dict[str, Any] = {}
        if t is Type.ARRAY:
            items = j.get("items")
            if items is None:
                raise DataError("Array schema did not specify the element type")
            parts["value_schema"] = self.schema(items)
        elif t is Type.MAP:
            if "keys" not in j:
                raise DataError("Map schema did not specify the key type")
            if "values" not in j:
                raise DataError("Map schema did not specify the value type")
            parts["key_schema"], parts["value_schema"] = self.schema(j["keys"]), self.schema(j["values"])
        elif t is Type.STRUCT:
            fields = j.get("fields")
            if not isinstance(fields, list):
                raise DataError('Struct schema\'s "fields" argument is not an array.')
            built = []
            for index, fj in enumerate(fields):
                fname = fj.get("field") if isinstance(fj, dict) else None
                if not isinstance(fname, str):
                    raise DataError("Struct schema's field name not specified properly")
                built.append(Field(fname, index, self.schema(fj)))
            parts["fields"] = tuple(built)
        params = j.get("parameters")
        if isinstance(params, dict):
            if not all(isinstance(v, str) for v in params.values()):
                raise DataError("Schema parameters must have string values.")
            parts["parameters"] = params
        version = j.get("version")
        schema = Schema(
            t,
            optional=j.get("optional") is True,
            name=j["name"] if isinstance(j.get("name"), str) else None,
            version=version if type(version) is int else None,
            doc=j["doc"] if isinstance(j.get("doc"), str) else None,
            **parts,
        )
        if "default" in j:
            default = self.node(schema).fn(j["default"])
            if default is not None:
                schema = schema.with_(default=default)
        return schema

    def node(self, schema: Schema) -> _Node:
        """The converter for parsed JSON of ``schema``."""
        node = self._node(schema, self.null_handler(schema))
        node.nullable = schema.optional and not (schema.default is not None and self.replace_null)
        return node

    def _node(self, schema: Schema, null: Callable[[], Any]) -> _Node:
        name, t = schema.name, schema.type
        if name == Decimal.LOGICAL_NAME:
            return _Node.null_safe(_decimal_decoder(_decimal_scale(schema)), null)
        if name == Date.LOGICAL_NAME:
            return _Node.null_safe(_date_value, null)
        if name == Time.LOGICAL_NAME:
            return _Node.null_safe(_time_value, null)
        if name == Timestamp.LOGICAL_NAME:
            return _Node.null_safe(_timestamp_value, null)
        if t in _INT_RANGES:
            lo, hi = _INT_RANGES[t]
            return _Node(_int_decoder(t, lo, hi, null), int, lo, hi)
        if t is Type.FLOAT32 or t is Type.FLOAT64:
            return _Node.null_safe(_float_value(t.name), null, fast=float)
        if t is Type.STRING:
            return _Node(_json_typed(str, "STRING", null), str)
        if t is Type.BOOLEAN:
            return _Node(_json_typed(bool, "BOOLEAN", null), bool)
        if t is Type.BYTES:
            return _Node.null_safe(_bytes_value, null)
        if t is Type.ARRAY:
            return _Node(self._array(schema, null))
        if t is Type.MAP:
            return _Node(self._map(schema, null))
        nodes = [self.node(f.schema) for f in schema.fields]
        return _Node(_generate("decode", schema, nodes, null, {"not_object": _not_object}))

    def _array(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        assert schema.value_schema is not None
        item = self.node(schema.value_schema)
        item_fn = item.fn

        def decode(j: Any) -> Any:
            if type(j) is not list:
                if j is None:
                    return null()
                raise DataError(f"Arrays should be encoded as JSON arrays, but found {_node_type(j)}")
            if item.fast is not None and _identity_loop_ok(j, item):
                return j
            return [item_fn(e) for e in j]

        return decode

    def _map(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        assert schema.key_schema is not None and schema.value_schema is not None
        key_fn = self.node(schema.key_schema).fn
        value = self.node(schema.value_schema)
        value_fn = value.fn
        object_mode = schema.key_schema.type is Type.STRING

        def decode(j: Any) -> Any:
            if j is None:
                return null()
            if object_mode:
                if type(j) is not dict:
                    raise DataError(
                        f"Maps with string fields should be encoded as JSON objects, but found {_node_type(j)}"
                    )
                if value.fast is not None and _identity_loop_ok(j.values(), value):
                    return j
                return {k: value_fn(v) for k, v in j.items()}
            if type(j) is not list:
                raise DataError(
                    f"Maps with non-string fields should be encoded as JSON array of tuples, but found {_node_type(j)}"
                )
            result = {}
            for entry in j:
                if type(entry) is not list:
                    raise DataError(f"Found invalid map entry instead of array tuple: {_node_type(entry)}")
                if len(entry) != 2:
                    raise DataError(f"Found invalid map entry, expected length 2 but found :{len(entry)}")
                result[key_fn(entry[0])] = value_fn(entry[1])
            return result

        return decode


class _NeedExactNumbers(Exception):
    """A Decimal arrived as a JSON number that orjson parsed into a float: parse again exactly."""


def _not_object(j: Any) -> None:
    raise DataError(f"Structs should be encoded as JSON objects, but found {_node_type(j)}")


def _integral(j: Any) -> int | None:
    """A JSON number with no fractional part (``1.0``) as an int, else ``None``."""
    if type(j) is float and j.is_integer():
        return int(j)
    if type(j) is decimal.Decimal and j.is_finite() and j == j.to_integral_value():
        return int(j)
    return None


def _int_decoder(t: Type, lo: int, hi: int, null: Callable[[], Any]) -> Callable[[Any], Any]:
    label = t.name

    def decode(j: Any) -> Any:
        if j is None:
            return null()
        if type(j) is not int:
            integral = _integral(j)
            if integral is None:
                raise DataError(f"Expected a JSON integer for {label}: {_node_type(j)}")
            j = integral
        if not lo <= j <= hi:
            raise DataError(f"Value {j} is out of range for {label} [{lo}, {hi}]")
        return j

    return decode


def _json_typed(kind: type, label: str, null: Callable[[], Any]) -> Callable[[Any], Any]:
    def decode(j: Any) -> Any:
        if j is None:
            return null()
        if type(j) is kind:
            return j
        raise DataError(f"Expected a JSON {'string' if kind is str else 'boolean'} for {label}: {_node_type(j)}")

    return decode


_NAMED_FLOATS = {"NaN": math.nan, "Infinity": _INF, "-Infinity": -_INF}


def _float_value(label: str) -> Callable[[Any], float]:
    def decode(j: Any) -> float:
        if type(j) is float:
            return j
        if isinstance(j, (int, decimal.Decimal)) and not isinstance(j, bool):
            return float(j)
        if isinstance(j, str) and j in _NAMED_FLOATS:  # how Jackson writes non-finite numbers
            return _NAMED_FLOATS[j]
        raise DataError(f"Expected a JSON number for {label}: {_node_type(j)}")

    return decode


def _bytes_value(j: Any) -> bytes:
    if type(j) is not str:
        raise DataError(f"Expected a base64 JSON string for BYTES: {_node_type(j)}")
    try:
        return binascii.a2b_base64(j, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise DataError(f"Invalid bytes field: {exc}") from exc


def _decimal_decoder(scale: int) -> Callable[[Any], decimal.Decimal]:
    def decode(j: Any) -> decimal.Decimal:
        kind = type(j)
        if kind is str:
            try:
                unscaled = int.from_bytes(binascii.a2b_base64(j, strict_mode=True), "big", signed=True)
            except (binascii.Error, ValueError) as exc:
                raise DataError(f"Invalid bytes for Decimal field: {exc}") from exc
            return decimal.Decimal(unscaled).scaleb(-scale, _EXACT)
        if kind is int or kind is decimal.Decimal:
            return decimal.Decimal(j)
        if kind is float:
            raise _NeedExactNumbers
        raise DataError(
            f"Invalid type for Decimal, underlying representation should be numeric or bytes but was {_node_type(j)}"
        )

    return decode


def _date_value(j: Any) -> _dt.date:
    if type(j) is not int or not -(2**31) <= j < 2**31:
        raise DataError(f"Invalid type for Date, underlying representation should be integer but was {_node_type(j)}")
    try:
        return _dt.date.fromordinal(_EPOCH_ORDINAL + j)
    except (ValueError, OverflowError):
        raise DataError(f"Date value {j} is outside the range of datetime.date") from None


def _time_value(j: Any) -> _dt.time:
    if type(j) is not int:
        raise DataError(f"Invalid type for Time, underlying representation should be integer but was {_node_type(j)}")
    if not 0 <= j < 86_400_000:
        raise DataError("Time values must use number of milliseconds greater than 0 and less than 86400000")
    seconds, millis = divmod(j, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return _dt.time(hour, minute, second, millis * 1000)


def _timestamp_value(j: Any) -> _dt.datetime:
    if type(j) is not int:
        raise DataError(
            f"Invalid type for Timestamp, underlying representation should be integral but was {_node_type(j)}"
        )
    try:
        return _EPOCH + _dt.timedelta(0, 0, j * 1000)  # positional microseconds: ~1.5x faster than milliseconds=
    except OverflowError:
        raise DataError(f"Timestamp value {j} is outside the range of datetime.datetime") from None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"Non-standard token '{token}'")
