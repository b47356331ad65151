"""Configuration of the FileStream source connector (Kafka Connect's ``FileStreamSourceConnector`` keys)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import LocalPath, PluginConfig

# Kafka's own rule for topic names (``org.apache.kafka.common.internals.Topic.validate``).
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249


def check_topic_name(topic: str) -> str:
    """Return ``topic`` if Kafka would accept it as a topic name, else raise ``ValueError`` saying why."""
    if not topic:
        raise ValueError("must be a non-empty topic name")
    if topic in (".", ".."):
        raise ValueError(f"topic name cannot be {topic!r}")
    if len(topic) > _MAX_TOPIC_LENGTH:
        raise ValueError(f"topic name is longer than {_MAX_TOPIC_LENGTH} characters")
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise ValueError(f"topic name {topic!r} may contain only ASCII letters, digits, '.', '_' and '-'")
    return topic


class FileStreamSourceConfig(PluginConfig):
    """``file``, ``topic`` and ``batch.size``, with Kafka Connect's defaults."""

    # LocalPath: the worker confines it to connector.allowed.paths, or any REST caller could publish
    # /etc/shadow to a topic.
    file: LocalPath = Field(
        "",
        description="The file to read lines from; empty or absent reads standard input. "
        "Must lie within the worker's connector.allowed.paths (by default <state.dir>/data).",
    )
    topic: str = Field(description="The topic to publish the lines to.")
    batch_size: int = Field(
        2000,
        ge=1,
        description="The largest number of records a single poll returns.",
    )

    @field_validator("file", mode="before")
    @classmethod
    def _none_is_stdin(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("topic")
    @classmethod
    def _legal_topic(cls, value: str) -> str:
        try:
            return check_topic_name(value)
        except ValueError as exc:
            # A custom error keeps pydantic's "Value error, " prefix out of the user's message.
            raise PydanticCustomError("invalid_topic", str(exc)) from None

    @classmethod
    def from_task_config(cls, raw: Mapping[str, Any]) -> FileStreamSourceConfig:
        """Parse a task configuration, ignoring the keys the runtime adds (``name``, ``task.class``, …).

        The connector already rejected unknown keys when it was created; a task must not fail
        because the runtime passes along its own bookkeeping keys.
        """
        known = {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)
        return cls.parse(raw, ignore=set(raw) - known)  # type: ignore[no-any-return]

    def to_task_config(self) -> dict[str, Any]:
        """The task configuration: the connector's keys in Connect's dotted spelling."""
        return self.model_dump(by_alias=True)
