"""Which PostgreSQL CDC connector writes a topic: what guards a backfill's hand-off.

A ``jdbc_to_topic`` backfill without ``target.cdc`` writes what the JDBC source writes: keys
that are structs without a schema name, values that are rows. A CDC connector keys the same row
``<prefix>.<schema>.<table>.Key`` and writes Debezium envelopes. Written into the CDC connector's
topic, each row would have two keys (the bytes differ, so the partitions usually do too) and two
record shapes, and a consumer could apply a row's changes out of order. The worker asks
:func:`cdc_topic_owner` about every stored connector when such a backfill is submitted (the
``jdbc_to_topic`` kind's ``topic_owner`` hook, :mod:`~sluice.connectors.backfill.builtin_kinds`).

A connector reaches a topic when:

* its topic tracking says it has written to it (this covers every routing transform, after the
  fact), or
* its naming does: ``<topic.prefix>.<schema>.<table>`` (sanitised as the connector does) of a
  table it captures (its include/exclude lists, parsed by the connector's own code), taken either
  from the backfill's source table or from the topic's own name, then through its RegexRouter
  transforms (a router with a predicate may or may not apply, so both outcomes count).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.kinds import TopicOwner
from sluice.connectors.cdc.envelope import sanitize
from sluice.connectors.source.postgres_cdc.catalog import SYSTEM_SCHEMAS, TableFilter
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.transforms.routing import java_replacement

#: The last part of ``connector.class`` of the PostgreSQL CDC source (its own name, Debezium's).
CDC_CLASSES = ("PostgresCdcSource", "PostgresConnector")


def is_postgres_cdc(config: Mapping[str, Any]) -> bool:
    return str(config.get("connector.class") or "").rsplit(".", 1)[-1] in CDC_CLASSES


def _literal(value: Any) -> str | None:
    """A config value the worker would not resolve further (``${provider:…}`` is unknown here)."""
    text = str(value or "").strip()
    return None if not text or text.startswith("${") else text


def _split(value: Any) -> list[str]:
    return [part.strip() for part in str(value or "").split(",") if part.strip()]


def _capture_rule(config: Mapping[str, Any]) -> Callable[[str, str], bool]:
    """The connector's table filter; a config this code cannot parse (a key resolved only by the
    worker) falls back to every user table, so the guard errs towards asking for ``target.cdc``."""
    literal = {k: v for k, v in config.items() if _literal(v) is not None}
    try:
        return TableFilter(PostgresCdcConfig.from_task_config(literal)).captures
    except (ConfigError, re.error):
        return lambda schema, _table: schema not in SYSTEM_SCHEMAS and not schema.startswith("pg_")


def _candidate_tables(topic: str, source_table: str, prefix: str) -> Iterator[tuple[str, str]]:
    schema, _, table = source_table.rpartition(".")
    yield (schema or "public"), table
    if topic.startswith(prefix + "."):
        parts = topic[len(prefix) + 1 :].split(".")
        if len(parts) == 2 and all(parts):
            yield parts[0], parts[1]


def _routes(topic: str, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every topic the connector's RegexRouters may turn ``topic`` into, with how."""
    outcomes = [(topic, "")]
    for alias in _split(config.get("transforms")):
        key = f"transforms.{alias}."
        if str(config.get(key + "type") or "").rsplit(".", 1)[-1] != "RegexRouter":
            continue
        try:
            regex = re.compile(str(config.get(key + "regex") or ""))
            template = java_replacement(str(config.get(key + "replacement") or ""))
        except (re.error, ConfigError):
            continue  # the connector itself refuses such a router
        routed: list[tuple[str, str]] = []
        for name, how in outcomes:
            match = regex.fullmatch(name)
            if match is None:
                routed.append((name, how))
                continue
            routed.append((match.expand(template), f"{how}, renamed by its transform {alias}"))
            if config.get(key + "predicate"):
                routed.append((name, how))
        outcomes = routed
    return outcomes


def cdc_topic_owner(
    topic: str, source_table: str, name: str, config: Mapping[str, Any], written: Collection[str] = ()
) -> TopicOwner | None:
    """The CDC connector ``name`` (``config``) if it writes ``topic``; ``None`` otherwise or when it
    is not a PostgreSQL CDC connector. ``written``: the topics its tracking recorded."""
    if not is_postgres_cdc(config):
        return None
    transformed = bool(_split(config.get("transforms")))
    if topic in written:
        return TopicOwner(name, "it has written to that topic", transformed)
    prefix = _literal(config.get("topic.prefix"))
    if prefix is None:
        return None
    captures = _capture_rule(config)
    for schema, table in _candidate_tables(topic, source_table, prefix):
        if not captures(schema, table):
            continue
        for routed, how in _routes(sanitize(f"{prefix}.{schema}.{table}"), config):
            if routed == topic:
                return TopicOwner(name, f"topic.prefix {prefix} + table {schema}.{table}{how}", transformed)
    return None
