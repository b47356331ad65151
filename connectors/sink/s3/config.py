"""Configuration of the S3 sink connector (Confluent's ``S3SinkConnector`` keys)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import ConfigError
from sluice.connectors.s3_common.config import S3CommonConfig
from sluice.connectors.s3_common.formats import short_format_name
from sluice.connectors.s3_common.storage import MIN_PART_SIZE


class S3SinkConfig(S3CommonConfig):
    """Where objects go, how they are encoded and named, and when they are committed."""

    flush_size: int = Field(ge=1, description="Records per Kafka partition after which every open object is committed.")
    rotate_interval_ms: int = Field(
        -1,
        description="Commit when a record's time is this far past the first record's (the partitioner's timestamp extractor); -1 disables.",
    )
    rotate_schedule_interval_ms: int = Field(
        -1,
        description="Commit open objects on this wall-clock schedule (aligned to 'timezone'), even without traffic; -1 disables.",
    )
    s3_part_size: int = Field(
        25 * 1024 * 1024,
        ge=MIN_PART_SIZE,
        le=2**31 - 1,
        description="Multipart part size: an open object buffers at most this much before a part is uploaded.",
    )
    s3_upload_threads: int = Field(
        2,
        ge=0,
        le=16,
        description=(
            "Sluice addition: threads that complete uploads of rotated objects while the task keeps encoding; "
            "0 uploads on the task thread. Offsets still advance only over completed objects."
        ),
    )
    partitioner_max_open_files: int = Field(
        100,
        ge=1,
        description="Open objects per Kafka partition; opening one more commits the oldest first, bounding memory.",
    )
    behavior_on_null_values: Literal["fail", "ignore", "write"] = Field(
        "fail",
        description="Tombstones: fail the task, skip them, or write them (JSON null / empty bytes) under tombstone.encoded.partition.",
    )
    tombstone_encoded_partition: str = Field(
        "tombstone", description="Directory of tombstones when behavior.on.null.values=write."
    )
    store_kafka_keys: bool = Field(
        False, description="Also write each object's record keys to a '.keys' sidecar object."
    )
    store_kafka_headers: bool = Field(
        False, description="Also write each object's record headers to a '.headers.json' sidecar object."
    )
    store_kafka_timestamps: bool = Field(
        False,
        description="Sluice addition: also write record timestamps to a '.timestamps.json' sidecar (the S3 source restores them).",
    )
    store_kafka_offsets: bool | None = Field(
        None,
        description=(
            "Sluice addition: also write record offsets to a '.offsets.json' sidecar, so the S3 source restores "
            "interleaved objects in offset order. Default: on when a partition's objects can interleave offsets "
            "(field partitioners; time-based ones without rotate.interval.ms), off otherwise."
        ),
    )
    keys_format_class: str = Field(
        "JsonFormat", description="Format of the keys sidecar: JsonFormat, AvroFormat or ByteArrayFormat."
    )
    headers_format_class: str = Field(
        "JsonFormat", description="Format of the headers sidecar (only JsonFormat is supported)."
    )
    schema_compatibility: Literal["NONE", "BACKWARD", "FORWARD", "FULL"] = Field(
        "NONE", description="Any value-schema change commits the open objects (NONE behaviour, whatever the setting)."
    )
    report_null_values_to_dlq: bool = Field(True, description="Accepted for compatibility.")
    enable_conditional_writes: bool = Field(
        False, description="Accepted for compatibility; objects are overwritten with identical content instead."
    )
    json_decimal_format: Literal["BASE64", "NUMERIC"] = Field(
        "BASE64",
        description=(
            "How JsonFormat objects (and a JsonFormat keys sidecar) write Decimals: BASE64, the base64 of the "
            "unscaled value as Connect's JsonConverter writes it by default, or NUMERIC, a JSON number."
        ),
    )
    parquet_row_group_records: int = Field(
        50_000, ge=1, description="Sluice addition: Parquet rows buffered before they are encoded as a row group."
    )

    @field_validator("behavior_on_null_values")
    @classmethod
    def _null_values_format(cls, value: str, info: ValidationInfo) -> str:
        fmt = info.data.get("format_class")
        if value == "write" and fmt and short_format_name(fmt) in ("parquet", "avro"):
            raise PydanticCustomError("null_values", "'write' needs JsonFormat or ByteArrayFormat; use ignore or fail")
        return value

    @field_validator("keys_format_class")
    @classmethod
    def _keys_format(cls, value: str) -> str:
        try:
            fmt = short_format_name(value)
        except ConfigError as exc:
            raise PydanticCustomError("unknown_format", str(exc)) from None
        if fmt == "parquet":
            raise PydanticCustomError("keys_format", "cannot be ParquetFormat (keys are not structs)")
        return value

    @field_validator("headers_format_class")
    @classmethod
    def _headers_format(cls, value: str) -> str:
        try:
            fmt = short_format_name(value)
        except ConfigError as exc:
            raise PydanticCustomError("unknown_format", str(exc)) from None
        if fmt != "json":
            raise PydanticCustomError("headers_format", "only JsonFormat is supported")
        return value


#: Keys of Confluent's S3 sink that Sluice accepts and does not honour, with the reason.
S3_SINK_UNIMPLEMENTED_KEYS: dict[str, str] = {
    "schema.generator.class": "legacy key Confluent ignores too; schemas come from the records",
    "s3.wan.mode": "S3 transfer acceleration is not implemented",
    "s3.proxy.*": "HTTP proxies are not implemented; use the HTTPS_PROXY environment of the worker",
    "s3.ssea.name": "server-side encryption settings are not implemented; use the bucket's default encryption",
    "s3.sse.customer.key": "server-side encryption settings are not implemented; use the bucket's default encryption",
    "s3.sse.kms.key.id": "server-side encryption settings are not implemented; use the bucket's default encryption",
    "s3.acl.canned": "canned ACLs are not implemented; objects get the bucket's default ACL",
    "s3.object.tagging": "object tagging is not implemented",
    "s3.object.tagging.key.value.pairs": "object tagging is not implemented",
    "behavior.on.tagging.error": "object tagging is not implemented",
    "s3.send.digest": "not implemented",
    "retry.backoff.ms": "not implemented; s3.retry.backoff.ms governs S3 retries",
    "max.write.duration.ms": "not implemented",
    "s3.elastic.buffer.enable": "parts are buffered up to s3.part.size; elastic buffers are not implemented",
    "s3.elastic.buffer.init.capacity": "parts are buffered up to s3.part.size; elastic buffers are not implemented",
    "s3.schema.partition.affix.type": "not implemented",
    "max.files.scan.limit": "not implemented",
    "rotate.file.on.partition.change": "a file always rotates when the encoded partition changes (Confluent's default, true)",
}
