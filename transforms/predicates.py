"""Predicates for conditional transforms (KIP-585): TopicNameMatches, HasHeaderKey, RecordIsTombstone."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.records import SinkRecord, SourceRecord
from sluice.transforms._support import BuiltinPredicate

__all__ = ["HasHeaderKey", "RecordIsTombstone", "TopicNameMatches"]

_PKG = "org.apache.kafka.connect.transforms.predicates"


class TopicNameMatchesConfig(PluginConfig):
    """Settings of TopicNameMatches."""

    pattern: str = Field(description="Regular expression the whole topic name must match.", min_length=1)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value


class TopicNameMatches(BuiltinPredicate):
    """True when the whole topic name matches ``pattern``; answers are cached per topic."""

    Config = TopicNameMatchesConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.TopicNameMatches",)

    def _configured(self, config: TopicNameMatchesConfig) -> None:
        self._pattern = re.compile(config.pattern)
        self._answers: dict[str, bool] = {}

    def test(self, record: SourceRecord | SinkRecord) -> bool:
        topic = record.topic
        answer = self._answers.get(topic)
        if answer is None:
            answer = self._pattern.fullmatch(topic) is not None
            if len(self._answers) >= 4096:
                self._answers.clear()
            self._answers[topic] = answer
        return answer


class HasHeaderKeyConfig(PluginConfig):
    """Settings of HasHeaderKey."""

    name: str = Field(description="The header name to look for.", min_length=1)


class HasHeaderKey(BuiltinPredicate):
    """True when at least one header has the key ``name``."""

    Config = HasHeaderKeyConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.HasHeaderKey",)

    def _configured(self, config: HasHeaderKeyConfig) -> None:
        self._name = config.name

    def test(self, record: SourceRecord | SinkRecord) -> bool:
        headers = record.headers
        if not headers:
            return False
        name = self._name
        return any(h[0] == name for h in headers)


class RecordIsTombstone(BuiltinPredicate):
    """True when the record's value is null."""

    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.RecordIsTombstone",)

    def test(self, record: SourceRecord | SinkRecord) -> bool:
        return record.value is None
