"""Where Sluice's source tree is, for the tools that work on it (building the container image,
regenerating the reference pages).

Run from a checkout, that is the checkout this package is in. Installed from a wheel, the package
holds no docs and no build files, so the tools use ``SLUICE_SOURCE_DIR`` if it is set, else the
checkout the command is run in.
"""

from __future__ import annotations

import os
from pathlib import Path


class SourceTreeNotFound(RuntimeError):
    """No Sluice checkout was found where it was looked for."""


def source_root(marker: str = "pyproject.toml") -> Path:
    """The checkout holding ``pyproject.toml`` and ``marker`` (a path inside it): the one named by
    ``SLUICE_SOURCE_DIR``, else the one this module is in, else the working directory or a parent."""
    here, cwd = Path(__file__).resolve(), Path.cwd().resolve()
    named = [Path(os.environ["SLUICE_SOURCE_DIR"]).resolve()] if os.environ.get("SLUICE_SOURCE_DIR") else []
    for parent in (*named, *here.parents, cwd, *cwd.parents):
        if (parent / "pyproject.toml").is_file() and (parent / marker).exists():
            return parent
    raise SourceTreeNotFound(
        f"no Sluice source checkout with {marker} above {here} or {cwd}: run this in a checkout "
        "(or set SLUICE_SOURCE_DIR to one)"
    )
