"""The bookkeeping of exactly-once source delivery that needs no broker: where a task's own
transaction requests cut a poll, what each boundary calls for, the producer settings, the ids."""

from __future__ import annotations

import time

from sluice.connectors.api import SourceRecord
from sluice.worker.runners.source_transactions import (
    POLL_GROUP_S,
    ExactlyOnce,
    SourceTransactions,
    TransactionRequests,
    transactional_id,
)


def _records(n: int) -> list[SourceRecord]:
    return [SourceRecord(topic="t", value=i, source_partition={"p": 0}, source_offset={"o": i}) for i in range(n)]


def _settings(boundary: str, interval_ms: int = 60_000) -> ExactlyOnce:
    return ExactlyOnce(transactional_id="g-c-0", offsets_topic="offsets", boundary=boundary, interval_ms=interval_ms)


def test_record_requests_cut_the_poll_after_the_named_records() -> None:
    records = _records(6)
    requests = TransactionRequests()
    requests.commit_transaction(records[1])
    requests.abort_transaction(records[3])
    parts = requests.split(records)
    assert [([r.value for r in part], action) for part, action in parts] == [
        ([0, 1], "commit"),
        ([2, 3], "abort"),
        ([4, 5], None),
    ]
    assert requests.split(records) == [(records, None)]  # requests are used once


def test_a_request_naming_the_last_record_leaves_no_empty_part_and_unknown_records_mean_nothing() -> None:
    records = _records(3)
    requests = TransactionRequests()
    requests.commit_transaction(records[2])
    requests.commit_transaction(_records(1)[0])  # not a record of this poll
    assert [(len(part), action) for part, action in requests.split(records)] == [(3, "commit")]
    assert requests.at_record == {}


def test_an_abort_at_the_end_of_a_poll_wins_over_a_commit() -> None:
    requests = TransactionRequests()
    assert requests.take() is None
    requests.commit_transaction()
    assert requests.take() == "commit"
    requests.commit_transaction()
    requests.abort_transaction()
    assert requests.take() == "abort"
    assert requests.take() is None


def test_what_each_boundary_calls_for() -> None:
    poll = SourceTransactions(_settings("poll"), "c-0", 5.0)
    assert poll.due(False, None) is None  # nothing open, nothing polled
    assert poll.due(True, None) == "commit"  # a poll whose records were all dropped: its offsets
    poll._open, poll._began = True, time.monotonic()
    assert poll.due(True, None) is None  # polls share a transaction for a while …
    assert poll.due(False, None) == "commit"  # … until one comes back empty
    poll._began -= POLL_GROUP_S
    assert poll.due(True, None) == "commit"  # … or the window has passed
    interval = SourceTransactions(_settings("interval", interval_ms=50), "c-0", 5.0)
    interval.next_interval = time.monotonic() + 60
    assert interval.due(True, None) is None
    interval.next_interval = time.monotonic() - 1
    assert interval.due(False, None) == "commit"
    requests = TransactionRequests()
    connector = SourceTransactions(_settings("connector"), "c-0", 5.0)
    assert connector.due(True, requests) is None
    requests.commit_transaction()
    assert connector.due(False, requests) == "commit"


def test_the_producer_is_transactional_and_its_timeouts_fit_the_transaction() -> None:
    settings = _settings("poll")
    config = settings.producer_config({"acks": "1", "delivery.timeout.ms": 2_147_483_647, "linger.ms": 5})
    assert config["transactional.id"] == "g-c-0" and config["enable.idempotence"] is True and config["acks"] == "all"
    assert config["delivery.timeout.ms"] == config["transaction.timeout.ms"] == 60_000
    chosen = settings.producer_config({"delivery.timeout.ms": 90_000}, overridden=frozenset({"delivery.timeout.ms"}))
    assert chosen["delivery.timeout.ms"] == 90_000  # the connector's own choice: librdkafka names the conflict


def test_transactional_ids_are_connects() -> None:
    assert transactional_id("connect-cluster", "inventory", 3) == "connect-cluster-inventory-3"
