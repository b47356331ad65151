"""A connector's transforms and converters run on records given in a file, without Kafka (``sluice test``).

What ``rpk connect test`` is for Redpanda Connect pipelines: a connector file carries ``tests``,
each with ``input`` records and the ``expected`` output::

    tests:
      - name: routes raw topics and drops the ssn
        input:
          - {topic: people-raw, key: "7", value: {id: 7, ssn: "123"}}
        expected:
          - {topic: people, key: "7", value: {id: 7}}

The pieces are the runtime's own: :func:`sluice.worker.execution.transform_chain.build_chain` and the converters the
worker would configure (the connector's ``key.converter``/``value.converter`` or the worker
defaults). The direction follows the connector's kind:

- **source**: ``input`` records are what the task returns from ``poll()`` (``topic``, ``key``,
  ``value``, optional ``key_schema``/``value_schema`` in Connect's JSON schema form, ``headers``,
  ``partition``, ``timestamp``); they pass the transforms, then the converters, and ``expected``
  describes the Kafka records produced. An expected string is compared with the produced bytes as
  text; any other JSON value with the produced bytes parsed as JSON.
- **sink**: ``input`` records are Kafka records (``topic``, ``partition``, ``offset``, ``key``,
  ``value``, ``headers``, ``timestamp``; a string is its UTF-8 bytes, any other value its JSON);
  they pass the converters, then the transforms, and ``expected`` describes the records the
  sink task's ``put()`` receives (structs as objects, bytes as base64, decimals as numbers).

An expected record is compared only on the fields it gives.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import ConfigError, Converter, HeaderConverter, Schema, SinkRecord, SourceRecord
from sluice.converters.json import JsonConverter
from sluice.plugins import PluginKind
from sluice.worker.config.models import ConnectorConfig
from sluice.worker.execution.transform_chain import TransformChain, build_chain
from sluice.worker.worker import Worker

_SOURCE_INPUT = frozenset({"topic", "key", "value", "key_schema", "value_schema", "headers", "partition", "timestamp"})
_SINK_INPUT = frozenset({"topic", "partition", "offset", "key", "value", "headers", "timestamp"})
_SOURCE_EXPECTED = frozenset({"topic", "key", "value", "headers", "partition", "timestamp"})
_SINK_EXPECTED = frozenset({"topic", "partition", "offset", "key", "value", "headers", "timestamp"})
_CASE_KEYS = frozenset({"name", "input", "expected"})
_PIPELINE_KEYS = ("transforms", "predicates", "key.converter", "value.converter", "header.converter")


class CaseError(ValueError):
    """A test case that is malformed or that could not run; the message names the case and the record."""


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one test case: ``failures`` is empty when it passed."""

    name: str
    failures: tuple[str, ...]
    produced: int

    @property
    def passed(self) -> bool:
        return not self.failures


def plain(value: Any) -> Any:
    """``value`` as JSON data, so a record can be compared with (and shown as) what a file holds."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return value


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _encoded(value: Any) -> bytes | None:
    """A Kafka key, value or header from a file: text as its bytes, other JSON values as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _header_pairs(value: Any, where: str) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        return [(str(k), v) for k, v in value]
    raise CaseError(f"{where}: headers: expected an object or a list of [name, value] pairs")


class OfflinePipeline:
    """The transform chain and converters of one connector config, as its tasks would build them."""

    def __init__(self, config: Mapping[str, Any], worker: Worker) -> None:
        """Raises :class:`ConfigError` naming the key when a transform, predicate or converter is misconfigured."""
        # Only the keys the pipeline reads are resolved: a placeholder elsewhere (a database
        # password) may name a provider or a secret this machine does not have.
        used = {k: v for k, v in config.items() if k.startswith(_PIPELINE_KEYS)}
        resolved = {**config, **worker.resolve(used)}
        common = ConnectorConfig.parse(resolved)
        self.kind = worker.plugins.connector(common.connector_class).kind
        if self.kind not in (PluginKind.SOURCE, PluginKind.SINK):
            raise ConfigError(f"{common.connector_class} is neither a source nor a sink connector", key="connector.class")
        # The worker's own choice of converters and their settings (connector override or worker default).
        converters: tuple[Converter, Converter, HeaderConverter] = worker._converters(common, resolved)
        self.key_converter, self.value_converter, self.header_converter = converters
        self.chain = build_chain(resolved, worker.plugins)
        self._schemas = JsonConverter()

    def close(self) -> None:
        if self.chain is not None:
            self.chain.close()

    # -- running records -------------------------------------------------------------------------

    def _transform(self, record: Any, where: str) -> list[Any]:
        """``record`` through the chain one step at a time, so an error names the transform."""
        records = [record]
        for step in self.chain.steps if self.chain is not None else ():
            try:
                records = TransformChain((step,))(records)
            except Exception as exc:  # any transform error fails the case, naming the record
                raise CaseError(f"{where}: transform {step.alias} failed: {exc}") from exc
            if not records:
                break
        return records

    def _schema(self, value: Any, where: str, key: str) -> Schema | None:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise CaseError(f"{where}: {key}: expected a Connect JSON schema object such as {{\"type\": \"string\"}}")
        try:
            return self._schemas.as_connect_schema(value)
        except Exception as exc:  # the converter says what is wrong with the schema
            raise CaseError(f"{where}: {key}: {exc}") from exc

    def run_source(self, item: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        """One record as a source task returns it → the Kafka records produced, as plain data."""
        record = SourceRecord(
            topic=str(item["topic"]),
            value=item.get("value"),
            value_schema=self._schema(item.get("value_schema"), where, "value_schema"),
            key=item.get("key"),
            key_schema=self._schema(item.get("key_schema"), where, "key_schema"),
            partition=item.get("partition"),
            timestamp=item.get("timestamp"),
            headers=tuple(_header_pairs(item.get("headers"), where)) or None,
        )
        produced = []
        for r in self._transform(record, where):
            try:
                key = None
                if r.key is not None or r.key_schema is not None:  # as the source runner does
                    key = self.key_converter.from_connect_data(r.topic, r.key_schema, r.key)
                value = self.value_converter.from_connect_data(r.topic, r.value_schema, r.value)
                headers = {k: self.header_converter.from_connect_header(r.topic, k, None, v) for k, v in r.headers or ()}
            except Exception as exc:  # a converter error fails the case, naming the record
                raise CaseError(f"{where}: converting to bytes failed: {exc}") from exc
            produced.append(
                {"topic": r.topic, "partition": r.partition, "timestamp": r.timestamp, "key": key, "value": value,
                 "headers": headers}
            )
        return produced

    def run_sink(self, item: Mapping[str, Any], index: int, where: str) -> list[dict[str, Any]]:
        """One Kafka record → the records the sink task receives, as plain data."""
        topic = str(item["topic"])
        try:
            key = self.key_converter.to_connect_data(topic, _encoded(item.get("key")))
            value = self.value_converter.to_connect_data(topic, _encoded(item.get("value")))
            headers = tuple(
                (k, self.header_converter.to_connect_header(topic, k, _encoded(v)).value)
                for k, v in _header_pairs(item.get("headers"), where)
            )
        except Exception as exc:  # a converter error fails the case, naming the record
            raise CaseError(f"{where}: converting from bytes failed: {exc}") from exc
        record = SinkRecord(
            topic, int(item.get("partition", 0)), int(item.get("offset", index)), value.value, value.schema,
            key.value, key.schema, item.get("timestamp"), 1 if item.get("timestamp") is not None else 0, headers or None,
        )
        return [
            {"topic": r.topic, "partition": r.partition, "offset": r.kafka_offset, "timestamp": r.timestamp,
             "key": plain(r.key), "value": plain(r.value), "headers": {k: plain(v) for k, v in r.headers or ()}}
            for r in self._transform(record, where)
        ]

    # -- test cases ------------------------------------------------------------------------------

    def run_case(self, case: Any, number: int) -> CaseResult:
        """Run one test case from a file; a malformed case raises :class:`CaseError`."""
        label = f"case {number}"
        if not isinstance(case, Mapping):
            raise CaseError(f"{label}: expected an object with name, input and expected")
        label = f"case {case.get('name') or number}"
        unknown = sorted(set(case) - _CASE_KEYS)
        if unknown:
            raise CaseError(f"{label}: unknown key {unknown[0]} (a case has {', '.join(sorted(_CASE_KEYS))})")
        inputs, expected = case.get("input"), case.get("expected")
        if not isinstance(inputs, list) or not isinstance(expected, list):
            raise CaseError(f"{label}: input and expected must both be lists of records")
        source = self.kind is PluginKind.SOURCE
        outputs: list[dict[str, Any]] = []
        for i, item in enumerate(inputs, 1):
            where = f"{label}: input record {i}"
            _check_fields(item, _SOURCE_INPUT if source else _SINK_INPUT, where)
            outputs.extend(self.run_source(item, where) if source else self.run_sink(item, i - 1, where))
        failures = compare_records(expected, outputs, label, _SOURCE_EXPECTED if source else _SINK_EXPECTED, source)
        return CaseResult(str(case.get("name") or number), tuple(failures), len(outputs))


def _check_fields(item: Any, allowed: frozenset[str], where: str) -> None:
    if not isinstance(item, Mapping):
        raise CaseError(f"{where}: expected an object")
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise CaseError(f"{where}: unknown field {unknown[0]} (a record here has {', '.join(sorted(allowed))})")
    if "topic" not in item:
        raise CaseError(f"{where}: topic is missing")


def _field_matches(expected: Any, actual: Any, produced_bytes: bool) -> tuple[bool, Any]:
    """Whether ``actual`` is ``expected``, and ``actual`` in the form it was compared in."""
    if not produced_bytes or actual is None or not isinstance(actual, bytes):
        return expected == actual, actual
    text = actual.decode("utf-8", errors="replace")
    if isinstance(expected, str):
        return expected == text, text
    try:
        parsed = json.loads(text)
    except ValueError:
        return False, text
    return expected == parsed, parsed


def compare_records(
    expected: Sequence[Any], actual: Sequence[Mapping[str, Any]], label: str, fields: frozenset[str], produced: bool
) -> list[str]:
    """A line per difference between the expected records and the ones that came out."""
    failures: list[str] = []
    if len(expected) != len(actual):
        failures.append(f"{label}: expected {len(expected)} record(s), got {len(actual)}")
    for i, (want, got) in enumerate(zip(expected, actual), 1):
        if not isinstance(want, Mapping):
            raise CaseError(f"{label}: expected record {i}: expected an object")
        unknown = sorted(set(want) - fields)
        if unknown:
            raise CaseError(f"{label}: expected record {i}: unknown field {unknown[0]} (compare on {', '.join(sorted(fields))})")
        for name in sorted(want):
            if name == "headers":
                if not isinstance(want["headers"], Mapping):
                    raise CaseError(f"{label}: expected record {i}: headers: expected an object of name: value")
                actual_headers = got.get("headers") or {}
                for header, value in want["headers"].items():
                    ok, shown = _field_matches(value, actual_headers.get(header), produced)
                    if not ok:
                        failures.append(f"{label}: record {i}: header {header}: expected {_shown(value)}, got {_shown(shown)}")
                continue
            ok, shown = _field_matches(want[name], got.get(name), produced and name in ("key", "value"))
            if not ok:
                failures.append(f"{label}: record {i}: {name}: expected {_shown(want[name])}, got {_shown(shown)}")
    return failures
