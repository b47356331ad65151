"""Debezium's outbox event router (``io.debezium.transforms.outbox.EventRouter``).

The outbox pattern: a service writes the events it publishes into an outbox table in the same
transaction as its state; a CDC connector captures the table and this SMT turns each inserted row
into the event itself. With Debezium's defaults the row ``(id, aggregatetype, aggregateid, type,
payload)`` becomes a record on ``outbox.event.<aggregatetype>`` whose key is ``aggregateid``, whose
value is ``payload`` and which carries the header ``id``. The record's timestamp is the change
event's ``ts_ms`` (or ``table.field.event.timestamp``'s column).

Only inserts (``c``, and ``r`` from a snapshot) are events. A delete is dropped (an outbox row is
usually deleted right after it was written); an update is dropped with the
``table.op.invalid.behavior`` reaction (``warn``, ``error``: logged; ``fatal``: the task fails).
Tombstones are dropped; records that are not change events (heartbeats, message events) pass.
``table.fields.additional.placement`` copies more columns, as ``column:header[:alias]``,
``column:envelope[:alias]`` (the value becomes ``{payload, alias…}``) or ``column:partition``.
``route.topic.regex`` takes Java's syntax (``(?<name>…)``) and ``route.topic.replacement`` Java's
``${name}``/``$1`` references, as RegexRouter does.
"""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar, Literal

import orjson
from pydantic import Field, field_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import ConfigError, ConnectError, DataError
from sluice.connectors.api.schema import Schema, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import BuiltinTransformation, SchemaCache
from sluice.transforms.routing import java_replacement

__all__ = ["EventRouter", "java_regex"]

log = logging.getLogger(__name__)

_PLACEMENTS = ("header", "envelope", "partition")
_JAVA_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z])")


def java_regex(pattern: str) -> str:
    """A Java regular expression's named groups (``(?<name>…)``) in Python's spelling (``(?P<name>…)``)."""
    return _JAVA_NAMED_GROUP.sub("(?P<", pattern)


class EventRouterConfig(PluginConfig):
    """Settings of the outbox EventRouter (Debezium's keys and defaults)."""

    table_field_event_id: str = Field("id", description="Column with the event id (the record's 'id' header).")
    table_field_event_key: str = Field("aggregateid", description="Column with the event key (the record key).")
    table_field_event_type: str = Field(
        "type", description="Column with the event type; place it with table.fields.additional.placement."
    )
    table_field_event_payload: str = Field("payload", description="Column with the event payload (the value).")
    table_field_event_timestamp: str = Field(
        "", description="Column with the record timestamp (default: the change event's ts_ms)."
    )
    table_field_event_schema_version: str = Field("", description="Column with the version of the value schema.")
    table_fields_additional_placement: str = Field(
        "", description="More columns, as column:header|envelope|partition[:alias], comma-separated."
    )
    table_fields_additional_error_on_missing: bool = Field(
        True, description="Fail when a placed column is not in the row (else leave it out)."
    )
    table_expand_json_payload: bool = Field(False, description="Parse a JSON string payload into a structure.")
    table_op_invalid_behavior: Literal["warn", "error", "fatal"] = Field(
        "warn", description="On an update of the outbox table: log a warning, log an error, or fail the task."
    )
    route_by_field: str = Field("aggregatetype", description="Column whose value routes the event.")
    route_topic_regex: str = Field(
        "(?<routedByValue>.*)", description="Regex matched against the routing value (Java syntax)."
    )
    route_topic_replacement: str = Field(
        "outbox.event.${routedByValue}", description="Topic built from the regex's groups (${name}, $1)."
    )
    route_tombstone_on_empty_payload: bool = Field(
        False, description="An event with a null payload becomes a tombstone (null value, no schema)."
    )

    @field_validator("route_topic_regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(java_regex(value))
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value

    @field_validator("table_fields_additional_placement")
    @classmethod
    def _placements(cls, value: str) -> str:
        parse_placements(value)
        return value


def parse_placements(text: str) -> list[tuple[str, str, str]]:
    """``column:placement[:alias]`` entries → ``(column, placement, name)``."""
    placements = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        parts = [p.strip() for p in entry.split(":")]
        if len(parts) not in (2, 3) or not parts[0] or parts[1] not in _PLACEMENTS:
            raise ValueError(f"entry {entry!r} is not <column>:header|envelope|partition[:<alias>]")
        placements.append((parts[0], parts[1], parts[2] if len(parts) == 3 and parts[2] else parts[0]))
    return placements


def json_schema_of(value: Any) -> Schema:
    """A Connect schema for a parsed JSON value (objects become structs, in their key order)."""
    if isinstance(value, dict):
        return Schema.struct([(k, json_schema_of(v)) for k, v in value.items()], optional=True)
    if isinstance(value, list):
        return Schema.array(json_schema_of(value[0]) if value else Schema(Type.STRING, optional=True), optional=True)
    if isinstance(value, bool):
        return Schema(Type.BOOLEAN, optional=True)
    if isinstance(value, int):
        return Schema(Type.INT64, optional=True)
    if isinstance(value, float):
        return Schema(Type.FLOAT64, optional=True)
    return Schema(Type.STRING, optional=True)


class EventRouter(BuiltinTransformation):
    """Turn change events of an outbox table into the events they carry (see the module docstring)."""

    Config = EventRouterConfig
    aliases: ClassVar[tuple[str, ...]] = ("io.debezium.transforms.outbox.EventRouter", "OutboxEventRouter")

    def _configured(self, config: EventRouterConfig) -> None:
        self._placements = parse_placements(config.table_fields_additional_placement)
        self._regex = re.compile(java_regex(config.route_topic_regex))
        try:
            self._replacement = java_replacement(config.route_topic_replacement)
        except ConfigError as exc:
            raise ConfigError(str(exc), key="route.topic.replacement") from None
        self._envelopes: SchemaCache[tuple[Schema | None, tuple[tuple[str, Schema], ...]], Schema] = SchemaCache()

    def apply(self, record: R) -> R | None:
        value, schema = record.value, record.value_schema
        if value is None:
            return None  # a tombstone of the outbox table: nothing to route
        if not _is_change_event(schema, value):
            return record
        op = value.get("op")
        if op == "d":
            return None
        if op == "u":
            self._invalid(record)
            return None
        after = value.get("after")
        if op not in ("c", "r") or not isinstance(after, dict):
            return None
        after_schema = _field_schema(schema, "after")
        return self._route(record, value, after, after_schema)

    def _invalid(self, record: R) -> None:
        behavior = self.config.table_op_invalid_behavior
        message = f"EventRouter: an update of the outbox table (topic {record.topic}, key {record.key!r}) was ignored"
        if behavior == "fatal":
            raise ConnectError(
                message.replace("was ignored", "is not an outbox event") + " (table.op.invalid.behavior=fatal)"
            )
        (log.error if behavior == "error" else log.warning)(message)

    def _column(self, after: dict[str, Any], after_schema: Schema | None, column: str) -> tuple[Any, Schema | None]:
        if column not in after:
            raise DataError(f"EventRouter: the outbox row has no column {column!r}")
        field = after_schema.field(column) if after_schema is not None else None
        return after[column], field.schema if field is not None else None

    def _route(self, record: R, value: dict[str, Any], after: dict[str, Any], after_schema: Schema | None) -> R:
        cfg = self.config
        event_id, _ = self._column(after, after_schema, cfg.table_field_event_id)
        key, key_schema = (None, None)
        if cfg.table_field_event_key and cfg.table_field_event_key in after:
            key, key_schema = self._column(after, after_schema, cfg.table_field_event_key)
        payload, payload_schema = self._payload(after, after_schema)
        headers: list[tuple[str, Any]] = [*(record.headers or ()), ("id", event_id)]
        envelope: list[tuple[str, Any, Schema | None]] = []
        partition = record.partition
        for column, placement, name in self._placements:
            if column not in after:
                if cfg.table_fields_additional_error_on_missing:
                    raise DataError(f"EventRouter: the outbox row has no column {column!r} to place in the {placement}")
                continue
            data, data_schema = self._column(after, after_schema, column)
            if placement == "header":
                headers.append((name, data))
            elif placement == "envelope":
                envelope.append((name, data, data_schema))
            elif data is not None:
                partition = int(data)
        if envelope:
            payload, payload_schema = self._envelope(payload, payload_schema, envelope)
        if payload_schema is not None and cfg.table_field_event_schema_version:
            version = after.get(cfg.table_field_event_schema_version)
            if version is not None:
                payload_schema = payload_schema.with_(version=int(version))
        if payload is None and cfg.route_tombstone_on_empty_payload:
            payload_schema = None
        timestamp = record.timestamp
        if cfg.table_field_event_timestamp:
            timestamp = after.get(cfg.table_field_event_timestamp)
        elif isinstance(value.get("ts_ms"), int):
            timestamp = value["ts_ms"]
        return record.replace(
            topic=self._topic(record.topic, after),
            key=key,
            key_schema=key_schema,
            value=payload,
            value_schema=payload_schema,
            headers=tuple(headers),
            partition=partition,
            timestamp=timestamp,
        )

    def _payload(self, after: dict[str, Any], after_schema: Schema | None) -> tuple[Any, Schema | None]:
        payload, schema = self._column(after, after_schema, self.config.table_field_event_payload)
        if self.config.table_expand_json_payload and isinstance(payload, str):
            try:
                parsed = orjson.loads(payload)
            except orjson.JSONDecodeError:
                log.warning("EventRouter: the payload is not JSON; it stays a string")
                return payload, schema
            return parsed, (json_schema_of(parsed) if after_schema is not None else None)
        return payload, schema

    def _envelope(
        self, payload: Any, payload_schema: Schema | None, extra: list[tuple[str, Any, Schema | None]]
    ) -> tuple[dict[str, Any], Schema | None]:
        data = {"payload": payload, **{name: v for name, v, _ in extra}}
        if payload_schema is None:
            return data, None
        fields = (("payload", payload_schema), *((n, s or Schema(Type.STRING, optional=True)) for n, _, s in extra))
        return data, self._envelopes.get((payload_schema, fields), lambda k: Schema.struct(list(k[1])))

    def _topic(self, topic: str, after: dict[str, Any]) -> str:
        routed = after.get(self.config.route_by_field)
        if routed is None:
            return topic
        match = self._regex.fullmatch(str(routed))
        return match.expand(self._replacement) if match is not None else topic


def _is_change_event(schema: Schema | None, value: Any) -> bool:
    if schema is not None:
        return schema.type is Type.STRUCT and (schema.name or "").endswith(".Envelope")
    return isinstance(value, dict) and "op" in value and ("after" in value or "before" in value)


def _field_schema(schema: Schema | None, name: str) -> Schema | None:
    field = schema.field(name) if schema is not None else None
    return field.schema if field is not None else None
