"""Topic routing SMTs: RegexRouter and TimestampRouter."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field, field_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.records import SinkRecordBatch
from sluice.connectors.api.schema import Timestamp
from sluice.connectors.api.transform import R
from sluice.transforms._support import BuiltinTransformation, DerivedSinkRecordBatch, with_topic
from sluice.transforms.java_time import JavaDateFormat

__all__ = ["RegexRouter", "TimestampRouter", "java_replacement"]

_PKG = "org.apache.kafka.connect.transforms"
_CACHE_LIMIT = 4096


def java_replacement(replacement: str) -> str:
    r"""A Java ``Matcher`` replacement (``$1``, ``${name}``, ``\$``) as a Python ``expand`` template."""
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        ch = replacement[i]
        if ch == "\\":
            if i + 1 >= n:
                raise ConfigError("character to be escaped is missing", key="replacement")
            out.append(re.escape(replacement[i + 1]) if replacement[i + 1] != "\\" else "\\\\")
            i += 2
        elif ch == "$":
            if i + 1 < n and replacement[i + 1] == "{":
                end = replacement.find("}", i + 2)
                if end < 0:
                    raise ConfigError("named capturing group is missing trailing '}'", key="replacement")
                out.append(f"\\g<{replacement[i + 2 : end]}>")
                i = end + 1
            else:
                j = i + 1
                while j < n and replacement[j].isdigit():
                    j += 1
                if j == i + 1:
                    raise ConfigError("Illegal group reference in replacement", key="replacement")
                out.append(f"\\g<{replacement[i + 1 : j]}>")
                i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class RegexRouterConfig(PluginConfig):
    """Settings of RegexRouter."""

    regex: str = Field(description="Regular expression the whole topic name must match.")
    replacement: str = Field(description="Replacement string; $1 / ${name} refer to capture groups.")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value


class RegexRouter(BuiltinTransformation):
    """Rename the topic when the whole name matches ``regex`` (Java's ``Matcher.matches``).

    Topic names repeat, so the result for each name is cached and a batch costs one dict lookup
    per record.
    """

    Config = RegexRouterConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.RegexRouter",)

    def _configured(self, config: RegexRouterConfig) -> None:
        self._regex = re.compile(config.regex)
        self._template = java_replacement(config.replacement)
        self._routes: dict[str, str] = {}
        for ref in re.findall(r"\\g<([^>]*)>", self._template):
            if not (ref.isdigit() and int(ref) <= self._regex.groups) and ref not in self._regex.groupindex:
                raise ConfigError(f"No group {ref} in regex {config.regex!r}", key="replacement")

    def route(self, topic: str) -> str:
        """The new name of ``topic`` (itself when the regex does not match)."""
        routed = self._routes.get(topic)
        if routed is None:
            match = self._regex.fullmatch(topic)
            routed = match.expand(self._template) if match else topic
            if len(self._routes) >= _CACHE_LIMIT:
                self._routes.clear()
            self._routes[topic] = routed
        return routed

    def apply(self, record: R) -> R:
        routed = self.route(record.topic)
        return record if routed == record.topic else with_topic(record, routed)

    def apply_columns(self, batch: SinkRecordBatch) -> SinkRecordBatch | None:
        """A consumed batch has one topic: one lookup renames all of it."""
        routed = self.route(batch.topic)
        return batch if routed == batch.topic else DerivedSinkRecordBatch(batch, topic=routed)

    def apply_batch(self, records: Sequence[R]) -> list[R]:
        routes = self._routes
        route = self.route
        out: list[R] = []
        append = out.append
        for record in records:
            topic = record.topic
            routed = routes.get(topic) or route(topic)
            append(record if routed == topic else with_topic(record, routed))
        return out


class TimestampRouterConfig(PluginConfig):
    """Settings of TimestampRouter."""

    topic_format: str = Field(
        "${topic}-${timestamp}", description="Topic name with ${topic} and ${timestamp} placeholders."
    )
    timestamp_format: str = Field("yyyyMMdd", description="java.text.SimpleDateFormat pattern for ${timestamp} (UTC).")

    @field_validator("timestamp_format")
    @classmethod
    def _pattern(cls, value: str) -> str:
        try:
            JavaDateFormat(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value


class TimestampRouter(BuiltinTransformation):
    """Route to ``topic.format`` with the record's timestamp formatted by ``timestamp.format`` (UTC).

    Formatted names are cached per topic and per unit of the pattern's finest field (a day for
    ``yyyyMMdd``), so most records cost a dict lookup.
    """

    Config = TimestampRouterConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.TimestampRouter",)

    def _configured(self, config: TimestampRouterConfig) -> None:
        self._format = JavaDateFormat(config.timestamp_format)
        self._topic_format = config.topic_format
        self._unit = self._format.unit_ms
        self._names: dict[tuple[str, int], str] = {}

    def apply(self, record: R) -> R:
        timestamp = record.timestamp
        if timestamp is None:
            raise DataError(f"TimestampRouter: timestamp missing on record {record.topic}")
        key = (record.topic, timestamp // self._unit)
        name = self._names.get(key)
        if name is None:
            formatted = self._format.format(Timestamp.from_int(timestamp))
            name = self._topic_format.replace("${topic}", record.topic).replace("${timestamp}", formatted)
            if len(self._names) >= _CACHE_LIMIT:
                self._names.clear()
            self._names[key] = name
        return with_topic(record, name)
