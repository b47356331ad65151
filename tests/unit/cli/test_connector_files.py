"""Reading connector files for ``sluice apply``: the shapes accepted, and errors that name the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.cli.connector_files import (
    ConnectorFileError,
    ConnectorFileErrors,
    dump_document,
    exported_document,
    load_connector_files,
    load_document,
    read_connector_file,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_yaml_values_become_connect_strings(tmp_path: Path) -> None:
    path = write(
        tmp_path / "orders.yaml",
        "name: orders\nconfig:\n  connector.class: FileStreamSource\n  tasks.max: 2\n  batch.ratio: 0.5\n"
        "  errors.log.enable: true\n  topic: orders\n",
    )
    [file] = load_connector_files([tmp_path])
    assert file.path == path
    assert file.config == {
        "connector.class": "FileStreamSource",
        "tasks.max": "2",
        "batch.ratio": "0.5",
        "errors.log.enable": "true",
        "topic": "orders",
        "name": "orders",
    }


def test_json_and_yaml_files_in_a_directory_sorted_by_name(tmp_path: Path) -> None:
    write(tmp_path / "b.json", json.dumps({"name": "zeta", "config": {"connector.class": "X"}}))
    write(tmp_path / "a.yml", "name: alpha\nconfig: {connector.class: Y}\n")
    write(tmp_path / "notes.txt", "ignored: not a connector file suffix")
    (tmp_path / "nested").mkdir()
    write(tmp_path / "nested" / "c.yaml", "name: nested\nconfig: {connector.class: Z}\n")
    assert [f.name for f in load_connector_files([tmp_path])] == ["alpha", "zeta"]


def errors_of(*paths: Path) -> list[str]:
    with pytest.raises(ConnectorFileErrors) as caught:
        load_connector_files(paths)
    return [str(e) for e in caught.value.errors]


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("name: a\nconfig:\n  connector.class: X\n  tasks.max: null\n", "config.tasks.max", "null is not a config value"),
        ("name: a\nconfig:\n  connector.class: X\n  topics: [a, b]\n", "config.topics", "a list is not a config value"),
        ("name: a\nconfig:\n  connector.class: X\n  nested: {a: 1}\n", "config.nested", "an object is not"),
        ("name: a\nconfig:\n  topic: t\n", "config.connector.class", "missing"),
        ("name: a\nconfig:\n  connector.class: X\n  name: b\n", "config.name", "differs from the file's name"),
        ("config:\n  connector.class: X\n", "name", "name is missing"),
        ("name: a\n", "config", "config is missing"),
        ("name: a\nconfig: {connector.class: X}\nspec: {}\n", "spec", "unknown key"),
        ("name: a\nconfig:\n  connector.class: X\n  topic: t\n  topic: u\n", "topic", "given twice (line 5)"),
        ("name: a\nconfig: {connector.class: X}\ntests: {a: 1}\n", "tests", "a list of test cases"),
    ],
)
def test_bad_yaml_names_the_file_and_the_key(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    path = write(tmp_path / "bad.yaml", text)
    [message] = errors_of(path)
    assert message.startswith(f"{path}: {key}: "), message
    assert fragment in message


def test_bad_json_names_the_file_and_where(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.json", '{"name": "a",\n "config": }')
    twice = write(tmp_path / "twice.json", '{"name": "a", "config": {"connector.class": "X", "topic": "t", "topic": "u"}}')
    messages = errors_of(broken, twice)
    assert messages[0].startswith(f"{broken}: not valid JSON: ") and "line 2" in messages[0]
    assert messages[1] == f"{twice}: topic: the key is given twice"


def test_every_bad_file_is_reported_and_a_name_declared_twice(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "name: same\nconfig: {connector.class: X}\n")
    write(tmp_path / "b.yaml", "name: same\nconfig: {connector.class: X}\n")
    write(tmp_path / "c.yaml", "name: c\nconfig: [1]\n")
    messages = errors_of(tmp_path)
    assert messages == [
        f"{tmp_path / 'c.yaml'}: config: the connector's config is missing (an object of key: value)",
        f"{tmp_path / 'b.yaml'}: name: connector 'same' is also declared in {tmp_path / 'a.yaml'}",
    ]


def test_a_test_only_file_is_skipped_by_apply_and_read_through_its_connector(tmp_path: Path) -> None:
    write(tmp_path / "orders.yaml", "name: orders\nconfig: {connector.class: X}\n")
    tests = write(tmp_path / "orders.test.yaml", "connector: orders.yaml\ntests: [{name: t, input: [], expected: []}]\n")
    assert [f.name for f in load_connector_files([tmp_path])] == ["orders"]
    file = read_connector_file(tests)
    assert file.name == "orders" and file.tests == [{"name": "t", "input": [], "expected": []}]


def test_an_invalid_connector_name_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "x.json", json.dumps({"name": "a\nb", "config": {"connector.class": "X"}}))
    with pytest.raises(ConnectorFileError) as caught:
        read_connector_file(path)
    assert caught.value.key == "name"


def test_export_shape_round_trips_through_both_formats(tmp_path: Path) -> None:
    config = {"name": "orders", "tasks.max": "1", "enabled": "true", "connector.class": "X", "a": "x: y"}
    document = exported_document("orders", config)
    assert list(document["config"]) == ["a", "connector.class", "enabled", "tasks.max"]
    for fmt in ("json", "yaml"):
        path = write(tmp_path / f"orders.{fmt}", dump_document(document, fmt))
        assert load_document(path) == document  # "true" and "1" stay strings in YAML
        assert read_connector_file(path).config == config
