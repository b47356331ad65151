"""``logger-cluster-<logger>`` records (KIP-976): Connect's shape, applied only when written after the worker started."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from sluice.worker.herder.stores.kafka_config_store import KafkaConfigStore


@pytest.fixture
def store() -> Iterator[tuple[KafkaConfigStore, list[tuple[str, str]]]]:
    applied: list[tuple[str, str]] = []
    configs = KafkaConfigStore(
        "connect-configs", "127.0.0.1:1", "g", client_id="c", on_change=lambda: None,
        on_logger_level=lambda name, level: applied.append((name, level)),
    )
    try:
        yield configs, applied
    finally:
        configs.stop()  # both readers' consumers, destroyed now rather than by the garbage collector


def test_records_in_the_topic_before_the_worker_started_are_not_applied(store: tuple[KafkaConfigStore, list[tuple[str, str]]]) -> None:
    configs, applied = store
    configs._apply(b"logger-cluster-org.example", orjson.dumps({"level": "DEBUG"}))
    assert applied == []
    configs._started = True  # what start() sets once it has read the topic to its end
    configs._apply(b"logger-cluster-org.example", orjson.dumps({"level": "TRACE"}))
    configs._apply(b"logger-cluster-root", orjson.dumps({"level": "WARN"}))
    assert applied == [("org.example", "TRACE"), ("root", "WARN")]
    assert configs.snapshot().sequence == 0  # no herder state changed


def test_a_malformed_record_is_logged_and_skipped(store: tuple[KafkaConfigStore, list[tuple[str, str]]], caplog: pytest.LogCaptureFixture) -> None:
    configs, applied = store
    configs._started = True
    with caplog.at_level(logging.ERROR, logger="sluice.worker.herder.stores.kafka_config_store"):
        for value in (None, orjson.dumps({"level": 3}), orjson.dumps(["DEBUG"])):
            configs._apply(b"logger-cluster-org.example", value)
    assert applied == [] and caplog.text.count("Ignoring the cluster-wide level of logger org.example") == 3
