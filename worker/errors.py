"""Error handling for task runners, configured with Kafka Connect's ``errors.*`` keys.

:class:`ErrorHandlingConfig` parses the keys; :class:`RetryWithTolerance` runs one operation of a
stage (conversion, transformation, …), retries it while it raises :class:`RetriableError` (with
exponential backoff and jitter, capped at ``errors.retry.delay.max.ms``, until
``errors.retry.timeout``), and then either fails the task (``errors.tolerance=none``) or logs and
reports the failure so the runner skips the record and sends it to the dead-letter queue
(``errors.tolerance=all``).

The runners only call into this module when a whole batch failed: the hot path stays batched.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import Message

from sluice.connectors.api import ConfigError, ConnectError, RetriableError, SinkRecord, SourceRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Connect's context header names (``errors.deadletterqueue.context.headers.enable``).
HEADER_PREFIX = "__connect.errors."
HEADER_TOPIC = HEADER_PREFIX + "topic"
HEADER_PARTITION = HEADER_PREFIX + "partition"
HEADER_OFFSET = HEADER_PREFIX + "offset"
HEADER_CONNECTOR_NAME = HEADER_PREFIX + "connector.name"
HEADER_TASK_ID = HEADER_PREFIX + "task.id"
HEADER_STAGE = HEADER_PREFIX + "stage"
HEADER_CLASS_NAME = HEADER_PREFIX + "class.name"
HEADER_EXCEPTION = HEADER_PREFIX + "exception.class.name"
HEADER_EXCEPTION_MESSAGE = HEADER_PREFIX + "exception.message"
HEADER_EXCEPTION_STACKTRACE = HEADER_PREFIX + "exception.stacktrace"

RETRY_DELAY_MIN_S = 0.3  # Connect's RETRIES_DELAY_MIN_MS


class Stage(enum.StrEnum):
    """Where in the pipeline an error happened (Connect's names)."""

    KEY_CONVERTER = "KEY_CONVERTER"
    VALUE_CONVERTER = "VALUE_CONVERTER"
    HEADER_CONVERTER = "HEADER_CONVERTER"
    TRANSFORMATION = "TRANSFORMATION"
    TASK_POLL = "TASK_POLL"
    TASK_PUT = "TASK_PUT"
    KAFKA_PRODUCE = "KAFKA_PRODUCE"
    KAFKA_CONSUME = "KAFKA_CONSUME"


_KEYS = {
    "errors.retry.timeout",
    "errors.retry.delay.max.ms",
    "errors.tolerance",
    "errors.log.enable",
    "errors.log.include.messages",
    "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.topic.replication.factor",
    "errors.deadletterqueue.context.headers.enable",
}

#: ``errors.*`` keys that belong to a connector, not to the runtime (Debezium's retry count), so
#: configs written for it deploy unchanged; the connector lists them if it does not honour them.
CONNECTOR_ERRORS_KEYS = frozenset({"errors.max.retries"})


def _int(raw: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = raw.get(key, default)
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {value!r} for configuration {key}: expected an integer", key=key) from None
    if number < minimum:
        raise ConfigError(f"Invalid value {value!r} for configuration {key}: must be at least {minimum}", key=key)
    return number


def _bool(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"Invalid value {value!r} for configuration {key}: expected true or false", key=key)
    return text == "true"


@dataclass(frozen=True)
class ErrorHandlingConfig:
    retry_timeout_ms: int = 0
    retry_delay_max_ms: int = 60_000
    tolerance_all: bool = False
    log_enable: bool = False
    log_include_messages: bool = False
    dlq_topic: str = ""
    dlq_replication_factor: int = 3
    dlq_context_headers: bool = False

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> ErrorHandlingConfig:
        """The ``errors.*`` keys of a connector config; a :class:`ConfigError` names a bad key."""
        raw = {k: v for k, v in config.items() if k.startswith("errors.")}
        for key in raw:
            if key not in _KEYS and key not in CONNECTOR_ERRORS_KEYS:
                raise ConfigError(f"Unknown configuration {key}; error handling takes {', '.join(sorted(_KEYS))}", key=key)
        tolerance = str(raw.get("errors.tolerance", "none")).strip().lower()
        if tolerance not in ("none", "all"):
            raise ConfigError(
                f"Invalid value {raw['errors.tolerance']!r} for configuration errors.tolerance: expected none or all",
                key="errors.tolerance",
            )
        rf_key = "errors.deadletterqueue.topic.replication.factor"
        rf = _int(raw, rf_key, 3, -1)
        if rf == 0:
            raise ConfigError(f"Invalid value 0 for configuration {rf_key}: must be positive or -1", key=rf_key)
        return cls(
            retry_timeout_ms=_int(raw, "errors.retry.timeout", 0, -1),
            retry_delay_max_ms=_int(raw, "errors.retry.delay.max.ms", 60_000, 1),
            tolerance_all=tolerance == "all",
            log_enable=_bool(raw, "errors.log.enable"),
            log_include_messages=_bool(raw, "errors.log.include.messages"),
            dlq_topic=str(raw.get("errors.deadletterqueue.topic.name", "") or "").strip(),
            dlq_replication_factor=rf,
            dlq_context_headers=_bool(raw, "errors.deadletterqueue.context.headers.enable"),
        )

    @property
    def wants_reporter(self) -> bool:
        """Whether sink tasks get an errant record reporter (Connect: a DLQ, logging or tolerance)."""
        return self.tolerance_all or bool(self.dlq_topic) or self.log_enable


@dataclass
class ErrorContext:
    """What a tolerated failure is about: passed to the runner's reporter and to the log line."""

    stage: Stage
    class_name: str
    error: BaseException
    coordinates: str = ""
    record: Any = None  # the failed item: a consumed message (sink) or a source record (source)

    def message_text(self) -> str:
        r = self.record
        if isinstance(r, Message):  # a consumed message
            return (
                f"topic={r.topic()} partition={r.partition()} offset={r.offset()} timestamp={r.timestamp()[1]} "
                f"key={r.key()!r} value={r.value()!r} headers={r.headers()!r}"
            )
        if isinstance(r, SourceRecord | SinkRecord):
            return f"key={r.key!r} value={r.value!r} headers={r.headers!r}"
        return f"key=None value={r!r} headers=None"


def context_headers(
    ctx: ErrorContext,
    connector: str,
    task: int,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> list[tuple[str, bytes | None]]:
    """Connect's ``__connect.errors.*`` headers for ``ctx``."""
    error = ctx.error
    headers: list[tuple[str, bytes | None]] = []
    if topic is not None:
        headers.append((HEADER_TOPIC, topic.encode()))
    if partition is not None:
        headers.append((HEADER_PARTITION, str(partition).encode()))
    if offset is not None:
        headers.append((HEADER_OFFSET, str(offset).encode()))
    headers += [
        (HEADER_CONNECTOR_NAME, connector.encode()),
        (HEADER_TASK_ID, str(task).encode()),
        (HEADER_STAGE, ctx.stage.value.encode()),
        (HEADER_CLASS_NAME, ctx.class_name.encode()),
        (HEADER_EXCEPTION, f"{type(error).__module__}.{type(error).__qualname__}".encode()),
        (HEADER_EXCEPTION_MESSAGE, str(error).encode()),
        (HEADER_EXCEPTION_STACKTRACE, "".join(traceback.format_exception(error)).encode()),
    ]
    return headers


class ToleranceExceeded(ConnectError):
    """A failure with ``errors.tolerance=none``: the task fails (Connect's message and chaining)."""


class _Skipped:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIPPED"


#: What :meth:`RetryWithTolerance.execute` returns for a tolerated failure.
SKIPPED: Any = _Skipped()


class RetryWithTolerance:
    """Runs operations with retries and tolerance; counts what it did (``task-error-metrics``)."""

    def __init__(
        self,
        config: ErrorHandlingConfig,
        *,
        reporter: Callable[[ErrorContext], None] | None = None,
        stop_event: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        rng: Callable[[], float] = random.random,
        task_id: Hashable | None = None,
        dlq: DeadLetterQueue | None = None,
    ) -> None:
        self.config = config
        self.dlq = dlq
        if task_id is not None:
            # The task's status shows these counters (see task_error_metrics) while the task lives.
            _LIVE[task_id] = self
        self.reporter = reporter
        self._stop = stop_event
        self._clock = clock
        self._sleep = sleep if sleep is not None else (stop_event.wait if stop_event is not None else time.sleep)
        self._rng = rng
        self.total_record_failures = 0
        self.total_records_skipped = 0
        self.total_retries = 0
        self.total_errors_logged = 0
        self.last_error_timestamp_ms = 0

    def backoff(self, attempt: int, remaining_s: float | None) -> float:
        """Delay before retry ``attempt`` (1-based): exponential from 300 ms with jitter, capped."""
        cap = self.config.retry_delay_max_ms / 1000
        delay = min(cap, RETRY_DELAY_MIN_S * (2 ** min(attempt - 1, 30)))
        delay = delay / 2 + self._rng() * delay / 2  # "equal jitter": between half and all of it
        if remaining_s is not None:
            delay = min(delay, max(0.0, remaining_s))
        return delay

    def execute(
        self,
        stage: Stage,
        operation: Callable[[], T],
        *,
        class_name: str = "",
        coordinates: str = "",
        record: Any = None,
    ) -> T:
        """The result of ``operation``, or :data:`SKIPPED` when it failed and failures are tolerated.

        With ``errors.tolerance=none`` a failure raises ``ConnectError("Tolerance exceeded in
        error handler")`` chained to the cause.
        """
        timeout_ms = self.config.retry_timeout_ms
        deadline = None if timeout_ms < 0 else self._clock() + timeout_ms / 1000
        attempt = 0
        while True:
            try:
                return operation()
            except RetriableError as exc:
                error: BaseException = exc
                if self._stop is not None and self._stop.is_set():
                    # Never skip a record only because the task is stopping: nothing is committed.
                    raise ConnectError(f"Task stopped while retrying stage {stage.value}") from exc
                now = self._clock()
                if deadline is not None and now >= deadline:
                    break
                attempt += 1
                self.total_retries += 1
                delay = self.backoff(attempt, None if deadline is None else deadline - now)
                log.debug("Retriable error in stage %s (attempt %d), retrying in %.3fs: %s", stage.value, attempt, delay, exc)
                self._sleep(delay)
            except Exception as exc:  # noqa: BLE001 - a non-retriable error goes to the error policy
                error = exc
                break
        return self.fail(ErrorContext(stage, class_name, error, coordinates, record))

    def fail(self, ctx: ErrorContext, *, report: bool = True) -> Any:
        """Handle a failure that is final: raise (tolerance none) or log, report and skip."""
        self.total_record_failures += 1
        self.last_error_timestamp_ms = int(time.time() * 1000)
        if not self.config.tolerance_all:
            if self.config.log_enable:
                self._log(ctx)
            where = f" for {ctx.coordinates}" if ctx.coordinates else ""
            raise ToleranceExceeded(f"Tolerance exceeded in error handler{where}") from ctx.error
        self.total_records_skipped += 1
        if self.config.log_enable:
            self._log(ctx)
        elif self.dlq is None:
            # Neither logged nor dead-lettered: one line each, so no record is skipped without a word.
            where = f" at {ctx.coordinates}" if ctx.coordinates else ""
            log.warning("Skipped a record%s that failed in stage %s (errors.tolerance=all): %s", where, ctx.stage.value, ctx.error)
        if report and self.reporter is not None:
            self.reporter(ctx)
        return SKIPPED

    def unrecoverable(self, stage: Stage, class_name: str, error: BaseException, coordinates: str = "") -> ConnectError:
        """The error that fails the task for a failure no tolerance applies to (``poll``, ``put``,
        consuming, or a delivery that failed after the record left the task): counted, logged
        with its stage when ``errors.log.enable`` is set, and named by stage in the task's trace.
        The caller raises it (``raise retry.unrecoverable(...) from exc``)."""
        self.total_record_failures += 1
        self.last_error_timestamp_ms = int(time.time() * 1000)
        if self.config.log_enable:
            self._log(ErrorContext(stage, class_name, error, coordinates))
        where = f" for {coordinates}" if coordinates else ""
        return ConnectError(f"Unrecoverable error in stage {stage.value} ({class_name}){where}: {error}")

    def metrics(self) -> dict[str, int]:
        """Connect's ``task-error-metrics`` for this task, under Connect's names."""
        dlq = self.dlq
        return {
            "total-record-failures": self.total_record_failures,
            "total-record-errors": self.total_record_failures,
            "total-records-skipped": self.total_records_skipped,
            "total-retries": self.total_retries,
            "total-errors-logged": self.total_errors_logged,
            "deadletterqueue-produce-requests": dlq.produce_requests if dlq is not None else 0,
            "deadletterqueue-produce-failures": dlq.produce_failures if dlq is not None else 0,
            "last-error-timestamp": self.last_error_timestamp_ms,
        }

    def _log(self, ctx: ErrorContext) -> None:
        self.total_errors_logged += 1
        where = f" for {ctx.coordinates}" if ctx.coordinates else ""
        message = f" record: {ctx.message_text()}" if self.config.log_include_messages and ctx.record is not None else ""
        log.error(
            "Error encountered in task. Executing stage '%s' with class '%s'%s%s: %s",
            ctx.stage.value,
            ctx.class_name,
            where,
            message,
            ctx.error,
            exc_info=ctx.error,
        )


#: The live error handlers by task id; an entry goes away with its runner.
_LIVE: weakref.WeakValueDictionary[Hashable, RetryWithTolerance] = weakref.WeakValueDictionary()


#: Connect's ``task-error-metrics`` names, in the order :meth:`RetryWithTolerance.metrics` gives them.
ERROR_METRIC_NAMES = (
    "total-record-failures",
    "total-record-errors",
    "total-records-skipped",
    "total-retries",
    "total-errors-logged",
    "deadletterqueue-produce-requests",
    "deadletterqueue-produce-failures",
    "last-error-timestamp",
)


class RelayedErrorMetrics:
    """A task's error counters as another process last reported them (``task.executor=process``)."""

    def __init__(self, task_id: Hashable) -> None:
        # Zeros until the task process first reports, as a new thread-run task shows them.
        self.latest: dict[str, int] = dict.fromkeys(ERROR_METRIC_NAMES, 0)
        _LIVE[task_id] = self  # type: ignore[assignment]  # quacks like RetryWithTolerance.metrics

    def metrics(self) -> dict[str, int]:
        return dict(self.latest)


def task_error_metrics(task_id: Hashable) -> dict[str, int] | None:
    """The ``task-error-metrics`` of a running task (``None`` when no runner of it is alive)."""
    retry = _LIVE.get(task_id)
    return retry.metrics() if retry is not None else None


class DeadLetterQueue:
    """A task's own producer to ``errors.deadletterqueue.topic.name``.

    :meth:`flush` must succeed before the runner commits offsets that cover a record sent here.
    """

    def __init__(
        self,
        config: ErrorHandlingConfig,
        producer_config: Mapping[str, Any],
        admin_config: Mapping[str, Any],
    ) -> None:
        self.topic = config.dlq_topic
        self.replication_factor = config.dlq_replication_factor
        self._producer_config = dict(producer_config)
        self._admin_config = dict(admin_config)
        self._producer: Any = None
        self._error: Any = None
        self.produce_requests = 0
        self.produce_failures = 0

    def start(self) -> None:
        from confluent_kafka import KafkaException, Producer

        self.ensure_topic()
        config = dict(self._producer_config)
        config["on_delivery"] = self._on_delivery
        try:
            self._producer = Producer(config)
        except KafkaException as exc:
            raise ConnectError(f"Invalid dead letter queue producer configuration: {exc.args[0].str()}") from exc

    def ensure_topic(self) -> None:
        """Create the topic (1 partition, ``min(replication factor, brokers)``) if it is missing."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self._admin_config)
        try:
            metadata = admin.list_topics(timeout=30)
        except KafkaException as exc:
            raise ConnectError(f"Could not list topics to create the dead letter queue {self.topic!r}: {exc}") from exc
        existing = metadata.topics.get(self.topic)
        if existing is not None and existing.error is None:
            return
        rf = self.replication_factor if self.replication_factor < 0 else min(self.replication_factor, max(1, len(metadata.brokers)))
        futures = admin.create_topics([NewTopic(self.topic, num_partitions=1, replication_factor=rf)], operation_timeout=30)
        # exception(), not result(): raised, the future's exception would get a traceback holding this
        # frame (the AdminClient, and the future holding the exception: a reference cycle). The garbage
        # collector may then destroy the client on a librdkafka thread, where rd_kafka_destroy() aborts
        # the process. Never raised, it holds no frame, and the client goes when this method returns.
        failure = futures[self.topic].exception(timeout=60)
        if failure is None:
            log.info("Created dead letter queue topic %s (replication factor %d)", self.topic, rf)
            return
        error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        reason = error.str() if isinstance(error, KafkaError) else str(failure)
        raise ConnectError(f"Could not create the dead letter queue topic {self.topic!r}: {reason}") from failure

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.produce_failures += 1
            if self._error is None:
                self._error = err

    def send(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None) -> None:
        producer = self._producer
        assert producer is not None, "DeadLetterQueue.start() was not called"
        self.produce_requests += 1
        while True:
            try:
                producer.produce(self.topic, value, key, headers=headers or None)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        self.check()

    def check(self) -> None:
        err = self._error
        if err is not None:
            raise ConnectError(f"Could not deliver a record to the dead letter queue {self.topic!r}: {err.str()}")

    def flush(self, timeout_s: float) -> bool:
        """Wait for every record sent so far; ``False`` if some are still pending after ``timeout_s``."""
        if self._producer is None:
            return True
        remaining = self._producer.flush(timeout_s)
        self.check()
        return remaining == 0

    def close(self, timeout_s: float = 5.0) -> None:
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None


def transform_each(chain: Callable[[Any], Sequence[Any]], record: Any, retry: RetryWithTolerance, coordinates: str) -> Any:
    """Apply ``chain`` to one record, step by step so a failure names its transform; the
    resulting records, or :data:`SKIPPED`. Only used once a whole batch failed."""
    steps = getattr(chain, "steps", None)
    if not steps:
        return retry.execute(
            Stage.TRANSFORMATION, partial(chain, [record]), class_name=type(chain).__qualname__,
            coordinates=coordinates, record=record,
        )
    chain_type: Any = type(chain)  # a TransformChain of one step at a time
    records = [record]
    for step in steps:
        one = chain_type((step,))
        records = retry.execute(
            Stage.TRANSFORMATION, partial(one, records), class_name=_class_name(step.transform),
            coordinates=coordinates, record=record,
        )
        if records is SKIPPED or not records:
            return records
    return records


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"
