"""Single message transforms and predicates (Connect's ``Transformation`` and ``Predicate``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.records import SinkRecord, SinkRecordBatch, SourceRecord
from sluice.connectors.api.wire import WireFormat

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
        predicate. A batch comes with raw values (:attr:`SinkRecordBatch.raw_values`) only when
        :meth:`keeps_raw_values` said so for their format. Thread: the task thread.
        """
        return None

    def keeps_raw_values(self, wire: WireFormat) -> bool:
        """Whether :meth:`apply_columns` keeps raw values in ``wire``'s format raw: given a batch
        whose :attr:`~SinkRecordBatch.raw_values` are in that format, it returns a batch whose raw
        values (and raw keys, if it had them) are in the same format, the bytes the converter would
        write for the transformed records, and whose ``values`` read as the records
        :meth:`apply` gives; or ``None`` for a batch it cannot do so (its records are then decoded
        and transformed one by one). A sink task that takes raw values
        (:attr:`~connectors.api.SinkTask.value_format`) gets them through a chain of transforms
        only when every one keeps them. Declared once: the runtime asks after :meth:`configure`,
        before the first batch. The default keeps none. Thread: the task thread.
        """
        return False

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
