"""``topic.creation.*`` (KIP-158): which group takes a topic, with what settings, and which configs are refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.runners.source import SourceTaskRunner
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.topic_creation import TopicCreationConfig
from sluice.worker.worker import Worker

DEFAULTS = {"topic.creation.default.partitions": "3", "topic.creation.default.replication.factor": "-1"}


def parse(**keys: Any) -> TopicCreationConfig:
    config = TopicCreationConfig.parse({"name": "src", **{k.replace("_", "."): v for k, v in keys.items()}})
    assert config is not None
    return config


def test_no_topic_creation_key_means_no_creation() -> None:
    assert TopicCreationConfig.parse({"name": "src", "topic": "t", "producer.override.acks": "1"}) is None


def test_every_topic_falls_to_the_default_group_with_its_settings() -> None:
    config = TopicCreationConfig.parse({**DEFAULTS, "topic.creation.default.cleanup.policy": "compact"})
    assert config is not None
    group = config.group_for("anything")
    assert (group.name, group.partitions, group.replication_factor) == ("default", 3, -1)
    assert dict(group.topic_configs) == {"cleanup.policy": "compact"}


def test_a_topic_goes_to_the_first_listed_group_that_includes_it_and_does_not_exclude_it() -> None:
    config = TopicCreationConfig.parse(
        {
            **DEFAULTS,
            "topic.creation.groups": "compacted, big",
            "topic.creation.compacted.include": "db\\..*, state-.*",
            "topic.creation.compacted.exclude": "db\\.audit.*",
            "topic.creation.compacted.cleanup.policy": "compact",
            "topic.creation.big.include": "db\\..*,logs",
            "topic.creation.big.partitions": "12",
            "topic.creation.big.replication.factor": "1",
            "topic.creation.big.retention.ms": 3_600_000,
        }
    )
    assert config is not None
    names = {t: config.group_for(t).name for t in ("db.users", "state-x", "db.audit_log", "logs", "logs2", "xdb.users")}
    assert names == {
        "db.users": "compacted",
        "state-x": "compacted",
        "db.audit_log": "big",  # excluded from the first group, included by the second
        "logs": "big",
        "logs2": "default",  # a regex must match the whole name
        "xdb.users": "default",
    }
    compacted, big = config.group_for("db.users"), config.group_for("logs")
    # A group inherits partitions and replication factor from default, not its topic configs.
    assert (compacted.partitions, compacted.replication_factor, dict(compacted.topic_configs)) == (
        3,
        -1,
        {"cleanup.policy": "compact"},
    )
    assert (big.partitions, big.replication_factor, dict(big.topic_configs)) == (12, 1, {"retention.ms": "3600000"})


def test_a_listed_group_without_include_takes_no_topic() -> None:
    config = TopicCreationConfig.parse(
        {**DEFAULTS, "topic.creation.groups": "lonely", "topic.creation.lonely.partitions": "5"}
    )
    assert config is not None
    assert config.group_for("lonely").name == "default"


@pytest.mark.parametrize(
    ("keys", "bad_key"),
    [
        ({"topic.creation.default.partitions": "3"}, "topic.creation.default.replication.factor"),
        ({"topic.creation.default.replication.factor": "1"}, "topic.creation.default.partitions"),
        ({"topic.creation.groups": "a", "topic.creation.a.include": "x"}, "topic.creation.default.partitions"),
        ({**DEFAULTS, "topic.creation.default.partitions": "three"}, "topic.creation.default.partitions"),
        ({**DEFAULTS, "topic.creation.default.partitions": "0"}, "topic.creation.default.partitions"),
        ({**DEFAULTS, "topic.creation.default.replication.factor": "-2"}, "topic.creation.default.replication.factor"),
        (
            {**DEFAULTS, "topic.creation.groups": "a", "topic.creation.a.partitions": "1.5"},
            "topic.creation.a.partitions",
        ),
        (
            {**DEFAULTS, "topic.creation.groups": "a", "topic.creation.a.include": "ok,(unclosed"},
            "topic.creation.a.include",
        ),
        ({**DEFAULTS, "topic.creation.groups": "a", "topic.creation.a.exclude": "[z-a]"}, "topic.creation.a.exclude"),
        ({**DEFAULTS, "topic.creation.default.include": ".*"}, "topic.creation.default.include"),
    ],
)
def test_invalid_keys_are_refused_by_name(keys: dict[str, str], bad_key: str) -> None:
    with pytest.raises(ConfigError) as info:
        TopicCreationConfig.parse(keys)
    assert info.value.key == bad_key
    assert bad_key in str(info.value)


def test_a_key_of_an_unlisted_group_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.worker.topic_creation"):
        TopicCreationConfig.parse({**DEFAULTS, "topic.creation.typo.partitions": "4"})
    assert "topic.creation.typo.partitions belongs to no group" in caplog.text


# -- the worker ------------------------------------------------------------------------------------


def make_worker(**settings: str) -> Worker:
    return Worker(WorkerConfig.from_mapping(settings), PluginRegistry(), MemoryOffsetStore())


SOURCE = {"name": "seq", "connector.class": "SequenceSource", "topic": "numbers", **DEFAULTS}


class _Listener:
    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def test_create_refuses_an_invalid_key_by_name_even_when_creation_is_disabled() -> None:
    for worker in (make_worker(), make_worker(**{"topic.creation.enable": "false"})):
        with pytest.raises(ConfigError) as info:
            worker.validate({**SOURCE, "topic.creation.default.partitions": "many"})
        assert info.value.key == "topic.creation.default.partitions"


def test_a_source_task_gets_a_topic_creator_only_when_enabled_and_asked_for(caplog: pytest.LogCaptureFixture) -> None:
    def creator(worker: Worker, config: dict[str, Any]) -> Any:
        runner = worker.build_task(
            ConnectorTaskId("seq", 0), worker.validate(config), {}, _Listener(), TargetState.STARTED
        )
        assert isinstance(runner, SourceTaskRunner)
        return runner.topics.creator

    enabled = make_worker(**{"admin.request.timeout.ms": "7000", "admin.retry.backoff.ms": "100"})
    # retry.backoff.ms: a tuning key the default override allowlist lets a connector set.
    made = creator(enabled, {**SOURCE, "admin.override.retry.backoff.ms": "250"})
    assert made is not None and made.config.group_for("numbers").partitions == 3
    # The worker's admin.* settings, then the connector's admin.override.*.
    assert made._admin_config["request.timeout.ms"] == "7000" and made._admin_config["retry.backoff.ms"] == "250"
    assert creator(enabled, {k: v for k, v in SOURCE.items() if not k.startswith("topic.creation.")}) is None

    disabled = make_worker(**{"topic.creation.enable": "false"})
    assert creator(disabled, SOURCE) is None
    with caplog.at_level(logging.WARNING, logger="sluice.worker.worker"):
        disabled.warn_ignored_keys(disabled.validate(SOURCE))  # what create and update call, once
    assert len([r for r in caplog.records if "topic.creation.enable=false" in r.message]) == 1
