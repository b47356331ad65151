"""Stored task configs carry the keys a Kafka Connect worker stores, so Connect can start the tasks."""

from __future__ import annotations

from typing import Any

from sluice.connectors.sink.file import FileStreamSinkConfig
from sluice.connectors.source.file import FileStreamSourceConfig
from sluice.plugins import PluginRegistry
from sluice.worker.config.connect_task_configs import as_connect_task_configs, task_class_name

REGISTRY = PluginRegistry()


def _generated(name: str, raw: dict[str, Any], max_tasks: int) -> list[dict[str, Any]]:
    """What the Sluice connector itself returns for ``raw``."""
    plugin = REGISTRY.connector(name)
    connector = plugin.cls()
    connector.start(plugin.cls.Config.parse({k: v for k, v in raw.items() if k not in ("name", "connector.class", "tasks.max")}))
    return [{k: str(v) for k, v in c.items()} for c in connector.task_configs(max_tasks)]


def test_a_file_source_task_config_is_connects_own() -> None:
    # Connect's FileStreamSourceConnector hands its task its config; the worker adds task.class.
    raw = {
        "name": "src",
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1",
        "file": "/data/in.txt",
        "topic": "lines",
    }
    plugin = REGISTRY.connector(raw["connector.class"])
    stored = as_connect_task_configs(plugin, raw, _generated(raw["connector.class"], raw, 1))
    assert stored == [{**raw, "task.class": "org.apache.kafka.connect.file.FileStreamSourceTask"}]
    # ... and Sluice's task runs from it, as from a config Connect wrote.
    config = FileStreamSourceConfig.from_task_config(stored[0])
    assert (config.file, config.topic, config.batch_size) == ("/data/in.txt", "lines", 2000)


def test_a_file_sink_task_config_is_connects_own_for_every_task() -> None:
    raw = {"name": "snk", "connector.class": "FileStreamSink", "tasks.max": "2", "file": "/data/out.txt", "topics": "lines"}
    plugin = REGISTRY.connector("FileStreamSink")
    stored = as_connect_task_configs(plugin, raw, _generated("FileStreamSink", raw, 2))
    assert stored == [{**raw, "task.class": "org.apache.kafka.connect.file.FileStreamSinkTask"}] * 2
    assert FileStreamSinkConfig.from_task_config(stored[1]).file == "/data/out.txt"


def test_a_stand_in_keeps_the_keys_its_own_task_configs_add() -> None:
    plugin = REGISTRY.connector("io.confluent.connect.jdbc.JdbcSinkConnector")
    raw = {"connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "topics.regex": "db-.*", "x": "1"}
    stored = as_connect_task_configs(plugin, raw, [{"x": "2", "own": "y"}])
    assert stored == [
        {
            "connector.class": raw["connector.class"],
            "topics.regex": "db-.*",
            "x": "2",
            "own": "y",
            "task.class": "io.confluent.connect.jdbc.sink.JdbcSinkTask",
        }
    ]


def test_a_sluice_only_connector_names_its_python_task_class() -> None:
    plugin = REGISTRY.connector("SequenceSource")
    assert task_class_name(plugin) == "sluice.connectors.source.sequence.connector.SequenceSourceTask"
    stored = as_connect_task_configs(plugin, {"connector.class": "SequenceSource", "topic": "n"}, [{"topic": "n", "task.id": "0"}])
    assert stored == [{"topic": "n", "task.id": "0", "task.class": "sluice.connectors.source.sequence.connector.SequenceSourceTask"}]
