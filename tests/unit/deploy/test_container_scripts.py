"""The container image's scripts (``deploy/container/*.py``) and the base-image helpers of ``sluice.deploy.container_image``.

The scripts are copied into the image by path, not imported as modules, so they are loaded here
from their files.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from sluice.deploy import container_image
from sluice.worker.config.properties import parse_properties

CONTAINER_DIR = container_image.containerfile().parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"container_{name}", CONTAINER_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entrypoint = _load("entrypoint")
healthcheck = _load("healthcheck")
requirements = _load("requirements")


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("SLUICE_BOOTSTRAP_SERVERS", "bootstrap.servers"),
        ("SLUICE_GROUP_ID", "group.id"),
        ("SLUICE_CONFIG_STORAGE_REPLICATION_FACTOR", "config.storage.replication.factor"),
        ("SLUICE_PRODUCER_COMPRESSION__TYPE", "producer.compression_type"),
        ("SLUICE_CONFIG_PROVIDERS_VAULT_PARAM_AUTH___METHOD", "config.providers.vault.param.auth-method"),
    ],
)
def test_variable_names_become_worker_keys(variable: str, key: str) -> None:
    assert entrypoint.property_key(variable) == key


def test_worker_keys_take_defaults_and_skip_the_client_variables() -> None:
    keys = entrypoint.worker_keys(
        {"SLUICE_BOOTSTRAP_SERVERS": "kafka:9092", "SLUICE_LISTENERS": "http://0.0.0.0:9000",
         "SLUICE_URL": "http://w:8083", "SLUICE_TOKEN": "t", "SLUICE_": "x", "PATH": "/bin"}
    )
    assert keys["bootstrap.servers"] == "kafka:9092"
    assert keys["listeners"] == "http://0.0.0.0:9000"  # the variable wins over the default
    assert keys["plugin.path"] == "/opt/sluice/plugins" and keys["group.id"] == "sluice"
    assert not {"url", "token", "", "path"} & set(keys)


def test_rendered_properties_read_back_unchanged() -> None:
    keys = {"a.b": "C:\\dir\\file", "odd key=x": "v", "lines": "one\ntwo", "lead": "  spaced", "empty": ""}
    assert parse_properties(entrypoint.render_properties(keys)) == keys


def test_a_mounted_file_is_kept_and_a_generated_one_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "worker.properties"
    path.write_text("bootstrap.servers=mine:9092\n")
    assert not entrypoint.write_worker_properties(path, {"SLUICE_BOOTSTRAP_SERVERS": "env:9092"})
    assert path.read_text() == "bootstrap.servers=mine:9092\n"

    path.unlink()
    assert entrypoint.write_worker_properties(path, {"SLUICE_BOOTSTRAP_SERVERS": "first:9092"})
    assert entrypoint.write_worker_properties(path, {"SLUICE_BOOTSTRAP_SERVERS": "second:9092"})
    assert parse_properties(path.read_text())["bootstrap.servers"] == "second:9092"


@pytest.mark.parametrize(
    ("listener", "url"),
    [
        ("http://0.0.0.0:8083", "http://127.0.0.1:8083/health"),
        ("https://worker-1:8443", "https://worker-1:8443/health"),
        ("http://[::]:9000", "http://127.0.0.1:9000/health"),
        ("127.0.0.1:8090", "http://127.0.0.1:8090/health"),
    ],
)
def test_healthcheck_asks_the_first_listener(listener: str, url: str) -> None:
    assert healthcheck.health_url(listener) == url


def test_healthcheck_reads_listeners_from_the_properties(tmp_path: Path) -> None:
    path = tmp_path / "worker.properties"
    path.write_text("# c\ngroup.id=g\nlisteners = http://0.0.0.0:9100, https://0.0.0.0:9443\n")
    assert healthcheck.first_listener(path) == "http://0.0.0.0:9100"
    assert healthcheck.first_listener(tmp_path / "missing") == healthcheck.DEFAULT_LISTENER


def test_requirements_list_the_chosen_extras_once(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["a>=1", "b"]\n'
        '[project.optional-dependencies]\njdbc = ["c", "pyarrow>=15"]\ns3 = ["d", "pyarrow>=15"]\nspark = ["e"]\n'
    )
    assert requirements.requirements(pyproject, ["jdbc", "s3"]) == ["a>=1", "b", "c", "pyarrow>=15", "d"]
    with pytest.raises(SystemExit, match="unknown extra"):
        requirements.requirements(pyproject, ["nope"])


def test_the_image_extras_exist_in_pyproject() -> None:
    pyproject = container_image.repository_root() / "pyproject.toml"
    assert requirements.requirements(pyproject, container_image.DEFAULT_EXTRAS.split(","))


def test_debian_mirror_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
    )
    assert container_image.debian_mirror(tmp_path) == "http://mirror.example/debian"

    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert container_image.debian_mirror(tmp_path) == "http://old.example/debian"
    (tmp_path / "sources.list").write_text("")
    assert container_image.debian_mirror(tmp_path) == container_image.FALLBACK_MIRROR


def test_the_build_context_digest_skips_what_the_ignore_file_keeps_out() -> None:
    patterns = container_image._ignore_patterns()
    assert container_image._ignored("worker/__pycache__/cli.cpython-311.pyc", patterns)
    assert container_image._ignored("native/target/release/x.so", patterns)
    assert container_image._ignored(".venv/bin/python", patterns)
    assert not container_image._ignored("cli/main.py", patterns)
    assert not container_image._ignored("native/src/lib.rs", patterns)
