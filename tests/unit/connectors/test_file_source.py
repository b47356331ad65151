"""The FileStream source connector and task, against real files and a memory offset store."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import STRING_SCHEMA, ConfigError, ConnectError, LocalFiles, OffsetReader, SourceRecord
from sluice.connectors.source.file import FileStreamSourceConnector, FileStreamSourceTask
from sluice.offsets import MemoryOffsetStore, StoreOffsetReader
from sluice.worker.config.local_paths import PathGrant

CONNECTOR = "file-source"


@dataclass
class FakeSourceTaskContext:
    """What the runtime hands a source task: its name, id and a reader over the stored offsets."""

    offset_reader: OffsetReader
    connector_name: str = CONNECTOR
    task_id: int = 0
    serialization: None = None
    transaction_context: None = None
    # The worker's own grant, granting every path: these tests are about the task, not the grant.
    local_files: LocalFiles = field(default_factory=lambda: PathGrant(anywhere=True))


@dataclass
class Harness:
    """A task wired to a memory offset store, with helpers to poll it dry."""

    path: Path
    store: MemoryOffsetStore = field(default_factory=MemoryOffsetStore)
    tasks: list[FileStreamSourceTask] = field(default_factory=list)

    def start(self, extra: dict[str, Any] | None = None, chunk_size: int | None = None) -> FileStreamSourceTask:
        task = FileStreamSourceTask()
        if chunk_size is not None:
            task.read_chunk_size = chunk_size
        config = {"file": str(self.path), "topic": "lines", **(extra or {})}
        task.start(config, FakeSourceTaskContext(StoreOffsetReader(self.store, CONNECTOR)))
        self.tasks.append(task)
        return task

    def commit(self, records: list[SourceRecord]) -> None:
        """Store the last record's offset, as the runtime does once Kafka acknowledged it."""
        last = records[-1]
        assert last.source_partition is not None
        self.store.put(CONNECTOR, [(last.source_partition, last.source_offset)])


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "in.txt")
    yield h
    for task in h.tasks:
        task.stop()


def drain(task: FileStreamSourceTask, max_idle_polls: int = 1) -> list[SourceRecord]:
    """Poll until ``max_idle_polls`` polls in a row return nothing."""
    records: list[SourceRecord] = []
    idle = 0
    while idle < max_idle_polls:
        batch = task.poll()
        if batch:
            records.extend(batch)
            idle = 0
        else:
            idle += 1
    return records


def values_and_positions(records: list[SourceRecord]) -> list[tuple[str, int]]:
    return [(r.value, r.source_offset["position"]) for r in records]  # type: ignore[index]


def reference_lines(data: bytes) -> list[tuple[str, int]]:
    """A deliberately naive splitter: the behaviour the fast one must match."""
    out = []
    start = i = 0
    while i < len(data):
        c = data[i : i + 1]
        if c == b"\n":
            out.append((data[start:i].decode("utf-8", "replace"), i + 1))
            start = i = i + 1
        elif c == b"\r":
            if i + 1 >= len(data):
                break  # cannot tell "\r" from "\r\n" yet
            end = i + 2 if data[i + 1 : i + 2] == b"\n" else i + 1
            out.append((data[start:i].decode("utf-8", "replace"), end))
            start = i = end
        else:
            i += 1
    return out


# -- lines and positions ---------------------------------------------------------------------


def test_records_carry_line_schema_partition_and_byte_position(harness: Harness) -> None:
    harness.path.write_bytes(b"first\nsecond\n")
    records = drain(harness.start())
    assert [r.value for r in records] == ["first", "second"]
    first = records[0]
    assert first.topic == "lines"
    assert first.value_schema is STRING_SCHEMA
    assert first.key is None and first.key_schema is None and first.timestamp is None and first.partition is None
    assert first.source_partition == {"filename": str(harness.path)}
    # One shared partition dict, distinct offset dicts.
    assert records[1].source_partition is first.source_partition
    assert values_and_positions(records) == [("first", 6), ("second", 13)]


def test_all_three_line_endings(harness: Harness) -> None:
    harness.path.write_bytes(b"lf\ncrlf\r\ncr\rlast\n\n")
    assert values_and_positions(drain(harness.start())) == [("lf", 3), ("crlf", 9), ("cr", 12), ("last", 17), ("", 18)]


def test_pure_crlf_file(harness: Harness) -> None:
    harness.path.write_bytes(b"a\r\nbb\r\n\r\nccc\r\n")
    assert values_and_positions(drain(harness.start())) == [("a", 3), ("bb", 7), ("", 9), ("ccc", 14)]


def test_utf8_lines_have_byte_positions_and_bad_bytes_are_replaced(harness: Harness) -> None:
    harness.path.write_bytes("héllo\nwörld ✓\n".encode() + b"bad \xff byte\n")
    assert values_and_positions(drain(harness.start())) == [("héllo", 7), ("wörld ✓", 18), ("bad \ufffd byte", 29)]


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 64])
def test_tiny_chunks_give_the_same_records(harness: Harness, chunk_size: int) -> None:
    data = b"a\r\nbc\rd\n\r\r\nefg\r\n\n" + "ünï\r\n".encode() + b"x" * 100 + b"\r" + b"tail without newline"
    harness.path.write_bytes(data)
    records = drain(harness.start(chunk_size=chunk_size))
    assert values_and_positions(records) == reference_lines(data)
    assert records[-1].value == "x" * 100


@pytest.mark.parametrize("seed", range(5))
def test_random_content_matches_reference_splitter(harness: Harness, seed: int) -> None:
    rng = random.Random(seed)
    pieces = []
    for _ in range(2000):
        pieces.append(rng.choice([b"", b"x", b"hello world", "é✓".encode(), b"y" * rng.randint(0, 50)]))
        pieces.append(rng.choice([b"\n", b"\r\n", b"\r", b"\n", b"\n"]))
    data = b"".join(pieces)
    harness.path.write_bytes(data)
    for chunk_size in (7, 1 << 20):
        task = harness.start(chunk_size=chunk_size)
        assert values_and_positions(drain(task)) == reference_lines(data)


def test_partial_line_waits_for_its_newline(harness: Harness) -> None:
    harness.path.write_bytes(b"done\nhalf")
    task = harness.start()
    assert values_and_positions(drain(task)) == [("done", 5)]
    with harness.path.open("ab") as f:
        f.write(b" and the rest\nnext\n")
    assert values_and_positions(drain(task)) == [("half and the rest", 23), ("next", 28)]


def test_carriage_return_at_end_of_data_waits_for_next_byte(harness: Harness) -> None:
    harness.path.write_bytes(b"one\r")
    task = harness.start()
    assert drain(task) == []  # could still become "one\r\n"
    with harness.path.open("ab") as f:
        f.write(b"\n")
    assert values_and_positions(drain(task)) == [("one", 5)]
    with harness.path.open("ab") as f:
        f.write(b"two\r")
    assert drain(task) == []
    with harness.path.open("ab") as f:
        f.write(b"three")  # not "\n", so "two" ended at the lone "\r"
    assert values_and_positions(drain(task)) == [("two", 9)]


def test_carriage_return_newline_split_across_chunks(harness: Harness) -> None:
    data = b"ab\r\ncd\r\n"
    harness.path.write_bytes(data)
    # chunk size 3 puts the "\r" of the first "\r\n" at the end of the first read
    assert values_and_positions(drain(harness.start(chunk_size=3))) == [("ab", 4), ("cd", 8)]


def test_long_line_spanning_many_chunks(harness: Harness) -> None:
    long = b"z" * 10_000
    harness.path.write_bytes(long + b"\nshort\n")
    assert values_and_positions(drain(harness.start(chunk_size=64))) == [("z" * 10_000, 10_001), ("short", 10_007)]


# -- offsets and batches ---------------------------------------------------------------------------


def test_resumes_from_stored_offset(harness: Harness) -> None:
    harness.path.write_bytes(b"one\ntwo\nthree\n")
    harness.store.put(CONNECTOR, [({"filename": str(harness.path)}, {"position": 4})])
    assert values_and_positions(drain(harness.start())) == [("two", 8), ("three", 14)]


def test_restart_after_commit_neither_loses_nor_repeats(harness: Harness) -> None:
    harness.path.write_bytes(b"".join(b"line %d\n" % i for i in range(100)))
    first = harness.start({"batch.size": 30})
    batch = first.poll()
    assert batch is not None and len(batch) == 30
    harness.commit(batch)
    first.stop()
    with harness.path.open("ab") as f:
        f.write(b"line 100\n")
    rest = drain(harness.start())
    assert [r.value for r in list(batch) + rest] == [f"line {i}" for i in range(101)]


def test_offsets_of_another_file_are_ignored(harness: Harness) -> None:
    harness.path.write_bytes(b"a\n")
    harness.store.put(CONNECTOR, [({"filename": "/somewhere/else"}, {"position": 1})])
    assert [r.value for r in drain(harness.start())] == ["a"]


@pytest.mark.parametrize("offset", [{"position": "12"}, {"position": -1}, {"position": 1.5}, {"position": True}])
def test_invalid_stored_offset_fails_start(harness: Harness, offset: dict[str, Any]) -> None:
    harness.path.write_bytes(b"a\n")
    harness.store.put(CONNECTOR, [({"filename": str(harness.path)}, offset)])
    with pytest.raises(ConnectError, match="position"):
        harness.start()


def test_batch_size_is_honoured(harness: Harness) -> None:
    harness.path.write_bytes(b"".join(b"%d\n" % i for i in range(10)))
    task = harness.start({"batch.size": "3"})
    sizes = []
    while (batch := task.poll()) is not None and batch:
        sizes.append(len(batch))
    assert sizes == [3, 3, 3, 1]


def test_poll_gathers_several_reads_up_to_batch_size(harness: Harness) -> None:
    harness.path.write_bytes(b"ab\n" * 20)
    task = harness.start({"batch.size": 5}, chunk_size=8)  # under three lines per read
    assert [len(task.poll() or []) for _ in range(5)] == [5, 5, 5, 5, 0]


def test_missing_file_waits_then_reads_once_created(harness: Harness) -> None:
    task = harness.start()
    began = time.monotonic()
    assert task.poll() is None
    assert time.monotonic() - began < 1.5
    harness.path.write_bytes(b"appeared\n")
    assert [r.value for r in drain(task)] == ["appeared"]


def test_empty_file_poll_returns_promptly(harness: Harness) -> None:
    harness.path.write_bytes(b"")
    task = harness.start()
    began = time.monotonic()
    assert task.poll() is None
    assert time.monotonic() - began < 1.0


def test_stop_unblocks_a_waiting_poll(harness: Harness) -> None:
    task = harness.start()  # the file does not exist: poll would wait a full second
    finished = threading.Event()
    result: list[object] = []

    def poll() -> None:
        result.append(task.poll())
        finished.set()

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.05)
    stopped_at = time.monotonic()
    task.stop()
    assert finished.wait(0.5)
    assert time.monotonic() - stopped_at < 0.3
    thread.join()
    assert result == [None]
    assert task.poll() is None  # and it stays stopped


def test_stdin_is_read_without_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "r") as fake_stdin:
        monkeypatch.setattr(sys, "stdin", fake_stdin)
        task = FileStreamSourceTask()
        task.start({"topic": "lines"}, FakeSourceTaskContext(StoreOffsetReader(MemoryOffsetStore(), CONNECTOR)))
        assert task.poll() is None  # nothing written yet: returns instead of blocking
        os.write(write_fd, b"from\r\nstdin\npart")
        records = drain(task)
        assert [(r.value, r.source_partition, r.source_offset) for r in records] == [
            ("from", None, None),
            ("stdin", None, None),
        ]
        task.stop()
        os.close(write_fd)


def test_task_ignores_keys_the_runtime_adds(harness: Harness) -> None:
    harness.path.write_bytes(b"a\n")
    task = harness.start({"task.class": "x", "name": CONNECTOR})
    assert [r.value for r in drain(task)] == ["a"]


# -- the connector --------------------------------------------------------------------------------


def test_connector_always_makes_one_task() -> None:
    connector = FileStreamSourceConnector()
    connector.start(FileStreamSourceConnector.validate({"file": "/tmp/in.txt", "topic": "lines"}))
    assert connector.task_configs(8) == [{"file": "/tmp/in.txt", "topic": "lines", "batch.size": 2000}]
    assert connector.task_configs(1) == connector.task_configs(8)
    assert FileStreamSourceConnector.task_class is FileStreamSourceTask
    assert FileStreamSourceConnector.version == "0.1.0"
    assert "org.apache.kafka.connect.file.FileStreamSourceConnector" in FileStreamSourceConnector.aliases


def test_missing_topic_is_a_config_error_naming_topic() -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSourceConnector.validate({"file": "/tmp/in.txt"})
    assert info.value.key == "topic"
    assert "topic" in str(info.value)


@pytest.mark.parametrize("topic", ["", "   ", "two words", "a" * 250, ".."])
def test_bad_topic_is_rejected(topic: str) -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSourceConnector.validate({"topic": topic})
    assert info.value.key == "topic"


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSourceConnector.validate({"topic": "t", "fiel": "/tmp/in.txt"})
    assert info.value.key == "fiel"
    assert "unknown" in str(info.value)


@pytest.mark.parametrize("size", ["0", "-5", "many"])
def test_bad_batch_size_is_rejected(size: str) -> None:
    with pytest.raises(ConfigError) as info:
        FileStreamSourceConnector.validate({"topic": "t", "batch.size": size})
    assert info.value.key == "batch.size"


def test_empty_file_key_means_stdin() -> None:
    assert FileStreamSourceConnector.validate({"topic": "t", "file": ""}).file == ""
    assert FileStreamSourceConnector.validate({"topic": "t"}).file == ""


def test_alter_offsets_checks_shapes() -> None:
    connector = FileStreamSourceConnector()
    config = {"file": "/tmp/in.txt", "topic": "t"}
    assert connector.alter_offsets(config, [({"filename": "/tmp/in.txt"}, {"position": 5}), ({"filename": "/x"}, None)])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="position"):
        connector.alter_offsets(config, [({"filename": "/tmp/in.txt"}, {"position": -1})])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="filename"):
        connector.alter_offsets(config, [({"file": "/tmp/in.txt"}, {"position": 1})])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="standard input"):
        connector.alter_offsets({"topic": "t"}, [({"filename": ""}, {"position": 1})])  # type: ignore[arg-type]
