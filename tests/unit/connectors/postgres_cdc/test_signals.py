"""Signal channels and snapshot notifications: config validation, signal handling, the records."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.cdc.notifications import NOTIFICATION_VALUE_SCHEMA, SnapshotNotifier
from sluice.connectors.cdc.signals import SignalDispatcher
from sluice.connectors.cdc.snapshot import BLOCKING, INCREMENTAL, ChunkedSnapshot
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.snapshot import postgres_snapshot
from tests.unit.connectors.postgres_cdc.test_decoder import decoder


def config(**extra: str) -> PostgresCdcConfig:
    return PostgresCdcConfig.parse({"database.dbname": "db", "topic.prefix": "srv", **extra})


def problem_keys(**extra: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        config(**extra)
    return dict(caught.value.problems or {})


def test_channels_default_as_debeziums_and_unknown_ones_are_named() -> None:
    cfg = config()
    assert (cfg.signal_enabled_channels, cfg.notification_enabled_channels) == (["source"], [])
    assert cfg.signal_kafka_group_id == "kafka-signal"
    assert (
        "unknown channel(s) jmx"
        in problem_keys(**{"signal.enabled.channels": "source, jmx"})["signal.enabled.channels"]
    )
    assert "notification.enabled.channels" in problem_keys(**{"notification.enabled.channels": "sink,email"})


def test_a_channel_without_its_required_key_is_an_error_on_that_key() -> None:
    assert "required" in problem_keys(**{"notification.enabled.channels": "sink"})["notification.sink.topic.name"]
    assert "required" in problem_keys(**{"signal.enabled.channels": "kafka"})["signal.kafka.bootstrap.servers"]
    cfg = config(**{"notification.enabled.channels": "log,sink", "notification.sink.topic.name": "n",
                    "signal.enabled.channels": "kafka", "signal.kafka.bootstrap.servers": "b:9092",
                    "signal.kafka.groupId": "g"})  # fmt: skip
    assert (cfg.signal_kafka_group_id, cfg.notification_sink_topic_name) == ("g", "n")
    assert cfg.to_task_config()["signal.kafka.groupId"] == "g"


def setup(**extra: str) -> tuple[ChunkedSnapshot, SignalDispatcher, list[Any]]:
    cfg = config(**{"notification.enabled.channels": "sink", "notification.sink.topic.name": "notes", **extra})
    d = decoder()
    snap = postgres_snapshot(d, lambda name: None, chunk_size=10, incremental_chunk_size=10)
    snap.notify = SnapshotNotifier(cfg, d)
    return snap, SignalDispatcher(cfg, snap, lambda: ["public.a", "public.b", "other.a"]), d.outbox


def notes(outbox: list[Any]) -> list[tuple[str, str, dict[str, str]]]:
    out = [(r.value["aggregate_type"], r.value["type"], r.value["additional_data"]) for batch in outbox for r in batch]
    outbox.clear()
    return out


def test_signals_queue_pause_resume_and_stop_snapshots_with_notifications() -> None:
    snap, signals, outbox = setup()
    signals.on_table_signal(
        {"id": "1", "type": "execute-snapshot", "data": '{"data-collections": ["public\\\\..*"]}'}, 0
    )
    assert snap.pending == [["public.a", INCREMENTAL], ["public.b", INCREMENTAL]]
    assert notes(outbox) == [
        ("Incremental Snapshot", "STARTED", {"connector_name": "srv", "data_collections": "public.a,public.b"})
    ]
    signals.run("2", "pause-snapshot", {})
    assert not snap.can_start and snap.paused
    signals.run("3", "resume-snapshot", {})
    assert snap.can_start and not snap.paused
    signals.run("4", "stop-snapshot", {"data-collections": ["public.b"]})
    assert snap.pending == [["public.a", INCREMENTAL]]
    assert snap.aborted  # Debezium's SnapshotAborted
    assert [n[1] for n in notes(outbox)] == ["PAUSED", "RESUMED", "ABORTED"]
    signals.run("5", "execute-snapshot", {"data-collections": ["other.a"], "type": "BLOCKING"})
    assert snap.pending[-1] == ["other.a", BLOCKING]
    assert not snap.aborted  # a snapshot started again
    signals.run("6", "execute-snapshot", {"data-collections": ["public.b"], "type": "unheard-of"})
    assert len(snap.pending) == 2


def test_the_source_channel_can_be_turned_off() -> None:
    snap, signals, _ = setup(**{"signal.enabled.channels": ""})
    signals.on_table_signal({"id": "1", "type": "execute-snapshot", "data": '{"data-collections": ["public.a"]}'}, 0)
    assert snap.pending == []


def test_notification_records_follow_debeziums_schema() -> None:
    snap, _, outbox = setup()
    snap.add(["public.a"], INCREMENTAL)
    (record,) = outbox[0]
    assert record.topic == "notes" and record.key == {"id": record.value["id"]}
    assert NOTIFICATION_VALUE_SCHEMA.name == "io.debezium.connector.common.Notification"
    assert [f.name for f in NOTIFICATION_VALUE_SCHEMA.fields] == [
        "id",
        "type",
        "aggregate_type",
        "additional_data",
        "timestamp",
    ]
    assert record.source_offset is None and isinstance(record.value["timestamp"], int)


KAFKA_CHANNEL = {"signal.enabled.channels": "source,kafka", "signal.kafka.bootstrap.servers": "broker:9092"}


def test_signal_consumer_settings_pass_through_to_the_signal_consumer_and_the_task_config() -> None:
    from sluice.connectors.cdc.signals import KafkaSignalChannel
    from sluice.worker.config.connector_keys import split_own_keys

    sasl = {
        "signal.consumer.security.protocol": "SASL_PLAINTEXT",
        "signal.consumer.sasl.mechanism": "PLAIN",
        "signal.consumer.sasl.username": "cdc",
        "signal.consumer.sasl.password": "s3cret",
    }
    raw = {"database.dbname": "db", "topic.prefix": "srv", **KAFKA_CHANNEL, **sasl, "not.a.key": "x"}
    own, ignored = split_own_keys(PostgresCdcConfig, raw)
    assert set(ignored) == {"not.a.key"}  # the prefixed keys are the connector's own, not ignored
    cfg = PostgresCdcConfig.parse(own)
    settings = KafkaSignalChannel(cfg).settings
    assert {k: settings[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password")} == {
        k.removeprefix("signal.consumer."): v for k, v in sasl.items()
    }
    assert (settings["bootstrap.servers"], settings["group.id"]) == ("broker:9092", "kafka-signal")
    task_config = cfg.to_task_config()
    assert {k: v for k, v in task_config.items() if k.startswith("signal.consumer.")} == sasl
    assert PostgresCdcConfig.parse(task_config).signal_consumer == cfg.signal_consumer


def test_a_signal_consumer_setting_librdkafka_does_not_take_is_an_error_on_its_key() -> None:
    problems = problem_keys(**KAFKA_CHANNEL, **{"signal.consumer.sasl.jaas.config": "org.apache...required;"})
    assert "JAAS" in problems["signal.consumer.sasl.jaas.config"]
    problems = problem_keys(**KAFKA_CHANNEL, **{"signal.consumer.no.such.setting": "1"})
    assert "No such configuration property" in problems["signal.consumer.no.such.setting"]


@pytest.mark.parametrize(
    ("setting", "reason"),
    [("sasl.kerberos.kinit.cmd", "runs a command"), ("ssl.key.location", "names a local file"), ("plugin.library.paths", "loads code")],
)
def test_signal_consumer_settings_that_reach_the_worker_are_refused(setting: str, reason: str) -> None:
    """``signal.consumer.*`` comes from an untrusted connector config: the deny-list of client
    overrides applies (before a consumer is built from the settings)."""
    problems = problem_keys(**KAFKA_CHANNEL, **{f"signal.consumer.{setting}": "/tmp/x"})
    assert reason in problems[f"signal.consumer.{setting}"]
