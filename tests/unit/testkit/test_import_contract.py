"""connectors/testkit is for connector authors: like the SPI it stands on, it imports nothing of
the runtime (no worker, REST, converters), so a connector's tests exercise only the SPI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

KIT_DIR = Path(__file__).resolve().parents[3] / "connectors" / "testkit"
ALLOWED_THIRD_PARTY = {"pytest", "pydantic", "pydantic_core", "typing_extensions"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_kit_modules_import_only_the_spi_the_stdlib_and_pytest() -> None:
    offenders = []
    for path in sorted(KIT_DIR.glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if name == "__future__" or name.startswith(("sluice.connectors.api", "sluice.connectors.testkit")):
                continue
            if top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_importing_the_kit_loads_no_runtime_package() -> None:
    code = (
        "import sys, sluice.connectors.testkit\n"
        "allowed = ('sluice', 'sluice.connectors')\n"
        "bad = sorted(m for m in sys.modules if m.startswith('sluice.') and m not in allowed"
        " and not m.startswith(('sluice.connectors.api', 'sluice.connectors.testkit')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=KIT_DIR.parents[1])
    assert out.stdout.strip() == ""
