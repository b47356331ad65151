"""The exactly-once keys of a source connector (KIP-618) at validate and create time, with Kafka
Connect's messages, on a standalone worker and on workers with a distributed config.

The distributed worker here is the herder core over memory stores with a ``DistributedConfig``:
what validation reads of a cluster member (its config and the connector class) without Kafka.
Connectors that are created are created STOPPED, so no task needs a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.connectors.api import ConfigError, ConnectorTransactionBoundaries, ExactlyOnceSupport, SourceConnector
from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector, MySqlCdcSourceConnector
from sluice.connectors.source.file.connector import FileStreamSourceConnector
from sluice.connectors.source.jdbc.connector import JdbcSourceConnector
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.connectors.source.s3.connector import S3SourceConnector
from sluice.connectors.source.sequence.connector import SequenceSourceConnector
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.worker.config.models import ConnectorConfig, WorkerConfig
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.herder.core import HerderCore
from sluice.worker.herder.stores.config_store import MemoryConfigStore
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.herder.strategy import LocalAssignment
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.plugins.controllable import ControllableSource

# Kafka Connect's messages, as its DistributedHerder words them.
NOT_ENABLED = "This worker does not have exactly-once source support enabled."
NO_PREFLIGHT = (
    "The connector does not implement the API required for preflight validation of exactly-once source support. "
    "Please consult the documentation for the connector to determine whether it supports exactly-once semantics, "
    'and then consider reconfiguring the connector to use the value "requested" for this property (which will '
    "disable this preflight check and allow the connector to be created)."
)
UNSUPPORTED = "The connector does not support exactly-once semantics with the provided configuration."
NO_BOUNDARIES = (
    "The connector does not support connector-defined transaction boundaries with the given configuration. "
    "Please reconfigure it to use a different transaction boundary definition."
)

CONTROLLABLE = "tests.plugins.controllable.ControllableSource"
SEQUENCE = {"connector.class": "SequenceSource", "topic": "t"}
CONTROLLED = {"connector.class": CONTROLLABLE, "topic": "t", "fail.flag": "/nonexistent/flag"}
WORKER = {"bootstrap.servers": "127.0.0.1:1", "connector.allowed.paths": "*"}
CLUSTER = {
    "group.id": "g",
    "config.storage.topic": "configs",
    "offset.storage.topic": "offsets",
    "status.storage.topic": "statuses",
}


class MemberHerder(HerderCore):
    """The herder core over memory stores, for a worker with a distributed config."""

    def __init__(self, worker: Worker) -> None:
        store = MemoryConfigStore(on_change=self.wakeup)
        strategy = LocalAssignment(worker.config.worker_id, store, running=lambda: self.ready)
        super().__init__(worker, store, StatusStore(), strategy)


#: The workers every check runs on: standalone, and distributed with each exactly-once setting.
WORKERS = ["standalone", "disabled", "preparing", "enabled"]


@pytest.fixture
def make_worker_client(registry: PluginRegistry) -> Iterator[Callable[[str], TestClient]]:
    herders: list[HerderCore] = []

    def make(kind: str) -> TestClient:
        herder: HerderCore
        if kind == "standalone":
            herder = StandaloneHerder(Worker(WorkerConfig.from_mapping(WORKER), registry, MemoryOffsetStore()))
        else:
            settings = {**WORKER, **CLUSTER, "exactly.once.source.support": kind}
            herder = MemberHerder(Worker(DistributedConfig.from_mapping(settings), registry, MemoryOffsetStore()))
        herder.start()
        herders.append(herder)
        return TestClient(create_app(herder), raise_server_exceptions=False)

    yield make
    for herder in herders:
        herder.stop()


def _validate(client: TestClient, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    response = client.put(f"/connector-plugins/{config['connector.class']}/config/validate", json=config)
    assert response.status_code == 200, response.text
    infos = response.json()
    return infos, {c["value"]["name"]: c["value"] for c in infos["configs"]}


def _create(client: TestClient, name: str, config: dict[str, Any]) -> Any:
    return client.post("/connectors", json={"name": name, "config": config, "initial_state": "STOPPED"})


@pytest.mark.parametrize("kind", WORKERS)
def test_the_defaults_are_listed_and_accepted_on_every_worker(
    make_worker_client: Callable[[str], TestClient], kind: str
) -> None:
    client = make_worker_client(kind)
    infos, values = _validate(client, SEQUENCE)
    assert infos["error_count"] == 0 and infos["warnings"] == []
    assert values["exactly.once.support"]["value"] == "requested"
    assert values["exactly.once.support"]["recommended_values"] == ["requested", "required"]
    assert values["transaction.boundary"]["value"] == "poll"
    assert values["transaction.boundary"]["recommended_values"] == ["poll", "interval", "connector"]
    assert values["transaction.boundary.interval.ms"]["value"] is None
    assert values["offsets.storage.topic"]["value"] is None
    explicit = {**SEQUENCE, "exactly.once.support": "requested", "transaction.boundary": "interval"}
    assert _create(client, "defaults", {**explicit, "transaction.boundary.interval.ms": "0"}).status_code == 201
    assert client.get("/connectors").json() == ["defaults"]


@pytest.mark.parametrize("kind", ["standalone", "disabled", "preparing"])
def test_required_on_a_worker_without_exactly_once_support_is_refused(
    make_worker_client: Callable[[str], TestClient], kind: str
) -> None:
    client = make_worker_client(kind)
    config = {**SEQUENCE, "exactly.once.support": "required"}
    infos, values = _validate(client, config)
    assert values["exactly.once.support"]["errors"] == [NOT_ENABLED]
    assert infos["error_count"] == 1
    refused = _create(client, "eos", config)
    assert refused.status_code == 400
    assert refused.json()["message"].startswith(
        "Connector configuration is invalid and contains the following 1 error(s):"
    )
    assert f"exactly.once.support: {NOT_ENABLED}" in refused.json()["message"]
    assert client.get("/connectors").json() == []


def test_required_on_a_worker_with_support_and_a_supporting_connector_is_accepted(
    make_worker_client: Callable[[str], TestClient],
) -> None:
    client = make_worker_client("enabled")
    config = {**SEQUENCE, "exactly.once.support": "required"}
    assert _validate(client, config)[0]["error_count"] == 0
    assert _create(client, "eos", config).status_code == 201


@pytest.mark.parametrize(
    ("kind", "expected"), [("enabled", [NO_PREFLIGHT]), ("standalone", [NOT_ENABLED, NO_PREFLIGHT])]
)
def test_required_for_a_connector_that_does_not_say(
    make_worker_client: Callable[[str], TestClient], kind: str, expected: list[str]
) -> None:
    client = make_worker_client(kind)
    config = {**CONTROLLED, "exactly.once.support": "required"}
    infos, values = _validate(client, config)
    assert values["exactly.once.support"]["errors"] == expected
    assert infos["error_count"] == len(expected)
    refused = _create(client, "quiet", config)
    assert refused.status_code == 400
    message = refused.json()["message"]
    assert message.startswith(
        f"Connector configuration is invalid and contains the following {len(expected)} error(s):"
    )
    assert all(f"exactly.once.support: {m}" in message for m in expected)
    # requested skips the preflight check, as Connect's message suggests.
    assert _create(client, "quiet", {**CONTROLLED, "exactly.once.support": "requested"}).status_code == 201


@pytest.mark.parametrize("kind", ["enabled", "standalone"])
def test_the_file_source_supports_exactly_once_for_a_file_not_for_stdin(
    make_worker_client: Callable[[str], TestClient], kind: str, tmp_path: Path
) -> None:
    client = make_worker_client(kind)
    worker_error = [] if kind == "enabled" else [NOT_ENABLED]
    stdin = {"connector.class": "FileStreamSource", "topic": "t", "file": "", "exactly.once.support": "required"}
    assert _validate(client, stdin)[1]["exactly.once.support"]["errors"] == [*worker_error, UNSUPPORTED]
    a_file = {**stdin, "file": str(tmp_path / "lines.txt")}
    assert _validate(client, a_file)[1]["exactly.once.support"]["errors"] == worker_error
    assert (_create(client, "file", a_file).status_code == 201) is (kind == "enabled")


@pytest.mark.parametrize("kind", WORKERS)
def test_connector_defined_boundaries_need_a_connector_that_defines_them(
    make_worker_client: Callable[[str], TestClient], kind: str
) -> None:
    # As Connect's herder: checked whatever the worker's exactly-once setting.
    client = make_worker_client(kind)
    config = {**SEQUENCE, "transaction.boundary": "Connector"}  # Connect reads it in any case
    infos, values = _validate(client, config)
    assert values["transaction.boundary"]["errors"] == [NO_BOUNDARIES] and infos["error_count"] == 1
    refused = _create(client, "bounded", config)
    assert refused.status_code == 400 and f"transaction.boundary: {NO_BOUNDARIES}" in refused.json()["message"]


def test_connector_defined_boundaries_are_accepted_from_a_connector_that_defines_them(
    make_worker_client: Callable[[str], TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        ControllableSource,
        "can_define_transaction_boundaries",
        lambda self, config: ConnectorTransactionBoundaries.SUPPORTED,
    )
    client = make_worker_client("enabled")
    config = {**CONTROLLED, "transaction.boundary": "connector"}
    assert _validate(client, config)[0]["error_count"] == 0
    assert _create(client, "bounded", config).status_code == 201


@pytest.mark.parametrize("kind", ["enabled", "standalone"])
def test_a_hook_that_raises_refuses_the_config_with_its_message(
    make_worker_client: Callable[[str], TestClient], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    seen: list[dict[str, Any]] = []

    def support(self: SourceConnector, config: dict[str, Any]) -> ExactlyOnceSupport:
        seen.append(config)
        raise RuntimeError("  the catalog did not answer ")

    def boundaries(self: SourceConnector, config: dict[str, Any]) -> ConnectorTransactionBoundaries:
        raise ValueError("")

    monkeypatch.setattr(ControllableSource, "exactly_once_support", support)
    monkeypatch.setattr(ControllableSource, "can_define_transaction_boundaries", boundaries)
    client = make_worker_client(kind)
    config = {**CONTROLLED, "exactly.once.support": "required", "transaction.boundary": "connector"}
    _, values = _validate(client, config)
    worker_error = [] if kind == "enabled" else [NOT_ENABLED]
    expected = "An unexpected error occurred during validation: the catalog did not answer"
    assert values["exactly.once.support"]["errors"] == [*worker_error, expected]
    assert values["transaction.boundary"]["errors"] == [
        "An unexpected error occurred during validation; please see the worker logs for more details."
    ]
    # The hook gets the raw config: strings, common keys included.
    assert seen[0]["exactly.once.support"] == "required" and seen[0]["topic"] == "t"
    assert _create(client, "raising", config).status_code == 400


def test_a_sink_ignores_the_keys_and_says_so(make_worker_client: Callable[[str], TestClient], tmp_path: Path) -> None:
    client = make_worker_client("standalone")
    definitions = {d["name"] for d in client.get("/connector-plugins/FileStreamSink/config").json()}
    assert "exactly.once.support" not in definitions and "transaction.boundary" not in definitions
    config = {
        "connector.class": "FileStreamSink",
        "topics": "t",
        "file": str(tmp_path / "out.txt"),
        "exactly.once.support": "required",
        "transaction.boundary": "connector",
    }
    infos, values = _validate(client, config)
    assert infos["error_count"] == 0
    assert {w["name"] for w in infos["warnings"]} == {"exactly.once.support", "transaction.boundary"}
    assert "applies to source connectors only" in values["transaction.boundary"]["warnings"][0]
    assert _create(client, "sink", config).status_code == 201


def test_the_interval_and_the_offsets_topic_are_checked(make_worker_client: Callable[[str], TestClient]) -> None:
    client = make_worker_client("enabled")
    infos, values = _validate(
        client, {**SEQUENCE, "transaction.boundary.interval.ms": "-1", "offsets.storage.topic": "no spaces"}
    )
    assert infos["error_count"] == 2
    assert values["transaction.boundary.interval.ms"]["errors"]
    [topic_error] = values["offsets.storage.topic"]["errors"]
    assert topic_error.endswith("topic name 'no spaces' may contain only ASCII letters, digits, '.', '_' and '-'")
    infos, _ = _validate(client, {**SEQUENCE, "transaction.boundary.interval.ms": "500", "offsets.storage.topic": ""})
    assert infos["error_count"] == 0
    assert infos["warnings"] == [
        {
            "name": "transaction.boundary.interval.ms",
            "message": '"transaction.boundary.interval.ms" has no effect with transaction.boundary=poll; '
            "it sets the interval of transaction.boundary=interval",
        }
    ]
    infos, _ = _validate(
        client, {**SEQUENCE, "transaction.boundary": "interval", "transaction.boundary.interval.ms": "500"}
    )
    assert infos["error_count"] == 0 and infos["warnings"] == []


def test_the_interval_defaults_to_the_workers_flush_interval() -> None:
    worker = WorkerConfig.from_mapping({"offset.flush.interval.ms": "7000"})
    common = {"name": "c", "connector.class": "SequenceSource", "transaction.boundary": "interval"}
    assert ConnectorConfig.parse(common).transaction_interval_ms(worker) == 7000
    assert (
        ConnectorConfig.parse({**common, "transaction.boundary.interval.ms": "250"}).transaction_interval_ms(worker)
        == 250
    )


def test_a_standalone_worker_refuses_exactly_once_source_support(registry: PluginRegistry) -> None:
    for value in ("enabled", "preparing"):
        config = WorkerConfig.from_mapping({**WORKER, "exactly.once.source.support": value})
        with pytest.raises(ConfigError) as refused:
            StandaloneHerder(Worker(config, registry, MemoryOffsetStore()))
        assert refused.value.key == "exactly.once.source.support"
        assert f"exactly.once.source.support={value} is a distributed-mode setting" in str(refused.value)
    disabled = WorkerConfig.from_mapping({**WORKER, "exactly.once.source.support": "disabled"})
    assert not StandaloneHerder(Worker(disabled, registry, MemoryOffsetStore())).worker.exactly_once_source_enabled


def test_only_enabled_counts_as_enabled_on_a_distributed_worker() -> None:
    def enabled(**extra: str) -> bool:
        return DistributedConfig.from_mapping({**CLUSTER, **extra}).exactly_once_source_enabled

    assert enabled(**{"exactly.once.source.support": "enabled"})
    assert not enabled(**{"exactly.once.source.support": "preparing"})
    assert not enabled()
    with pytest.raises(ConfigError):
        enabled(**{"exactly.once.source.support": "on"})
    assert not WorkerConfig.from_mapping({}).exactly_once_source_enabled


@pytest.mark.parametrize(
    ("connector", "support", "boundaries"),
    [
        (PostgresCdcSourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.SUPPORTED),
        (MySqlCdcSourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.SUPPORTED),
        (MariaDbCdcSourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.SUPPORTED),
        (JdbcSourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.UNSUPPORTED),
        (S3SourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.UNSUPPORTED),
        (SequenceSourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.UNSUPPORTED),
        (FileStreamSourceConnector, ExactlyOnceSupport.SUPPORTED, ConnectorTransactionBoundaries.UNSUPPORTED),
        (ControllableSource, None, ConnectorTransactionBoundaries.UNSUPPORTED),
    ],
)
def test_what_each_source_declares(
    connector: type[SourceConnector], support: ExactlyOnceSupport | None, boundaries: ConnectorTransactionBoundaries
) -> None:
    config = {"file": "/data/in.txt", "topic": "t"}
    assert connector().exactly_once_support(config) is support
    assert connector().can_define_transaction_boundaries(config) is boundaries
