"""A standalone worker's Kafka probe: when contact counts as lost (distributed mode's rule), what
it says, and that the log names a loss and its end once each."""

from __future__ import annotations

import logging
import time

import pytest

from sluice.worker.config.models import WorkerConfig
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.herder.api import DEFAULT_SESSION_TIMEOUT_MS, contact_lost_after_s
from sluice.worker.herder.kafka_contact import KafkaContact
from sluice.worker.standalone import kafka_probe_settings

BOOTSTRAP = "kafka-1:9092,kafka-2:9092"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _contact(clock: FakeClock) -> KafkaContact:
    return KafkaContact(BOOTSTRAP, clock=clock)


def test_the_delay_is_distributed_modes() -> None:
    """8 s: 80 % of the session timeout a distributed worker has by default."""
    distributed = DistributedConfig.model_fields["session_timeout_ms"].default
    assert distributed == DEFAULT_SESSION_TIMEOUT_MS
    assert KafkaContact(BOOTSTRAP).lost_after_s == contact_lost_after_s(distributed) == 8.0


def test_never_reached_counts_as_lost_after_the_delay_from_the_start() -> None:
    clock = FakeClock()
    contact = _contact(clock)
    clock.now += 7.9
    contact.failed("Connection refused")
    assert contact.loss() is None
    clock.now += 0.2
    assert contact.loss() == (
        f"cannot reach the Kafka cluster at {BOOTSTRAP}: no broker has answered since it started 8 s ago "
        "(last error: Connection refused)"
    )


def test_lost_after_the_delay_from_the_last_answer_and_back_at_the_next() -> None:
    clock = FakeClock()
    contact = _contact(clock)
    clock.now += 30
    contact.answered()
    clock.now += 7
    contact.failed()
    assert contact.loss() is None
    clock.now += 3
    assert contact.loss() == f"has lost contact with the Kafka cluster at {BOOTSTRAP}: no broker has answered for 10 s"
    contact.answered()
    assert contact.loss() is None


def test_the_log_names_a_loss_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    contact = _contact(clock)
    contact.answered()
    caplog.set_level(logging.INFO, logger="sluice.worker.herder.kafka_contact")
    for _ in range(10):  # a probe every 2 s for 20 s
        clock.now += 2
        contact.failed("Connection refused")
    contact.answered()
    contact.answered()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            "WARNING",
            f"This worker has lost contact with the Kafka cluster at {BOOTSTRAP}: no broker has answered for 8 s "
            "(last error: Connection refused); GET /health reports it unhealthy until a broker answers",
        ),
        ("INFO", f"In contact with the Kafka cluster at {BOOTSTRAP} again"),
    ]


def test_a_probe_against_a_refused_port_reports_the_connection_error() -> None:
    """The real client: nothing listens on port 1, so the reason is librdkafka's connection error."""
    contact = KafkaContact("127.0.0.1:1", lost_after_s=0.0, interval_s=0.2)
    contact.start()
    try:
        loss = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (loss is None or "last error" not in loss):
            time.sleep(0.1)
            loss = contact.loss()
        assert loss is not None
        assert "cannot reach the Kafka cluster at 127.0.0.1:1" in loss
        assert "(last error: Connection refused)" in loss
    finally:
        contact.stop()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, {}),
        ({"producer.security.protocol": "SSL", "consumer.security.protocol": "SASL_SSL"}, {"security.protocol": "SSL"}),
        ({"consumer.sasl.mechanism": "PLAIN", "consumer.linger.ms": "5"}, {"sasl.mechanism": "PLAIN"}),
        (
            {"admin.security.protocol": "SASL_SSL", "producer.security.protocol": "SSL", "admin.client.id": "x"},
            {"security.protocol": "SASL_SSL"},
        ),
    ],
)
def test_the_probe_speaks_to_kafka_as_the_workers_clients_do(
    settings: dict[str, str], expected: dict[str, str]
) -> None:
    """The admin clients' security settings, else the producers' or the consumers': a worker that
    secures only its task clients is not called unhealthy because its probe spoke plaintext."""
    assert kafka_probe_settings(WorkerConfig.from_mapping(settings)) == expected


def test_a_setting_librdkafka_refuses_leaves_health_alone(caplog: pytest.LogCaptureFixture) -> None:
    """A Java-only key (a JKS trust store) must not stop the worker: the probe is off, and says so."""
    contact = KafkaContact("127.0.0.1:1", {"ssl.truststore.location": "/etc/kafka/truststore.jks"}, lost_after_s=0.0)
    contact.start()
    assert contact.loss() is None
    contact.stop()
    assert "Cannot probe the Kafka cluster at 127.0.0.1:1" in caplog.text
    assert "GET /health will not report losing it" in caplog.text
