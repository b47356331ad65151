"""The layer contracts of pyproject.toml (``[tool.importlinter]``, run by ``make lint``) hold on the
tree, and a deliberate breach of each kind makes ``lint-imports`` fail naming the broken contract.

A breach is planted in a copy of the project's packages, so the real tree is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The checkout's sources (SLUICE_SOURCE_DIR when the suite runs against the installed wheel).
ROOT = Path(os.environ.get("SLUICE_SOURCE_DIR") or Path(__file__).resolve().parents[2])
PACKAGES = ("connectors", "converters", "transforms", "offsets", "worker", "rest", "plugins", "deploy", "cli")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    # The copy's packages must win over the editable install of the real ones: PYTHONPATH comes first.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _python_files_only(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or (not n.endswith(".py") and not Path(directory, n).is_dir())}


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    (root / "sluice").mkdir()
    shutil.copy(ROOT / "sluice" / "__init__.py", root / "sluice" / "__init__.py")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / "sluice" / package, ignore=_python_files_only)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_tree_keeps_every_contract() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        (
            "connectors/api/breach.py",
            "import sluice.worker\n",
            ["Layers: a layer imports only the layers below it", "connectors.api (the SPI) imports nothing else"],
        ),
        (
            "worker/breach.py",
            "from sluice.connectors.source.file import connector\n",
            ["The runtime never imports a concrete connector"],
        ),
        ("offsets/breach.py", "import sluice.deploy\n", ["Only the CLI (and the tests) import deploy"]),
        ("converters/breach.py", "import sluice.transforms.cast\n", ["Layers: a layer imports only the layers below it"]),
    ],
)
def test_a_breach_fails_naming_its_contract(project_copy: Path, module: str, source: str, broken: list[str]) -> None:
    planted = project_copy / "sluice" / module
    planted.write_text(source)
    try:
        result = _lint_imports(project_copy)
    finally:
        planted.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Broken contracts" in result.stdout, result.stdout
    broken_section = result.stdout.split("Broken contracts", 1)[1]
    for name in broken:
        assert name in broken_section, result.stdout
    assert "sluice." + module.removesuffix(".py").replace("/", ".") in broken_section
