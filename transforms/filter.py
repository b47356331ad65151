"""Filter: drop records (with a predicate, the ones it matches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from sluice.connectors.api.transform import R
from sluice.transforms._support import BuiltinTransformation

__all__ = ["Filter"]


class Filter(BuiltinTransformation):
    """Drop every record it is applied to; pair it with ``predicate`` (and ``negate``) to choose which."""

    aliases: ClassVar[tuple[str, ...]] = ("org.apache.kafka.connect.transforms.Filter",)

    def apply(self, record: R) -> None:
        return None

    def apply_batch(self, records: Sequence[R]) -> list[R]:
        return []
