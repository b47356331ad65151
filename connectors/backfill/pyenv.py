"""The Python code a backfill's Spark executors run, packed so a cluster needs nothing installed.

Three kinds run Python on the executors: ``topic_to_s3`` and ``topic_to_sink`` (a sink connector's
task inside ``mapInArrow``) and ``s3_to_topic`` (the archive's readers and a producer inside
``mapPartitions``); ``jdbc_to_topic`` stays in the JVM. On ``local[*]`` the executors are the
worker's own process tree and import what it imports. On a cluster they start the Python that
``spark.pyspark.python`` names on *their* host, which has PySpark (the cluster's
``python/lib/pyspark.zip``) and nothing of Sluice.

So for a cluster master the session ships :func:`executor_archive`: one zip of the ``sluice``
package (with its ``dist-info``, whose entry points are how plugins are found) and every installed
distribution it depends on through its runtime extras — minus PySpark and Py4J, which the cluster
provides at its own version. Spark unpacks it beside each executor (``spark.archives``) and the
executors' ``PYTHONPATH`` names it. Compiled modules (pydantic-core, confluent-kafka, pyarrow) make
the archive specific to this interpreter's ``major.minor`` and platform; PySpark itself refuses an
executor Python of another minor version, with its own message.

The archive is built once per set of installed versions and source files, and cached.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import importlib.util
import logging
import os
import platform
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: The directory name the archive unpacks to on the executors (``spark.archives`` ``#alias``).
ARCHIVE_ALIAS: Final = "sluice-pyenv"
#: Extras of the ``sluice`` distribution whose modules executors never import.
_DRIVER_ONLY_EXTRAS: Final = frozenset({"dev", "spark", "otel"})
#: What the cluster provides, at the version its JVM needs.
_CLUSTER_PROVIDED: Final = frozenset({"pyspark", "py4j"})
_REQUIREMENT: Final = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA: Final = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def executor_distributions(root: str = "sluice") -> list[metadata.Distribution]:
    """``root`` and the installed distributions it needs at run time, closed under their own
    requirements (and the extras named in them, as ``psycopg[binary]``); PySpark, Py4J and the
    root's driver-only extras left out."""
    wanted: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    root_extras = frozenset(_root_extras(root))
    pending: list[tuple[str, frozenset[str]]] = [(root, root_extras)]
    while pending:
        name, extras = pending.pop()
        key = _canonical(name)
        if (key, extras) in seen or key in _CLUSTER_PROVIDED:
            continue
        seen.add((key, extras))
        try:
            dist = wanted.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an extra not installed here: the kinds needing it fail here too
        wanted[key] = dist
        for requirement in dist.requires or []:
            extra = _EXTRA.search(requirement)
            if extra and extra.group(1) not in extras:
                continue
            match = _REQUIREMENT.match(requirement)
            if match:
                named = frozenset(e.strip() for e in (match.group(2) or "").split(",") if e.strip())
                pending.append((match.group(1), named))
    return sorted(wanted.values(), key=lambda d: _canonical(d.metadata["Name"]))


def _root_extras(root: str) -> list[str]:
    try:
        provided = metadata.distribution(root).metadata.get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:
        return []
    return [e for e in provided if e not in _DRIVER_ONLY_EXTRAS]


def _distribution_files(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """``(file on disk, name in the archive)`` of an installed distribution (its RECORD)."""
    for entry in dist.files or []:
        name = entry.as_posix()
        if name.startswith("..") or "__pycache__" in name or name.endswith(".pyc") or name.startswith("__editable__"):
            continue
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            yield path, name


def _package_files(package: str) -> Iterator[tuple[Path, str]]:
    """The files of an importable package (links followed: a checkout installed in editable mode
    links its top-level folders into it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not importable")
    for location in spec.submodule_search_locations:
        base = Path(location)
        for folder, dirs, files in os.walk(base, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for file in sorted(files):
                if not file.endswith((".pyc", ".pyo")):
                    path = Path(folder) / file
                    yield path, f"{package}/{path.relative_to(base).as_posix()}"


def _root_metadata(root: str) -> Iterator[tuple[Path, str]]:
    """The installed ``.dist-info`` of ``root`` (its entry points are how plugins are found); a
    source checkout's ``.egg-info`` beside the working directory only when nothing is installed."""
    found = list(metadata.distributions(name=root))
    installed = [d for d in found if any(f.parts[0].endswith(".dist-info") for f in d.files or [])]
    for dist in (installed or found)[:1]:
        for path, name in _distribution_files(dist):
            if name.split("/")[0].endswith((".dist-info", ".egg-info")):
                yield path, name


def _contents(root: str = "sluice") -> dict[str, Path]:
    contents: dict[str, Path] = {}
    for dist in executor_distributions(root):
        # The root's own files come below: an editable install's RECORD lists only its hooks.
        if _canonical(dist.metadata["Name"]) != root:
            contents.update((name, path) for path, name in _distribution_files(dist))
    contents.update((name, path) for path, name in _root_metadata(root))
    contents.update((name, path) for path, name in _package_files(root))
    return contents


def _fingerprint(contents: dict[str, Path]) -> str:
    digest = hashlib.sha256(f"{sys.version_info[:2]}|{platform.machine()}|{sys.platform}".encode())
    for name in sorted(contents):
        stat = contents[name].stat()
        digest.update(f"{name}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _cache_root() -> Path:
    """Sluice's download cache (the same place ``sluice.deploy`` keeps fetched jars)."""
    override = os.environ.get("SLUICE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "sluice"


def executor_archive(cache: Path | None = None) -> Path:
    """The zip of the executors' Python code for this interpreter, built now if not cached."""
    contents = _contents()
    py = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    target = (cache or _cache_root() / "backfill-pyenv") / f"{ARCHIVE_ALIAS}-{py}-{_fingerprint(contents)}.zip"
    if target.is_file():
        os.utime(target)  # most recently used: see _prune
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.name + ".", suffix=".partial", dir=target.parent)
    os.close(fd)
    try:
        # Level 1: most of the bytes are compiled libraries that barely compress; speed matters more.
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            for name in sorted(contents):
                archive.write(contents[name], name)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    _prune(target.parent, f"{ARCHIVE_ALIAS}-{py}-*.zip")
    log.info(
        "Packed %d files for the Spark executors into %s (%.0f MB)", len(contents), target, target.stat().st_size / 1e6
    )
    return target


def _prune(folder: Path, pattern: str, keep: int = 3) -> None:
    """Delete all but the ``keep`` most recently used archives: an older one may still be what a
    running session serves to executors that join later (another worker, or one started before a
    source file changed), so the latest build alone is not enough, but the cache stays bounded."""
    used: list[tuple[float, Path]] = []
    for archive in folder.glob(pattern):
        try:
            used.append((archive.stat().st_mtime, archive))
        except FileNotFoundError:  # another process pruned it meanwhile
            continue
    for _, old in sorted(used, reverse=True)[keep:]:
        old.unlink(missing_ok=True)
