"""``sluice distributed``: run one member of a cluster until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import sys
from typing import Any

from confluent_kafka.admin import AdminClient

from sluice.cli.standalone import load_worker_file, provide_spark_jars, serve
from sluice.connectors.api import ConfigError
from sluice.offsets.connector_topics import OffsetTopics
from sluice.offsets.kafka import KafkaOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.rest.server import RestServer, metrics_listener_server
from sluice.rest.settings import RestSettings
from sluice.worker.config.local_paths import create_data_dir
from sluice.worker.config.models import with_cli_defaults
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.distributed.herder import DistributedHerder
from sluice.worker.distributed.topics import InternalTopic, ensure_topics
from sluice.worker.herder.core import security_settings
from sluice.worker.worker import Worker

log = logging.getLogger(__name__)


def internal_topics(config: DistributedConfig) -> list[InternalTopic]:
    return [
        InternalTopic(
            config.config_storage_topic,
            "config.storage.topic",
            1,
            config.config_storage_replication_factor,
            exact_partitions=True,
        ),
        InternalTopic(
            config.sluice_topic,
            "sluice.storage.topic",
            1,
            config.config_storage_replication_factor,
            exact_partitions=True,
        ),
        InternalTopic(
            config.offset_storage_topic,
            "offset.storage.topic",
            config.offset_storage_partitions,
            config.offset_storage_replication_factor,
        ),
        InternalTopic(
            config.status_storage_topic,
            "status.storage.topic",
            config.status_storage_partitions,
            config.status_storage_replication_factor,
        ),
    ]


def offset_topics(config: DistributedConfig, client_id: str, admin_security: dict[str, Any]) -> OffsetTopics:
    """The worker's offsets topic and, opened when a connector names one (``offsets.storage.topic``),
    the connectors' own: created like the worker's (compacted, its partitions and replication)."""
    producer = security_settings(config.prefixed("producer."))
    consumer = security_settings(config.prefixed("consumer."))

    def store(topic: str) -> KafkaOffsetStore:
        return KafkaOffsetStore(
            topic,
            config.bootstrap_servers,
            client_id=client_id if topic == config.offset_storage_topic else f"{client_id}-{topic}",
            producer_overrides=producer,
            consumer_overrides=consumer,
        )

    def open_topic(topic: str) -> KafkaOffsetStore:
        admin = AdminClient({"bootstrap.servers": config.bootstrap_servers, **admin_security})
        spec = InternalTopic(
            topic, "offsets.storage.topic", config.offset_storage_partitions, config.offset_storage_replication_factor
        )
        ensure_topics(admin, [spec])
        opened = store(topic)
        opened.start()
        return opened

    return OffsetTopics(store(config.offset_storage_topic), open_topic)


class DistributedWorker:
    """Wires the herder, the REST server and the Kafka-backed stores of one cluster member."""

    def __init__(self, worker_config: dict[str, Any]) -> None:
        # What stop() must undo: start() may fail half-way (the internal topics cannot be made).
        self._rest_started = False
        self._herder_started = False
        self.config = DistributedConfig.from_mapping(with_cli_defaults(worker_config))
        # Before anything starts: a listener other machines reach needs authentication (or an explicit opt-out).
        rest_settings = RestSettings.from_worker_config(self.config.raw)
        rest_settings.check_exposure(self.config.listener[1])
        registry = PluginRegistry([p.strip() for p in self.config.plugin_path.split(",") if p.strip()])
        client_id = self.config.client_id or f"sluice-{self.config.group_id}-{self.config.worker_id}"
        security = {
            k: v for k, v in self.config.prefixed("admin.").items() if k.startswith(("security.", "ssl.", "sasl."))
        }
        self.admin: AdminClient | None = AdminClient({"bootstrap.servers": self.config.bootstrap_servers, **security})
        store = offset_topics(self.config, client_id, security)
        self.herder = DistributedHerder(Worker(self.config, registry, store), self.config)
        create_data_dir(self.config)  # after the worker checked that it overlaps nothing protected
        _, host, port = self.config.listener
        app = create_app(self.herder, rest_settings, backfills=self.herder.backfills)
        self.rest = RestServer(app, host, port)
        self.metrics_server = metrics_listener_server(app, self.config.metrics_listener)

    def start(self) -> None:
        # The REST server first, as Connect's: GET /health answers 503 "starting" until the worker
        # has joined its group (KIP-1017), and writes are refused until the herder is ready.
        self._rest_started = True
        self.rest.start()
        if self.metrics_server is not None:
            self.metrics_server.start()
        admin = self.admin
        if admin is None:
            raise RuntimeError("the worker was stopped")
        ensure_topics(admin, internal_topics(self.config))
        self._herder_started = True
        self.herder.start()

    def refresh_plugins(self) -> None:
        """Scan ``plugin.path`` again: the operator's ``kill -HUP`` (on each worker), never a REST request."""
        self.herder.worker.refresh_plugins()

    def stop(self) -> None:
        try:
            if self._rest_started:
                if self.metrics_server is not None:
                    self.metrics_server.stop()
                self.rest.stop()
        finally:
            try:
                if self._herder_started:
                    self.herder.stop()
            finally:
                # The last reference: the client is destroyed now, on this thread, instead of
                # reconnecting for as long as this object lives and then going wherever the garbage
                # collector runs (on a librdkafka thread, rd_kafka_destroy() aborts the process).
                self.admin = None


def run_distributed(worker_file: str) -> int:
    """Run until a signal arrives; return the process exit code."""
    provide_spark_jars()
    try:
        node = DistributedWorker(load_worker_file(worker_file))
    except ConfigError as exc:
        print(f"sluice: invalid configuration: {exc}", file=sys.stderr)
        return 2
    return serve(node, on_hangup=node.refresh_plugins)
