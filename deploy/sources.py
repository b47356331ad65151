"""The layout of a Sluice checkout, kept in this one place for every tool that works on the sources:
building the container image, regenerating the reference pages, and the tests that check the
layers, the import names and the wheel's contents.

A checkout keeps the design's top-level folders (:data:`SUBPACKAGES`) and installs them under one
import name: ``sluice/`` holds ``__init__.py`` and a symbolic link to each folder, so a checkout, an
editable install and the wheel (which holds real copies) all import ``sluice.worker``, never
``worker``. ruff's banned-api list in pyproject.toml refuses the bare names; a bare import would
work in a checkout and fail from the wheel.

Run from a checkout, the sources are the checkout this package is imported from. Installed from a
wheel, the package holds no docs and no build files, so ``SLUICE_SOURCE_DIR`` names the checkout,
else the working directory (or one of its parents) must be one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import sluice

#: The one import name the distribution installs.
PACKAGE: Final = "sluice"
#: The repository's top-level folders that are the subpackages of :data:`PACKAGE`.
SUBPACKAGES: Final = ("cli", "connectors", "converters", "deploy", "offsets", "plugins", "rest", "transforms", "worker")


class SourceTreeNotFound(RuntimeError):
    """No Sluice checkout was found where it was looked for."""


def is_checkout(path: Path) -> bool:
    """``path`` is a Sluice checkout: ``pyproject.toml``, the top-level folders, and ``sluice/``
    holding ``__init__.py`` and a link to each folder. An installed package is not one."""
    package = path / PACKAGE
    return (
        (path / "pyproject.toml").is_file()
        and (package / "__init__.py").is_file()
        and all((path / name).is_dir() and (package / name).is_symlink() for name in SUBPACKAGES)
    )


def running_checkout() -> Path | None:
    """The checkout the ``sluice`` package is imported from (a checkout on ``sys.path`` or an
    editable install); ``None`` when it is installed from the wheel."""
    root = Path(sluice.__file__).resolve().parent.parent
    return root if is_checkout(root) else None


def source_root() -> Path:
    """The checkout named by ``SLUICE_SOURCE_DIR``, else the one running, else the working directory
    or the nearest parent that is one. Raises :class:`SourceTreeNotFound` saying where it looked."""
    named = os.environ.get("SLUICE_SOURCE_DIR")
    if named:
        root = Path(named).resolve()
        if is_checkout(root):
            return root
        raise SourceTreeNotFound(f"SLUICE_SOURCE_DIR={named} is not a Sluice checkout (pyproject.toml and {PACKAGE}/'s links)")
    running = running_checkout()
    if running is not None:
        return running
    cwd = Path.cwd().resolve()
    for candidate in (cwd, *cwd.parents):
        if is_checkout(candidate):
            return candidate
    raise SourceTreeNotFound(
        f"{PACKAGE} is installed (not run from a checkout) and neither {cwd} nor a parent is a Sluice "
        "checkout: run this in a checkout (or set SLUICE_SOURCE_DIR to one)"
    )
