"""A stopped Kafka log lets go of its Kafka clients: no thread of theirs keeps retrying a broker
that went away (a stopped worker in a process that lives on, as in tests or an embedding app)."""

from __future__ import annotations

import os
import time

import pytest

from sluice.offsets.kafka_log import KafkaLog, KafkaLogError


def native_threads() -> set[str]:
    """This process's thread ids (clients other tests left behind may still end meanwhile: the
    test follows the threads the log started, not the count)."""
    return set(os.listdir("/proc/self/task"))


def test_stop_destroys_the_clients_and_later_writes_say_the_log_is_stopped() -> None:
    before = native_threads()
    log = KafkaLog("sluice-offsets", "127.0.0.1:9", lambda *record: None, client_id="stop-test",
                   producer_overrides={"log_level": 0}, consumer_overrides={"log_level": 0})  # fmt: skip
    started = native_threads() - before
    assert started  # librdkafka's threads of the two clients
    log.send_async(b"k", b"v")  # queued for a broker that is not there
    log.stop()  # waits for it (5 s), then drops it with a warning
    deadline = time.monotonic() + 5
    while started & native_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not started & native_threads()
    with pytest.raises(KafkaLogError, match="stopped"):
        log.send_async(b"k", b"v")
