from __future__ import annotations

import pytest

from sluice.connectors.api import ConfigError
from sluice.worker.config.client_policy import AllOverridePolicy, NoneOverridePolicy, PrincipalOverridePolicy
from sluice.worker.config.models import ConnectorConfig, WorkerConfig, split_connector_config
from sluice.worker.execution.clients import client_config


def test_worker_config_reads_connect_keys_and_prefixes() -> None:
    w = WorkerConfig.from_mapping(
        {
            "bootstrap.servers": "127.0.0.1:9092",
            "offset.flush.interval.ms": "1000",
            "producer.linger.ms": "20",
            "key.converter.schemas.enable": "false",
            "listeners": "http://0.0.0.0:18083",
            "rest.advertised.host.name": "worker-1",
            "group.id": "ignored-in-standalone",
        }
    )
    assert w.offset_flush_interval_ms == 1000
    assert w.prefixed("producer.") == {"linger.ms": "20"}
    assert w.prefixed("key.converter.") == {"schemas.enable": "false"}
    assert w.listener == ("http", "0.0.0.0", 18083)
    assert w.worker_id == "worker-1:18083"


def test_worker_config_rejects_bad_values_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        WorkerConfig.from_mapping({"offset.flush.interval.ms": "soon"})
    assert info.value.key == "offset.flush.interval.ms"


def test_connector_config_split_and_validation() -> None:
    raw = {
        "name": "c",
        "connector.class": "FileStreamSink",
        "tasks.max": "2",
        "topics": "a, b",
        "value.converter": "StringConverter",
        "value.converter.encoding": "UTF-8",
        "consumer.override.max.poll.records": "10",
        "file": "/tmp/x",
    }
    common, own = split_connector_config(raw)
    assert own == {"file": "/tmp/x"}
    cfg = ConnectorConfig.parse(common)
    assert cfg.tasks_max == 2 and cfg.topic_list == ["a", "b"]
    with pytest.raises(ConfigError, match="tasks.max"):
        ConnectorConfig.parse({**common, "tasks.max": "0"})
    with pytest.raises(ConfigError, match="mutually exclusive"):
        ConnectorConfig.parse({**common, "topics.regex": "a.*"})
    with pytest.raises(ConfigError, match="name"):
        ConnectorConfig.parse({**common, "name": "bad\nname"})


def test_client_overrides_follow_the_worker_policy() -> None:
    merged = client_config("b:1", {"acks": "all"}, {"linger.ms": "5", "buffer.memory": "1"}, {"acks": "1"}, AllOverridePolicy(), what="producer")
    assert merged.pop("logger").name == "librdkafka"  # client logs go through Python logging
    assert merged == {"bootstrap.servers": "b:1", "acks": "1", "linger.ms": "5"}
    with pytest.raises(ConfigError, match="forbids"):
        client_config("b:1", {}, {}, {"acks": "1"}, NoneOverridePolicy(), what="producer")
    with pytest.raises(ConfigError, match="Principal"):
        client_config("b:1", {}, {}, {"acks": "1"}, PrincipalOverridePolicy(), what="producer")
    assert client_config("b:1", {}, {}, {"security.protocol": "SSL"}, PrincipalOverridePolicy(), what="producer")["security.protocol"] == "SSL"
