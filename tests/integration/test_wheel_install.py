"""The distribution as a user installs it: a wheel built with ``python -m build``, installed into a
clean virtualenv (no checkout on the path, no editable install), claims the one import name
``sluice`` and runs the quickstart (``sluice dev up``, a standalone worker, file → topic → file).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.worker_process import free_port

pytestmark = pytest.mark.integration

# The checkout the wheel is built from (SLUICE_SOURCE_DIR when the suite itself runs from a wheel).
ROOT = Path(os.environ.get("SLUICE_SOURCE_DIR") or Path(__file__).resolve().parents[2])


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # The sdist first, then the wheel from it (build's default): what a release publishes, and no
    # leftover build/ directory of the checkout can slip into the wheel.
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=ROOT)
    (built,) = out.glob("sluice-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", str(home)], cwd=home.parent)
    _run([str(home / "bin" / "pip"), "install", "--quiet", str(wheel)], cwd=home.parent)
    return home


def _clean_env(venv: Path) -> dict[str, str]:
    """No PYTHONPATH, nothing of the checkout: what a user's shell has."""
    keep = {k: v for k, v in os.environ.items() if k in {"HOME", "LANG", "LC_ALL", "JAVA_HOME", "TMPDIR", "CI"}}
    return {**keep, "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"}


def test_the_wheel_claims_only_the_sluice_import_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"sluice", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for module in (
        "sluice/__init__.py",
        "sluice/cli/main.py",
        "sluice/connectors/api/__init__.py",
        "sluice/connectors/source/file/connector.py",
        "sluice/deploy/quickstart/run.sh",
        "sluice/deploy/kafka/pom.xml",
    ):
        assert module in names
    # The launchers of the services only the tests start (tests/services/) ship under no name.
    launchers = {path.name for path in (ROOT / "tests" / "services").glob("*.py")} - {"__init__.py"}
    shipped = [name for name in names if name.rsplit("/", 1)[-1] in launchers]
    assert launchers and not shipped, f"test-service launchers in the wheel: {shipped}"
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    targets = re.findall(r"=\s*([\w.]+):", entry_points)
    assert targets and all(t.startswith("sluice.") for t in targets), entry_points


def test_the_installed_package_imports_from_the_venv_and_nothing_else(venv: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.util, sluice, sluice.cli.main, sluice.connectors.source.file.connector\n"
        "print(sluice.__file__)\n"
        "print([n for n in ('worker', 'connectors', 'converters', 'offsets', 'rest', 'plugins', 'deploy', 'transforms', 'cli')"
        " if importlib.util.find_spec(n)])\n"
    )
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_clean_env(venv)).splitlines()
    assert out[0].startswith(str(venv)), out
    assert out[1] == "[]", f"generic top-level names importable: {out[1]}"
    plugins = _run([str(venv / "bin" / "sluice"), "plugins"], cwd=tmp_path, env=_clean_env(venv))
    assert "sluice.connectors.source.file.connector.FileStreamSourceConnector" in plugins
    assert "sluice.connectors.sink.file.connector.FileStreamSinkConnector" in plugins


def test_the_quickstart_runs_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    kafka_port, rest_port = free_port(), free_port()
    cmd = [
        str(venv / "bin" / "sluice"),
        "quickstart",
        "--seconds",
        "12",
        "--kafka-port",
        str(kafka_port),
        "--rest-port",
        str(rest_port),
    ]
    result = subprocess.run(cmd, cwd=tmp_path, env=_clean_env(venv), capture_output=True, text=True, timeout=420)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    lines = (tmp_path / ".sluice" / "quickstart" / "data" / "output.txt").read_text().splitlines()
    assert len(lines) >= 5, log
    assert all(re.fullmatch(r"hello from sluice, line \d+ at [\d:]+", line) for line in lines), lines
    numbers = [int(line.split("line ")[1].split()[0]) for line in lines]
    assert numbers == list(range(1, len(numbers) + 1)), "lines lost or reordered on the way"
    assert "worker stopped (offsets committed)" in log
