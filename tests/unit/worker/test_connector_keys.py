"""Keys a connector does not define are accepted, kept and named (issue #24): worker/config/connector_keys."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.sink.elasticsearch.connector import ElasticsearchSinkConnector
from sluice.connectors.sink.jdbc.connector import JdbcSinkConnector
from sluice.connectors.sink.s3.connector import S3SinkConnector
from sluice.connectors.source.file.connector import FileStreamSourceConnector
from sluice.connectors.source.jdbc.connector import JdbcSourceConnector
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginKind, PluginRegistry
from sluice.worker.config.connector_keys import ignored_key_warnings, split_own_keys
from sluice.worker.config.infos import check_connectivity
from sluice.worker.config.models import WorkerConfig
from sluice.worker.worker import Worker

SOURCE = {"name": "f", "connector.class": "FileStreamSource", "file": "", "topic": "t"}


def make_worker() -> Worker:
    return Worker(WorkerConfig.from_mapping({}), PluginRegistry(), MemoryOffsetStore())


def test_unknown_keys_are_kept_and_not_handed_to_the_connector() -> None:
    validated = make_worker().validate({**SOURCE, "tpoic": "x", "connector.plugin.version": "1.0"})
    assert validated.ignored == ("connector.plugin.version", "tpoic")
    assert validated.raw["tpoic"] == "x" and validated.own.topic == "t"


def test_values_of_known_keys_are_still_errors() -> None:
    with pytest.raises(ConfigError) as info:
        make_worker().validate({**SOURCE, "batch.size": "lots", "tpoic": "x"})
    assert info.value.key == "batch.size"


def test_prefixed_keys_keep_their_checks() -> None:
    worker = make_worker()
    with pytest.raises(ConfigError) as info:
        worker.validate({**SOURCE, "errors.tolerence": "all"})
    assert info.value.key == "errors.tolerence"
    with pytest.raises(ConfigError):
        worker.validate({**SOURCE, "transforms": "x", "transforms.x.type": "NoSuchTransform"})
    # Debezium's errors.max.retries belongs to the connector: accepted and named, not refused.
    assert worker.validate({**SOURCE, "errors.max.retries": "3"}).ignored == ("errors.max.retries",)


def test_warnings_give_the_reason_or_the_closest_key() -> None:
    warnings = ignored_key_warnings(
        PostgresCdcSourceConnector,
        ["snapshot.locking.mode", "column.mask.with.12.chars", "databse.hostname", "connector.plugin.version", "zzz"],
    )
    assert warnings["snapshot.locking.mode"].startswith('"snapshot.locking.mode" is accepted but not honoured')
    assert "takes no table locks" in warnings["snapshot.locking.mode"]
    assert "MaskField" in warnings["column.mask.with.12.chars"]  # a pattern entry of the table
    assert warnings["databse.hostname"].endswith('(did you mean "database.hostname"?)')
    assert "KIP-891" in warnings["connector.plugin.version"]
    assert "did you mean" not in warnings["zzz"] and "kept but ignored" in warnings["zzz"]


def test_split_own_keys_accepts_attribute_names_as_the_model_does() -> None:
    known, unknown = split_own_keys(FileStreamSourceConnector.Config, {"batch_size": "1", "topic": "t", "x": "y"})
    assert known == {"batch_size": "1", "topic": "t"} and unknown == {"x": "y"}


def test_create_logs_one_warning_naming_the_ignored_keys(caplog: pytest.LogCaptureFixture) -> None:
    worker = make_worker()
    with caplog.at_level(logging.WARNING, logger="sluice.worker.worker"):
        worker.warn_ignored_keys(worker.validate({**SOURCE, "tpoic": "x"}))
        worker.warn_ignored_keys(worker.validate(SOURCE))
    lines = [r.getMessage() for r in caplog.records if "ignores" in r.getMessage()]
    assert len(lines) == 1 and '"tpoic"' in lines[0] and 'did you mean "topic"' in lines[0]


def test_a_misspelt_class_gets_suggestions() -> None:
    with pytest.raises(ConfigError, match="Did you mean FileStreamSource\\?") as info:
        make_worker().validate({**SOURCE, "connector.class": "FileStreamSorce"})
    assert info.value.key == "connector.class"
    assert PluginRegistry().suggest("JdbcSinkConector", (PluginKind.SOURCE, PluginKind.SINK)) == ["JdbcSinkConnector"]
    assert PluginRegistry().suggest("Nothing", (PluginKind.SOURCE, PluginKind.SINK)) == []


class _Hangs(JdbcSinkConnector):
    released: ClassVar[threading.Event] = threading.Event()

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        cls.released.wait(30)
        return {}


class _Raises(JdbcSinkConnector):
    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        raise RuntimeError("driver bug")


def test_connectivity_is_bounded_and_never_raises() -> None:
    try:
        assert check_connectivity(_Hangs, object(), timeout_s=0.1) == {
            "connector.class": "_Hangs could not check connectivity within 0.1 s"
        }
    finally:
        _Hangs.released.set()
    assert check_connectivity(_Raises, object(), timeout_s=0.1) == {
        "connector.class": "Checking connectivity failed: RuntimeError"
    }
    # A connector without the hook costs no thread.
    assert check_connectivity(FileStreamSourceConnector, object()) == {}


@pytest.mark.parametrize(
    ("page", "connector"),
    [
        ("postgres-cdc.md", PostgresCdcSourceConnector),
        ("jdbc.md", JdbcSinkConnector),
        ("jdbc.md", JdbcSourceConnector),
        ("s3.md", S3SinkConnector),
        ("elasticsearch.md", ElasticsearchSinkConnector),
    ],
)
def test_the_docs_audit_lists_every_key_not_honoured(page: str, connector: Any) -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "connectors" / page).read_text()
    missing = [key for key in connector.unimplemented_keys if f"`{key}`" not in text]
    assert not missing, f"docs/connectors/{page} does not list {missing}"
