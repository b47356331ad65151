"""Connector configs kept as files: what ``sluice apply``, ``sluice export`` and ``sluice test`` read.

A file holds one connector in the body shape of Connect's ``POST /connectors``, as JSON
(``.json``) or YAML (``.yaml``/``.yml``)::

    name: orders-sink
    config:
      connector.class: JdbcSink
      topics: orders
      tasks.max: 2                       # numbers and booleans become Connect's strings
      connection.password: ${file:/etc/sluice/secrets/db.properties:password}
    tests: [...]                         # optional, for `sluice test` (cli.offline_pipeline)

A file that has ``tests`` and ``connector`` (a path to such a file) but no ``config`` is a test
file only: ``sluice apply`` passes over it. Every problem is a :class:`ConnectorFileError` that
names the file and the key, so a CI log points at the line to fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sluice.worker.config.models import connector_name_problem
from sluice.worker.herder.calls import stringify

SUFFIXES = (".json", ".yaml", ".yml")
_TOP_LEVEL_KEYS = ("name", "config", "tests", "connector")


class ConnectorFileError(ValueError):
    """A connector file that cannot be used; the message names the file and, when one is at fault, the key."""

    def __init__(self, path: Path | str, message: str, key: str | None = None) -> None:
        self.path = Path(path)
        self.key = key
        where = f"{path}: {key}" if key else str(path)
        super().__init__(f"{where}: {message}")


class ConnectorFileErrors(ValueError):
    """Every problem found in a set of files, so one run reports them all."""

    def __init__(self, errors: Sequence[ConnectorFileError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


@dataclass(frozen=True)
class ConnectorFile:
    """One connector as a file declares it: ``config`` has Connect's string values and ``name``."""

    path: Path
    name: str
    config: dict[str, str]
    tests: list[Any] | None = field(default=None, compare=False)


# --- reading documents ---------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error, not a silent overwrite."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.line = line


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def load_document(path: Path) -> Any:
    """The JSON or YAML document in ``path`` (by its suffix); a key given twice is an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConnectorFileError(path, f"cannot read the file: {exc}") from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text, object_pairs_hook=_unique_pairs)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        line = f" (line {exc.line})" if exc.line else ""
        raise ConnectorFileError(path, f"the key is given twice{line}", key=exc.key) from None
    except json.JSONDecodeError as exc:
        raise ConnectorFileError(path, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except yaml.YAMLError as exc:
        raise ConnectorFileError(path, f"not valid YAML: {' '.join(str(exc).split())}") from None


# --- connector documents -------------------------------------------------------------------------


def config_value(path: Path, key: str, value: Any) -> str:
    """A config value as Connect stores it: a string; numbers and booleans written the worker's way."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(stringify(value))
    if value is None:
        raise ConnectorFileError(path, "null is not a config value (leave the key out to get its default)", key)
    kind = "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__
    raise ConnectorFileError(
        path, f"{kind} is not a config value; Connect configs are flat strings (write a list as 'a,b,c')", key
    )


def parse_connector(path: Path, document: Any) -> ConnectorFile:
    """A :class:`ConnectorFile` from a loaded document (the ``{name, config}`` shape)."""
    if not isinstance(document, dict):
        raise ConnectorFileError(path, 'expected an object {"name": ..., "config": {...}}')
    unknown = [k for k in document if k not in _TOP_LEVEL_KEYS]
    if unknown:
        raise ConnectorFileError(path, f"unknown key; a connector file has {', '.join(_TOP_LEVEL_KEYS)}", str(unknown[0]))
    name = document.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConnectorFileError(path, "the connector's name is missing (a non-empty string)", "name")
    problem = connector_name_problem(name)
    if problem:
        raise ConnectorFileError(path, problem, "name")
    raw = document.get("config")
    if not isinstance(raw, dict):
        raise ConnectorFileError(path, "the connector's config is missing (an object of key: value)", "config")
    config = {str(k): config_value(path, f"config.{k}", v) for k, v in raw.items()}
    if config.get("name", name) != name:
        raise ConnectorFileError(path, f"{config['name']!r} differs from the file's name {name!r}", "config.name")
    if not config.get("connector.class"):
        raise ConnectorFileError(path, "missing: every connector needs its class", "config.connector.class")
    tests = document.get("tests")
    if tests is not None and not isinstance(tests, list):
        raise ConnectorFileError(path, "expected a list of test cases", "tests")
    return ConnectorFile(path, name, {**config, "name": name}, tests)


def is_test_only(document: Any) -> bool:
    """A test file that points at its connector file instead of holding a config."""
    return isinstance(document, dict) and "config" not in document and "connector" in document


def read_connector_file(path: Path) -> ConnectorFile:
    """The connector in ``path``; a test-only file is read through the connector file it names."""
    document = load_document(path)
    if is_test_only(document):
        target = document.get("connector")
        if not isinstance(target, str) or not target:
            raise ConnectorFileError(path, "expected the path of a connector file", "connector")
        connector_path = (path.parent / target).resolve()
        connector = parse_connector(connector_path, load_document(connector_path))
        tests = document.get("tests")
        if not isinstance(tests, list):
            raise ConnectorFileError(path, "expected a list of test cases", "tests")
        return ConnectorFile(connector.path, connector.name, connector.config, tests)
    if isinstance(document, dict) and "connector" in document:
        raise ConnectorFileError(path, "give either config or connector (the path of a connector file), not both", "connector")
    return parse_connector(path, document)


def connector_paths(arguments: Iterable[str | Path]) -> list[Path]:
    """The files named, and the ``.json``/``.yaml``/``.yml`` files directly inside each directory named."""
    paths: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            paths.extend(sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES))
        else:
            paths.append(path)
    return paths


def load_connector_files(arguments: Iterable[str | Path]) -> list[ConnectorFile]:
    """Every connector declared under ``arguments`` (test-only files skipped), sorted by name.

    Raises :class:`ConnectorFileErrors` with every bad file, and with every name declared twice.
    """
    files: list[ConnectorFile] = []
    errors: list[ConnectorFileError] = []
    for path in connector_paths(arguments):
        if path.suffix.lower() not in SUFFIXES:
            errors.append(ConnectorFileError(path, f"not a connector file (expected {', '.join(SUFFIXES)})"))
            continue
        try:
            document = load_document(path)
            if not is_test_only(document):
                files.append(parse_connector(path, document))
        except ConnectorFileError as exc:
            errors.append(exc)
    by_name: dict[str, ConnectorFile] = {}
    for file in files:
        first = by_name.setdefault(file.name, file)
        if first is not file:
            errors.append(ConnectorFileError(file.path, f"connector {file.name!r} is also declared in {first.path}", "name"))
    if errors:
        raise ConnectorFileErrors(errors)
    return sorted(by_name.values(), key=lambda f: f.name)


def exported_document(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """What ``sluice export`` writes for one connector: ``{name, config}``, keys sorted, no ``config.name``."""
    return {"name": name, "config": {k: config[k] for k in sorted(config) if k != "name"}}


def dump_document(document: Any, fmt: str) -> str:
    """``document`` as stable, diff-friendly JSON or YAML text ending in a newline."""
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000))
