#!/usr/bin/env python3
"""Print the requirements of ``pyproject.toml``'s project with some extras, one a line.

``requirements.py pyproject.toml jdbc,s3`` prints ``[project].dependencies`` and the listed
``[project.optional-dependencies]``. The image's builder stage writes them to a file the runtime
stage installs before Sluice's own wheel: that layer then only changes when a dependency does,
not on every change to the source, and a rebuild reuses it. Standard library only (Python 3.11+).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The project's dependencies plus those of ``extras``, in order, without repeats."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"unknown extra(s) {', '.join(unknown)}; {pyproject} defines {', '.join(sorted(optional))}")
    ordered = list(project.get("dependencies", []))
    for extra in extras:
        ordered += optional[extra]
    return list(dict.fromkeys(ordered))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: requirements.py PYPROJECT EXTRA[,EXTRA...]")
    chosen = [extra.strip() for extra in sys.argv[2].split(",") if extra.strip()]
    print("\n".join(requirements(Path(sys.argv[1]), chosen)))
