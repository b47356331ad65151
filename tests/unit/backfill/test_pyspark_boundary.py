"""PySpark is imported only in connectors/backfill, and a worker that never backfills never loads it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("connectors", "converters", "offsets", "worker", "rest", "plugins", "deploy", "transforms", "cli")
_IMPORT = re.compile(r"^\s*(?:import pyspark|from pyspark)", re.MULTILINE)


def test_only_connectors_backfill_imports_pyspark() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if _IMPORT.search(path.read_text(encoding="utf-8")) and not path.is_relative_to(REPO / "connectors" / "backfill")
    ]
    assert offenders == []


def test_the_rest_app_and_manager_do_not_load_pyspark() -> None:
    code = "import sys, sluice.rest, sluice.worker.backfill, sluice.cli.main; assert 'pyspark' not in sys.modules, 'pyspark loaded'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
