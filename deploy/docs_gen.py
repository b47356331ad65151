"""Regenerate the reference tables in ``docs/`` from the config models, so the pages cannot drift.

    .venv/bin/python -m sluice.deploy.docs_gen           # rewrite the generated blocks
    .venv/bin/python -m sluice.deploy.docs_gen --check   # exit 1, naming the page, if one is stale

``docs/worker-config.md``, ``docs/transforms.md`` and ``docs/moving-from-kafka-connect.md`` are
hand-written prose around blocks between ``<!-- BEGIN GENERATED: <id> -->`` and
``<!-- END GENERATED -->``; only the blocks are rewritten.
Key tables come from the pydantic models through :func:`sluice.worker.config.infos.key_info`, the function
behind ``GET /connector-plugins/{plugin}/config``, so a page says what the REST API says. The REST
listener keys are parsed by hand in :mod:`sluice.rest.settings`; their names and descriptions are read from
that module's docstring, and their types and defaults from :data:`REST_KEY_TYPES` below, which the
generator refuses to run without (a key added to the docstring must be added there too).
"""

from __future__ import annotations

import argparse
import re
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from sluice.connectors.api import dotted
from sluice.deploy.sources import source_root
from sluice.plugins import PluginInfo, PluginKind, PluginRegistry
from sluice.rest import settings as rest_settings
from sluice.worker.config.infos import key_info
from sluice.worker.config.models import ConnectorConfig, WorkerConfig, with_cli_defaults
from sluice.worker.distributed.config import DistributedConfig


def docs_dir() -> Path:
    """The checkout's ``docs/`` (:func:`~sluice.deploy.sources.source_root`)."""
    return source_root() / "docs"


REGENERATE = ".venv/bin/python -m sluice.deploy.docs_gen"

_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (?P<id>[^>]+?) -->\n)(?P<body>.*?)(<!-- END GENERATED -->)", re.S)

#: Type and default of each key :mod:`sluice.rest.settings` documents (``None``: no default).
REST_KEY_TYPES: dict[str, tuple[str, str | None]] = {
    "listeners.https.ssl.certfile": ("STRING", None),
    "listeners.https.ssl.keyfile": ("STRING", None),
    "listeners.https.ssl.keyfile.password": ("PASSWORD", None),
    "listeners.https.ssl.client.authentication": ("STRING", rest_settings.CLIENT_AUTH_MODES[0]),
    "listeners.https.ssl.cafile": ("STRING", None),
    "rest.auth.basic.users": ("PASSWORD", None),
    "rest.auth.basic.users.file": ("STRING", None),
    "rest.auth.bearer.tokens": ("PASSWORD", None),
    "rest.auth.roles": ("LIST", None),
    "rest.request.max.bytes": ("INT", str(rest_settings.DEFAULT_MAX_REQUEST_BYTES)),
    "rest.request.header.timeout.ms": ("LONG", str(rest_settings.DEFAULT_HEADER_TIMEOUT_MS)),
    "rest.request.body.timeout.ms": ("LONG", str(rest_settings.DEFAULT_BODY_TIMEOUT_MS)),
    "rest.connections.per.client.max": ("INT", str(rest_settings.DEFAULT_CONNECTIONS_PER_CLIENT)),
    "rest.connections.max": ("INT", "RLIMIT_NOFILE/4, at most 1024"),
    "rest.connections.fd.reserve": ("INT", "RLIMIT_NOFILE/4"),
    "rest.auth.allow.unauthenticated": ("BOOLEAN", "false"),
}

#: Worker keys read outside the models and :mod:`sluice.rest.settings` (key, type, default, description).
#: ``tests/unit/deploy/test_docs_gen.py`` checks that each exact key still occurs in the code.
OTHER_WORKER_KEYS: tuple[tuple[str, str, str | None, str], ...] = (
    (
        "topic.tracking.enable",
        "BOOLEAN",
        "true",
        "Record the topics each connector uses (KIP-558); `false` makes `GET /connectors/{name}/topics` answer 403",
    ),
    ("topic.tracking.allow.reset", "BOOLEAN", "true", "`false` makes `PUT /connectors/{name}/topics/reset` answer 403"),
    (
        "rest.audit.topic",
        "STRING",
        None,
        "Kafka topic that receives a JSON record of every mutating or refused REST request, besides the `sluice.audit` logger",
    ),
    (
        "backfill.storage.file.filename",
        "STRING",
        None,
        "Standalone: file holding backfill jobs and schedules (default `backfills.json` beside "
        "`offset.storage.file.filename`; memory only when neither is set). A cluster keeps them in "
        "`sluice.storage.topic` (and still reads those an earlier Sluice kept in the config topic)",
    ),
    (
        "backfill.bootstrap.servers",
        "STRING",
        None,
        "Kafka that backfill jobs read and write (default: `bootstrap.servers`)",
    ),
    (
        "backfill.spark.*",
        "STRING",
        None,
        "Spark confs for backfill jobs, without `spark.` (`backfill.spark.master=local[4]`)",
    ),
    (
        "producer.*, consumer.*, admin.*",
        "–",
        None,
        "librdkafka settings for the clients of every task, the worker's own clients included",
    ),
    (
        "key.converter.*, value.converter.*, header.converter.*",
        "–",
        None,
        "Settings of the default converters (`value.converter.schemas.enable=false`)",
    ),
    (
        "config.providers.<name>.class, config.providers.<name>.param.*",
        "–",
        None,
        "A declared provider's class (not needed for `env`, `file`, `dir`) and its settings "
        "(`allowed.paths`, `allowlist.pattern`)",
    ),
)


# -- rendering ----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(value: str | None, required: bool) -> str:
    if required:
        return "*required*"
    if value is None:
        return "–"
    if value == "":
        return "*(empty)*"
    return f"`{value}`"


def _choices(annotation: Any) -> list[str]:
    """The allowed values of a ``Literal`` field (``X | None`` unwrapped)."""
    if typing.get_origin(annotation) is Literal:
        return [str(a) for a in typing.get_args(annotation)]
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is Literal:
            return _choices(arg)
    return []


def _table(rows: Iterable[tuple[str, str, str, str]]) -> str:
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    lines += [f"| {key} | {kind} | {default} | {_cell(text)} |" for key, kind, default, text in rows]
    return "\n".join(lines) + "\n"


def model_rows(
    model: type[BaseModel],
    keep: Callable[[str], bool] = lambda key: True,
    defaults: dict[str, Any] | None = None,
) -> list[tuple[str, str, str, str]]:
    """One row per field of ``model`` that ``keep`` accepts; ``defaults`` overrides shown defaults."""
    rows = []
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        key = info.alias or dotted(name)
        if not keep(key):
            continue
        meta = key_info(key, info, None, 0)
        kind = meta["type"]
        choices = _choices(info.annotation)
        if choices:
            kind += " (" + ", ".join(f"`{c}`" for c in choices) + ")"
        default = _default(meta["default_value"], meta["required"])
        if defaults and key in defaults:
            default = f"`{defaults[key]}` (embedded: {default})"
        rows.append((f"`{key}`", kind, default, meta["documentation"]))
    return rows


def _settings_table(model: type[BaseModel] | None) -> str:
    rows = model_rows(model) if model is not None else []
    if not rows:
        return "No settings of its own.\n"
    return _table(rows)


# -- worker-config.md ---------------------------------------------------------------------------


def rest_docstring_keys() -> list[tuple[list[str], str]]:
    """``([keys], description)`` for each entry of :mod:`sluice.rest.settings`'s docstring."""
    entries: list[tuple[list[str], str]] = []
    for line in (rest_settings.__doc__ or "").splitlines():
        if line.startswith("``"):
            entries.append((re.findall(r"``([^`]+)``", line), ""))
        elif line.startswith("    ") and entries:
            keys, text = entries[-1]
            entries[-1] = (keys, f"{text} {line.strip()}")
        elif line.strip() and entries:
            break
    return [(keys, _rst(text)) for keys, text in entries]


def _rst(text: str) -> str:
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    return text.replace("``", "`").strip()


def _rest_rows() -> list[tuple[str, str, str, str]]:
    model_keys = {info.alias for info in WorkerConfig.model_fields.values()}
    rows = []
    for keys, text in rest_docstring_keys():
        for key in keys:
            if key in model_keys:
                continue
            if key not in REST_KEY_TYPES:
                raise SystemExit(
                    f"deploy/docs_gen.py: add {key!r} (from rest/settings.py's docstring) to REST_KEY_TYPES"
                )
            kind, default = REST_KEY_TYPES[key]
            rows.append((f"`{key}`", kind, _default(default, False), text))
    return rows


def _worker_blocks() -> dict[str, str]:
    worker_keys = {info.alias for info in WorkerConfig.model_fields.values()}
    # Distributed-only: keys WorkerConfig lacks, or declares differently (group.id becomes required).
    own = {
        info.alias
        for name, info in DistributedConfig.model_fields.items()
        if info.alias not in worker_keys or repr(info) != repr(WorkerConfig.model_fields.get(name))
    }
    # A worker started by the sluice commands runs with other defaults than one embedded in a program.
    cli = with_cli_defaults({})
    other = [
        (", ".join(f"`{part.strip()}`" for part in keys.split(",")), kind, _default(default, False), text)
        for keys, kind, default, text in OTHER_WORKER_KEYS
    ]
    return {
        "worker-common": _table(model_rows(WorkerConfig, lambda key: key not in own, cli)),
        "worker-distributed": _table(model_rows(DistributedConfig, lambda key: key in own)),
        "worker-rest": _table(_rest_rows()),
        "worker-other": _table(other),
        "connector-common": _table(model_rows(ConnectorConfig)),
    }


# -- transforms.md ------------------------------------------------------------------------------


def family(cls: type) -> str:
    """The Connect name of a transform's or predicate's section: ``Cast`` for ``CastKey`` and ``CastValue``."""
    aliases = getattr(cls, "aliases", ())
    return aliases[0].rsplit(".", 1)[-1].split("$")[0] if aliases else cls.__name__


def _plugin_block(members: list[PluginInfo]) -> str:
    names = []
    for p in members:
        names.append(f"`{p.name}`")
        names += [f"`{a}`" for a in getattr(p.cls, "aliases", ())]
    kind = "transform" if members[0].kind is PluginKind.TRANSFORMATION else "predicate"
    text = f"`type` of the {kind}: " + ", ".join(names) + ".\n\n"
    return text + _settings_table(getattr(members[-1].cls, "Config", None))


def _transform_blocks(registry: PluginRegistry) -> dict[str, str]:
    groups: dict[str, list[PluginInfo]] = {}
    for plugin in registry.plugins((PluginKind.TRANSFORMATION, PluginKind.PREDICATE)):
        groups.setdefault(family(plugin.cls), []).append(plugin)
    return {name: _plugin_block(sorted(members, key=lambda p: p.name)) for name, members in groups.items()}


# -- moving-from-kafka-connect.md ---------------------------------------------------------------

_KIND_NAMES = {
    PluginKind.SOURCE: "source connector",
    PluginKind.SINK: "sink connector",
    PluginKind.CONVERTER: "converter",
    PluginKind.HEADER_CONVERTER: "header converter",
    PluginKind.CONFIG_PROVIDER: "config provider",
}


def _class_names(registry: PluginRegistry) -> str:
    """Connect, Confluent and Debezium class names of the plugins that are not transforms."""
    lines = ["| Kind | Class name in a Connect config | Sluice name |", "|---|---|---|"]
    for plugin in registry.plugins(_KIND_NAMES):
        java = [a for a in getattr(plugin.cls, "aliases", ()) if "." in a]
        if java:
            lines.append(f"| {_KIND_NAMES[plugin.kind]} | {', '.join(f'`{a}`' for a in java)} | `{plugin.name}` |")
    return "\n".join(lines) + "\n"


# -- files --------------------------------------------------------------------------------------


def render(text: str, blocks: dict[str, str], page: str) -> str:
    """``text`` with every generated block replaced; an unknown block id is an error."""

    def replace(match: re.Match[str]) -> str:
        block_id = match["id"]
        if block_id not in blocks:
            raise SystemExit(f"{page}: no generator for block {block_id!r}")
        return f"{match.group(1)}{blocks[block_id]}{match.group(4)}"

    return _BLOCK.sub(replace, text)


def pages(registry: PluginRegistry | None = None) -> dict[Path, Callable[[str], str]]:
    """Each generated page and the function that regenerates its text."""
    registry = registry or PluginRegistry()
    transforms = _transform_blocks(registry)
    worker = _worker_blocks()
    moving = {"class-names": _class_names(registry)}
    docs = docs_dir()
    return {
        docs / "moving-from-kafka-connect.md": lambda text: render(text, moving, "docs/moving-from-kafka-connect.md"),
        docs / "worker-config.md": lambda text: render(text, worker, "docs/worker-config.md"),
        docs / "transforms.md": lambda text: render(text, transforms, "docs/transforms.md"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.deploy.docs_gen", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report pages that differ")
    args = parser.parse_args(argv)
    stale = []
    for path, regenerate in pages().items():
        text = path.read_text()
        fresh = regenerate(text)
        if fresh == text:
            continue
        stale.append(path.name)
        if not args.check:
            path.write_text(fresh)
            print(f"rewrote {path}")
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
