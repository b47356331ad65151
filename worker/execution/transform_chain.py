"""A connector's single message transforms, in order, each with its optional predicate.

Configured exactly as in Kafka Connect::

    transforms=route,mask
    transforms.route.type=org.apache.kafka.connect.transforms.RegexRouter
    transforms.route.regex=(.*)-raw
    transforms.route.replacement=$1
    transforms.mask.type=MaskField$Value
    transforms.mask.fields=ssn
    transforms.mask.predicate=isPerson
    transforms.mask.negate=false
    predicates=isPerson
    predicates.isPerson.type=TopicNameMatches
    predicates.isPerson.pattern=people.*

The chain runs on whole batches: a transform without a predicate gets the batch in one
``apply_batch`` call; a predicate splits the batch record by record only for its own transform.
A consumed :class:`~connectors.api.SinkRecordBatch` goes first through the leading steps that can
transform columns (``apply_columns``), so a chain of such transforms never builds a record object.
When every step keeps raw values raw (:meth:`TransformChain.keeps_raw_values`), a sink task that
takes raw values gets them through the chain, rewritten.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from sluice.connectors.api import (
    ConfigError,
    Predicate,
    SinkRecord,
    SinkRecordBatch,
    SourceRecord,
    Transformation,
    WireFormat,
)
from sluice.plugins import PluginKind, PluginRegistry
from sluice.worker.config.models import sub_config

log = logging.getLogger(__name__)

R = TypeVar("R", SourceRecord, SinkRecord)

_RUNTIME_KEYS = ("type", "predicate", "negate")


@dataclass(frozen=True)
class TransformStep:
    """One configured transform."""

    alias: str
    transform: Transformation
    predicate: Predicate | None = None
    negate: bool = False


class TransformChain:
    """Applies every step to a batch, in order; a record a step drops is gone for later steps."""

    def __init__(self, steps: Sequence[TransformStep]) -> None:
        self.steps = tuple(steps)

    @overload
    def __call__(self, records: list[R]) -> list[R]: ...

    @overload
    def __call__(self, records: Sequence[R]) -> Sequence[R]: ...

    def __call__(self, records: Sequence[R]) -> Sequence[R]:
        """The transformed records: a list for a list, a batch or a list for a batch."""
        steps = self.steps
        if isinstance(records, SinkRecordBatch):
            batch, steps = self._columns(records)
            if not steps:
                # A renamed batch stays a batch: it keeps the consumed topic in original_topic.
                return batch  # type: ignore[return-value]
            records = batch.records()  # type: ignore[assignment]
        elif not isinstance(records, list):
            records = list(records)
        for step in steps:
            if step.predicate is None:
                records = step.transform.apply_batch(records)
            else:
                test, negate, apply = step.predicate.test, step.negate, step.transform.apply
                out: list[R] = []
                for record in records:
                    if test(record) is not negate:
                        result = apply(record)
                        if result is not None:
                            out.append(result)
                    else:
                        out.append(record)
                records = out
            if not records:
                break
        return records

    def keeps_raw_values(self, wire: WireFormat) -> bool:
        """Whether a batch with raw values in ``wire``'s format keeps them through every step: no
        step has a predicate (those go record by record) and each transform says it keeps them
        (:meth:`~connectors.api.Transformation.keeps_raw_values`), asked once."""
        return all(step.predicate is None and step.transform.keeps_raw_values(wire) for step in self.steps)

    def _columns(self, batch: SinkRecordBatch) -> tuple[SinkRecordBatch, tuple[TransformStep, ...]]:
        """Apply the leading steps that can work on columns; the batch and the steps left over."""
        steps = self.steps
        for i, step in enumerate(steps):
            if step.predicate is not None:
                return batch, steps[i:]
            out = step.transform.apply_columns(batch)
            if out is None:
                return batch, steps[i:]
            batch = out
            if not len(batch):
                return batch, ()
        return batch, ()

    def close(self) -> None:
        for step in self.steps:
            try:
                step.transform.close()
            except Exception:  # closing must reach every transform
                log.exception("Error closing transform %s", step.alias)


def _aliases(value: str | None, key: str) -> list[str]:
    aliases = [a.strip() for a in (value or "").split(",") if a.strip()]
    duplicates = sorted({a for a in aliases if aliases.count(a) > 1})
    if duplicates:
        raise ConfigError(f"Duplicate alias provided in {key}: {', '.join(duplicates)}", key=key)
    return aliases


def _bool(value: Any, key: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"Invalid value {value!r} for configuration {key}: expected true or false", key=key)


def build_chain(config: Mapping[str, Any], registry: PluginRegistry) -> TransformChain | None:
    """The chain a connector config describes (``None`` without transforms); every error is a
    :class:`ConfigError` naming the key at fault."""
    transforms = _aliases(config.get("transforms"), "transforms")
    predicate_aliases = _aliases(config.get("predicates"), "predicates")
    predicates: dict[str, Predicate] = {}
    for alias in predicate_aliases:
        type_key = f"predicates.{alias}.type"
        info = registry.resolve(str(config.get(type_key) or ""), (PluginKind.PREDICATE,), type_key)
        predicate = info.cls()
        settings = {k: v for k, v in sub_config(config, f"predicates.{alias}.").items() if k != "type"}
        _configure(predicate, settings, f"predicates.{alias}.")
        predicates[alias] = predicate
    steps = []
    for alias in transforms:
        prefix = f"transforms.{alias}."
        settings = sub_config(config, prefix)
        info = registry.resolve(str(settings.get("type") or ""), (PluginKind.TRANSFORMATION,), f"{prefix}type")
        predicate = None
        if settings.get("predicate"):
            predicate = predicates.get(str(settings["predicate"]))
            if predicate is None:
                raise ConfigError(
                    f"{prefix}predicate: transform {alias} refers to predicate {settings['predicate']!r}, which is not in predicates "
                    f"({', '.join(predicate_aliases) or 'none defined'})",
                    key=f"{prefix}predicate",
                )
        negate = _bool(settings["negate"], f"{prefix}negate") if "negate" in settings else False
        if negate and predicate is None:
            raise ConfigError(f"{prefix}negate: negate needs {prefix}predicate", key=f"{prefix}negate")
        transform = info.cls()
        _configure(transform, {k: v for k, v in settings.items() if k not in _RUNTIME_KEYS}, prefix)
        steps.append(TransformStep(alias, transform, predicate, negate))
    return TransformChain(steps) if steps else None


def _configure(plugin: Transformation | Predicate, settings: Mapping[str, Any], prefix: str) -> None:
    try:
        plugin.configure(settings)
    except ConfigError as exc:
        if exc.problems:
            problems = {f"{prefix}{k}": v for k, v in exc.problems.items()}
            message = "; ".join(f"{k}: {v}" for k, v in problems.items())
            raise ConfigError(f"Invalid configuration: {message}", key=next(iter(problems)), problems=problems) from exc
        raise ConfigError(f"{prefix.rstrip('.')}: {exc}", key=prefix.rstrip(".")) from exc
