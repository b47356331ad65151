"""Source connectors meet the runtime only through the SPI (issue #25, DESIGN.md's Layout): none
imports ``worker``, imports a private converter helper, or tests the type of a converter or of a
record batch. What a fast path needs (the converters' wire formats) comes from the task's context."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[3] / "connectors" / "source"


def _package(module: str) -> str:
    """The project package a module name belongs to (``sluice.worker.x`` → ``worker``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "sluice" and len(parts) > 1 else parts[0]


def _offences(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if _package(a.name) == "worker"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _package(node.module) == "worker":
                found.append(f"{where} imports {node.module}")
            if _package(node.module) == "converters":
                found += [f"{where} imports private {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, (ast.Call, ast.Compare)):
            text = ast.unparse(node)
            is_type_test = text.startswith(("isinstance(", "type(")) or "type(" in text and isinstance(node, ast.Compare)
            if is_type_test and ("Converter" in text or "RecordBatch" in text):
                found.append(f"{where} tests a type: {text}")
    return found


def test_source_connectors_use_only_the_spi_to_meet_the_runtime() -> None:
    paths = sorted(SOURCES.rglob("*.py"))
    assert len(paths) > 20
    offences = [o for path in paths for o in _offences(path.read_text(), str(path.relative_to(SOURCES.parent)))]
    assert offences == []


def test_the_check_finds_what_it_looks_for() -> None:
    bad = (
        "from sluice.worker.runners import source\n"
        "from sluice.converters.json_text import _dumps\n"
        "ok = type(converter) is JsonConverter or isinstance(batch, SourceRecordBatch)\n"
    )
    assert len(_offences(bad, "probe.py")) == 4
