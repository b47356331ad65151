"""Backfill job specs (what ``POST /backfills`` and ``sluice backfill run job.json`` accept) and
the status a run reports.

A spec is JSON: ``id``, ``kind`` and the kind's ``source`` / ``target`` sections, plus optional
``spark`` settings and a cron ``schedule``. Keys inside sections use the dotted names of the
connectors they mirror (``connection.url``, ``s3.bucket.name``), so a connector config carries over.
Every model forbids unknown keys; :func:`check_spec` turns validation errors into
a list of :class:`SpecProblem` (each with its path), which :func:`parse_spec` raises as one
:class:`~connectors.api.ConfigError` whose message names the dotted path of each bad key.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sluice.connectors.api import ConfigError
from sluice.worker.backfill.conf_policy import kafka_option_problem, master_problem, spark_conf_problem
from sluice.worker.backfill.kind_registry import installed_kinds

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _dotted(name: str) -> str:
    return name.replace("_", ".")


def _checked_client_options(options: dict[str, str]) -> dict[str, str]:
    """Refuse Kafka client options a REST caller may not set (see :mod:`sluice.worker.backfill.conf_policy`)."""
    for key, value in options.items():
        problem = kafka_option_problem(key, value)
        if problem is not None:
            raise ValueError(problem)
    return options


class _Section(BaseModel):
    """Dotted keys (``connection.url``) in JSON, snake_case attributes in Python."""

    model_config = ConfigDict(extra="forbid", alias_generator=_dotted, populate_by_name=True, frozen=True)


# -- sources and targets ---------------------------------------------------------------------------


class JdbcTableSource(_Section):
    """A table read over JDBC with Spark's partitioned reader."""

    connection_url: str = Field(description="JDBC URL, e.g. jdbc:postgresql://db:5432/shop (as the JDBC source)")
    connection_user: str | None = Field(None, description="Database user")
    connection_password: SecretStr | None = Field(None, description="Database password")
    table: str = Field(description="Table to read, optionally schema-qualified (public.orders)")
    partition_column: str | None = Field(
        None, description="Numeric column that splits the read; default: the single-column integer primary key"
    )
    num_partitions: int = Field(4, ge=1, le=10_000, description="Parallel reads (Spark's numPartitions)")
    fetch_size: int = Field(10_000, ge=1, description="Rows fetched per round trip (JDBC fetchsize)")
    key_columns: list[str] | None = Field(None, description="Record key columns; default: the primary key")
    numeric_mapping: Literal["none", "best_fit", "best_fit_eager_double", "precision_only"] = Field(
        "none", description="numeric.mapping of the JDBC source, so schemas match the stream"
    )
    db_timezone: str = Field("UTC", description="Time zone of TIMESTAMP WITHOUT TIME ZONE values (db.timezone)")
    cdc_position: Literal["auto", "required", "off"] = Field(
        "auto",
        description="PostgreSQL: read every partition in one exported snapshot of a logical slot and record its LSN "
        "for a CDC hand-off (auto: when wal_level=logical and the user may replicate; required: fail otherwise)",
    )
    cdc_slot_name: str | None = Field(
        None,
        description="The CDC connector's slot.name: created at the read's consistent point if missing (kept for "
        "the connector); an existing one must not be past that point",
    )

    @field_validator("cdc_slot_name")
    @classmethod
    def _slot_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9_]{1,63}", value):
            raise ValueError("a replication slot name is 1-63 lower-case letters, digits and underscores")
        return value

    @field_validator("connection_url")
    @classmethod
    def _jdbc_url(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        # The kind's own URL parser (the JDBC connectors' rules), which the worker may not import.
        problem = installed_kinds().source_url_problem("jdbc_to_topic", value)
        if problem is not None:
            raise ValueError(problem)
        return value.strip()


class CdcConnectorTarget(_Section):
    """The PostgreSQL CDC connector a backfill hands off to: the body of its ``POST /connectors``."""

    name: str = Field(min_length=1, description="The connector's name (what --apply creates)")
    config: dict[str, Any] = Field(
        description="The PostgreSQL CDC connector's config (topic.prefix, table.include.list, slot.name, "
        "decimal.handling.mode, time.precision.mode, converters …); the backfill writes what its snapshot would"
    )

    @field_validator("config")
    @classmethod
    def _is_postgres_cdc(cls, value: dict[str, Any]) -> dict[str, Any]:
        connector_class = str(value.get("connector.class") or "")
        if connector_class.rsplit(".", 1)[-1] not in ("PostgresCdcSource", "PostgresConnector"):
            raise ValueError(
                "connector.class must be the PostgreSQL CDC source (PostgresCdcSource or Debezium's PostgresConnector)"
            )
        for key in ("topic.prefix", "database.dbname"):
            if not value.get(key):
                raise ValueError(f"{key} is required")
        return value


class KafkaTopicTarget(_Section):
    """Where records go: a topic, written by Spark's Kafka data source."""

    cdc: CdcConnectorTarget | None = Field(
        None,
        description="Hand off to this PostgreSQL CDC connector: write its snapshot's records (Debezium read events, "
        "its keys, schemas, conversions and partitioner) to its topic, from its slot's consistent point",
    )
    topic: str | None = Field(
        None,
        validate_default=True,
        min_length=1,
        description="Target topic (created when missing); with cdc, the CDC connector's topic",
    )

    bootstrap_servers: str | None = Field(None, description="Kafka bootstrap servers; default: the worker's")
    partitions: int | None = Field(None, ge=1, description="Partitions of the topic when it must be created")
    replication_factor: int = Field(-1, description="Replication factor when the topic is created (-1: broker default)")
    partitioner: Literal["crc32", "murmur2"] = Field(
        "crc32",
        description="Key → partition: crc32 as Sluice's streaming connectors (librdkafka's default) or murmur2 (Java's)",
    )
    key_converter_schemas_enable: bool = Field(True, description="JsonConverter schemas.enable for keys")
    value_converter_schemas_enable: bool = Field(True, description="JsonConverter schemas.enable for values")
    value_converter_decimal_format: Literal["BASE64", "NUMERIC"] = Field(
        "BASE64", description="JsonConverter decimal.format"
    )
    producer: dict[str, str] = Field(
        default_factory=dict,
        description="Kafka producer settings over the bulk defaults (linger.ms=50, batch.size=1000000, compression.type=lz4, acks=all)",
    )

    @field_validator("producer")
    @classmethod
    def _safe_producer(cls, value: dict[str, str]) -> dict[str, str]:
        return _checked_client_options(value)

    @field_validator("producer")
    @classmethod
    def _at_least_once(cls, value: dict[str, str]) -> dict[str, str]:
        acks = str(value.get("acks", "all")).strip().lower()
        if acks not in ("all", "-1"):
            raise ValueError(
                f"acks={value['acks']} can lose acknowledged rows; a backfill is at-least-once and needs acks=all"
            )
        return value

    @field_validator("value_converter_decimal_format", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("topic")
    @classmethod
    def _topic_or_cdc(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("cdc") is None:
            raise ValueError("required (or cdc, to write the CDC connector's topic)")
        return value


class TopicRangeSource(_Section):
    """A range of a topic read by Spark's Kafka data source: offsets or timestamps per partition."""

    topic: str = Field(min_length=1, description="Topic to read")
    bootstrap_servers: str | None = Field(None, description="Kafka bootstrap servers; default: the worker's")
    start_offsets: dict[str, int] | None = Field(
        None, description="Partition → first offset (inclusive); default earliest"
    )
    end_offsets: dict[str, int] | None = Field(None, description="Partition → end offset (exclusive); default latest")
    start_timestamp_ms: int | None = Field(None, ge=0, description="Read from the first record at or after this time")
    end_timestamp_ms: int | None = Field(None, ge=0, description="Stop before the first record at or after this time")
    consumer: dict[str, str] = Field(default_factory=dict, description="Kafka consumer settings")

    @field_validator("consumer")
    @classmethod
    def _safe_consumer(cls, value: dict[str, str]) -> dict[str, str]:
        return _checked_client_options(value)

    @model_validator(mode="after")
    def _one_way(self) -> TopicRangeSource:
        if self.start_offsets is not None and self.start_timestamp_ms is not None:
            raise ValueError("give start.offsets or start.timestamp.ms, not both")
        if self.end_offsets is not None and self.end_timestamp_ms is not None:
            raise ValueError("give end.offsets or end.timestamp.ms, not both")
        for name, offsets in (("start.offsets", self.start_offsets), ("end.offsets", self.end_offsets)):
            for partition in offsets or {}:
                if not partition.isdigit():
                    raise ValueError(f"{name}: partition {partition!r} is not a number")
        return self


class SinkConnectorTarget(_Section):
    """Any sink connector, run in-process over the records (its own config, as for ``POST /connectors``)."""

    config: dict[str, Any] = Field(
        description="The sink connector's config (connector.class, converters, transforms …)"
    )

    @field_validator("config")
    @classmethod
    def _has_class(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value.get("connector.class"):
            raise ValueError("connector.class is required")
        return value


class S3ArchiveSource(_Section):
    """Objects the S3 sink wrote: the S3 connectors' own keys (bucket, endpoint, format, layout)."""

    config: dict[str, Any] = Field(
        description="S3 source/sink keys: s3.bucket.name, store.url, format.class, topics.dir …"
    )
    topics: list[str] = Field(min_length=1, description="Archived topics to replay")
    key_converter: str = Field(
        "ByteArrayConverter", description="Serializes restored keys (as the archiving sink read them)"
    )
    value_converter: str = Field("ByteArrayConverter", description="Serializes restored values")
    header_converter: str = Field("SimpleHeaderConverter", description="Serializes restored headers")
    converter_config: dict[str, Any] = Field(
        default_factory=dict, description="key.converter.* / value.converter.* / header.converter.* settings"
    )


class TopicTarget(_Section):
    """Replay target: a topic per archived topic (default: the same name), same partitions."""

    topics: dict[str, str] = Field(default_factory=dict, description="Archived topic → target topic")
    bootstrap_servers: str | None = Field(None, description="Kafka bootstrap servers; default: the worker's")
    producer: dict[str, str] = Field(default_factory=dict, description="Kafka producer settings")

    @field_validator("producer")
    @classmethod
    def _safe_producer(cls, value: dict[str, str]) -> dict[str, str]:
        return _checked_client_options(value)


class S3ExportTarget(_Section):
    """The S3 sink's keys for the objects an export writes (format.class, s3.bucket.name, store.url …)."""

    config: dict[str, Any] = Field(description="S3 sink keys; topics and connector.class are set by the job")


# -- the spec --------------------------------------------------------------------------------------


class SparkSettings(_Section):
    """Spark settings of one job (on top of the worker's ``backfill.spark.*``)."""

    master: str | None = Field(
        None,
        description="A local master (local, local[4], local[*]); a cluster is chosen by the worker's backfill.spark.master",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark confs that tune the run (spark.executor.memory, spark.sql.* …); confs that load code, "
        "touch files or reach hosts are the worker's (backfill.spark.*)",
    )

    @field_validator("master")
    @classmethod
    def _local_master(cls, value: str | None) -> str | None:
        problem = master_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("conf")
    @classmethod
    def _safe_conf(cls, value: dict[str, str]) -> dict[str, str]:
        for key, conf_value in value.items():
            problem = spark_conf_problem(key, conf_value)
            if problem is not None:
                raise ValueError(problem)
        return value


class Schedule(_Section):
    """Run the job on a cron schedule."""

    cron: str = Field(description="Five-field cron expression, e.g. '0 3 * * *'")
    timezone: str = Field("UTC", description="Time zone the expression is read in")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value)
        except ValueError as exc:
            raise ValueError(f"not a valid cron expression: {exc}") from None
        return value


class _Spec(_Section):
    id: str = Field(description="Job id: letters, digits, '.', '_', '-'")
    spark: SparkSettings = Field(default_factory=lambda: SparkSettings.model_validate({}))
    schedule: Schedule | None = None

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError("must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value


class JdbcToTopicSpec(_Spec):
    """A database table, read over JDBC, into a Kafka topic (optionally as a CDC connector's snapshot)."""

    kind: Literal["jdbc_to_topic"]
    source: JdbcTableSource
    target: KafkaTopicTarget


class S3ToTopicSpec(_Spec):
    """Replay an archive the S3 sink wrote into topics."""

    kind: Literal["s3_to_topic"]
    source: S3ArchiveSource
    target: TopicTarget = Field(default_factory=lambda: TopicTarget.model_validate({}))


class TopicToS3Spec(_Spec):
    """Export a range of a topic with the S3 sink's layout."""

    kind: Literal["topic_to_s3"]
    source: TopicRangeSource
    target: S3ExportTarget


class TopicToSinkSpec(_Spec):
    """Reprocess a range of a topic through any sink connector."""

    kind: Literal["topic_to_sink"]
    source: TopicRangeSource
    target: SinkConnectorTarget


AnySpec = JdbcToTopicSpec | S3ToTopicSpec | TopicToS3Spec | TopicToSinkSpec
BackfillSpec = Annotated[AnySpec, Field(discriminator="kind")]
#: Each kind's spec model, in the order the console lists them.
SPEC_MODELS: dict[str, type[_Spec]] = {
    "jdbc_to_topic": JdbcToTopicSpec,
    "s3_to_topic": S3ToTopicSpec,
    "topic_to_s3": TopicToS3Spec,
    "topic_to_sink": TopicToSinkSpec,
}
KINDS = tuple(SPEC_MODELS)


class _Envelope(BaseModel):
    spec: BackfillSpec


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec: where (``path``) and why (``message``).

    ``path`` holds one JSON key per level (``("source", "connection.url")``): keys contain dots, so
    the joined :attr:`key` alone cannot say where one level ends. An empty path is the whole spec.
    """

    path: tuple[str, ...]
    message: str

    @property
    def key(self) -> str:
        """The dotted key the messages name (``source.connection.url``; ``spec`` for the whole spec)."""
        return ".".join(self.path) or "spec"

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "path": list(self.path), "message": self.message}


def check_spec(raw: Any) -> tuple[AnySpec | None, list[SpecProblem]]:
    """The parsed spec and no problems, or ``None`` and every problem found (at least one)."""
    if not isinstance(raw, Mapping):
        return None, [SpecProblem((), "a backfill spec must be a JSON object")]
    kind = raw.get("kind")
    if kind not in KINDS:
        return None, [SpecProblem(("kind",), f"must be one of {', '.join(KINDS)} (got {kind!r})")]
    try:
        return _Envelope.model_validate({"spec": dict(raw)}).spec, []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ())][1:]  # drop "spec"
            if loc and loc[0] == kind:  # the discriminated union's tag
                loc = loc[1:]
            problems.append(SpecProblem(tuple(loc), err.get("msg", "invalid").removeprefix("Value error, ")))
        return None, problems


def spec_error(problems: list[SpecProblem]) -> ConfigError:
    """One :class:`ConfigError` for ``problems``: each as ``key: message``, the first one's key as its key."""
    return ConfigError(
        "; ".join(f"{p.key}: {p.message}" for p in problems),
        key=problems[0].key,
        problems={p.key: p.message for p in problems},
    )


def parse_spec(raw: Mapping[str, Any]) -> AnySpec:
    """Validate a job spec; raise :class:`ConfigError` naming every bad key by its dotted path."""
    spec, problems = check_spec(raw)
    if spec is None:
        raise spec_error(problems)
    return spec


def spec_to_json(spec: BaseModel) -> dict[str, Any]:
    """The spec as stored and returned: dotted keys, secrets in clear (the store is the worker's own)."""
    return _unsecret(spec.model_dump(by_alias=True, exclude_none=True, mode="python"))


def _unsecret(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: _unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecret(v) for v in value]
    return value


def masked_spec(spec: BaseModel) -> dict[str, Any]:
    """The spec for REST output: passwords and secret keys replaced by ``[hidden]``."""
    return _mask(spec_to_json(spec))


_SECRET_KEY_RE = re.compile(r"password|secret|token|(^|\.)key$", re.IGNORECASE)


def _mask(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    # A config-provider reference (${env:PG_PASSWORD}) is no secret: shown, as Connect shows it.
    if (
        isinstance(value, str)
        and _SECRET_KEY_RE.search(key)
        and not key.endswith(("converter", "format.class"))
        and not value.strip().startswith("${")
    ):
        return "[hidden]"
    return value


# -- status ----------------------------------------------------------------------------------------


class JobState(enum.StrEnum):
    """Where a job's latest run is."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class RunStatus(BaseModel):
    """The state and progress of a job's latest run (persisted as the job's last state)."""

    model_config = ConfigDict(extra="ignore")

    run_id: str | None = None
    state: JobState = JobState.PENDING
    worker_id: str | None = Field(None, description="The worker the run is on (distributed mode)")
    started_at: float | None = Field(None, description="Epoch seconds")
    finished_at: float | None = Field(None, description="Epoch seconds")
    rows_done: int = 0
    bytes_done: int | None = None
    rows_total: int | None = None
    rows_per_s: float | None = None
    percent: float | None = None
    eta_s: float | None = None
    error: str | None = None
    source_position: dict[str, Any] | None = Field(
        None, description="Where the source was when the read began (PostgreSQL: WAL LSN), for CDC hand-off"
    )
    details: dict[str, Any] = Field(default_factory=dict)
