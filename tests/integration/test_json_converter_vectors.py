"""Kafka Connect's own JsonConverter, run in Java, still writes the committed vectors byte for byte.

The unit tests compare Sluice's JsonConverter with ``tests/unit/converters/vectors/json_converter.jsonl``
without Java; this test regenerates that file with the real ``org.apache.kafka.connect.json``
converter (``tests/compat/generate_vectors.py``: Maven fetches the jars once, then a single-file
``java`` launch) and checks both the committed file and Sluice against it. A missing ``java`` or
``mvn`` fails the test: a compatibility check that silently skips would prove nothing.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from sluice.connectors.api.errors import DataError
from sluice.converters.json import JsonConverter
from tests.unit.converters.test_json_converter import CASES

pytestmark = pytest.mark.integration

_GENERATOR = Path(__file__).resolve().parents[1] / "compat" / "generate_vectors.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sluice_generate_vectors", _GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def connect_run() -> tuple[ModuleType, bytes | None, str]:
    """Kafka Connect's JsonConverter output now, or why it could not run (generated once per module)."""
    generator = _generator()
    try:
        return generator, generator.generate(), ""
    except (generator.ToolMissing, RuntimeError, OSError) as exc:
        return generator, None, str(exc)


def _require(connect_run: tuple[ModuleType, bytes | None, str]) -> tuple[ModuleType, bytes]:
    generator, produced, reason = connect_run
    if produced is None:
        # Failed from the test body (not the fixture), so it reports as FAILED, with just the reason.
        pytest.fail(f"could not run Kafka Connect's JsonConverter in Java:\n{reason}", pytrace=False)
    return generator, produced


def test_committed_vectors_equal_kafka_connect_output(connect_run: tuple[ModuleType, bytes | None, str]) -> None:
    generator, produced = _require(connect_run)
    committed = generator.VECTORS_PATH.read_bytes()
    if produced != committed:
        fresh, old = produced.decode().splitlines(), committed.decode().splitlines()
        changed = [f"- {a}\n+ {b}" for a, b in zip(old, fresh) if a != b][:5]
        pytest.fail(
            f"{generator.VECTORS_PATH} is stale ({len(old)} committed lines, {len(fresh)} from Connect); "
            f"run `python tests/compat/generate_vectors.py` and review the diff. First differences:\n"
            + "\n".join(changed),
            pytrace=False,
        )


def test_sluice_writes_what_kafka_connect_writes(connect_run: tuple[ModuleType, bytes | None, str]) -> None:
    _, produced = _require(connect_run)
    mismatches = []
    for raw in produced.decode().splitlines():
        line = json.loads(raw)
        schema, value = CASES[line["case"]]
        converter = JsonConverter()
        converter.configure(line["config"], is_key=False)
        try:
            ours: bytes | str | None = converter.from_connect_data("vectors", schema, value)
        except DataError as exc:
            ours = str(exc)
        theirs = line.get("error") or (base64.b64decode(line["bytes_b64"]) if line["bytes_b64"] else None)
        if ours != theirs:
            mismatches.append(f"{line['case']} {line['config']}:\n  connect: {theirs!r}\n  sluice:  {ours!r}")
    assert not mismatches, "\n".join(mismatches)
