"""The checks of Debezium's shared keys apply to any CDC source's config model that declares them."""

from __future__ import annotations

import pytest
from pydantic import Field

from sluice.connectors.api import ConfigError
from sluice.connectors.cdc.config import CdcSourceConfig


class ToyConfig(CdcSourceConfig):
    """A second database source's model, declaring a few of the shared keys."""

    topic_prefix: str = Field(description="Prefix of every topic.")
    table_include_list: list[str] = Field(default_factory=list, description="Regexes of tables to capture.")
    skipped_operations: list[str] = Field(default_factory=lambda: ["t"], description="Operations not emitted.")
    signal_enabled_channels: list[str] = Field(default_factory=lambda: ["source"], description="Signal channels.")
    signal_kafka_bootstrap_servers: str = Field("", validate_default=True, description="Kafka of the signals.")


def problems(**raw: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        ToyConfig.parse({"topic.prefix": "toy", **raw})
    return dict(caught.value.problems or {})


def test_shared_keys_are_checked_and_named_as_debezium_names_them() -> None:
    cfg = ToyConfig.parse({"topic.prefix": "toy", "table.include.list": "db\\.a, db\\.b", "skipped.operations": "none"})
    assert cfg.table_include_list == ["db\\.a", "db\\.b"] and cfg.skipped_operations == []
    assert "unknown operations" in problems(**{"skipped.operations": "c,x"})["skipped.operations"]
    assert "invalid regular expression" in problems(**{"table.include.list": "("})["table.include.list"]
    assert "unknown channel(s) jmx" in problems(**{"signal.enabled.channels": "jmx"})["signal.enabled.channels"]
    assert "required" in problems(**{"signal.enabled.channels": "kafka"})["signal.kafka.bootstrap.servers"]


def test_the_task_config_round_trips_with_lists_as_debezium_writes_them() -> None:
    cfg = ToyConfig.parse({"topic.prefix": "toy", "skipped.operations": "none", "table.include.list": "a,b"})
    task = cfg.to_task_config()
    assert task["skipped.operations"] == "none" and task["table.include.list"] == "a,b"
    assert ToyConfig.from_task_config({**task, "task.class": "ignored"}) == cfg
