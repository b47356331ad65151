"""Backfill specs: what is accepted, and errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.worker.backfill.models import JdbcToTopicSpec, masked_spec, parse_spec, spec_to_json


def jdbc_spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "id": "orders",
        "kind": "jdbc_to_topic",
        "source": {
            "connection.url": "jdbc:postgresql://db/shop",
            "connection.password": "pw",
            "table": "public.orders",
        },
        "target": {"topic": "orders"},
    }
    spec.update(changes)
    return spec


def test_a_minimal_jdbc_spec_gets_the_defaults() -> None:
    spec = parse_spec(jdbc_spec())
    assert isinstance(spec, JdbcToTopicSpec)
    assert spec.source.num_partitions == 4
    assert spec.target.partitioner == "crc32"
    assert spec.target.value_converter_schemas_enable is True
    assert spec.schedule is None


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"source": {"table": "t"}}, "source.connection.url"),
        (
            {"source": {"connection.url": "jdbc:postgresql://db/shop", "table": "t", "num.partitions": 0}},
            "source.num.partitions",
        ),
        ({"source": {"connection.url": "jdbc:postgresql://db/shop", "table": "t", "tabel": "t"}}, "source.tabel"),
        ({"target": {}}, "target.topic"),
        ({"id": "has space"}, "id"),
        ({"schedule": {"cron": "every day"}}, "schedule.cron"),
        ({"kind": "nope"}, "kind"),
    ],
)
def test_errors_name_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(jdbc_spec(**change))
    assert info.value.key == key
    assert key in str(info.value)


def test_topic_range_offsets_and_timestamps_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="start.offsets or start.timestamp.ms"):
        parse_spec(
            {
                "id": "r",
                "kind": "topic_to_sink",
                "source": {"topic": "t", "start.offsets": {"0": 1}, "start.timestamp.ms": 5},
                "target": {"config": {"connector.class": "JdbcSink"}},
            }
        )


def test_sink_target_needs_a_connector_class() -> None:
    with pytest.raises(ConfigError, match="target.config: .*connector.class"):
        parse_spec({"id": "r", "kind": "topic_to_sink", "source": {"topic": "t"}, "target": {"config": {}}})


def test_round_trip_keeps_secrets_for_the_store_and_masks_them_for_output() -> None:
    spec = parse_spec(jdbc_spec(schedule={"cron": "0 3 * * *"}))
    stored = spec_to_json(spec)
    assert stored["source"]["connection.password"] == "pw"
    assert parse_spec(stored) == spec
    shown = masked_spec(spec)
    assert shown["source"]["connection.password"] == "[hidden]"
    assert shown["schedule"] == {"cron": "0 3 * * *", "timezone": "UTC"}
