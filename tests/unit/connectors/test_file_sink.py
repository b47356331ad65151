"""The FileStream sink connector and task, writing real files."""

from __future__ import annotations

import decimal
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import ConfigError, ConnectError, LocalFiles, SinkRecord, SinkRecordBatch, TopicPartition
from sluice.connectors.sink.file import FileStreamSinkConnector, FileStreamSinkTask
from sluice.worker.config.local_paths import PathGrant


@dataclass
class FakeSinkTaskContext:
    """Just enough of a sink task context: the file sink never pauses, rewinds or reports."""

    connector_name: str = "file-sink"
    task_id: int = 0
    errant_record_reporter: None = None
    # The worker's own grant, granting every path: these tests are about the task, not the grant.
    local_files: LocalFiles = field(default_factory=lambda: PathGrant(anywhere=True))

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("in", 0)}

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def rewind(self, offsets: Any) -> None: ...

    def request_commit(self) -> None: ...


def records(*values: Any, start: int = 0) -> list[SinkRecord]:
    return [SinkRecord("in", 0, start + i, value) for i, value in enumerate(values)]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out.txt"


@pytest.fixture
def task(out: Path) -> Iterator[FileStreamSinkTask]:
    t = FileStreamSinkTask()
    t.start({"file": str(out), "topics": "in"}, FakeSinkTaskContext())
    yield t
    t.stop()


def test_writes_one_line_per_value(task: FileStreamSinkTask, out: Path) -> None:
    task.put(SinkRecordBatch.of(records("first", "second")))
    task.put(SinkRecordBatch.of(records("third", start=2)))
    task.put(SinkRecordBatch.of([]))
    task.flush({TopicPartition("in", 0): 3})
    assert out.read_text() == "first\nsecond\nthird\n"


def test_appends_to_an_existing_file(out: Path) -> None:
    out.write_text("already here\n")
    task = FileStreamSinkTask()
    task.start({"file": str(out), "topics": "in"}, FakeSinkTaskContext())
    task.put(SinkRecordBatch.of(records("new")))
    task.stop()  # stop closes, which flushes
    assert out.read_text() == "already here\nnew\n"


def test_values_of_several_types(task: FileStreamSinkTask, out: Path) -> None:
    values = [
        "plain",
        "two\nlines",
        "ünïcode ✓",
        b"utf8 bytes \xc3\xa9",
        b"bad \xff bytes",
        {"a": 1, "b": [True, None], "c": {"d": 1.5}},
        [1, "x", None],
        42,
        2.5,
        True,
        None,
        decimal.Decimal("1.10"),
        {"blob": b"\x00\x01", "n": decimal.Decimal("3.3")},
    ]
    task.put(SinkRecordBatch.of(records(*values)))
    task.flush({})
    assert out.read_text(encoding="utf-8").split("\n") == [
        "plain",
        "two",
        "lines",
        "ünïcode ✓",
        "utf8 bytes é",
        "bad \ufffd bytes",
        '{"a":1,"b":[true,null],"c":{"d":1.5}}',
        '[1,"x",null]',
        "42",
        "2.5",
        "true",
        "null",
        "1.10",
        '{"blob":"AAE=","n":"3.3"}',
        "",
    ]


def test_pre_commit_returns_offsets_only_after_fsync(
    task: FileStreamSinkTask, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        # Durable means the bytes are in the file when fsync runs, not still in Python's buffer.
        synced.append(fd)
        assert out.read_text() == "a\nb\n"
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    task.put(SinkRecordBatch.of(records("a", "b")))
    offsets = {TopicPartition("in", 0): 2}
    assert task.pre_commit(offsets) == offsets
    assert len(synced) == 1


def test_empty_file_key_writes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    task = FileStreamSinkTask()
    task.start({"topics": "in"}, FakeSinkTaskContext())
    task.put(SinkRecordBatch.of(records("to", {"stdout": True})))
    task.flush({})  # a terminal or pipe cannot be fsynced; flush must still succeed
    task.stop()
    assert capsys.readouterr().out == 'to\n{"stdout":true}\n'


def test_put_after_stop_fails_instead_of_dropping(task: FileStreamSinkTask) -> None:
    task.stop()
    with pytest.raises(ConnectError, match="stopped"):
        task.put(SinkRecordBatch.of(records("late")))


def test_unwritable_file_is_a_clear_error(tmp_path: Path) -> None:
    task = FileStreamSinkTask()
    with pytest.raises(ConnectError, match="no-such-dir"):
        task.start({"file": str(tmp_path / "no-such-dir" / "out.txt"), "topics": "in"}, FakeSinkTaskContext())


# -- the connector --------------------------------------------------------------------------------


def test_connector_makes_tasks_max_identical_configs() -> None:
    connector = FileStreamSinkConnector()
    connector.start(FileStreamSinkConnector.validate({"file": "/tmp/out.txt", "topics": "a, b"}))
    configs = connector.task_configs(3)
    assert configs == [{"file": "/tmp/out.txt", "topics": "a,b"}] * 3
    assert configs[0] is not configs[1]
    assert "org.apache.kafka.connect.file.FileStreamSinkConnector" in FileStreamSinkConnector.aliases
    assert FileStreamSinkConnector.task_class is FileStreamSinkTask


def test_topics_regex_is_accepted() -> None:
    connector = FileStreamSinkConnector()
    connector.start(FileStreamSinkConnector.validate({"topics.regex": "orders-.*"}))
    assert connector.task_configs(1) == [{"file": "", "topics.regex": "orders-.*"}]


@pytest.mark.parametrize("raw", [{}, {"file": "/tmp/out.txt"}, {"topics": ""}, {"topics": "a", "topics.regex": "b.*"}])
def test_exactly_one_of_topics_and_topics_regex(raw: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSinkConnector.validate(raw)
    assert info.value.key == "topics"
    assert "'topics'" in str(info.value) and "'topics.regex'" in str(info.value)


def test_invalid_topics_regex_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSinkConnector.validate({"topics.regex": "(unclosed"})
    assert info.value.key == "topics.regex"


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSinkConnector.validate({"topics": "a", "flie": "/tmp/out.txt"})
    assert info.value.key == "flie"
