#!/usr/bin/env python3
"""The image's entry point: writes the worker's properties from ``SLUICE_*`` variables, then runs ``sluice``.

Connect's container images configure a worker from the environment (``CONNECT_BOOTSTRAP_SERVERS``
becomes ``bootstrap.servers``); this does the same with the ``SLUICE_`` prefix. The rest of the
name is lower-cased and its underscores translated in Confluent's order:

- ``___`` (three) becomes ``-``,
- ``__`` (two) becomes ``_``,
- ``_`` (one) becomes ``.``.

So ``SLUICE_BOOTSTRAP_SERVERS`` is ``bootstrap.servers``, ``SLUICE_GROUP_ID`` is ``group.id`` and
``SLUICE_PRODUCER_COMPRESSION__TYPE`` would be ``producer.compression_type``. The variables the
``sluice`` client commands read themselves (:data:`NOT_WORKER_KEYS`) are left alone.

The file (:data:`WORKER_PROPERTIES`) is written only when nothing else put it there: a file mounted
over it is used as it is, while a file this script wrote on an earlier start (it begins with
:data:`GENERATED_MARK`) is rewritten, so a restarted container picks up changed variables.
Keys a containerised worker needs but Connect has no default for (:data:`CONTAINER_DEFAULTS`)
are filled in unless a variable gives them.

This file is copied into the image as ``/usr/local/bin/sluice-entrypoint`` and uses only the
standard library: it must run before anything else is known to work.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

PREFIX = "SLUICE_"
WORKER_PROPERTIES = Path(os.environ.get("SLUICE_ENTRYPOINT_PROPERTIES", "/etc/sluice/worker.properties"))
GENERATED_MARK = "# Written by sluice-entrypoint from SLUICE_* environment variables"

#: Variables with the prefix that are not worker keys: the client commands' options
#: (``sluice connectors --url ...``), the download cache and this script's own setting.
NOT_WORKER_KEYS = frozenset(
    {"SLUICE_URL", "SLUICE_USER", "SLUICE_PASSWORD", "SLUICE_TOKEN", "SLUICE_CACHE_DIR", "SLUICE_ENTRYPOINT_PROPERTIES"}
)

#: What a worker in a container needs beyond the worker's own defaults: a REST listener other
#: containers can reach, the image's plugin directory, and a cluster (group and internal topics),
#: so ``SLUICE_BOOTSTRAP_SERVERS`` alone starts a working distributed worker.
CONTAINER_DEFAULTS: Mapping[str, str] = {
    "listeners": "http://0.0.0.0:8083",
    "plugin.path": "/opt/sluice/plugins",
    # The image's state directory: connectors may use local files only in its data folder.
    "state.dir": "/var/lib/sluice",
    "group.id": "sluice",
    "config.storage.topic": "sluice-configs",
    "offset.storage.topic": "sluice-offsets",
    "status.storage.topic": "sluice-status",
}


def property_key(variable: str) -> str:
    """The worker key a ``SLUICE_*`` variable sets (``SLUICE_GROUP_ID`` -> ``group.id``)."""
    name = variable[len(PREFIX) :].lower()
    # Placeholders keep a translated run from being translated again by the next, shorter rule.
    name = name.replace("___", "\0").replace("__", "\1").replace("_", ".")
    return name.replace("\0", "-").replace("\1", "_")


def worker_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker keys given by ``environ``, over :data:`CONTAINER_DEFAULTS`."""
    keys = dict(CONTAINER_DEFAULTS)
    for variable, value in sorted(environ.items()):
        if variable.startswith(PREFIX) and len(variable) > len(PREFIX) and variable not in NOT_WORKER_KEYS:
            keys[property_key(variable)] = value
    return keys


def _escape(text: str, *, is_key: bool) -> str:
    # The escapes a .properties reader undoes: backslash, line breaks, and in keys the separators.
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if is_key:
        out = out.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
    elif out.startswith(" "):
        out = "\\" + out  # a leading blank would be taken for part of the separator
    return out


def render_properties(keys: Mapping[str, str]) -> str:
    """The text of a ``.properties`` file holding ``keys``, with :data:`GENERATED_MARK` first."""
    lines = [GENERATED_MARK]
    lines += [f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}" for key, value in sorted(keys.items())]
    return "\n".join(lines) + "\n"


def write_worker_properties(path: Path, environ: Mapping[str, str]) -> bool:
    """Write ``path`` from ``environ`` unless a file not written here is there; whether it wrote."""
    if path.exists():
        with path.open(encoding="utf-8", errors="replace") as handle:
            if handle.readline().rstrip("\n") != GENERATED_MARK:
                return False
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(render_properties(worker_keys(environ)), encoding="utf-8")
    os.replace(scratch, path)
    return True


def main(argv: list[str]) -> None:
    """Write the properties, then replace this process with ``sluice ARGS...``."""
    try:
        write_worker_properties(WORKER_PROPERTIES, os.environ)
    except OSError as exc:  # e.g. a read-only /etc/sluice without a mounted file
        print(f"sluice-entrypoint: cannot write {WORKER_PROPERTIES}: {exc}", file=sys.stderr)
        sys.exit(1)
    os.execvp("sluice", ["sluice", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
