"""Task configs in the shape a Kafka Connect worker stores them, so Connect can start the tasks.

Connect's worker adds two things to every task config a connector returns before it writes
``task-<c>-<n>`` to the config topic: ``task.class`` (the connector's ``taskClass()``) and, for a
sink, the connector's ``topics`` / ``topics.regex``. A Connect worker that takes a cluster over
starts each task from the stored config first, and without ``task.class`` that start fails
(``Missing required configuration "task.class"``). So Sluice stores the same keys:

* ``task.class`` names Connect's Java task class when the Sluice connector stands in for a Connect
  connector (its ``aliases`` name the Java connector class: :data:`CONNECT_TASK_CLASSES`), else the
  Python task class (Sluice's own connectors, which no Connect worker can run anyway);
* for a stand-in, the connector's raw config is the base of every task config, because the Java
  connectors hand their tasks their own config (plus, for some, keys of their own, which the
  Sluice connector's task config adds on top). Where the Java connector hands over its config and
  nothing else (``passthrough``: Connect's FileStream connectors), the stored task config is
  exactly what Connect would store, so a Connect leader that takes over finds nothing to rewrite
  and restarts no task.

Sluice's tasks ignore keys they do not know in a task config (the runtime's ``name``,
``task.class``, …), so they run from these configs as from the ones Connect wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sluice.connectors.api import Connector
from sluice.plugins import PluginInfo, PluginKind

TASK_CLASS_KEY: Final = "task.class"
SINK_TOPIC_KEYS: Final = ("topics", "topics.regex")


@dataclass(frozen=True)
class ConnectTaskShape:
    """What a Java connector puts in its task configs."""

    task_class: str
    #: True when the Java connector's ``taskConfigs()`` returns its own config unchanged.
    passthrough: bool


#: Java connector class → its task class. FileStream: read from Kafka's ``connect-file`` and checked
#: against a running Connect worker (tests/integration/test_connect_migration.py); the others are
#: the task classes of the connectors the built-in ones stand in for, not run against them here.
CONNECT_TASK_CLASSES: Final[Mapping[str, ConnectTaskShape]] = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": ConnectTaskShape(
        "org.apache.kafka.connect.file.FileStreamSourceTask", passthrough=True
    ),
    "org.apache.kafka.connect.file.FileStreamSinkConnector": ConnectTaskShape(
        "org.apache.kafka.connect.file.FileStreamSinkTask", passthrough=True
    ),
    "io.confluent.connect.jdbc.JdbcSourceConnector": ConnectTaskShape(
        "io.confluent.connect.jdbc.source.JdbcSourceTask", False
    ),
    "io.confluent.connect.jdbc.JdbcSinkConnector": ConnectTaskShape(
        "io.confluent.connect.jdbc.sink.JdbcSinkTask", False
    ),
    "io.debezium.connector.postgresql.PostgresConnector": ConnectTaskShape(
        "io.debezium.connector.postgresql.PostgresConnectorTask", False
    ),
    "io.confluent.connect.s3.S3SinkConnector": ConnectTaskShape("io.confluent.connect.s3.S3SinkTask", False),
    "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector": ConnectTaskShape(
        "io.confluent.connect.elasticsearch.ElasticsearchSinkTask", False
    ),
}


def connect_shape(plugin: PluginInfo) -> ConnectTaskShape | None:
    """The Java connector ``plugin`` stands in for (through its aliases), or None."""
    for alias in plugin.aliases:
        shape = CONNECT_TASK_CLASSES.get(alias)
        if shape is not None:
            return shape
    return None


def task_class_name(plugin: PluginInfo) -> str:
    """The ``task.class`` value Sluice stores for ``plugin``'s tasks."""
    shape = connect_shape(plugin)
    if shape is not None:
        return shape.task_class
    if issubclass(plugin.cls, Connector):
        return plugin.cls.task_class_name()
    return plugin.class_name


def as_connect_task_configs(
    plugin: PluginInfo, raw_connector_config: Mapping[str, Any], task_configs: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``task_configs`` (already reverse-transformed: placeholders, not secrets) with the keys a
    Connect worker stores beside them; ``raw_connector_config`` is the stored connector config."""
    shape = connect_shape(plugin)
    task_class = task_class_name(plugin)
    result: list[dict[str, Any]] = []
    for generated in task_configs:
        if shape is None:
            config = dict(generated)
        elif shape.passthrough:
            config = dict(raw_connector_config)
        else:
            config = {**raw_connector_config, **generated}
        config[TASK_CLASS_KEY] = task_class
        if plugin.kind is PluginKind.SINK:
            for key in SINK_TOPIC_KEYS:
                if key in raw_connector_config:
                    config[key] = raw_connector_config[key]
        result.append(config)
    return result
