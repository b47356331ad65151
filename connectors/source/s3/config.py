"""Configuration of the S3 source connector, restore and generic modes (Confluent's ``S3SourceConnector`` keys)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import ConfigError
from sluice.connectors.s3_common.config import S3CommonConfig
from sluice.connectors.source.s3.generic import parse_topic_regex_list

#: Task-only key: the topics one task restores (the connector splits ``topics`` over its tasks).
TASK_TOPICS_KEY = "s3.source.task.topics"
#: Task-only keys of generic mode: this task's index and the number of tasks sharing the objects.
TASK_INDEX_KEY = "s3.source.task.index"
TASK_COUNT_KEY = "s3.source.task.count"


class S3SourceConfig(S3CommonConfig):
    """Restore mode mirrors the sink's format, partitioner and layout keys and reads what it wrote;
    generic mode reads any objects under ``topics.dir`` and maps their keys to topics."""

    mode: Literal["RESTORE_BACKUP", "GENERIC"] = Field(
        "RESTORE_BACKUP",
        description=(
            "RESTORE_BACKUP replays what the S3 sink wrote into the original topic partitions; "
            "GENERIC reads any objects whose keys match topic.regex.list."
        ),
    )
    topic_regex_list: list[str] = Field(
        default_factory=list,
        validate_default=True,
        description=(
            "GENERIC mode: comma-separated <topic>:<regex> pairs; an object whose key under topics.dir fully "
            "matches a regex is read into that topic (the first matching pair wins)."
        ),
    )
    topics: list[str] = Field(
        default_factory=list, description="Topics to restore; empty restores every topic under topics.dir."
    )
    s3_poll_interval_ms: int = Field(60_000, ge=100, description="How often to list the bucket for new objects.")
    record_batch_max_size: int = Field(2_000, ge=1, description="The largest number of records one poll returns.")
    keys_format_class: str = Field(
        "JsonFormat", description="Format of the sink's keys sidecars (keys.format.class of the sink)."
    )
    # The sink's own keys, accepted so a sink configuration can be reused as is.
    flush_size: int | None = Field(None, description="Ignored (a sink key).")
    store_kafka_keys: bool | None = Field(None, description="Ignored: keys sidecars are read when present.")
    store_kafka_headers: bool | None = Field(None, description="Ignored: headers sidecars are read when present.")
    store_kafka_timestamps: bool | None = Field(None, description="Ignored: timestamps sidecars are read when present.")
    store_kafka_offsets: bool | None = Field(None, description="Ignored: offsets sidecars are read when present.")
    s3_upload_threads: int | None = Field(None, description="Ignored (a sink key).")

    @field_validator("topics", "topic_regex_list", mode="before")
    @classmethod
    def _split_lists(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @field_validator("topic_regex_list")
    @classmethod
    def _pairs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("mode") == "GENERIC" and not value:
            raise PydanticCustomError("generic_topics", "GENERIC mode needs at least one <topic>:<regex> pair")
        try:
            parse_topic_regex_list(value)
        except ConfigError as exc:
            raise PydanticCustomError("topic_regex", str(exc)) from None
        return value

    def generic_prefix(self) -> str:
        """Where generic mode lists objects: ``topics.dir`` and a delimiter, or the whole bucket."""
        return f"{self.topics_dir}{self.directory_delim}" if self.topics_dir else ""
