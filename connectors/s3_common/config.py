"""Configuration keys shared by the S3 sink and source: the bucket, the endpoint, credentials,
the format and the layout (Confluent's names, so an existing connector config carries over)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import ConfigError, PluginConfig
from sluice.connectors.s3_common.formats import FormatSettings, short_format_name
from sluice.connectors.s3_common.layout import ObjectLayout
from sluice.connectors.s3_common.partitioners import PartitionerSettings, short_partitioner_name
from sluice.connectors.s3_common.storage import S3Connection


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class S3CommonConfig(PluginConfig):
    """Keys both S3 connectors accept."""

    s3_bucket_name: str = Field(min_length=3, description="The bucket to write to / read from.")
    s3_region: str = Field("us-west-2", description="The AWS region of the bucket.")
    store_url: str | None = Field(
        None, description="Endpoint of an S3-compatible service (MinIO, S3Proxy, ...); empty for AWS."
    )
    s3_path_style_access_enabled: bool = Field(
        True, description="Path-style bucket addressing (needed by most S3-compatible servers)."
    )
    aws_access_key_id: SecretStr | None = Field(
        None, description="Access key; without it the default AWS credential chain is used."
    )
    aws_secret_access_key: SecretStr | None = Field(
        None, validate_default=True, description="Secret key matching aws.access.key.id."
    )
    s3_credentials_provider_class: str | None = Field(
        None, description="Accepted for compatibility; Sluice always uses boto3's default chain when no keys are set."
    )
    s3_part_retries: int = Field(
        3, ge=0, description="Retries of a failed S3 request (throttling, 5xx, timeouts) before the task backs off."
    )
    s3_retry_backoff_ms: int = Field(
        200, ge=0, description="Accepted for compatibility; botocore's standard retry mode sets the backoff."
    )
    storage_class: str = Field("io.confluent.connect.s3.storage.S3Storage", description="Only S3Storage is supported.")
    format_class: str = Field(
        description="JsonFormat, ParquetFormat, AvroFormat or ByteArrayFormat (Confluent's class names or json/parquet/avro/bytearray)."
    )
    topics_dir: str = Field("topics", description="Top-level prefix of the objects.")
    directory_delim: str = Field("/", min_length=1, description="Delimiter between the key's directories.")
    file_delim: str = Field(
        "+", min_length=1, description="Delimiter between topic, partition and offset in object names."
    )
    filename_offset_zero_pad_width: int = Field(
        10, ge=0, description="Zero-pad the start offset to this width, so names sort by offset."
    )
    s3_compression_type: Literal["none", "gzip"] = Field(
        "none", description="Compression of JSON and ByteArray objects."
    )
    s3_compression_level: int = Field(-1, ge=-1, le=9, description="gzip level (-1: the default, 6).")
    parquet_codec: Literal["none", "snappy", "gzip", "zstd", "lz4", "brotli"] = Field(
        "snappy", description="Parquet compression codec."
    )
    avro_codec: Literal["null", "deflate", "snappy", "bzip2", "xz", "zstandard"] = Field(
        "null", description="Avro container codec."
    )
    format_bytearray_extension: str = Field(".bin", description="Extension of ByteArrayFormat objects.")
    format_bytearray_separator: str | None = Field(
        None, description="Separator between ByteArrayFormat values (default a newline)."
    )
    partitioner_class: str = Field(
        "io.confluent.connect.storage.partitioner.DefaultPartitioner",
        description="Default, Field, TimeBased, Daily or Hourly partitioner.",
    )
    partition_field_name: list[str] = Field(
        default_factory=list, description="FieldPartitioner: the fields whose values name the directory."
    )
    path_format: str = Field(
        "", description="TimeBasedPartitioner: Joda-Time pattern of the directory, e.g. 'year'=YYYY/'month'=MM."
    )
    partition_duration_ms: int = Field(-1, description="TimeBasedPartitioner: the length of a time bucket.")
    timestamp_extractor: str = Field("Wallclock", description="Record, RecordField or Wallclock.")
    timestamp_field: str = Field("timestamp", description="RecordField: the (dotted) field that holds the time.")
    timezone: str = Field("UTC", description="Time zone of the time buckets and of rotate.schedule.interval.ms.")
    locale: str = Field("en", description="Locale of textual path.format fields (only English names are produced).")

    @field_validator("partition_field_name", mode="before")
    @classmethod
    def _split_fields(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("format_class")
    @classmethod
    def _known_format(cls, value: str) -> str:
        try:
            short_format_name(value)
        except ConfigError as exc:
            raise PydanticCustomError("unknown_format", str(exc)) from None
        return value

    @field_validator("partitioner_class")
    @classmethod
    def _known_partitioner(cls, value: str) -> str:
        try:
            short_partitioner_name(value)
        except ConfigError as exc:
            raise PydanticCustomError("unknown_partitioner", str(exc)) from None
        return value

    @field_validator("aws_secret_access_key")
    @classmethod
    def _both_keys(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if (value is None) != (info.data.get("aws_access_key_id") is None):
            raise PydanticCustomError(
                "credentials", "aws.access.key.id and aws.secret.access.key must be set together (or neither)"
            )
        return value

    @field_validator("storage_class")
    @classmethod
    def _s3_storage(cls, value: str) -> str:
        if value.rsplit(".", 1)[-1] != "S3Storage":
            raise ValueError("only io.confluent.connect.s3.storage.S3Storage is supported")
        return value

    # -- derived settings ---------------------------------------------------------------------

    def connection(self) -> S3Connection:
        key = self.aws_access_key_id.get_secret_value() if self.aws_access_key_id else None
        secret = self.aws_secret_access_key.get_secret_value() if self.aws_secret_access_key else None
        return S3Connection(
            bucket=self.s3_bucket_name,
            region=self.s3_region,
            endpoint_url=self.store_url or None,
            path_style=self.s3_path_style_access_enabled,
            access_key_id=key,
            secret_access_key=secret,
            max_attempts=self.s3_part_retries + 1,
        )

    def layout(self) -> ObjectLayout:
        return ObjectLayout(self.topics_dir, self.directory_delim, self.file_delim, self.filename_offset_zero_pad_width)

    def format_settings(self, **extra: Any) -> FormatSettings:
        separator = b"\n" if self.format_bytearray_separator is None else self.format_bytearray_separator.encode()
        return FormatSettings(
            format=self.format_class,
            compression=self.s3_compression_type,
            compression_level=self.s3_compression_level,
            parquet_codec=self.parquet_codec,
            avro_codec=self.avro_codec,
            bytearray_extension=self.format_bytearray_extension,
            bytearray_separator=separator,
            **extra,
        )

    def partitioner_settings(self) -> PartitionerSettings:
        return PartitionerSettings(
            partitioner_class=self.partitioner_class,
            field_names=tuple(self.partition_field_name),
            path_format=self.path_format,
            partition_duration_ms=self.partition_duration_ms,
            timestamp_extractor=self.timestamp_extractor,
            timestamp_field=self.timestamp_field,
            timezone=self.timezone,
            locale=self.locale,
            directory_delim=self.directory_delim,
        )

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, ignore: frozenset[str] | set[str] = frozenset()) -> Any:
        """Validate like :meth:`PluginConfig.parse`; errors on defaulted fields name the dotted key too."""
        try:
            return super().parse(raw, ignore=ignore)
        except ConfigError as exc:
            info = cls.model_fields.get(exc.key or "")
            if info is None or not info.alias:
                raise
            raise ConfigError(str(exc).replace(f"{exc.key}:", f"{info.alias}:"), key=info.alias) from None

    # -- task configurations ------------------------------------------------------------------

    @classmethod
    def from_task_config(cls, raw: Mapping[str, Any]) -> Any:
        """Parse a task configuration, ignoring the keys the runtime adds (``name``, ``task.class``, …)."""
        known = {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)
        return cls.parse(raw, ignore=set(raw) - known)

    def to_task_config(self) -> dict[str, Any]:
        """The task configuration, secrets included in clear (the runtime masks them in its output)."""
        out = self.model_dump(by_alias=True, exclude_none=True)
        for key, value in list(out.items()):
            if isinstance(value, SecretStr):
                out[key] = value.get_secret_value()
            elif isinstance(value, list):
                out[key] = ",".join(str(v) for v in value)
        return out
