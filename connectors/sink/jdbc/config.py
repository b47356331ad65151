"""Configuration of the JDBC sink (Confluent ``JdbcSinkConnector`` keys)."""

from __future__ import annotations

import enum
import re

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import split_list
from sluice.connectors.jdbc_common.config import JdbcConnectionConfig

#: The column names ``pk.mode=kafka`` uses when ``pk.fields`` is empty.
KAFKA_PK_FIELDS = ("__connect_topic", "__connect_partition", "__connect_offset")
#: The column name of a primitive record key when ``pk.fields`` is empty.
DEFAULT_KEY_FIELD = "__connect_key"


class InsertMode(enum.StrEnum):
    INSERT = "insert"
    UPSERT = "upsert"
    UPDATE = "update"


class PkMode(enum.StrEnum):
    NONE = "none"
    KAFKA = "kafka"
    RECORD_KEY = "record_key"
    RECORD_VALUE = "record_value"


class JdbcSinkConfig(JdbcConnectionConfig):
    """Where and how records are written; the defaults are Confluent's."""

    topics: list[str] | None = Field(None, description="Topics to consume (or 'topics.regex').")
    topics_regex: str | None = Field(None, description="A regular expression of topics to consume.")
    pk_mode: PkMode = Field(
        PkMode.NONE,
        description="Where the primary key comes from: none, kafka (topic/partition/offset), record_key or record_value.",
    )
    pk_fields: list[str] = Field(
        default_factory=list,
        description="The primary key columns; their meaning depends on pk.mode (empty: all key or value fields).",
    )
    insert_mode: InsertMode = Field(InsertMode.INSERT, description="insert, upsert (idempotent by key) or update.")
    fields_whitelist: list[str] = Field(default_factory=list, description="Value fields to write (empty: all of them).")
    table_name_format: str = Field("${topic}", description="The table of a topic; '${topic}' is replaced by its name.")
    auto_create: bool = Field(False, description="Create a missing table from the record schema.")
    auto_evolve: bool = Field(False, description="Add columns for new optional or defaulted fields.")
    delete_enabled: bool = Field(False, description="Delete the row of a tombstone's key (needs pk.mode=record_key).")
    batch_size: int = Field(3000, ge=1, description="Most records written in one transaction.")
    max_retries: int = Field(10, ge=0, description="Retries after a connection failure before the task fails.")
    retry_backoff_ms: int = Field(3000, ge=0, description="Wait before retrying after a connection failure, in ms.")

    @field_validator("topics", "pk_fields", "fields_whitelist", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return split_list(value)

    @field_validator("topics")
    @classmethod
    def _empty_topics(cls, value: list[str] | None) -> list[str] | None:
        return value or None

    @field_validator("topics_regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        try:
            re.compile(value)
        except re.error as exc:
            raise PydanticCustomError(
                "invalid_regex", "is not a valid regular expression: {e}", {"e": str(exc)}
            ) from None
        return value

    @field_validator("pk_mode", "insert_mode", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("pk_fields")
    @classmethod
    def _kafka_fields(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("pk_mode") is PkMode.KAFKA and value and len(value) != 3:
            raise PydanticCustomError(
                "pk_fields", "with pk.mode=kafka must name exactly 3 columns (topic, partition, offset) or be empty"
            )
        return value

    @field_validator("insert_mode")
    @classmethod
    def _mode_needs_key(cls, value: InsertMode, info: ValidationInfo) -> InsertMode:
        if value is not InsertMode.INSERT and info.data.get("pk_mode") in (PkMode.NONE, None):
            raise PydanticCustomError(
                "insert_mode", "insert.mode={mode} needs a primary key: set pk.mode", {"mode": value.value}
            )
        return value

    @field_validator("table_name_format")
    @classmethod
    def _table_format(cls, value: str) -> str:
        if not value:
            raise PydanticCustomError("table_name_format", "must not be empty")
        return value

    @field_validator("delete_enabled")
    @classmethod
    def _delete_needs_record_key(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("pk_mode") is not PkMode.RECORD_KEY:
            raise PydanticCustomError("delete_enabled", "delete.enabled=true requires pk.mode=record_key")
        return value

    @model_validator(mode="after")
    def _one_topic_source(self) -> JdbcSinkConfig:
        if self.topics is not None and self.topics_regex is not None:
            raise PydanticCustomError(
                "topics", "'topics' and 'topics.regex' are mutually exclusive options, but both are set"
            )
        return self

    def table_name(self, topic: str) -> str:
        """The destination table of ``topic``."""
        return self.table_name_format.replace("${topic}", topic)
