"""Partitioners: which directory (encoded partition) a record's object goes into.

The class names and keys are Confluent's (``io.confluent.connect.storage.partitioner.*``):

* ``DefaultPartitioner`` → ``partition=<kafka partition>``
* ``FieldPartitioner`` (``partition.field.name``, a list) → ``<field>=<value>[/<field>=<value>...]``
* ``TimeBasedPartitioner`` (``path.format`` in Joda-Time syntax, ``partition.duration.ms``,
  ``timestamp.extractor`` = ``Record`` | ``RecordField`` | ``Wallclock``, ``timestamp.field``,
  ``timezone``, ``locale``)
* ``DailyPartitioner`` / ``HourlyPartitioner``: time-based with a fixed path format and duration.

Partitioners work on whole columns (:meth:`Partitioner.encode_batch`), because they run once per
record on the sink's hot path.
"""

from __future__ import annotations

import abc
import datetime as dt
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.connectors.api import ConfigError, DataError

_PREFIX = "io.confluent.connect.storage.partitioner."
DAILY_PATH_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd"
HOURLY_PATH_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH"


@dataclass(frozen=True)
class PartitionerSettings:
    """The partitioner-related keys of a connector configuration."""

    partitioner_class: str = "DefaultPartitioner"
    field_names: tuple[str, ...] = ()
    path_format: str = ""
    partition_duration_ms: int = -1
    timestamp_extractor: str = "Wallclock"
    timestamp_field: str = "timestamp"
    timezone: str = "UTC"
    locale: str = "en"
    directory_delim: str = "/"


class Partitioner(abc.ABC):
    """Maps records to encoded partitions (directory names below ``<topics.dir>/<topic>/``)."""

    #: True when the encoded partition depends only on the Kafka partition (no per-record work).
    per_kafka_partition: bool = False
    #: True when encoded partitions are time buckets (enables rotate-on-partition-change).
    time_based: bool = False
    #: False when :meth:`encode_batch` and :meth:`record_times` use ``values`` only for their
    #: length and null-ness, so the sink may hand them raw bytes instead of decoded values.
    reads_values: bool = True

    @abc.abstractmethod
    def encode_batch(
        self,
        kafka_partition: int,
        values: Sequence[Any],
        timestamps: Callable[[], Sequence[int | None]],
    ) -> list[str]:
        """The encoded partition of each record of one Kafka partition."""

    def record_times(self, values: Sequence[Any], timestamps: Callable[[], Sequence[int | None]]) -> list[int] | None:
        """Each record's time in ms as this partitioner's extractor sees it (``None``: no extractor)."""
        return None


class DefaultPartitioner(Partitioner):
    """``partition=<n>``: one directory per Kafka partition."""

    per_kafka_partition = True
    reads_values = False

    def encode(self, kafka_partition: int) -> str:
        return f"partition={kafka_partition}"

    def encode_batch(
        self, kafka_partition: int, values: Sequence[Any], timestamps: Callable[[], Sequence[int | None]]
    ) -> list[str]:
        return [self.encode(kafka_partition)] * len(values)


class FieldPartitioner(Partitioner):
    """``<field>=<value>`` for each of ``partition.field.name``, joined by ``directory.delim``."""

    def __init__(self, field_names: Sequence[str], delim: str) -> None:
        if not field_names:
            raise ConfigError("FieldPartitioner needs partition.field.name", key="partition.field.name")
        self.field_names = tuple(field_names)
        self.delim = delim

    def encode_batch(
        self, kafka_partition: int, values: Sequence[Any], timestamps: Callable[[], Sequence[int | None]]
    ) -> list[str]:
        names = self.field_names
        out: list[str] = []
        append = out.append
        for value in values:
            if not isinstance(value, dict):
                raise DataError(f"FieldPartitioner needs struct or map values, got {type(value).__name__}")
            try:
                if len(names) == 1:
                    append(f"{names[0]}={_field_text(value[names[0]])}")
                else:
                    append(self.delim.join(f"{n}={_field_text(value[n])}" for n in names))
            except KeyError as exc:
                raise DataError(f"FieldPartitioner: the record has no field {exc.args[0]!r}") from None
        return out


def _field_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    raise DataError(
        f"FieldPartitioner: a partition field must be a string, integer or boolean, got {type(value).__name__}"
    )


class TimeBasedPartitioner(Partitioner):
    """Time buckets of ``partition.duration.ms``, named by ``path.format`` in ``timezone``."""

    time_based = True

    def __init__(self, settings: PartitionerSettings) -> None:
        if not settings.path_format:
            raise ConfigError("TimeBasedPartitioner needs path.format", key="path.format")
        if settings.partition_duration_ms <= 0:
            raise ConfigError("TimeBasedPartitioner needs partition.duration.ms > 0", key="partition.duration.ms")
        try:
            self.zone = ZoneInfo(settings.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"Unknown timezone {settings.timezone!r}", key="timezone") from None
        self.duration = settings.partition_duration_ms
        self.formatter = JodaFormatter(settings.path_format)
        self.extractor = make_extractor(settings.timestamp_extractor, settings.timestamp_field)
        self.reads_values = extractor_reads_values(settings.timestamp_extractor)
        self._names: dict[int, str] = {}

    def bucket(self, millis: int) -> int:
        """Start of the bucket holding ``millis``, in UTC ms (buckets align to local time)."""
        offset = self._offset_ms(millis)
        local = millis + offset
        start_local = local - local % self.duration
        return start_local - offset

    def _offset_ms(self, millis: int) -> int:
        moment = dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
        delta = self.zone.utcoffset(moment)
        return int(delta.total_seconds() * 1000) if delta else 0

    def name(self, bucket_start: int) -> str:
        """The directory name of the bucket starting at ``bucket_start`` (cached)."""
        name = self._names.get(bucket_start)
        if name is None:
            if len(self._names) > 100_000:
                self._names.clear()
            local = dt.datetime.fromtimestamp(bucket_start / 1000, dt.UTC).astimezone(self.zone)
            name = self._names[bucket_start] = self.formatter.format(local)
        return name

    def record_times(self, values: Sequence[Any], timestamps: Callable[[], Sequence[int | None]]) -> list[int]:
        return self.extractor(values, timestamps)

    def encode_batch(
        self, kafka_partition: int, values: Sequence[Any], timestamps: Callable[[], Sequence[int | None]]
    ) -> list[str]:
        return self.encode_times(self.record_times(values, timestamps))

    def encode_times(self, times: Sequence[int]) -> list[str]:
        out: list[str] = []
        append = out.append
        duration = self.duration
        last_lo, last_hi, last_name = 1, 0, ""
        for millis in times:
            if last_lo <= millis < last_hi:  # consecutive records mostly share a bucket
                append(last_name)
                continue
            start = self.bucket(millis)
            last_lo, last_hi, last_name = start, start + duration, self.name(start)
            append(last_name)
        return out


# -- timestamp extractors -----------------------------------------------------------------------

Extractor = Callable[[Sequence[Any], Callable[[], Sequence[int | None]]], list[int]]


def extractor_reads_values(kind: str) -> bool:
    """Whether the ``timestamp.extractor`` called ``kind`` looks into record values (RecordField)."""
    return kind.rsplit(".", 1)[-1].removesuffix("TimestampExtractor") == "RecordField"


def make_extractor(kind: str, field: str) -> Extractor:
    """``Record`` (the Kafka timestamp), ``RecordField`` (``timestamp.field``) or ``Wallclock``."""
    short = kind.rsplit(".", 1)[-1].removesuffix("TimestampExtractor")
    if short == "Wallclock":
        return lambda values, _ts: [int(time.time() * 1000)] * len(values)
    if short == "Record":

        def record(values: Sequence[Any], timestamps: Callable[[], Sequence[int | None]]) -> list[int]:
            ts = timestamps()
            if None in ts:
                raise DataError("timestamp.extractor=Record: a record has no timestamp")
            return list(ts)  # type: ignore[arg-type]

        return record
    if short == "RecordField":
        path = field.split(".")

        def record_field(values: Sequence[Any], _ts: Callable[[], Sequence[int | None]]) -> list[int]:
            return [field_time(value, path) for value in values]

        return record_field
    raise ConfigError(
        f"Unknown timestamp.extractor {kind!r}: use Record, RecordField or Wallclock", key="timestamp.extractor"
    )


def field_time(value: Any, path: Sequence[str]) -> int:
    """The time in ms held by the (possibly nested) field ``path`` of ``value``."""
    current = value
    for part in path:
        if not isinstance(current, dict) or part not in current:
            raise DataError(f"timestamp.field {'.'.join(path)!r} is missing from the record value")
        current = current[part]
    if isinstance(current, bool):
        raise DataError(f"timestamp.field {'.'.join(path)!r} is a boolean, not a time")
    if isinstance(current, int):
        return current
    if isinstance(current, float):
        return int(current)
    if isinstance(current, dt.datetime):
        moment = current if current.tzinfo else current.replace(tzinfo=dt.UTC)
        return int(moment.timestamp() * 1000)
    if isinstance(current, str):
        try:
            moment = dt.datetime.fromisoformat(current.replace("Z", "+00:00"))
        except ValueError:
            raise DataError(f"timestamp.field value {current!r} is not an ISO-8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return int(moment.timestamp() * 1000)
    raise DataError(f"timestamp.field holds a {type(current).__name__}, not a time")


# -- Joda-Time patterns -------------------------------------------------------------------------

_JODA_TOKEN = re.compile(r"'([^']*)'|([A-Za-z])\2*|[^'A-Za-z]+")


class JodaFormatter:
    """Formats a datetime with the numeric subset of Joda-Time's ``DateTimeFormat`` patterns.

    Supported: ``'literal'``, ``Y``/``y`` (year), ``M`` (month; ``MMM``/``MMMM`` as English names),
    ``d``, ``H``, ``m``, ``s``, ``S`` (millis), ``D`` (day of year), ``w`` (ISO week), ``E``
    (English day name). Other letters are rejected so a typo fails the configuration.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._parts: list[Callable[[dt.datetime], str]] = []
        position = 0
        for match in _JODA_TOKEN.finditer(pattern):
            if match.start() != position:
                break
            position = match.end()
            literal, letter = match.group(1), match.group(2)
            text = match.group(0)
            if literal is not None:
                self._parts.append(_const(literal if literal else "'"))
            elif letter is not None:
                self._parts.append(_field(letter, len(text), pattern))
            else:
                self._parts.append(_const(text))
        if position != len(pattern):
            raise ConfigError(f"path.format {pattern!r} has an unterminated quote", key="path.format")

    def format(self, moment: dt.datetime) -> str:
        return "".join(part(moment) for part in self._parts)


def _const(text: str) -> Callable[[dt.datetime], str]:
    return lambda _m: text


def _field(letter: str, width: int, pattern: str) -> Callable[[dt.datetime], str]:
    numeric: dict[str, Callable[[dt.datetime], int]] = {
        "Y": lambda m: m.year,
        "y": lambda m: m.year,
        "d": lambda m: m.day,
        "H": lambda m: m.hour,
        "m": lambda m: m.minute,
        "s": lambda m: m.second,
        "S": lambda m: m.microsecond // 1000,
        "D": lambda m: m.timetuple().tm_yday,
        "w": lambda m: m.isocalendar()[1],
    }
    if letter == "M":
        if width >= 4:
            return lambda m: m.strftime("%B")
        if width == 3:
            return lambda m: m.strftime("%b")
        return lambda m: f"{m.month:0{width}d}"
    if letter == "E":
        return (lambda m: m.strftime("%A")) if width >= 4 else (lambda m: m.strftime("%a"))
    if letter in numeric:
        get = numeric[letter]
        if letter in "Yy" and width == 2:
            return lambda m: f"{get(m) % 100:02d}"
        return lambda m: f"{get(m):0{width}d}"
    raise ConfigError(f"path.format {pattern!r}: unsupported pattern letter {letter!r}", key="path.format")


# -- factory ------------------------------------------------------------------------------------

PARTITIONER_NAMES = (
    "DefaultPartitioner",
    "FieldPartitioner",
    "TimeBasedPartitioner",
    "DailyPartitioner",
    "HourlyPartitioner",
)


def short_partitioner_name(name: str) -> str:
    """``io.confluent.connect.storage.partitioner.FieldPartitioner`` / ``field`` → ``FieldPartitioner``."""
    short = name.removeprefix(_PREFIX).rsplit(".", 1)[-1]
    lowered = short.lower().removesuffix("partitioner").replace("-", "").replace("_", "")
    for known in PARTITIONER_NAMES:
        if known.lower().removesuffix("partitioner") == lowered:
            return known
    raise ConfigError(
        f"Unknown partitioner.class {name!r}: use one of {', '.join(PARTITIONER_NAMES)}", key="partitioner.class"
    )


def make_partitioner(settings: PartitionerSettings) -> Partitioner:
    """Build the partitioner ``settings`` name (raises :class:`ConfigError` for a bad setting)."""
    kind = short_partitioner_name(settings.partitioner_class)
    if kind == "DefaultPartitioner":
        return DefaultPartitioner()
    if kind == "FieldPartitioner":
        return FieldPartitioner(settings.field_names, settings.directory_delim)
    if kind == "DailyPartitioner":
        fmt = DAILY_PATH_FORMAT.replace("/", settings.directory_delim)
        return TimeBasedPartitioner(_with(settings, path_format=fmt, partition_duration_ms=86_400_000))
    if kind == "HourlyPartitioner":
        fmt = HOURLY_PATH_FORMAT.replace("/", settings.directory_delim)
        return TimeBasedPartitioner(_with(settings, path_format=fmt, partition_duration_ms=3_600_000))
    return TimeBasedPartitioner(settings)


def _with(settings: PartitionerSettings, **changes: Any) -> PartitionerSettings:
    return replace(settings, **changes)
