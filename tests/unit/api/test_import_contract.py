"""connectors/api is the SPI connector authors build against: it imports nothing else from Sluice."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

API_DIR = Path(__file__).resolve().parents[3] / "connectors" / "api"
PROJECT_PACKAGES = {"worker", "rest", "plugins", "offsets", "converters", "deploy", "transforms", "connectors", "cli"}
ALLOWED_THIRD_PARTY = {"pydantic", "pydantic_core", "typing_extensions"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_api_modules_import_only_stdlib_pydantic_and_the_api_itself() -> None:
    offenders = []
    for path in sorted(API_DIR.glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if name.startswith("sluice.connectors.api") or name == "__future__":
                continue
            if top in {"sluice", "benchmarks", "tests"} or top in PROJECT_PACKAGES:
                offenders.append(f"{path.name}: {name}")
            elif top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                offenders.append(f"{path.name}: third-party {name}")
    assert offenders == []


def test_importing_the_api_loads_no_other_project_package() -> None:
    code = (
        "import sys, sluice.connectors.api\n"
        "allowed = ('sluice', 'sluice.connectors', 'sluice.connectors.api')\n"
        "bad = sorted(m for m in sys.modules if (m.startswith('sluice.') or m.split('.')[0] in"
        f" {sorted(PROJECT_PACKAGES | {'benchmarks', 'tests'})!r}) and m not in allowed"
        " and not m.startswith('sluice.connectors.api.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=API_DIR.parents[1])
    assert out.stdout.strip() == ""
