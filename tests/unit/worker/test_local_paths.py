"""``connector.allowed.paths``: connector keys typed ``LocalPath`` must stay inside the allowed directories,
which default to ``<state.dir>/data``, never overlap the worker's code and files, and are checked again at open."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.connectors.api import ConfigError
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.local_paths import PathGrant, allowed_roots, check_local_paths, warn_if_unconfined
from sluice.worker.config.masking import SECRETS
from sluice.worker.config.models import WorkerConfig
from sluice.worker.worker import Worker


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    yield
    SECRETS.clear()


@pytest.fixture
def area(tmp_path: Path) -> Path:
    """An allowed directory next to a forbidden one, both under ``tmp_path``."""
    (tmp_path / "allowed").mkdir()
    (tmp_path / "forbidden").mkdir()
    (tmp_path / "forbidden" / "secret.txt").write_text("do not copy\n")
    return tmp_path


def check(value: str, allowed: str, key: str = "file") -> None:
    check_local_paths({key: value}, {key}, PathGrant(allowed_roots(allowed)))


# -- allowed_roots ---------------------------------------------------------------------------------


def test_allowed_roots_are_absolute_resolved_and_blank_entries_dropped(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert allowed_roots("") == ()
    assert allowed_roots(f" {tmp_path}/link , ,/srv/data ") == (
        Path(os.path.realpath(tmp_path / "real")),
        Path("/srv/data"),
    )


def test_a_relative_allowed_path_is_refused_naming_the_worker_key() -> None:
    with pytest.raises(ConfigError) as info:
        allowed_roots("/srv/data,spool")
    assert info.value.key == "connector.allowed.paths"
    assert "'spool'" in str(info.value)


# -- check_local_paths -----------------------------------------------------------------------------


def test_an_empty_grant_accepts_nothing() -> None:
    with pytest.raises(ConfigError, match="outside"):
        check("/etc/passwd", "")


def test_paths_inside_an_allowed_directory_pass_even_before_they_exist(area: Path) -> None:
    allowed = area / "allowed"
    for value in (
        str(allowed),
        str(allowed / "in.txt"),
        str(allowed / "new" / "deeper.txt"),
        f"{allowed}/./x/../y.txt",
    ):
        check(value, str(allowed))


def test_a_path_outside_is_refused_naming_the_key_and_not_the_resolution(area: Path) -> None:
    with pytest.raises(ConfigError) as info:
        check("/etc/passwd", str(area / "allowed"))
    assert info.value.key == "file"
    message = str(info.value)
    assert message.startswith("file: '/etc/passwd' is outside") and "connector.allowed.paths" in message
    assert str(area) not in message  # the allowed directories are the operator's business


@pytest.mark.parametrize("escape", ["allowed/../forbidden/secret.txt", "allowed/../../../../etc/passwd"])
def test_dot_dot_does_not_lead_out(area: Path, escape: str) -> None:
    with pytest.raises(ConfigError, match="outside"):
        check(f"{area}/{escape}", str(area / "allowed"))


def test_a_symlink_inside_that_points_outside_is_refused_without_naming_its_target(area: Path) -> None:
    link = area / "allowed" / "innocent.txt"
    link.symlink_to(area / "forbidden" / "secret.txt")
    with pytest.raises(ConfigError) as info:
        check(str(link), str(area / "allowed"))
    assert "forbidden" not in str(info.value)


def test_a_directory_whose_name_extends_an_allowed_one_is_not_inside_it(area: Path) -> None:
    (area / "allowed-not").mkdir()
    with pytest.raises(ConfigError, match="outside"):
        check(str(area / "allowed-not" / "x.txt"), str(area / "allowed"))


def test_relative_paths_are_taken_from_the_working_directory(area: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(area / "allowed")
    check("in.txt", str(area / "allowed"))
    with pytest.raises(ConfigError, match="outside"):
        check("../forbidden/secret.txt", str(area / "allowed"))
    monkeypatch.chdir(area / "forbidden")
    with pytest.raises(ConfigError, match="outside"):
        check("secret.txt", str(area / "allowed"))


def test_an_allowed_file_allows_itself_and_nothing_beside_it(area: Path) -> None:
    only = area / "forbidden" / "secret.txt"
    check(str(only), str(only))
    with pytest.raises(ConfigError):
        check(str(area / "forbidden" / "other.txt"), str(only))


def test_unset_and_empty_values_are_not_paths(area: Path) -> None:
    grant = PathGrant(allowed_roots(str(area / "allowed")))
    check_local_paths({"file": "", "other": "/etc/passwd"}, {"file", "absent"}, grant)


def test_a_nul_character_is_refused(area: Path) -> None:
    with pytest.raises(ConfigError, match="NUL") as info:
        check(f"{area}/allowed/x\0/etc/passwd", str(area / "allowed"), key="spool.dir")
    assert info.value.key == "spool.dir"


# -- warn_if_unconfined ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "warns"),
    [
        ({"listeners": "http://0.0.0.0:8083", "connector.allowed.paths": "*"}, True),
        ({"listeners": "http://10.1.2.3:8083", "connector.allowed.paths": "*"}, True),
        ({"listeners": "http://127.0.0.1:8083", "connector.allowed.paths": "*"}, False),
        ({"listeners": "http://localhost:8083", "connector.allowed.paths": "*"}, False),
        ({"listeners": "http://0.0.0.0:8083", "connector.allowed.paths": "/srv/data"}, False),
        ({"listeners": "http://0.0.0.0:8083"}, False),
    ],
)
def test_warning_when_unconfined_and_reachable_from_other_hosts(
    settings: dict[str, str], warns: bool, caplog: pytest.LogCaptureFixture
) -> None:
    config = WorkerConfig.from_mapping(settings)
    with caplog.at_level(logging.WARNING, logger="sluice.worker.config.local_paths"):
        warn_if_unconfined(config, PathGrant.from_worker_config(config))
    assert ("connector.allowed.paths=* and the REST listener" in caplog.text) is warns


# -- the worker ------------------------------------------------------------------------------------


def make_worker(**settings: str) -> Worker:
    return Worker(WorkerConfig.from_mapping(settings), PluginRegistry(), MemoryOffsetStore())


def source(file: str, **extra: Any) -> dict[str, Any]:
    return {"name": "src", "connector.class": "FileStreamSource", "file": file, "topic": "lines", **extra}


def test_worker_refuses_a_file_source_outside_connector_allowed_paths(area: Path) -> None:
    worker = make_worker(**{"connector.allowed.paths": str(area / "allowed")})
    assert worker.validate(source(str(area / "allowed" / "in.txt"))).own.file == str(area / "allowed" / "in.txt")
    for path in ("/etc/passwd", str(area / "forbidden" / "secret.txt")):
        with pytest.raises(ConfigError) as info:
            worker.validate(source(path))
        assert info.value.key == "file"


def test_worker_refuses_a_file_sink_outside_connector_allowed_paths(area: Path) -> None:
    worker = make_worker(**{"connector.allowed.paths": str(area / "allowed")})
    sink = {"name": "out", "connector.class": "FileStreamSink", "topics": "lines"}
    worker.validate({**sink, "file": str(area / "allowed" / "out.txt")})
    with pytest.raises(ConfigError) as info:
        worker.validate({**sink, "file": str(Path.home() / ".bashrc")})
    assert info.value.key == "file"


def test_worker_checks_the_resolved_value_of_a_placeholder(area: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_UNIT_INPUT", str(area / "forbidden" / "secret.txt"))
    worker = make_worker(**{"connector.allowed.paths": str(area / "allowed"), "config.providers": "env"})
    with pytest.raises(ConfigError) as info:
        worker.validate(source("${env:SLUICE_UNIT_INPUT}"))
    assert info.value.key == "file"
    assert "forbidden" not in str(info.value)  # a resolved value is masked like any secret


def test_worker_without_allowed_paths_grants_only_its_data_folder(tmp_path: Path) -> None:
    worker = make_worker(**{"state.dir": str(tmp_path / "state")})
    inside = str(tmp_path / "state" / "data" / "in.txt")
    assert worker.validate(source(inside)).own.file == inside
    for path in ("/etc/passwd", str(tmp_path / "state" / "offsets.json"), str(tmp_path / "elsewhere.txt")):
        with pytest.raises(ConfigError) as info:
            worker.validate(source(path))
        assert info.value.key == "file"


def test_worker_with_a_star_accepts_any_file_but_its_own() -> None:
    worker = make_worker(**{"connector.allowed.paths": "*"})
    assert worker.validate(source("/etc/passwd")).own.file == "/etc/passwd"
    for path in (
        sys.prefix + "/bin/evil.py",
        os.path.dirname(os.__file__) + "/evil.py",
        str(Path(sluice.__file__).parent / "x.py"),
    ):
        with pytest.raises(ConfigError, match="outside"):
            worker.validate(source(path))


def test_worker_refuses_a_relative_connector_allowed_paths_at_startup() -> None:
    with pytest.raises(ConfigError) as info:
        make_worker(**{"connector.allowed.paths": "data"})
    assert info.value.key == "connector.allowed.paths"


def test_worker_warns_once_at_construction_when_unconfined_on_a_public_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.worker.config.local_paths"):
        worker = make_worker(listeners="http://0.0.0.0:8083", **{"connector.allowed.paths": "*"})
        worker.validate(source("/etc/hostname"))
    assert caplog.text.count("connector.allowed.paths=* and the REST listener") == 1
