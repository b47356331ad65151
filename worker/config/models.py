"""Worker and connector configuration, with Kafka Connect's keys.

The worker reads a Connect-style ``worker.properties``; each connector config is a flat mapping with
Connect's common keys (``name``, ``connector.class``, ``tasks.max``, converter overrides,
``producer.override.*`` …) plus the connector's own keys, which its ``Config`` model validates.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import unicodedata
from collections.abc import Mapping
from typing import Any, Literal, Self
from urllib.parse import urlparse

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import ConfigError, PluginConfig
from sluice.worker.config.client_policy import DEFAULT_ALLOWLIST, DEFAULT_POLICY
from sluice.worker.restarts import RestartPolicy

log = logging.getLogger(__name__)

DEFAULT_KEY_CONVERTER = "JsonConverter"
DEFAULT_VALUE_CONVERTER = "JsonConverter"
DEFAULT_HEADER_CONVERTER = "SimpleHeaderConverter"

WORKER_PREFIXES = (
    "producer.",
    "consumer.",
    "admin.",
    "key.converter.",
    "value.converter.",
    "header.converter.",
    "config.providers.",
    "listeners.https.",
    "rest.",
    # backfill.spark.* (Spark confs), backfill.storage.file.filename, backfill.bootstrap.servers: read
    # by the backfill manager from the raw keys.
    "backfill.",
)


class WorkerConfig(PluginConfig):
    """Settings of one worker process (``worker.properties``)."""

    bootstrap_servers: str = Field("localhost:9092", description="Kafka bootstrap servers, host:port[,host:port…]")
    client_id: str | None = Field(None, description="Client id prefix for the worker's Kafka clients")
    key_converter: str = Field(DEFAULT_KEY_CONVERTER, description="Default key converter for connectors")
    value_converter: str = Field(DEFAULT_VALUE_CONVERTER, description="Default value converter for connectors")
    header_converter: str = Field(DEFAULT_HEADER_CONVERTER, description="Default header converter")
    offset_storage_file_filename: str | None = Field(
        None, description="Standalone: file that stores source offsets (memory only when unset)"
    )
    offset_flush_interval_ms: int = Field(60_000, ge=1, description="Interval between offset commits")
    offset_flush_timeout_ms: int = Field(
        5_000, ge=1, description="Maximum wait for pending records before a commit is abandoned"
    )
    task_shutdown_graceful_timeout_ms: int = Field(5_000, ge=0, description="Time tasks get to stop cleanly")
    metrics_history_interval_ms: int = Field(
        10_000,
        ge=100,
        description="How often the worker samples each connector's records in and out, errors and lag for "
        "GET /connectors/{name}/metrics/history (the console's charts)",
    )
    metrics_history_span_ms: int = Field(
        3_600_000, ge=10_000, description="How long those samples are kept (a few numbers per connector per sample)"
    )
    task_degraded_after_ms: int = Field(
        10_000,
        ge=0,
        description="How long a task may fail to reach Kafka or its own system (retrying all along) before its "
        "RUNNING status carries a degraded trace ('Degraded since …: cannot reach …'); cleared when it recovers",
    )
    task_executor: Literal["thread", "process"] = Field(
        "thread",
        description="Where tasks run: threads of a few task host processes (what `sluice standalone` and "
        "`sluice distributed` do unless told otherwise: every core used, a hung task's host is killed after "
        "task.shutdown.graceful.timeout.ms, its other tasks moved first), or threads of the worker process (the default for a "
        "worker embedded in another program)",
    )
    task_host_processes: int = Field(
        0,
        ge=0,
        description="task.executor=process: how many task host processes run the tasks, each hosting several "
        "as threads (0: one per core)",
    )
    task_host_preload: str = Field(
        "",
        description="task.executor=process: comma-separated connectors (connector.class names) whose task code "
        "and libraries the task hosts' fork server imports once, before it forks any host, so that every host "
        "shares those pages; a task of another connector imports its code in its own host when it starts (its "
        "libraries' code pages are shared all the same, its Python objects are the host's). Empty: none, the "
        "smallest worker; name the connectors a worker runs on many hosts (e.g. JdbcSink,PostgresCdcSource)",
    )
    task_host_sandbox: Literal["landlock", "none"] = Field(
        "landlock",
        description="task.executor=process: confine each task host process with Linux Landlock before it runs "
        "tasks (read the installation, plugin.path and system libraries; read and write only "
        "connector.allowed.paths and its own temporary directory), or none. Where Landlock is unavailable the "
        "worker logs a warning and GET /health says so in details.sandbox; see worker.sandbox",
    )
    listeners: str = Field("http://127.0.0.1:8083", description="REST listeners, e.g. http://127.0.0.1:8083")
    metrics_listeners: str = Field(
        "",
        description="A listener of its own (e.g. http://127.0.0.1:9404) serving only GET /metrics and GET /health, "
        "besides the REST listener; REST authentication and the listeners.https.* TLS keys apply to it, and one "
        "beyond loopback without authentication is refused as the REST listener is. Empty: none",
    )
    rest_advertised_host_name: str | None = Field(
        None, description="Host name other workers and status use for this worker"
    )
    rest_advertised_port: int | None = Field(None, description="Port other workers and status use for this worker")
    plugin_path: str = Field(
        "",
        description="Comma-separated directories of plugin modules and packages (or package directories), "
        "scanned when the worker starts and again on SIGHUP: connector.class, transforms, predicates, converters "
        "and config providers name only plugins found then or through entry points, never a module to import",
    )
    topic_creation_enable: bool = Field(True, description="Let source connectors create their topics (KIP-158)")
    connector_client_config_override_policy: str = Field(
        DEFAULT_POLICY,
        description="Which producer/consumer/admin overrides connectors may set: Allowlist (with "
        "connector.client.config.override.allowlist), All (Kafka Connect's default), None, Principal or a policy "
        "class; keys that load code, run commands, read local files or fetch URLs are refused under every policy, "
        "and a client overriding bootstrap.servers or a security key inherits none of the worker's security "
        "settings (see worker.config.client_policy)",
    )
    connector_client_config_override_allowlist: str = Field(
        ",".join(sorted(DEFAULT_ALLOWLIST)),
        description="Comma-separated client keys connectors may override under the Allowlist policy; the default "
        "lists only tuning keys (set it, even empty, to replace the list)",
    )
    connector_allowed_paths: str = Field(
        "",
        description="Comma-separated absolute paths connectors may name as local files or directories (a "
        "FileStreamSource's or FileStreamSink's file): a value must resolve, symlinks and '..' followed, to one "
        "of them or below, when the config is validated and again when the task opens it. Unset or empty: "
        "<state.dir>/data, created at start; '*' allows any path. Either way an allowed path may neither contain "
        "nor lie inside plugin.path, the installation, sys.path, the worker's config, offset and other files, "
        "or a config provider's allowed.paths (refused at start); see worker.config.local_paths",
    )
    state_dir: str = Field(
        "",
        description="Absolute directory of the worker's state; its data folder is what connectors may use when "
        "connector.allowed.paths is unset. Empty: $XDG_STATE_HOME/sluice, else ~/.local/state/sluice (the "
        "container image sets /var/lib/sluice)",
    )
    worker_config_file: str = Field(
        "",
        description="The worker's own config file, which no allowed path may reach; the sluice command sets it "
        "to the file it was started with",
    )
    group_id: str | None = Field(None, description="Distributed mode: the cluster's group id")
    task_restart_max_attempts: int = Field(
        3, ge=0, description="Automatic restarts of a failed task before it stays FAILED (0: never, as Kafka Connect)"
    )
    task_restart_backoff_initial_ms: int = Field(1_000, ge=0, description="Wait before the first automatic restart")
    task_restart_backoff_max_ms: int = Field(60_000, ge=0, description="Longest wait between automatic restarts")
    config_providers: str | None = Field(
        None,
        description="Comma-separated config provider names (config.providers.<name>.class, .param.*); only "
        "these exist, so unset or empty enables none (as in Kafka Connect); env, file and dir need no .class",
    )

    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log line format of `sluice standalone` and `sluice distributed` (and their task processes): "
        "text, Connect's layout with [connector|task-N], or json, one object per line with ts, level, logger, "
        "message, connector, task, thread and exc; --log-format overrides it",
    )
    tracing_otlp_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP endpoint (e.g. http://collector:4318) that receives an OpenTelemetry trace per "
        "task batch (poll → convert → produce, consume → convert → put → commit); unset, the standard "
        "OTEL_EXPORTER_OTLP_ENDPOINT is used, and without either nothing is traced (needs the otel extra)",
    )

    # Worker files carry many prefixed keys (producer.*, key.converter.schemas.enable, …) and keys of
    # modes we don't run; Connect accepts and logs them, so this model ignores unknown keys.
    model_config = {**PluginConfig.model_config, "extra": "ignore"}

    raw: dict[str, Any] = Field(default_factory=dict, exclude=True)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Self:
        known = {info.alias for info in cls.model_fields.values() if info.alias}
        for key in raw:
            if key not in known and not key.startswith(WORKER_PREFIXES):
                log.info("Worker configuration key %r is not used by Sluice", key)
        config = cls.parse({k: v for k, v in raw.items() if k in known})
        return config.model_copy(update={"raw": dict(raw)})

    def prefixed(self, prefix: str) -> dict[str, Any]:
        """The worker keys under ``prefix``, with the prefix removed."""
        return {k[len(prefix) :]: v for k, v in self.raw.items() if k.startswith(prefix)}

    @property
    def listener(self) -> tuple[str, str, int]:
        """``(scheme, host, port)`` of the first REST listener."""
        first = self.listeners.split(",")[0].strip()
        url = urlparse(first if "://" in first else f"http://{first}")
        return url.scheme or "http", url.hostname or "0.0.0.0", url.port or 8083

    @property
    def metrics_listener(self) -> tuple[str, str, int] | None:
        """``(scheme, host, port)`` of ``metrics.listeners`` (its first listener), ``None`` when unset."""
        first = self.metrics_listeners.split(",")[0].strip()
        if not first:
            return None
        url = urlparse(first if "://" in first else f"http://{first}")
        if url.scheme not in ("http", "https"):
            raise ConfigError(f"metrics.listeners must be http:// or https://, got {first!r}", key="metrics.listeners")
        try:
            port = url.port
        except ValueError:
            port = None
        if not port:
            raise ConfigError(
                f"metrics.listeners needs a port, e.g. http://127.0.0.1:9404, got {first!r}", key="metrics.listeners"
            )
        return url.scheme, url.hostname or "0.0.0.0", port

    @property
    def exactly_once_source_enabled(self) -> bool:
        """Whether this worker delivers source records exactly once: never for this class (a standalone
        worker has no exactly-once source support); a distributed worker's config says."""
        return False

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(
            self.task_restart_max_attempts, self.task_restart_backoff_initial_ms, self.task_restart_backoff_max_ms
        )

    @property
    def listener_is_loopback(self) -> bool:
        """Whether the first REST listener is reachable only from this machine."""
        return is_loopback_host(self.listener[1])

    @property
    def worker_id(self) -> str:
        """``host:port`` as Connect reports it in status."""
        _, host, port = self.listener
        host = self.rest_advertised_host_name or (host if host not in ("", "0.0.0.0", "::") else socket.gethostname())
        return f"{host}:{self.rest_advertised_port or port}"

    def offsets_topic(self) -> str | None:
        """The topic of source offsets (``offset.storage.topic``; a standalone worker has a file)."""
        return None

    def worker_topics(self) -> dict[str, str]:
        """``{topic: worker key}`` of the topics this worker writes its own records to, which no
        connector may use as its offsets topic (the audit trail here; a cluster's internal topics)."""
        audit = str(self.raw.get("rest.audit.topic") or "").strip()
        return {audit: "rest.audit.topic"} if audit else {}

    def source_transactions_topic(self) -> str | None:
        """The offsets topic that source tasks write in their own transactions when they deliver
        exactly once (a distributed worker with ``exactly.once.source.support=enabled``); ``None``:
        at least once, offsets stored by the worker."""
        return None


#: Worker keys only a distributed worker honours: the value that means "off", and why a standalone
#: worker cannot honour another, which it refuses instead of silently running without it.
DISTRIBUTED_ONLY_KEYS: Mapping[str, tuple[str, str]] = {
    "exactly.once.source.support": (
        "disabled",
        "a standalone worker has no exactly-once source support (its offsets file cannot join a Kafka transaction)",
    ),
}


def refuse_distributed_only_keys(raw: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` when a standalone worker's config turns on a distributed-mode setting."""
    for key, (off, why) in DISTRIBUTED_ONLY_KEYS.items():
        value = str(raw.get(key, off)).strip()
        if value != off:
            raise ConfigError(
                f"{key}={value} is a distributed-mode setting: {why}. Remove it (or set it to {off}), "
                "or run the connectors on a distributed worker (sluice distributed)",
                key=key,
            )


def is_loopback_host(host: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` or ``::1``; an empty host or a wildcard (``0.0.0.0``, ``::``) is not."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


CONNECTOR_PREFIXES = (
    "key.converter.",
    "value.converter.",
    "header.converter.",
    "transforms.",
    "predicates.",
    "producer.override.",
    "consumer.override.",
    "admin.override.",
    "topic.creation.",
    "errors.",
)

#: Longest connector name: it becomes part of consumer group ids, client ids and URLs.
MAX_NAME_LENGTH = 255

# Unicode categories a name may not contain: controls (Cc), invisible format characters such as the
# bidirectional overrides U+202E and zero-width joiners (Cf), surrogates (Cs), private use (Co),
# unassigned code points (Cn) and line/paragraph separators (Zl, Zp). Any of them lets two names
# that look the same differ, or makes a name display as something it is not.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


# Kafka's rule for topic names (``Topic.validate``): its characters and its length.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249


def topic_name_problem(topic: str) -> str | None:
    """Why Kafka would refuse ``topic`` as a topic name, or None when it would accept it."""
    if not topic:
        return "a topic name may not be empty"
    if topic in (".", ".."):
        return f"{topic!r} is not a legal topic name"
    if len(topic) > _MAX_TOPIC_LENGTH:
        return f"a topic name may be at most {_MAX_TOPIC_LENGTH} characters long, got {len(topic)}"
    if not _LEGAL_TOPIC.fullmatch(topic):
        return f"topic name {topic!r} may contain only ASCII letters, digits, '.', '_' and '-'"
    return None


def connector_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a connector, or None when it can.

    The rule: 1 to 255 characters, in Unicode normalization form NFC, none of them ``/`` or ``\\``
    or a control, format (bidirectional, zero-width), private-use, unassigned or line/paragraph
    separator character, and not ``.`` or ``..`` — every name then appears unchanged and
    unambiguous in a URL path (``/connectors/{name}``), a log line and a terminal.
    """
    if not name:
        return "connector names may not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"connector names may be at most {MAX_NAME_LENGTH} characters long, got {len(name)}"
    if name in (".", ".."):
        return f"{name!r} is not a connector name: a URL path would normalise it away"
    for char in name:
        if char in "/\\":
            return f"connector names may not contain {char!r}: a URL path would split or normalise it"
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            return (
                f"connector names may not contain control, invisible or unassigned characters (found U+{ord(char):04X})"
            )
    if unicodedata.normalize("NFC", name) != name:
        return "connector names must be in Unicode normalization form NFC (a name that looks the same must be the same)"
    return None


class ConnectorConfig(PluginConfig):
    """The keys every connector shares; the connector's own model gets the rest."""

    name: str = Field(description="Unique connector name")
    connector_class: str = Field(description="Connector class: alias, entry-point name or Python path")
    tasks_max: int = Field(1, ge=1, description="Maximum number of tasks")
    key_converter: str | None = Field(None, description="Key converter override")
    value_converter: str | None = Field(None, description="Value converter override")
    header_converter: str | None = Field(None, description="Header converter override")
    topics: str | None = Field(None, description="Sink: comma-separated topics to consume")
    topics_regex: str | None = Field(None, description="Sink: regex of topics to consume")
    transforms: str = Field("", description="Comma-separated transform aliases, applied in order")
    predicates: str = Field("", description="Comma-separated predicate aliases")
    config_action_reload: Literal["none", "restart"] = Field(
        "restart", description="What to do when a provided value changes"
    )
    tasks_max_enforce: bool = Field(True, description="Fail a connector that generates more than tasks.max tasks")
    # KIP-618. Source connectors only: a sink's config may carry them and they are ignored, with a warning.
    exactly_once_support: Literal["requested", "required"] = Field(
        "requested",
        description="Source: required refuses the config unless the worker has exactly.once.source.support=enabled "
        "and the connector declares that it supports exactly-once delivery with this config; requested skips "
        "that check (the connector then runs exactly-once whenever the worker has it enabled)",
    )
    transaction_boundary: Literal["poll", "interval", "connector"] = Field(
        "poll",
        description="Source, with exactly-once enabled on the worker: where a task's transactions end: after "
        "each poll's records, every transaction.boundary.interval.ms, or where the task asks (only for a "
        "connector that declares it can define its own boundaries)",
    )
    transaction_boundary_interval_ms: int | None = Field(
        None,
        ge=0,
        description="Source, with transaction.boundary=interval: how often a task commits its transaction; "
        "unset: the worker's offset.flush.interval.ms. No effect with another transaction.boundary",
    )
    offsets_storage_topic: str | None = Field(
        None,
        description="Source, on a distributed worker: a topic of the connector's own for its offsets (created "
        "compacted like offset.storage.topic when missing); reads fall back to the worker's offsets topic for "
        "partitions it has no record of. Unset: the worker's offset.storage.topic. A standalone worker ignores it",
    )

    model_config = {**PluginConfig.model_config, "extra": "ignore"}

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        problem = connector_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("topics_regex")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        if value:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @field_validator("exactly_once_support", "transaction_boundary", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        # Connect reads these two case-insensitively.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("offsets_storage_topic", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        # As Connect: a blank offsets.storage.topic means the worker's offsets.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("offsets_storage_topic")
    @classmethod
    def _valid_topic(cls, value: str | None) -> str | None:
        if value is not None:
            problem = topic_name_problem(value)
            if problem is not None:
                # A custom error keeps pydantic's "Value error, " prefix out of the user's message.
                raise PydanticCustomError("invalid_topic", problem)
        return value

    @model_validator(mode="after")
    def _one_topic_source(self) -> ConnectorConfig:
        if self.topics and self.topics_regex:
            raise ValueError("topics and topics.regex are mutually exclusive; set only one")
        return self

    @property
    def topic_list(self) -> list[str]:
        return [t.strip() for t in (self.topics or "").split(",") if t.strip()]

    def transaction_interval_ms(self, worker: WorkerConfig) -> int:
        """How often a source task's transaction commits with ``transaction.boundary=interval``:
        ``transaction.boundary.interval.ms``, else the worker's ``offset.flush.interval.ms``."""
        if self.transaction_boundary_interval_ms is not None:
            return self.transaction_boundary_interval_ms
        return worker.offset_flush_interval_ms

    @classmethod
    def own_keys(cls) -> set[str]:
        return {info.alias for info in cls.model_fields.values() if info.alias}


def split_connector_config(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a connector config into ``(common keys, the connector's own keys)``."""
    common_keys = ConnectorConfig.own_keys()
    common: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in raw.items():
        if key in common_keys or key.startswith(CONNECTOR_PREFIXES):
            common[key] = value
        else:
            own[key] = value
    return common, own


def sub_config(raw: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The keys of ``raw`` under ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}


def require(condition: bool, message: str, key: str) -> None:
    if not condition:
        raise ConfigError(message, key=key)


#: What the ``sluice`` worker commands run tasks in when ``task.executor`` is not set.
CLI_TASK_EXECUTOR = "process"


def with_cli_defaults(worker_config: Mapping[str, Any]) -> dict[str, Any]:
    """``worker_config`` with the defaults of a worker started by the ``sluice`` command: a process
    per task, so the worker uses every core (``task.executor=thread`` keeps tasks in-process)."""
    return {"task.executor": CLI_TASK_EXECUTOR, **worker_config}
