"""Single message transforms and predicates (Connect's ``Transformation`` and ``Predicate``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.records import SinkRecord, SinkRecordBatch, SourceRecord

R = TypeVar("R", SourceRecord, SinkRecord)


class Transformation(abc.ABC):
    """Changes, reroutes or drops one record at a time.

    :meth:`apply_batch` is what the runtime calls; override it when a whole batch can be done
    faster than record by record. Thread: the task thread.
    """

    Config: ClassVar[type[PluginConfig]] = PluginConfig
    version: ClassVar[str] = "0.0.0"

    def configure(self, config: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Apply the transform's settings (``transforms.<alias>.*`` without the prefix)."""

    @abc.abstractmethod
    def apply(self, record: R) -> R | None:
        """Return the transformed record, or ``None`` to drop it."""

    def apply_batch(self, records: Sequence[R]) -> list[R]:
        apply = self.apply
        out = []
        for record in records:
            result = apply(record)
            if result is not None:
                out.append(result)
        return out

    def apply_columns(self, batch: SinkRecordBatch) -> SinkRecordBatch | None:
        """Transform a sink batch column by column, or return ``None`` when this transform cannot
        (then :meth:`apply_batch` gets its records). A chain of transforms that all work on columns
        never builds a record object, which costs more than most transforms do. Only without a
        predicate. Thread: the task thread.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class Predicate(abc.ABC):
    """Decides whether a transform applies to a record."""

    Config: ClassVar[type[PluginConfig]] = PluginConfig
    version: ClassVar[str] = "0.0.0"

    def configure(self, config: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Apply the predicate's settings (``predicates.<alias>.*`` without the prefix)."""

    @abc.abstractmethod
    def test(self, record: SourceRecord | SinkRecord) -> bool: ...
