"""Config providers: ``${env:…}``, ``${file:…}``, ``${dir:…}`` and their resolution in the worker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import ConfigError, PluginConfig
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginKind, PluginRegistry
from sluice.plugins.registry import kind_of
from sluice.worker.config.masking import SECRETS, mask_text
from sluice.worker.config.models import WorkerConfig
from sluice.worker.config.providers import (
    ConfigProvider,
    ConfigProviders,
    DirectoryConfigProvider,
    EnvVarConfigProvider,
    FileConfigProvider,
    reverse_transform,
)
from sluice.worker.worker import Worker
from tests.host_files import passwd_root


def _this_module_as_plugins() -> PluginRegistry:
    """A registry whose plugin path holds this module (imported as ``path_modules`` says, not by
    a scan of the whole test package): its classes are then named by their Python paths."""
    return PluginRegistry([str(Path(__file__).resolve().parent)], path_modules=[__name__])


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    yield
    SECRETS.clear()


ALL_THREE = {"config.providers": "env,file,dir"}


def providers(**raw: str) -> ConfigProviders:
    """The built-in providers, declared (nothing exists undeclared), plus ``raw`` worker keys."""
    return ConfigProviders.from_worker_config({**ALL_THREE, **{k.replace("_", "."): v for k, v in raw.items()}})


def resolve(config: Mapping[str, Any], **worker: str) -> dict[str, Any]:
    return providers(**worker).resolve(config)


# -- env -------------------------------------------------------------------------------------------


def test_env_placeholder_is_replaced_and_registered_as_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", "s3cr3t-value")
    assert resolve({"connection.password": "${env:DB_PASSWORD}", "other": 5}) == {
        "connection.password": "s3cr3t-value",
        "other": 5,
    }
    assert mask_text("login with s3cr3t-value failed") == "login with [hidden] failed"


def test_a_value_resolved_for_a_connector_is_that_connectors_secret_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_USER", "app-owner")
    assert providers().resolve({"connection.user": "${env:DB_USER}"}, connector="orders") == {
        "connection.user": "app-owner"
    }
    assert mask_text("login as app-owner failed", "orders") == "login as [hidden] failed"
    assert mask_text("login as app-owner failed", "billing") == "login as app-owner failed"


def test_missing_env_var_names_the_key_and_placeholder_not_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_NOT_SET", raising=False)
    with pytest.raises(ConfigError) as info:
        resolve({"connection.password": "${env:SLUICE_NOT_SET}"})
    assert info.value.key == "connection.password"
    assert "${env:SLUICE_NOT_SET}" in str(info.value)
    assert "not set" in str(info.value)


def test_env_allowlist_pattern_hides_other_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_USER", "reader")
    monkeypatch.setenv("AWS_SECRET", "do-not-read")
    worker = {"config.providers": "env", "config.providers.env.param.allowlist.pattern": "DB_.*"}
    assert ConfigProviders.from_worker_config(worker).resolve({"u": "${env:DB_USER}"}) == {"u": "reader"}
    with pytest.raises(ConfigError, match="allowlist.pattern"):
        ConfigProviders.from_worker_config(worker).resolve({"s": "${env:AWS_SECRET}"})


def test_env_provider_rejects_a_path() -> None:
    with pytest.raises(ConfigError, match="takes no path"):
        resolve({"k": "${env:/etc:HOME}"})


def test_invalid_allowlist_pattern_names_the_worker_key() -> None:
    with pytest.raises(ConfigError) as info:
        ConfigProviders.from_worker_config(
            {"config.providers": "env", "config.providers.env.param.allowlist.pattern": "("}
        )
    assert info.value.key == "config.providers.env.param.allowlist.pattern"


# -- file ------------------------------------------------------------------------------------------


def test_file_provider_reads_a_properties_key(tmp_path: Path) -> None:
    props = tmp_path / "db.properties"
    props.write_text("# credentials\nuser=reader\npassword = pa\\:ss=word\n")
    assert resolve({"u": f"${{file:{props}:user}}", "p": f"${{file:{props}:password}}"}) == {
        "u": "reader",
        "p": "pa:ss=word",
    }


def test_file_provider_missing_key_and_missing_file(tmp_path: Path) -> None:
    props = tmp_path / "db.properties"
    props.write_text("user=reader\n")
    with pytest.raises(ConfigError) as info:
        resolve({"connection.password": f"${{file:{props}:password}}"})
    assert info.value.key == "connection.password"
    assert f"${{file:{props}:password}}" in str(info.value)
    with pytest.raises(ConfigError, match="cannot read properties file") as info:
        resolve({"connection.user": f"${{file:{tmp_path}/absent.properties:user}}"})
    assert info.value.key == "connection.user"


def test_file_provider_allowed_paths(tmp_path: Path) -> None:
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (allowed / "a.properties").write_text("k=inside\n")
    (other / "b.properties").write_text("k=outside\n")
    worker = {"config.providers": "file", "config.providers.file.param.allowed.paths": str(allowed)}
    ok = ConfigProviders.from_worker_config(worker)
    assert ok.resolve({"x": f"${{file:{allowed}/a.properties:k}}"}) == {"x": "inside"}
    for path in (other / "b.properties", f"{allowed}/../other/b.properties"):
        with pytest.raises(ConfigError, match="outside the provider's allowed.paths"):
            ok.resolve({"x": f"${{file:{path}:k}}"})


def test_file_provider_allowed_paths_does_not_follow_a_symlink_out(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (tmp_path / "secret.properties").write_text("k=outside\n")
    (allowed / "link.properties").symlink_to(tmp_path / "secret.properties")
    worker = {"config.providers": "file", "config.providers.file.param.allowed.paths": str(allowed)}
    with pytest.raises(ConfigError, match="outside"):
        ConfigProviders.from_worker_config(worker).resolve({"x": f"${{file:{allowed}/link.properties:k}}"})


def test_allowed_paths_must_be_absolute() -> None:
    with pytest.raises(ConfigError) as info:
        ConfigProviders.from_worker_config(
            {"config.providers": "dir", "config.providers.dir.param.allowed.paths": "relative/dir"}
        )
    assert info.value.key == "config.providers.dir.param.allowed.paths"


# -- dir -------------------------------------------------------------------------------------------


def test_dir_provider_returns_the_whole_file_like_connect(tmp_path: Path) -> None:
    (tmp_path / "password").write_text("hunter22\n")
    (tmp_path / "user").write_text("reader")
    assert resolve({"p": f"${{dir:{tmp_path}:password}}", "u": f"${{dir:{tmp_path}:user}}"}) == {
        "p": "hunter22\n",
        "u": "reader",
    }


def test_dir_provider_missing_file_and_traversal(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (tmp_path / "outside").write_text("nope")
    (secrets / "sub").mkdir()
    for key in ("absent", "../outside", "sub"):
        with pytest.raises(ConfigError, match="no file") as info:
            resolve({"ssl.key.password": f"${{dir:{secrets}:{key}}}"})
        assert info.value.key == "ssl.key.password"


def test_dir_provider_allowed_paths(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("v")
    worker = {"config.providers": "dir", "config.providers.dir.param.allowed.paths": str(tmp_path / "elsewhere")}
    with pytest.raises(ConfigError, match="outside"):
        ConfigProviders.from_worker_config(worker).resolve({"x": f"${{dir:{tmp_path}:k}}"})


# -- placeholders ----------------------------------------------------------------------------------


def test_several_placeholders_with_text_around_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DB_HOST", "db.internal")
    (tmp_path / "port").write_text("5432")
    url = f"jdbc:postgresql://${{env:DB_HOST}}:${{dir:{tmp_path}:port}}/app?ssl=${{env:DB_HOST}}"
    assert resolve({"connection.url": url}) == {
        "connection.url": "jdbc:postgresql://db.internal:5432/app?ssl=db.internal"
    }


def test_text_without_a_provider_reference_is_left_alone() -> None:
    config = {"topic.format": "${topic}-out", "query": "SELECT 1", "n": None}
    assert resolve(config) == config


def test_unknown_provider_names_it_and_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"connection.password": "${vault:secret/db:password}"})
    assert info.value.key == "connection.password"
    assert "'vault' is not declared" in str(info.value) and "dir, env, file" in str(info.value)


def test_config_providers_lists_which_are_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME_DIR", "/home/x")
    only_env = ConfigProviders.from_worker_config({"config.providers": "env"})
    assert only_env.names == ["env"]
    with pytest.raises(ConfigError, match="config provider 'file' is not declared"):
        only_env.resolve({"k": "${file:/etc/x.properties:k}"})
    none = ConfigProviders.from_worker_config({"config.providers": ""})
    assert none.names == []
    with pytest.raises(ConfigError, match="it declares none"):
        none.resolve({"k": "${env:HOME_DIR}"})


@pytest.mark.parametrize(
    "worker",
    [
        {},
        {"config.providers": ""},
        {"config.providers": "vault", "config.providers.vault.class": "EnvVarConfigProvider"},
    ],
)
@pytest.mark.parametrize("placeholder", ["${file:/etc/passwd:root}", "${dir:/etc:passwd}", "${env:HOME}"])
def test_undeclared_providers_do_not_exist(worker: dict[str, str], placeholder: str) -> None:
    """The attack of issue #21: a placeholder in an ordinary key must not make the worker read anything."""
    built = ConfigProviders.from_worker_config(worker)
    assert "file" not in built.names and "dir" not in built.names and "env" not in built.names
    with pytest.raises(ConfigError) as info:
        built.resolve({"topic": placeholder})
    assert info.value.key == "topic"
    message = str(info.value)
    assert "'topic'" in message and placeholder in message and "not declared" in message
    assert passwd_root() not in message and "localhost" not in message
    assert mask_text(passwd_root()) == passwd_root()  # nothing was read, so nothing registered


@pytest.mark.parametrize(
    "placeholder", ["${file:/etc/passwd:root}", "${dir:/etc:passwd}", "${file:/srv/../etc/passwd:root}"]
)
def test_declared_path_providers_refuse_paths_outside_allowed_paths(tmp_path: Path, placeholder: str) -> None:
    worker = {
        "config.providers": "file,dir",
        "config.providers.file.param.allowed.paths": str(tmp_path),
        "config.providers.dir.param.allowed.paths": str(tmp_path),
    }
    with pytest.raises(ConfigError, match="outside the provider's allowed.paths") as info:
        ConfigProviders.from_worker_config(worker).resolve({"topic": placeholder})
    assert info.value.key == "topic" and "'topic'" in str(info.value)
    assert passwd_root() not in str(info.value)
    assert mask_text(passwd_root()) == passwd_root()


def test_settings_of_an_undeclared_provider_are_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker file written when env, file and dir existed by default must not look as if it enabled them."""
    (tmp_path / "k").write_text("v")
    with caplog.at_level("WARNING", logger="sluice.worker.config.providers"):
        built = ConfigProviders.from_worker_config({"config.providers.dir.param.allowed.paths": str(tmp_path)})
    assert built.names == []
    assert "config.providers.dir.*" in caplog.text and "not declared" in caplog.text
    with pytest.raises(ConfigError, match="not declared"):
        built.resolve({"x": f"${{dir:{tmp_path}:k}}"})


def test_dir_provider_does_not_quote_a_file_that_is_not_text(tmp_path: Path) -> None:
    (tmp_path / "binary").write_bytes(b"ok\xff\xfe-secret-bytes")
    with pytest.raises(ConfigError, match="not UTF-8 text") as info:
        resolve({"k": f"${{dir:{tmp_path}:binary}}"})
    assert "xff" not in str(info.value) and "secret-bytes" not in str(info.value)


def test_connect_class_names_and_custom_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_VAR", "value-x")
    built = ConfigProviders.from_worker_config(
        {
            "config.providers": "environment,files",
            "config.providers.environment.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "config.providers.files.class": "FileConfigProvider",
        }
    )
    assert built.names == ["environment", "files"]
    assert built.resolve({"k": "${environment:X_VAR}"}) == {"k": "value-x"}


def test_a_listed_provider_needs_a_known_class() -> None:
    with pytest.raises(ConfigError) as info:
        ConfigProviders.from_worker_config({"config.providers": "vault"})
    assert info.value.key == "config.providers.vault.class"
    with pytest.raises(ConfigError, match="not found") as info:
        ConfigProviders.from_worker_config(
            {"config.providers": "vault", "config.providers.vault.class": "no.such.Vault"}
        )
    assert info.value.key == "config.providers.vault.class"


class VaultLikeProvider(ConfigProvider):
    """A custom provider found by its Python path, with its own parameters."""

    class Config(PluginConfig):
        prefix: str

    calls: list[tuple[str, list[str]]] = []

    def get(self, path: str, keys: Iterable[str]) -> dict[str, str]:
        keys = list(keys)
        VaultLikeProvider.calls.append((path, keys))
        return {k: f"{self.config.prefix}{path}/{k}" for k in keys if k != "absent"}


def test_plugin_provider_by_python_path_with_params() -> None:
    assert kind_of(VaultLikeProvider) is PluginKind.CONFIG_PROVIDER
    VaultLikeProvider.calls.clear()
    built = ConfigProviders.from_worker_config(
        {
            "config.providers": "vault",
            "config.providers.vault.class": f"{__name__}.VaultLikeProvider",
            "config.providers.vault.param.prefix": "v:",
        },
        _this_module_as_plugins(),
    )
    resolved = built.resolve({"user": "${vault:db:user}", "password": "${vault:db:password}"})
    assert resolved == {"user": "v:db/user", "password": "v:db/password"}
    assert VaultLikeProvider.calls == [("db", ["user", "password"])]  # one call per path
    with pytest.raises(ConfigError, match=r"\$\{vault:db:absent\}"):
        built.resolve({"k": "${vault:db:absent}"})


def test_plugin_provider_params_are_validated() -> None:
    with pytest.raises(ConfigError) as info:
        ConfigProviders.from_worker_config(
            {"config.providers": "vault", "config.providers.vault.class": f"{__name__}.VaultLikeProvider"},
            _this_module_as_plugins(),
        )
    assert info.value.key == "config.providers.vault.param.prefix"


def test_provider_classes_are_plugins() -> None:
    for cls in (EnvVarConfigProvider, FileConfigProvider, DirectoryConfigProvider):
        assert kind_of(cls) is PluginKind.CONFIG_PROVIDER


def test_reverse_transform_puts_placeholders_back() -> None:
    raw = {"topic": "${env:T}", "file": "/data/in.txt", "password": "x-${env:P}"}
    tasks = [{"topic": "resolved-topic", "file": "/data/in.txt", "password": "x-pw", "task.id": "0"}]
    assert reverse_transform(raw, tasks) == [
        {"topic": "${env:T}", "file": "/data/in.txt", "password": "x-${env:P}", "task.id": "0"}
    ]


# -- the worker ------------------------------------------------------------------------------------


def make_worker(**worker: str) -> Worker:
    """A worker with ``env`` declared (``config.providers=`` overrides it) and the given keys."""
    settings = {
        "config.providers": "env",
        "connector.allowed.paths": "*",
        **{k.replace("_", "."): v for k, v in worker.items()},
    }
    return Worker(WorkerConfig.from_mapping(settings), PluginRegistry(), MemoryOffsetStore())


def test_worker_validates_resolved_values_and_keeps_the_raw(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLUICE_UNIT_TOPIC", "resolved-topic")
    raw = {
        "name": "src",
        "connector.class": "FileStreamSource",
        "file": str(tmp_path / "in.txt"),
        "topic": "${env:SLUICE_UNIT_TOPIC}",
        "batch.size": "${env:SLUICE_UNIT_BATCH}",
    }
    monkeypatch.setenv("SLUICE_UNIT_BATCH", "17")
    validated = make_worker().validate(raw)
    assert validated.raw == raw
    assert validated.own.topic == "resolved-topic" and validated.own.batch_size == 17
    task_configs = make_worker().reverse_transform(validated, [validated.own.to_task_config()])
    assert task_configs[0]["topic"] == "${env:SLUICE_UNIT_TOPIC}"


def test_worker_validation_reports_a_placeholder_that_does_not_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_UNIT_MISSING", raising=False)
    with pytest.raises(ConfigError) as info:
        make_worker().validate(
            {"name": "src", "connector.class": "FileStreamSource", "topic": "${env:SLUICE_UNIT_MISSING}"}
        )
    assert info.value.key == "topic"


def test_worker_validation_checks_the_resolved_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_UNIT_BAD_TOPIC", "not a topic!")
    with pytest.raises(ConfigError) as info:
        make_worker().validate(
            {"name": "src", "connector.class": "FileStreamSource", "topic": "${env:SLUICE_UNIT_BAD_TOPIC}"}
        )
    assert info.value.key == "topic"
    assert "not a topic!" not in str(info.value)  # PluginConfig hides inputs; a resolved value may be a secret


def test_worker_resolves_its_own_config_and_rejects_bad_provider_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_UNIT_JAAS", "org.apache.kafka.common.security.plain.PlainLoginModule required;")
    worker = make_worker(producer_sasl_jaas_config="${env:SLUICE_UNIT_JAAS}")
    assert worker.config.prefixed("producer.") == {
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;"
    }
    with pytest.raises(ConfigError) as info:
        make_worker(config_providers="nope")
    assert info.value.key == "config.providers.nope.class"


def test_a_worker_without_config_providers_refuses_placeholders_in_its_own_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLUICE_UNIT_JAAS", "org.apache.kafka.common.security.plain.PlainLoginModule required;")
    with pytest.raises(ConfigError, match="not declared") as info:
        make_worker(config_providers="", producer_sasl_jaas_config="${env:SLUICE_UNIT_JAAS}")
    assert info.value.key == "producer.sasl.jaas.config"


def test_worker_validation_refuses_an_undeclared_provider_naming_the_key() -> None:
    raw = {"name": "src", "connector.class": "FileStreamSource", "file": "", "topic": "${file:/etc/passwd:root}"}
    with pytest.raises(ConfigError) as info:
        make_worker(config_providers="env").validate(raw)
    assert info.value.key == "topic"
    assert "'topic'" in str(info.value) and passwd_root() not in str(info.value)
