"""The layer contracts of pyproject.toml (``[tool.importlinter]``, run by ``make lint``) hold on the
tree, and a deliberate breach of each kind makes ``lint-imports`` fail naming the broken contract;
ruff refuses a bare import of a top-level folder (``import worker``) in any file of the project.

A breach is planted in a ``sluice`` package made of links to the checkout's files, with only the
directories on the way to the planted module made for real: the tree is neither touched nor copied.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sluice.deploy import sources

# The checkout's sources (SLUICE_SOURCE_DIR when the suite runs against the installed wheel).
ROOT = sources.source_root()
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
RUFF = Path(sys.executable).with_name("ruff")


def _lint_imports(cwd: Path, *, config: Path) -> subprocess.CompletedProcess[str]:
    # lint-imports puts its working directory first on sys.path, so the `sluice` there is the one
    # analysed, ahead of the editable install's finder.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(config)],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _linked_package(root: Path, planted: str, source: str) -> None:
    """Under ``root``, a ``sluice`` package whose files are links to the checkout's, plus ``source``
    as the module at ``planted`` (``connectors/api/breach.py``)."""
    *directories, module = Path(planted).parts
    here, real = root / sources.PACKAGE, ROOT / sources.PACKAGE
    for name in [*directories, None]:
        here.mkdir()
        for entry in real.iterdir():
            if entry.name not in (name, "__pycache__"):
                (here / entry.name).symlink_to(entry.resolve())
        if name is not None:
            here, real = here / name, real / name
    (here / module).write_text(source)


def test_the_tree_keeps_every_contract() -> None:
    result = _lint_imports(ROOT, config=ROOT / "pyproject.toml")
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
def test_a_breach_fails_naming_its_contract(tmp_path: Path, module: str, source: str, broken: list[str]) -> None:
    _linked_package(tmp_path, module, source)
    result = _lint_imports(tmp_path, config=ROOT / "pyproject.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Broken contracts" in result.stdout, result.stdout
    broken_section = result.stdout.split("Broken contracts", 1)[1]
    for name in broken:
        assert name in broken_section, result.stdout
    assert "sluice." + module.removesuffix(".py").replace("/", ".") in broken_section


def test_the_layout_names_every_linked_folder_and_ruff_bans_each() -> None:
    linked = {path.name for path in (ROOT / sources.PACKAGE).iterdir() if path.is_symlink() and path.is_dir()}
    assert linked == set(sources.SUBPACKAGES)
    assert sources.is_checkout(ROOT)
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert set(lint["flake8-tidy-imports"]["banned-api"]) == set(sources.SUBPACKAGES)


def _ruff(source: str) -> subprocess.CompletedProcess[str]:
    """ruff, with the project's configuration, on ``source`` given as a module of ``cli/``."""
    return subprocess.run(
        [str(RUFF), "check", "--no-cache", "--output-format", "concise", "--stdin-filename", str(ROOT / "cli" / "probe.py"), "-"],
        input=source,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("name", sources.SUBPACKAGES)
def test_ruff_refuses_a_bare_import_of_a_top_level_folder(name: str) -> None:
    bare = _ruff(f'import {name}\nfrom {name}.probe import thing\n\n__all__ = ["{name}", "thing"]\n')
    assert bare.returncode == 1, bare.stdout + bare.stderr
    assert bare.stdout.count(f"TID251 `{name}` is banned: a top-level folder of the repository: import it as sluice.{name}") == 2, bare.stdout
    qualified = _ruff(f'import sluice.{name}\nfrom sluice.{name}.probe import thing\n\n__all__ = ["sluice", "thing"]\n')
    assert "TID251" not in qualified.stdout, qualified.stdout
