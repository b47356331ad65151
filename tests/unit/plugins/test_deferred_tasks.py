"""Connectors name their task class with ``Deferred``: the worker lists and validates connectors
without loading what only tasks use; a task host loads a task's code when it starts the task, or
the hosts' fork server for the connectors of ``task.host.preload``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sluice.connectors.api import ConfigError, Connector, Deferred, SourceTask
from sluice.connectors.sink.file.task import FileStreamSinkTask
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.worker import Worker

#: Libraries only tasks use: none of them may be in a worker that has merely discovered plugins.
TASK_ONLY = ("pyarrow", "numpy", "psycopg", "fastavro", "sqlalchemy", "boto3", "pymysqlreplication")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return set(out.split())


def test_discovering_every_plugin_loads_no_task_driver() -> None:
    loaded = _modules_after(
        """
        from sluice.plugins import PluginKind, PluginRegistry
        registry = PluginRegistry()
        names = {p.name for p in registry.plugins([PluginKind.SOURCE, PluginKind.SINK])}
        assert {"JdbcSink", "PostgresCdcSource", "ElasticsearchSink", "S3Sink"} <= names, names
        for info in registry.plugins([PluginKind.SOURCE, PluginKind.SINK]):
            info.cls.task_class_name()
        """
    )
    assert not [m for m in TASK_ONLY if m in loaded]


def test_the_fork_servers_preload_loads_no_task_of_its_own() -> None:
    loaded = _modules_after("import sluice.worker.execution.task_host_preload")
    assert "sluice.worker.execution.task_host" in loaded
    assert not [m for m in (*TASK_ONLY, "sluice.connectors.sink.jdbc.task") if m in loaded]


def test_task_host_preload_names_the_task_modules_of_its_connectors(tmp_path: Path) -> None:
    worker = Worker(
        WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1", "task.host.preload": "JdbcSink, PostgresCdcSource"}),
        PluginRegistry(),
        MemoryOffsetStore(),
    )
    assert worker.preloaded_task_modules == [
        "sluice.connectors.sink.jdbc.task",
        "sluice.connectors.source.postgres_cdc.task",
    ]
    with pytest.raises(ConfigError, match="task.host.preload: .*NoSuchSink") as refused:
        Worker(
            WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1", "task.host.preload": "NoSuchSink"}),
            PluginRegistry(),
            MemoryOffsetStore(),
        )
    assert refused.value.key == "task.host.preload"


def _connector(task_path: str) -> type[Connector]:
    class Late(Connector):
        task_class = Deferred[SourceTask](task_path)

        def start(self, config: object) -> None: ...

        def task_configs(self, max_tasks: int) -> list[dict[str, object]]:
            return []

    return Late


def test_a_deferred_task_class_reads_as_the_class_and_is_named_without_an_import() -> None:
    late = _connector("sluice.connectors.sink.file.task:FileStreamSinkTask")
    assert late.task_class_name() == "sluice.connectors.sink.file.task.FileStreamSinkTask"
    assert late.task_class is FileStreamSinkTask
    assert isinstance(late.task_class(), FileStreamSinkTask)


def test_a_deferred_path_must_name_module_and_class() -> None:
    with pytest.raises(ValueError, match="package.module:Class"):
        Deferred("sluice.connectors.sink.file.task.FileStreamSinkTask")


def test_a_deferred_class_that_does_not_exist_fails_when_read() -> None:
    broken = _connector("sluice.connectors.sink.file.task:NoSuchTask")
    assert broken.task_class_name() == "sluice.connectors.sink.file.task.NoSuchTask"
    with pytest.raises(AttributeError, match="NoSuchTask"):
        broken.task_class  # noqa: B018
