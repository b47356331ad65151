"""Issue #36 item 1: allowed paths never overlap the worker's code and files, and every open is checked again.

What an attacker with connector rights would try: point ``connector.allowed.paths`` (or its
default) at the plugin path, or plant a symlink inside an allowed directory after the connector was
validated so that the task's open leads outside. Each test looks at what is refused and whether
anything outside was read or created.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.sink.file import FileStreamSinkTask
from sluice.connectors.testkit.contexts import MemorySinkTaskContext
from sluice.worker.config.local_paths import PathGrant, create_data_dir
from sluice.worker.config.models import WorkerConfig
from sluice.worker.config.providers import ConfigProviders


def grant_of(**settings: str) -> PathGrant:
    return PathGrant.from_worker_config(WorkerConfig.from_mapping(settings))


@pytest.fixture
def area(tmp_path: Path) -> Path:
    """``allowed/`` with a file in it, ``outside/`` with a secret, ``plugins/``, ``state/``."""
    for name in ("allowed", "outside", "plugins", "state"):
        (tmp_path / name).mkdir()
    (tmp_path / "allowed" / "in.txt").write_text("allowed line\n")
    (tmp_path / "outside" / "secret.txt").write_text("secret line\n")
    return tmp_path


# -- refused at start --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "protected_key", "protected", "relation"),
    [
        ("{t}", "plugin.path", "{t}/plugins", "contains"),
        ("{t}/plugins/data", "plugin.path", "{t}/plugins", "lies inside"),
        ("{t}/plugins", "plugin.path", "{t}/plugins", "is"),
        ("{t}/allowed", "offset.storage.file.filename", "{t}/allowed/offsets.json", "contains"),
        ("{t}/allowed", "worker.config.file", "{t}/allowed/worker.properties", "contains"),
        ("{t}/allowed", "config.providers.file.param.allowed.paths", "{t}/allowed/secrets", "contains"),
        ("{t}/allowed", "listeners.https.ssl.keyfile", "{t}/allowed/tls.key", "contains"),
        ("{t}/state", "state.dir", "{t}/state", "is"),
        ("{t}/allowed", "state.dir", "{t}/allowed/state", "contains"),
    ],
)
def test_an_allowed_path_overlapping_a_protected_place_is_refused_naming_both(
    area: Path, allowed: str, protected_key: str, protected: str, relation: str
) -> None:
    settings = {
        "plugin.path": str(area / "plugins"),
        "state.dir": str(area / "state"),
        protected_key: protected.format(t=area),
        "connector.allowed.paths": allowed.format(t=area),
    }
    with pytest.raises(ConfigError) as info:
        grant_of(**settings)
    assert info.value.key == "connector.allowed.paths"
    message = str(info.value)
    assert f"the allowed path {allowed.format(t=area)} {relation} " in message
    assert protected_key.replace("worker.config.file", "config file") in message
    assert protected.format(t=area) in message


def test_an_allowed_path_containing_a_sys_path_entry_or_the_installation_is_refused(
    area: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path, str(area / "allowed" / "lib")])
    with pytest.raises(ConfigError, match=r"contains the Python path \(sys.path\)"):
        grant_of(**{"connector.allowed.paths": str(area / "allowed")})
    with pytest.raises(ConfigError, match=r"the installation"):
        grant_of(**{"connector.allowed.paths": os.path.realpath(sys.prefix)})


def test_the_default_grant_is_the_data_folder_of_the_state_dir_and_is_refused_inside_plugin_path(area: Path) -> None:
    config = WorkerConfig.from_mapping({"state.dir": str(area / "state")})
    assert PathGrant.from_worker_config(config).roots == (area / "state" / "data",)
    create_data_dir(config)
    assert (area / "state" / "data").is_dir()
    with pytest.raises(ConfigError, match=r"unset: <state.dir>/data\): the allowed path .* lies inside plugin.path"):
        grant_of(**{"state.dir": str(area / "plugins" / "state"), "plugin.path": str(area / "plugins")})


def test_a_relative_state_dir_and_a_star_mixed_with_paths_are_refused(area: Path) -> None:
    with pytest.raises(ConfigError) as info:
        grant_of(**{"state.dir": "state"})
    assert info.value.key == "state.dir"
    with pytest.raises(ConfigError, match="stands alone"):
        grant_of(**{"connector.allowed.paths": f"*,{area}/allowed"})


def test_the_default_state_dir_follows_xdg_state_home(area: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(area / "xdg"))
    assert grant_of().roots == (area / "xdg" / "sluice" / "data",)


def test_star_grants_anything_but_the_protected_places(area: Path) -> None:
    grant = grant_of(**{"connector.allowed.paths": "*", "plugin.path": str(area / "plugins")})
    assert grant.permits(area / "outside" / "secret.txt")
    for refused in (area / "plugins" / "evilmod.py", area / "plugins", area, Path("/")):
        assert not grant.permits(refused), refused
    with pytest.raises(ConfigError, match="outside"):
        grant.open(str(area / "plugins" / "evilmod.py"), "a", key="file")
    assert not (area / "plugins" / "evilmod.py").exists()


# -- checked at open ---------------------------------------------------------------------------------


def confined(area: Path) -> PathGrant:
    return grant_of(**{"connector.allowed.paths": str(area / "allowed")})


def test_files_inside_are_opened_for_reading_and_appending(area: Path) -> None:
    grant = confined(area)
    with grant.open(str(area / "allowed" / "in.txt"), "r", key="file", encoding="utf-8") as f:
        assert f.read() == "allowed line\n"
    with grant.open(str(area / "allowed" / "out.txt"), "a", key="file", encoding="utf-8") as f:
        f.write("x\n")
    with grant.open(str(area / "allowed" / "out.txt"), "ab", key="file") as f:
        f.write(b"y\n")
    assert (area / "allowed" / "out.txt").read_text() == "x\ny\n"
    with pytest.raises(FileNotFoundError):
        grant.open(str(area / "allowed" / "absent.txt"), "rb", key="file")


def test_a_symlink_planted_after_validation_is_not_followed_out(area: Path) -> None:
    grant = confined(area)
    link = area / "allowed" / "later.txt"
    grant.check({"file": str(link)}, {"file"})  # validated while it did not exist
    link.symlink_to(area / "outside" / "secret.txt")
    with pytest.raises(ConfigError) as info:
        grant.open(str(link), "rb", key="file")
    assert info.value.key == "file" and "outside" in str(info.value) and "secret" not in str(info.value)
    with pytest.raises(ConfigError):
        grant.open(str(link), "a", key="file")
    assert (area / "outside" / "secret.txt").read_text() == "secret line\n"


def test_a_dangling_symlink_to_outside_creates_nothing_there(area: Path) -> None:
    grant = confined(area)
    (area / "allowed" / "new.txt").symlink_to(area / "outside" / "created.txt")
    with pytest.raises(ConfigError):
        grant.open(str(area / "allowed" / "new.txt"), "a", key="file")
    assert not (area / "outside" / "created.txt").exists()


def test_a_directory_symlink_in_the_middle_does_not_lead_out(area: Path) -> None:
    grant = confined(area)
    (area / "allowed" / "sub").symlink_to(area / "outside")
    for mode in ("rb", "a", "w", "x"):
        with pytest.raises(ConfigError):
            grant.open(str(area / "allowed" / "sub" / "secret.txt"), mode, key="file")
    with pytest.raises(ConfigError):
        grant.open(str(area / "allowed" / "sub" / "fresh.txt"), "a", key="file")
    assert not (area / "outside" / "fresh.txt").exists()
    assert (area / "outside" / "secret.txt").read_text() == "secret line\n"


def test_symlinks_that_stay_inside_are_followed(area: Path) -> None:
    grant = confined(area)
    (area / "allowed" / "current").symlink_to("in.txt")
    (area / "allowed" / "dir").mkdir()
    (area / "allowed" / "dir" / "up").symlink_to("../current")
    with grant.open(str(area / "allowed" / "dir" / "up"), "rb", key="file") as f:
        assert f.read() == b"allowed line\n"


def test_a_symlink_loop_is_refused(area: Path) -> None:
    grant = confined(area)
    (area / "allowed" / "a").symlink_to("b")
    (area / "allowed" / "b").symlink_to("a")
    with pytest.raises(ConfigError, match="too many symbolic links"):
        grant.open(str(area / "allowed" / "a"), "rb", key="file")


def test_relative_paths_open_from_the_working_directory(area: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grant = confined(area)
    monkeypatch.chdir(area / "allowed")
    with grant.open("in.txt", "rb", key="file") as f:
        assert f.read() == b"allowed line\n"
    with pytest.raises(ConfigError):
        grant.open("../outside/secret.txt", "rb", key="file")


def test_the_file_sink_task_refuses_a_symlink_out_when_it_starts(area: Path) -> None:
    (area / "allowed" / "out.txt").symlink_to(area / "outside" / "written.txt")
    task = FileStreamSinkTask()
    with pytest.raises(ConfigError) as info:
        task.start(
            {"file": str(area / "allowed" / "out.txt"), "topics": "t"},
            MemorySinkTaskContext(local_files=confined(area)),
        )
    assert info.value.key == "file"
    assert not (area / "outside" / "written.txt").exists()


# -- config providers ---------------------------------------------------------------------------------


def providers(area: Path) -> ConfigProviders:
    return ConfigProviders.from_worker_config(
        {
            "config.providers": "file,dir",
            "config.providers.file.param.allowed.paths": str(area / "allowed"),
            "config.providers.dir.param.allowed.paths": str(area / "allowed"),
        }
    )


def test_dir_provider_does_not_follow_a_symlink_out_of_allowed_paths(area: Path) -> None:
    (area / "allowed" / "password").symlink_to(area / "outside" / "secret.txt")
    with pytest.raises(ConfigError) as info:
        providers(area).resolve({"topic": f"${{dir:{area}/allowed:password}}"})
    assert info.value.key == "topic"
    assert "outside the provider's allowed.paths" in str(info.value) and "secret line" not in str(info.value)


def test_dir_provider_follows_kubernetes_style_links_inside(area: Path) -> None:
    mount = area / "allowed"
    (mount / "..2024").mkdir()
    (mount / "..2024" / "password").write_text("hunter2")
    (mount / "..data").symlink_to("..2024")
    (mount / "password").symlink_to("..data/password")
    assert providers(area).resolve({"pw": f"${{dir:{mount}:password}}"}) == {"pw": "hunter2"}


def test_file_provider_does_not_follow_a_symlink_out_of_allowed_paths(area: Path) -> None:
    (area / "outside" / "db.properties").write_text("password=secret\n")
    (area / "allowed" / "db.properties").symlink_to(area / "outside" / "db.properties")
    with pytest.raises(ConfigError, match="outside the provider's allowed.paths"):
        providers(area).resolve({"pw": f"${{file:{area}/allowed/db.properties:password}}"})
