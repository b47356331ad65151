"""Configuration of the S3 source connector in restore mode (Confluent's ``S3SourceConnector`` keys)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from connectors.s3_common.config import S3CommonConfig

#: Task-only key: the topics one task restores (the connector splits ``topics`` over its tasks).
TASK_TOPICS_KEY = "s3.source.task.topics"


class S3SourceConfig(S3CommonConfig):
    """Mirror the sink's format, partitioner and layout keys; the source reads what it wrote."""

    mode: Literal["RESTORE_BACKUP"] = Field(
        "RESTORE_BACKUP",
        description="RESTORE_BACKUP replays what the S3 sink wrote into the original topic partitions.",
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

    @field_validator("topics", mode="before")
    @classmethod
    def _split_topics(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value
