"""The offset stores: Connect's key format, round trips, tombstones, atomic and durable file writes."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.connectors.api import OffsetReader
from sluice.offsets import (
    FileOffsetStore,
    MemoryOffsetStore,
    OffsetStore,
    OffsetStoreError,
    StoreOffsetReader,
    encode_offset,
    offset_key,
    parse_offset_key,
)

# -- key format ------------------------------------------------------------------------------------


def test_offset_key_is_connects_compact_json() -> None:
    assert offset_key("c", {"filename": "x"}) == b'["c",{"filename":"x"}]'
    assert offset_key("file-source", {"filename": "/tmp/in.txt"}) == b'["file-source",{"filename":"/tmp/in.txt"}]'


def test_offset_key_keeps_non_ascii_as_utf8_and_key_order() -> None:
    assert offset_key("c", {"b": 1, "a": "é"}) == '["c",{"b":1,"a":"é"}]'.encode()


def test_offset_value_is_compact_json() -> None:
    assert encode_offset({"position": 1234}) == b'{"position":1234}'


def test_parse_offset_key_round_trips() -> None:
    partition = {"server": "db1", "table": "public.t", "n": 3}
    assert parse_offset_key(offset_key("jdbc", partition)) == ("jdbc", partition)


@pytest.mark.parametrize("bad", [b"not json", b'{"a":1}', b'["c"]', b"[1,{}]", b'["c",[]]'])
def test_parse_offset_key_rejects_other_shapes(bad: bytes) -> None:
    with pytest.raises(ValueError):
        parse_offset_key(bad)


def test_offset_key_rejects_unserializable_partitions() -> None:
    with pytest.raises(TypeError):
        offset_key("c", {"f": object()})


# -- behaviour shared by every store ------------------------------------------------------------


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OffsetStore]:
    made: OffsetStore = (
        MemoryOffsetStore() if request.param == "memory" else FileOffsetStore(tmp_path / "offsets.jsonl")
    )
    made.start()
    yield made
    made.stop()


def test_store_satisfies_protocol(store: OffsetStore) -> None:
    assert isinstance(store, OffsetStore)


def test_round_trip(store: OffsetStore) -> None:
    store.put("c", [({"filename": "a"}, {"position": 10}), ({"filename": "b"}, {"position": 20})])
    assert store.get("c", [{"filename": "b"}, {"filename": "zz"}, {"filename": "a"}]) == [
        {"position": 20},
        None,
        {"position": 10},
    ]
    assert store.all("c") == [({"filename": "a"}, {"position": 10}), ({"filename": "b"}, {"position": 20})]


def test_connectors_are_separate_namespaces(store: OffsetStore) -> None:
    store.put("one", [({"filename": "a"}, {"position": 1})])
    store.put("two", [({"filename": "a"}, {"position": 2})])
    assert store.get("one", [{"filename": "a"}]) == [{"position": 1}]
    assert store.get("two", [{"filename": "a"}]) == [{"position": 2}]
    store.delete("one")
    assert store.all("one") == []
    assert store.get("two", [{"filename": "a"}]) == [{"position": 2}]


def test_later_put_overwrites_and_key_order_does_not_matter(store: OffsetStore) -> None:
    store.put("c", [({"a": 1, "b": 2}, {"pos": 1})])
    store.put("c", [({"b": 2, "a": 1}, {"pos": 2})])
    assert store.get("c", [{"a": 1, "b": 2}]) == [{"pos": 2}]
    assert store.all("c") == [({"a": 1, "b": 2}, {"pos": 2})]


def test_tombstone_removes_partition(store: OffsetStore) -> None:
    store.put("c", [({"filename": "a"}, {"position": 1}), ({"filename": "b"}, {"position": 2})])
    store.put("c", [({"filename": "a"}, None)])
    assert store.get("c", [{"filename": "a"}]) == [None]
    assert store.all("c") == [({"filename": "b"}, {"position": 2})]


def test_last_pair_for_a_partition_wins_within_a_put(store: OffsetStore) -> None:
    store.put("c", [({"f": "a"}, {"p": 1}), ({"f": "a"}, None), ({"f": "a"}, {"p": 3})])
    assert store.get("c", [{"f": "a"}]) == [{"p": 3}]


def test_put_is_all_or_nothing(store: OffsetStore) -> None:
    store.put("c", [({"f": "a"}, {"p": 1})])
    with pytest.raises(TypeError):
        store.put("c", [({"f": "a"}, {"p": 2}), ({"f": "b"}, {"p": object()})])
    assert store.all("c") == [({"f": "a"}, {"p": 1})]


def test_returned_offsets_are_copies(store: OffsetStore) -> None:
    store.put("c", [({"f": "a"}, {"p": 1})])
    got = store.get("c", [{"f": "a"}])[0]
    assert got is not None
    got["p"] = 99  # type: ignore[index]
    assert store.get("c", [{"f": "a"}]) == [{"p": 1}]


def test_concurrent_puts_lose_nothing(store: OffsetStore) -> None:
    def writer(n: int) -> None:
        for i in range(50):
            store.put("c", [({"writer": n}, {"i": i})])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted((p["writer"], o["i"]) for p, o in store.all("c")) == [(n, 49) for n in range(4)]


def test_store_offset_reader_is_an_offset_reader(store: OffsetStore) -> None:
    store.put("c", [({"filename": "a"}, {"position": 5})])
    reader: OffsetReader = StoreOffsetReader(store, "c")  # mypy checks the protocol is satisfied
    assert reader.offset({"filename": "a"}) == {"position": 5}
    assert reader.offset({"filename": "b"}) is None
    assert reader.offsets([{"filename": "b"}, {"filename": "a"}]) == [None, {"position": 5}]
    assert StoreOffsetReader(store, "other").offset({"filename": "a"}) is None


# -- the file store ------------------------------------------------------------------------------


def test_file_store_reloads_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "offsets.jsonl"
    first = FileOffsetStore(path)
    first.start()
    first.put("file-source", [({"filename": "/tmp/in.txt"}, {"position": 1234}), ({"filename": "/x"}, {"position": 1})])
    first.put("file-source", [({"filename": "/x"}, None)])
    first.put("other", [({"k": "é"}, {"v": [1, 2.5, None, True]})])
    first.stop()

    second = FileOffsetStore(path)
    second.start()
    assert second.all("file-source") == [({"filename": "/tmp/in.txt"}, {"position": 1234})]
    assert second.get("other", [{"k": "é"}]) == [{"v": [1, 2.5, None, True]}]


def test_file_store_delete_is_persisted(tmp_path: Path) -> None:
    path = tmp_path / "offsets.jsonl"
    first = FileOffsetStore(path)
    first.start()
    first.put("gone", [({"f": "a"}, {"p": 1})])
    first.put("kept", [({"f": "a"}, {"p": 2})])
    first.delete("gone")
    second = FileOffsetStore(path)
    second.start()
    assert second.all("gone") == []
    assert second.all("kept") == [({"f": "a"}, {"p": 2})]


def test_file_format_is_documented_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "offsets.jsonl"
    store = FileOffsetStore(path)
    store.start()
    store.put("file-source", [({"filename": "/tmp/in.txt"}, {"position": 1234})])
    assert path.read_text().splitlines() == [
        '{"format":"sluice.offsets","version":1}',
        '{"key":"[\\"file-source\\",{\\"filename\\":\\"/tmp/in.txt\\"}]","value":{"position":1234}}',
    ]


def test_file_store_writes_through_a_temp_file_and_leaves_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "offsets.jsonl"
    store = FileOffsetStore(path)
    store.start()
    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        replaced.append((os.path.dirname(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    store.put("c", [({"f": "a"}, {"p": 1})])
    assert replaced == [(str(tmp_path), str(path))]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.jsonl"]


def test_crash_before_rename_keeps_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "offsets.jsonl"
    store = FileOffsetStore(path)
    store.start()
    store.put("c", [({"f": "a"}, {"p": 1})])
    before = path.read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OffsetStoreError, match="offsets.jsonl"):
        store.put("c", [({"f": "a"}, {"p": 2}), ({"f": "b"}, {"p": 3})])
    # The failed put is undone in memory too, and no temp file is left behind.
    assert store.all("c") == [({"f": "a"}, {"p": 1})]
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.jsonl"]


def test_stale_temp_file_from_a_crash_is_ignored_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "offsets.jsonl"
    store = FileOffsetStore(path)
    store.start()
    store.put("c", [({"f": "a"}, {"p": 1})])
    store.stop()
    # A process killed mid-write leaves a half-written temp file next to the real one.
    (tmp_path / ".offsets.jsonl.abc123.tmp").write_bytes(b'{"format":"sluice.offsets","version":1}\n{"key":"[\\"c\\",{')

    reopened = FileOffsetStore(path)
    reopened.start()
    assert reopened.all("c") == [({"f": "a"}, {"p": 1})]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.jsonl"]


def test_missing_or_empty_file_is_an_empty_store(tmp_path: Path) -> None:
    missing = FileOffsetStore(tmp_path / "sub" / "offsets.jsonl")
    missing.start()
    assert missing.all("c") == []
    (tmp_path / "empty.jsonl").write_bytes(b"")
    empty = FileOffsetStore(tmp_path / "empty.jsonl")
    empty.start()
    assert empty.all("c") == []


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"garbage\n", "line 1"),
        (b'{"format":"something-else"}\n', "not a Sluice offset file"),
        (b'{"format":"sluice.offsets","version":7}\n', "version 7"),
        (b'{"format":"sluice.offsets","version":1}\n{"key":"[\\"c\\",{}]","value":{"p":1}}\n{"key":', "line 3"),
        (b'{"format":"sluice.offsets","version":1}\n{"key":"not a key","value":{}}\n', "line 2"),
        (b'{"format":"sluice.offsets","version":1}\n{"key":"[\\"c\\",{}]","value":5}\n', "line 2"),
    ],
)
def test_corrupt_file_raises_an_error_naming_the_path(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "offsets.jsonl"
    path.write_bytes(content)
    store = FileOffsetStore(path)
    with pytest.raises(OffsetStoreError) as info:
        store.start()
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_file_store_must_be_started(tmp_path: Path) -> None:
    store = FileOffsetStore(tmp_path / "offsets.jsonl")
    with pytest.raises(OffsetStoreError, match="not started"):
        store.get("c", [{"f": "a"}])
