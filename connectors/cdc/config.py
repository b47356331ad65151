"""The Debezium keys every CDC source shares, checked as Debezium checks them.

A database source's config model extends :class:`CdcSourceConfig` and declares the keys itself,
in the order its users know them from Debezium's documentation (the order of a model's fields is
the order of its config definitions and of its validation errors); the base adds no field, only
the checks of the shared keys (each applies when the model declares the key) and the task-config
round trip. The shared parts read their settings through the protocols below.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, Self

from pydantic import Field, ValidationInfo, field_validator

from sluice.connectors.api import ConfigError, PluginConfig, dotted, split_list
from sluice.connectors.api.client_keys import check_denied


class SignalSettings(Protocol):
    """What the signal channels read (:mod:`sluice.connectors.cdc.signals`)."""

    topic_prefix: str
    signal_enabled_channels: list[str]
    signal_kafka_topic: str
    signal_kafka_bootstrap_servers: str
    signal_kafka_group_id: str
    signal_consumer: dict[str, str]


class NotificationSettings(Protocol):
    """What the snapshot notifications read (:mod:`sluice.connectors.cdc.notifications`)."""

    topic_prefix: str
    notification_enabled_channels: list[str]
    notification_sink_topic_name: str


def parse_message_key_columns(text: str) -> list[tuple[re.Pattern[str], str, list[str]]]:
    """``message.key.columns`` → ``(table regex, its text, column regexes)`` per entry.

    Debezium's format: ``<schema>.<table>:<column>[,<column>…]`` entries separated by ``;``; the
    table and the columns are regular expressions matched case-insensitively against the whole
    ``schema.table`` and column name."""
    entries = []
    for raw in text.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        table, sep, columns = entry.partition(":")
        names = [c.strip() for c in columns.split(",") if c.strip()]
        if not sep or not table.strip() or not names or ":" in columns:
            raise ValueError(f"entry {entry!r} is not <schema>.<table>:<column>[,<column>...]")
        try:
            pattern = re.compile(table.strip(), re.IGNORECASE)
            for name in names:
                re.compile(name, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"entry {entry!r} has an invalid regular expression: {exc}") from None
        entries.append((pattern, table.strip(), names))
    return entries


#: Keys of Debezium's core (every connector has them) that the CDC sources accept and do not honour, with the reason.
DEBEZIUM_UNIMPLEMENTED_KEYS: dict[str, str] = {
    "snapshot.mode.configuration.based.*": "snapshot.mode=configuration_based is not implemented",
    "snapshot.mode.custom.name": "snapshot.mode=custom is not implemented",
    "snapshot.include.collection.list": "not implemented; the initial snapshot covers every captured table",
    "snapshot.fetch.size": "not implemented; snapshot.chunk.size sets the rows per chunk",
    "snapshot.max.threads": "not implemented; one task snapshots the tables in turn",
    "snapshot.delay.ms": "not implemented",
    "snapshot.lock.timeout.ms": "not applicable: the snapshot takes no table locks",
    "signal.kafka.poll.timeout.ms": "the Kafka signal consumer polls in a thread of its own",
    "incremental.snapshot.watermarking.strategy": "not implemented",
    "read.only": "read-only incremental snapshots are not implemented",
    "topic.transaction": "the transaction metadata topic is always <topic.prefix>.transaction",
    "column.mask.*": "column masking is not implemented; use the MaskField transform",
    "column.truncate.*": "column truncation is not implemented",
    "column.propagate.source.type": "not implemented",
    "datatype.propagate.source.type": "not implemented",
    "converters": "custom converters are Java classes; not applicable",
    "event.processing.failure.handling.mode": "not implemented; errors.tolerance and the dead-letter queue apply",
    "errors.max.retries": "not implemented; failed tasks restart per the worker's restart policy",
    "retriable.restart.connector.wait.ms": "not implemented; failed tasks restart per the worker's restart policy",
    "guardrail.collections.max": "not implemented",
    "custom.metric.tags": "not implemented",
}

#: Debezium's comma-separated list keys shared by the CDC sources.
_LIST_FIELDS = (
    "table_include_list",
    "table_exclude_list",
    "column_include_list",
    "column_exclude_list",
    "skipped_operations",
    "post_processors",
)
_REGEX_FIELDS = ("table_include_list", "table_exclude_list", "column_include_list", "column_exclude_list")


class CdcSourceConfig(PluginConfig):
    """Checks of Debezium's shared keys, for a CDC source's config model to extend (no fields)."""

    @field_validator(*_LIST_FIELDS, mode="before", check_fields=False)
    @classmethod
    def _shared_lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator(*_REGEX_FIELDS, check_fields=False)
    @classmethod
    def _shared_regexes(cls, value: list[str]) -> list[str]:
        return check_regexes(value)

    @field_validator("decimal_handling_mode", check_fields=False)
    @classmethod
    def _decimal_mode(cls, value: str) -> str:
        if value not in ("precise", "double", "string"):
            raise ValueError("must be one of precise, double, string")
        return value

    @field_validator("schema_name_adjustment_mode", check_fields=False)
    @classmethod
    def _schema_name_mode(cls, value: str) -> str:
        if value not in ("none", "avro", "avro_unicode"):
            raise ValueError("must be one of none, avro, avro_unicode")
        return value

    @field_validator("field_name_adjustment_mode", check_fields=False)
    @classmethod
    def _field_name_mode(cls, value: str) -> str:
        if value != "none":
            raise ValueError(
                "only none is supported: column names are kept; set scrub.invalid.names=true on the "
                "AvroConverter to adjust them in Avro schemas"
            )
        return value

    @field_validator("time_precision_mode", check_fields=False)
    @classmethod
    def _time_mode(cls, value: str) -> str:
        if value not in ("adaptive", "adaptive_time_microseconds", "connect"):
            raise ValueError("must be one of adaptive, adaptive_time_microseconds, connect")
        return value

    @field_validator("skipped_operations", check_fields=False)
    @classmethod
    def _operations(cls, value: list[str]) -> list[str]:
        if value == ["none"]:
            return []
        bad = [v for v in value if v not in ("c", "u", "d", "t")]
        if bad:
            raise ValueError(f"unknown operations {bad}; use c, u, d, t or none")
        return value

    @field_validator("signal_enabled_channels", "notification_enabled_channels", mode="before", check_fields=False)
    @classmethod
    def _channels(cls, value: Any, info: ValidationInfo) -> Any:
        known = ("source", "kafka") if info.field_name == "signal_enabled_channels" else ("sink", "log")
        value = [str(v).lower() for v in split_list(value)]
        unknown = [v for v in value if v not in known]
        if unknown:
            raise ValueError(f"unknown channel(s) {', '.join(unknown)}; the channels are {', '.join(known)}")
        return value

    @field_validator("signal_consumer", check_fields=False)
    @classmethod
    def _consumer_settings(cls, value: dict[str, str]) -> dict[str, str]:
        """Each ``signal.consumer.*`` setting must be one librdkafka knows: a name only Java's client
        has (``sasl.jaas.config``, ``ssl.truststore.location``) fails here, not in the signal thread."""
        if not value:
            return value
        check_denied(value, "signal.consumer.")  # before any client is built from them
        from confluent_kafka import Consumer, KafkaException  # the worker's client; loaded only when used

        try:
            Consumer({"group.id": "sluice-config-check", **value}).close()
        except (KafkaException, ValueError, TypeError) as exc:
            named = [setting for setting in value if f'"{setting}"' in str(exc)]
            key = f"signal.consumer.{(named or list(value))[0]}"
            raise ConfigError(f"Invalid configuration: {key}: {exc}", key=key) from None
        return value

    @field_validator("signal_kafka_bootstrap_servers", "notification_sink_topic_name", check_fields=False)
    @classmethod
    def _channel_needs(cls, value: str, info: ValidationInfo) -> str:
        channels, needed = (
            ("signal_enabled_channels", "kafka")
            if info.field_name == "signal_kafka_bootstrap_servers"
            else ("notification_enabled_channels", "sink")
        )
        if not value and needed in info.data.get(channels, ()):
            # A default is validated under the attribute's name; the error names the dotted key.
            key = dotted(info.field_name or "")
            raise ConfigError(f"Invalid configuration: {key}: required when the {needed} channel is enabled", key=key)
        return value

    @field_validator("message_key_columns", check_fields=False)
    @classmethod
    def _key_columns(cls, value: str) -> str:
        parse_message_key_columns(value)
        return value

    # -- the task config ---------------------------------------------------------------------------

    @classmethod
    def known_keys(cls) -> set[str]:
        return {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)

    @classmethod
    def from_task_config(cls, raw: Mapping[str, Any]) -> Self:
        """Parse a task configuration, ignoring the keys the runtime adds (``name``, ``task.class``, …);
        the prefixed keys (``signal.consumer.*``) are the model's own."""
        prefixes = tuple(cls.prefixed_keys)
        ignore = {k for k in set(raw) - cls.known_keys() if not (prefixes and k.startswith(prefixes))}
        config: Self = cls.parse(raw, ignore=ignore)
        return config

    def to_task_config(self) -> dict[str, Any]:
        """Dotted keys, lists comma-joined (``skipped.operations`` empty as ``none``), secrets in
        clear (the runtime masks task configs)."""
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json", exclude=set(self.prefixed_keys.values()))
        data.update(self.prefixed_flat(self))
        for key, value in list(data.items()):
            if isinstance(value, list):
                data[key] = (
                    ",".join(str(v) for v in value) if value else ("none" if key == "skipped.operations" else "")
                )
        data.update(self.secrets_in_clear())
        return data

    def secrets_in_clear(self) -> dict[str, str]:
        """The secret keys' values, which :meth:`to_task_config` writes in clear (none by default)."""
        return {}


class SignalingCdcConfig(CdcSourceConfig):
    """:class:`CdcSourceConfig` with Debezium's signal, notification and incremental snapshot keys,
    which the database sources share (each adds ``signal.data.collection``, named its own way)."""

    incremental_snapshot_chunk_size: int = Field(1024, ge=1, description="Rows per chunk of an incremental snapshot.")
    signal_enabled_channels: list[str] = Field(
        default_factory=lambda: ["source"],
        description="Channels signals are read from: source (the signal.data.collection table), kafka.",
    )
    signal_kafka_topic: str = Field("", description="Topic of Kafka signals (default <topic.prefix>-signal).")
    signal_kafka_bootstrap_servers: str = Field(
        "", validate_default=True, description="Kafka cluster of the signal topic (required with the kafka channel)."
    )
    signal_kafka_group_id: str = Field(
        "kafka-signal", alias="signal.kafka.groupId", description="Consumer group of the Kafka signal consumer."
    )
    signal_consumer: dict[str, str] = Field(
        default_factory=dict,
        description="signal.consumer.<setting>: librdkafka settings of the Kafka signal consumer (security, SASL, ...).",
    )
    notification_enabled_channels: list[str] = Field(
        default_factory=list, description="Where snapshot notifications go: sink (a topic), log (an INFO line)."
    )
    notification_sink_topic_name: str = Field(
        "", validate_default=True, description="Topic of notifications (required with the sink channel)."
    )



def check_regexes(value: list[str]) -> list[str]:
    """Each pattern compiles, or the error names it."""
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return value
