"""A stopped Kafka log lets go of its Kafka clients: no thread of theirs keeps retrying a broker
that went away (a stopped worker in a process that lives on, as in tests or an embedding app)."""

from __future__ import annotations

import os
import time

import pytest

from sluice.offsets.kafka_log import KafkaLog, KafkaLogError


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_stop_destroys_the_clients_and_later_writes_say_the_log_is_stopped() -> None:
    before = native_threads()
    log = KafkaLog("sluice-offsets", "127.0.0.1:9", lambda *record: None, client_id="stop-test",
                   producer_overrides={"log_level": 0}, consumer_overrides={"log_level": 0})  # fmt: skip
    assert native_threads() > before  # librdkafka's threads of the two clients
    log.send_async(b"k", b"v")  # queued for a broker that is not there
    log.stop()  # waits for it (5 s), then drops it with a warning
    deadline = time.monotonic() + 5
    while native_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert native_threads() == before
    with pytest.raises(KafkaLogError, match="stopped"):
        log.send_async(b"k", b"v")
