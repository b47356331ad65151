"""Backfill specs: what is accepted, and errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.worker.backfill.models import (
    JdbcToTopicSpec,
    SpecProblem,
    check_spec,
    masked_spec,
    parse_spec,
    spec_to_json,
)


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


def test_check_spec_lists_every_problem_with_its_path() -> None:
    spec, problems = check_spec(
        jdbc_spec(
            source={"table": "t", "num.partitions": 0},
            target={"topic": "x", "producer": {"acks": "1"}},
            bogus=1,
        )
    )
    assert spec is None
    found = {p.path: p.message for p in problems}
    assert found[("source", "connection.url")] == "Field required"  # one part: the key has a dot in it
    assert "greater than or equal to 1" in found[("source", "num.partitions")]
    assert "acks=all" in found[("target", "producer")]
    assert found[("bogus",)] == "Extra inputs are not permitted"
    assert [p.as_json()["key"] for p in problems][:1] == ["source.connection.url"]
    with pytest.raises(ConfigError) as info:
        parse_spec(jdbc_spec(source={"table": "t", "num.partitions": 0}))
    assert str(info.value).startswith("source.connection.url: Field required; source.num.partitions: ")
    assert info.value.key == "source.connection.url"
    assert set(info.value.problems) == {"source.connection.url", "source.num.partitions"}


def test_check_spec_of_a_good_spec_and_of_no_object() -> None:
    spec, problems = check_spec(jdbc_spec())
    assert isinstance(spec, JdbcToTopicSpec) and problems == []
    assert check_spec([1]) == (None, [SpecProblem((), "a backfill spec must be a JSON object")])
    assert SpecProblem((), "x").key == "spec"
    _, (wrong_kind,) = check_spec(jdbc_spec(kind="nope"))
    assert wrong_kind.path == ("kind",) and "jdbc_to_topic" in wrong_kind.message
