"""``sluice test``: a connector's own transforms and converters over sample records, without Kafka."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner, Result

from sluice.cli.main import main

SOURCE = {
    "connector.class": "FileStreamSource",
    "file": "/data/people.txt",
    "topic": "people-raw",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": False,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "transforms": "route,drop,tag",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": "(.*)-raw",
    "transforms.route.replacement": "$1",
    "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "transforms.drop.exclude": "ssn",
    "transforms.tag.type": "org.apache.kafka.connect.transforms.InsertHeader",
    "transforms.tag.header": "origin",
    "transforms.tag.value.literal": "files",
}

SINK = {
    "connector.class": "FileStreamSink",
    "file": "/data/out.txt",
    "topics": "orders",
    "value.converter": "JsonConverter",
    "value.converter.schemas.enable": "false",
    "key.converter": "StringConverter",
    "transforms": "rename,onlyBig",
    "transforms.rename.type": "ReplaceField$Value",
    "transforms.rename.renames": "amt:amount",
    "transforms.onlyBig.type": "Filter",
    "transforms.onlyBig.predicate": "isSmall",
    "predicates": "isSmall",
    "predicates.isSmall.type": "HasHeaderKey",
    "predicates.isSmall.name": "small",
}


def write(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def sluice_test(*args: str) -> Result:
    result = CliRunner().invoke(main, ["test", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def source_case(expected_value: object) -> dict:
    return {
        "name": "routes and drops the ssn",
        "input": [
            {"topic": "people-raw", "key": "7", "value": {"id": 7, "ssn": "123-45"}},
            {"topic": "people-raw", "key": "8", "value": {"id": 8, "ssn": "999"}},
        ],
        "expected": [
            {"topic": "people", "key": "7", "value": {"id": 7}, "headers": {"origin": "files"}},
            {"topic": "people", "key": "8", "value": expected_value},
        ],
    }


def test_a_matching_source_file_passes(tmp_path: Path) -> None:
    path = write(tmp_path / "people.yaml", {"name": "people", "config": SOURCE, "tests": [source_case({"id": 8})]})
    result = sluice_test(str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"PASS {path}: case routes and drops the ssn (2 record(s))",
        "1 of 1 case(s) passed.",
    ]


def test_a_mismatch_fails_naming_the_case_the_record_and_the_field(tmp_path: Path) -> None:
    path = write(tmp_path / "people.yaml", {"name": "people", "config": SOURCE, "tests": [source_case({"id": 8, "ssn": "999"})]})
    result = sluice_test(str(path))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"FAIL {path}: case routes and drops the ssn",
        '  case routes and drops the ssn: record 2: value: expected {"id": 8, "ssn": "999"}, got {"id": 8}',
        "0 of 1 case(s) passed.",
    ]


def test_produced_bytes_compare_as_text_when_a_string_is_expected(tmp_path: Path) -> None:
    case = {"name": "raw", "input": [{"topic": "people-raw", "value": {"id": 1}}],
            "expected": [{"value": '{"id":1}', "key": None}]}
    path = write(tmp_path / "p.yaml", {"name": "p", "config": SOURCE, "tests": [case]})
    assert sluice_test(str(path)).exit_code == 0


def test_a_sink_sees_converted_transformed_records_from_a_separate_test_file(tmp_path: Path) -> None:
    # A placeholder the pipeline does not read need not resolve here (no provider is declared).
    write(tmp_path / "orders.yaml", {"name": "orders", "config": {**SINK, "db.password": "${dir:/run/secrets/db:pw}"}})
    case = {
        "name": "renames and filters",
        "input": [
            {"topic": "orders", "key": "a", "value": {"id": 1, "amt": 5}, "headers": {"small": "yes"}},
            {"topic": "orders", "key": "b", "value": '{"id": 2, "amt": 500}', "offset": 41},
        ],
        "expected": [{"topic": "orders", "offset": 41, "key": "b", "value": {"id": 2, "amount": 500}}],
    }
    wrong = {**case, "name": "wrong count", "expected": []}
    tests = write(tmp_path / "orders.test.yaml", {"connector": "orders.yaml", "tests": [case, wrong]})
    result = sluice_test(str(tests))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"PASS {tests}: case renames and filters (1 record(s))",
        f"FAIL {tests}: case wrong count",
        "  case wrong count: expected 0 record(s), got 1",
        "1 of 2 case(s) passed.",
    ]


def test_a_record_a_converter_refuses_names_the_input_record(tmp_path: Path) -> None:
    case = {"name": "bad json", "input": [{"topic": "orders", "value": "{not json"}], "expected": []}
    path = write(tmp_path / "orders.yaml", {"name": "orders", "config": SINK, "tests": [case]})
    result = sluice_test(str(path))
    assert result.exit_code == 1
    assert result.stdout.startswith(f"FAIL {path}: case bad json: input record 1: converting from bytes failed: ")


def test_a_bad_transform_setting_names_the_file_and_key(tmp_path: Path) -> None:
    config = {**SOURCE, "transforms.route.type": "NoSuchTransform"}
    path = write(tmp_path / "p.yaml", {"name": "p", "config": config, "tests": [source_case({"id": 8})]})
    result = sluice_test(str(path))
    assert result.exit_code == 1
    assert f"Error: {path}: config.transforms.route.type: " in result.stderr


def test_a_file_without_cases_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "p.yaml", {"name": "p", "config": SOURCE})
    result = sluice_test(str(path))
    assert result.exit_code == 1
    assert f"{path}: tests: the file has no test cases" in result.stderr
