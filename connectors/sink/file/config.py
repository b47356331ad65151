"""Configuration of the FileStream sink connector (Kafka Connect's ``FileStreamSinkConnector`` keys)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_serializer, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import ConfigError, LocalPath, PluginConfig


class FileStreamSinkConfig(PluginConfig):
    """``file`` plus the standard sink keys ``topics`` / ``topics.regex`` (exactly one of them).

    The runtime subscribes to the topics itself; the model accepts and checks them so that a
    connector created with neither (or both) is refused up front with a clear message.
    """

    # LocalPath: the worker confines it to connector.allowed.paths, or any REST caller could append
    # chosen bytes to any file the worker's user may write (~/.ssh/authorized_keys, a crontab).
    file: LocalPath = Field(
        "",
        description="The file to append the records to; empty or absent writes to standard output. "
        "Must lie within the worker's connector.allowed.paths (by default <state.dir>/data).",
    )
    topics: list[str] | None = Field(
        None,
        description="Comma-separated topics to consume. Exactly one of 'topics' and 'topics.regex' is required.",
    )
    topics_regex: str | None = Field(
        None,
        description="A regular expression of the topics to consume. Exactly one of 'topics' and 'topics.regex' is required.",
    )

    @field_validator("file", mode="before")
    @classmethod
    def _none_is_stdout(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("topics", mode="before")
    @classmethod
    def _split_topics(cls, value: Any) -> Any:
        # Connect's LIST type: "a, b" and ["a", "b"] mean the same; empty items are dropped.
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, (list, tuple)):
            items = [item.strip() if isinstance(item, str) else item for item in value]
            items = [item for item in items if item != ""]
            return items or None
        return value

    @field_validator("topics")
    @classmethod
    def _no_duplicates(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            duplicates = sorted({t for t in value if value.count(t) > 1})
            if duplicates:
                raise PydanticCustomError(
                    "duplicate_topics", "lists the same topic more than once: {dups}", {"dups": ", ".join(duplicates)}
                )
        return value

    @field_validator("topics_regex", mode="before")
    @classmethod
    def _empty_regex_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("topics_regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise PydanticCustomError(
                    "invalid_regex", "is not a valid regular expression: {error}", {"error": str(exc)}
                ) from None
        return value

    @model_validator(mode="after")
    def _exactly_one_topic_source(self) -> FileStreamSinkConfig:
        if self.topics is None and self.topics_regex is None:
            raise PydanticCustomError("topics", "Must configure one of 'topics' or 'topics.regex'")
        if self.topics is not None and self.topics_regex is not None:
            raise PydanticCustomError(
                "topics", "'topics' and 'topics.regex' are mutually exclusive options, but both are set"
            )
        return self

    @field_serializer("topics")
    def _join_topics(self, value: list[str] | None) -> str | None:
        # Task configurations carry Connect's string form of a LIST.
        return None if value is None else ",".join(value)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, ignore: frozenset[str] | set[str] = frozenset()) -> Any:
        """Validate like :meth:`PluginConfig.parse`, attaching the topics check to the ``topics`` key."""
        try:
            return super().parse(raw, ignore=ignore)
        except ConfigError as exc:
            if exc.key == "<config>":  # the model-level check has no field of its own
                raise ConfigError(str(exc).replace("<config>: ", "topics: ", 1), key="topics") from None
            raise

    @classmethod
    def from_task_config(cls, raw: Mapping[str, Any]) -> FileStreamSinkConfig:
        """Parse a task configuration, ignoring the keys the runtime adds (``name``, ``task.class``, …)."""
        known = {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)
        return cls.parse(raw, ignore=set(raw) - known)  # type: ignore[no-any-return]

    def to_task_config(self) -> dict[str, Any]:
        """The task configuration: the connector's keys in Connect's dotted spelling."""
        return self.model_dump(by_alias=True, exclude_none=True)
