"""The ``LocalPath`` marker and ``PluginConfig.path_keys()``: how a connector declares local file keys."""

from __future__ import annotations

from pydantic import Field, SecretStr

from sluice.connectors.api import LocalPath, PluginConfig
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig
from sluice.connectors.sink.file.config import FileStreamSinkConfig
from sluice.connectors.source.file.config import FileStreamSourceConfig


class SpoolingConfig(PluginConfig):
    """A connector config with every way of spelling a local path, and keys that are not one."""

    file: LocalPath = Field("", description="A required-style path with a default.")
    spool_dir: LocalPath | None = Field(None, description="An optional directory.")
    ssl_ca_location: LocalPath | None = None
    topic: str = "t"
    path_format: str = Field("'year'=YYYY", description="Named like a path, but a template, not a file.")
    password: SecretStr | None = None


def test_path_keys_lists_local_path_fields_by_their_dotted_keys() -> None:
    assert SpoolingConfig.path_keys() == {"file", "spool.dir", "ssl.ca.location"}
    assert SpoolingConfig.secret_keys() == {"password"}


def test_a_local_path_is_still_a_plain_string_to_the_connector() -> None:
    config = SpoolingConfig.parse({"file": " /data/in.txt ", "spool.dir": "/var/spool/x"})
    assert config.file == "/data/in.txt" and config.spool_dir == "/var/spool/x"
    assert config.model_dump(by_alias=True)["file"] == "/data/in.txt"


def test_the_builtin_connectors_declare_their_local_files() -> None:
    assert FileStreamSourceConfig.path_keys() == {"file"}
    assert FileStreamSinkConfig.path_keys() == {"file"}
    assert ElasticsearchSinkConfig.path_keys() == {
        "elastic.https.ssl.truststore.location",
        "elastic.https.ssl.keystore.location",
        "elastic.https.ssl.key.location",
    }


def test_a_model_without_local_paths_has_none() -> None:
    assert PluginConfig.path_keys() == set()
