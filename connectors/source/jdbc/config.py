"""Configuration of the JDBC source (Confluent ``JdbcSourceConnector`` keys)."""

from __future__ import annotations

import enum
import re

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import split_list
from sluice.connectors.jdbc_common.config import JdbcConnectionConfig
from sluice.connectors.jdbc_common.types import NumericMapping


class Mode(enum.StrEnum):
    BULK = "bulk"
    INCREMENTING = "incrementing"
    TIMESTAMP = "timestamp"
    TIMESTAMP_INCREMENTING = "timestamp+incrementing"

    @property
    def uses_timestamp(self) -> bool:
        return self in (Mode.TIMESTAMP, Mode.TIMESTAMP_INCREMENTING)

    @property
    def uses_incrementing(self) -> bool:
        return self in (Mode.INCREMENTING, Mode.TIMESTAMP_INCREMENTING)


class JdbcSourceConfig(JdbcConnectionConfig):
    """What to read and how often; the defaults are Confluent's."""

    mode: Mode = Field(
        description="bulk (whole table each poll), incrementing (new rows by a strictly increasing column), "
        "timestamp (new and changed rows by timestamp) or timestamp+incrementing (both, for exact resumption)."
    )
    topic_prefix: str = Field(description="Topic = prefix + table name; with 'query', the topic is exactly the prefix.")
    query: str = Field("", description="Read the result of this query instead of whole tables (one task).")
    query_suffix: str = Field("", description="Appended to every generated query (e.g. a locking clause).")
    incrementing_column_name: str = Field(
        "",
        validate_default=True,
        description="The strictly increasing column; empty: the table's auto-increment integer primary key.",
    )
    timestamp_column_name: list[str] = Field(
        default_factory=list,
        validate_default=True,
        description="The timestamp column(s); several are combined with COALESCE, in order.",
    )
    timestamp_initial: int | None = Field(
        None, description="Epoch milliseconds to start from when no offset is stored; -1 means now; empty: all rows."
    )
    timestamp_delay_interval_ms: int = Field(
        0, ge=0, description="Leave out rows newer than now minus this delay, so open transactions can commit first."
    )
    table_include_list: list[str] = Field(
        default_factory=list, description="Regular expressions of the tables to read."
    )
    table_exclude_list: list[str] = Field(
        default_factory=list, description="Regular expressions of tables to leave out."
    )
    table_whitelist: list[str] = Field(default_factory=list, description="Legacy: the names of the tables to read.")
    table_blacklist: list[str] = Field(default_factory=list, description="Legacy: the names of tables to leave out.")
    schema_pattern: str | None = Field(
        None, description="A SQL LIKE pattern of the schemas to read tables from; empty: every non-system schema."
    )
    catalog_pattern: str | None = Field(
        None, description="Accepted for Confluent compatibility (the URL names the database)."
    )
    table_types: list[str] = Field(default_factory=lambda: ["TABLE"], description="TABLE and/or VIEW.")
    table_poll_interval_ms: int = Field(60_000, ge=0, description="How often to look for added or dropped tables.")
    poll_interval_ms: int = Field(5000, ge=0, description="How often each table is queried.")
    batch_max_rows: int = Field(1000, ge=1, description="Most rows returned by one poll.")
    numeric_mapping: NumericMapping = Field(
        NumericMapping.NONE, description="none, best_fit, best_fit_eager_double or precision_only."
    )
    validate_non_null: bool = Field(True, description="Refuse nullable incrementing and timestamp columns.")

    @field_validator("mode", "numeric_mapping", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        if value is None:
            return NumericMapping.NONE
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator(
        "timestamp_column_name",
        "table_include_list",
        "table_exclude_list",
        "table_whitelist",
        "table_blacklist",
        mode="before",
    )
    @classmethod
    def _lists(cls, value: object) -> object:
        return split_list(value)

    @field_validator("table_types", mode="before")
    @classmethod
    def _types(cls, value: object) -> object:
        items = split_list(value)
        if isinstance(items, list):
            items = [i.upper() for i in items if isinstance(i, str)] or ["TABLE"]
            unknown = sorted(set(items) - {"TABLE", "VIEW"})
            if unknown:
                raise PydanticCustomError(
                    "table_types", "unsupported table types {t}: use TABLE and/or VIEW", {"t": unknown}
                )
        return items

    @field_validator("table_include_list", "table_exclude_list")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise PydanticCustomError(
                    "invalid_regex", "{p!r} is not a valid regular expression: {e}", {"p": pattern, "e": str(exc)}
                ) from None
        return value

    @field_validator("timestamp_initial", mode="before")
    @classmethod
    def _empty_initial(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("timestamp_column_name")
    @classmethod
    def _timestamp_needed(cls, value: list[str], info: ValidationInfo) -> list[str]:
        mode = info.data.get("mode")
        if isinstance(mode, Mode) and mode.uses_timestamp and not value:
            raise PydanticCustomError("timestamp", "is required with mode={mode}", {"mode": mode.value})
        return value

    @field_validator("incrementing_column_name")
    @classmethod
    def _incrementing_for_query(cls, value: str, info: ValidationInfo) -> str:
        mode = info.data.get("mode")
        if isinstance(mode, Mode) and mode.uses_incrementing and not value and info.data.get("query"):
            raise PydanticCustomError(
                "incrementing", "is required with mode={mode} and a query (it cannot be detected)", {"mode": mode.value}
            )
        return value

    @field_validator("table_whitelist")
    @classmethod
    def _not_both_includes(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if value and info.data.get("table_include_list"):
            raise PydanticCustomError("tables", "cannot be combined with table.include.list")
        return value

    @field_validator("table_blacklist")
    @classmethod
    def _not_both_excludes(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if value and info.data.get("table_exclude_list"):
            raise PydanticCustomError("tables", "cannot be combined with table.exclude.list")
        if value and info.data.get("table_whitelist"):
            raise PydanticCustomError("tables", "table.whitelist and table.blacklist cannot both be set")
        return value

    @model_validator(mode="after")
    def _query_or_tables(self) -> JdbcSourceConfig:
        if self.query and (
            self.table_include_list or self.table_whitelist or self.table_exclude_list or self.table_blacklist
        ):
            raise PydanticCustomError("query", "'query' cannot be combined with table include/exclude lists")
        return self


class JdbcSourceTaskConfig(JdbcSourceConfig):
    """A task's configuration: the connector's plus the tables it reads."""

    tables: list[str] = Field(default_factory=list, description="The fully qualified tables this task reads.")

    @field_validator("tables", mode="before")
    @classmethod
    def _table_list(cls, value: object) -> object:
        return split_list(value)
