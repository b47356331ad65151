"""The CDC hand-off position of a PostgreSQL read: what is recorded and how partitions import it."""

from __future__ import annotations

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.pg_position import ConsistentPoint, format_lsn, libpq_params, parse_lsn
from sluice.connectors.jdbc_common.connection import to_sqlalchemy_url
from sluice.connectors.jdbc_common.urls import NO_FILE
from sluice.worker.backfill.models import parse_spec


def test_lsn_text_round_trips() -> None:
    assert format_lsn((3 << 32) | 0xA41D28) == "3/A41D28"
    assert parse_lsn("3/A41D28") == (3 << 32) | 0xA41D28


def test_the_position_continues_with_commits_at_or_after_the_consistent_point() -> None:
    point = ConsistentPoint(parse_lsn("0/3A41D28"), "00000003-00000002-1", "debezium", True, "debezium")
    position = point.position()
    assert position["lsn"] == "0/3A41D28"
    # The connector streams commits strictly after streaming.start.lsn; a commit may start at the
    # consistent point itself, and no WAL record starts one byte before it.
    assert position["cdc"] == {"snapshot.mode": "no_data", "streaming.start.lsn": "0/3A41D27", "slot.name": "debezium"}
    assert position["slot_created"] is True
    temporary = ConsistentPoint(parse_lsn("0/3A41D28"), "00000003-00000002-1", "sluice_backfill_x", False, None)
    assert "slot.name" not in temporary.position()["cdc"]


def test_every_partition_imports_the_snapshot_in_a_repeatable_read_transaction() -> None:
    point = ConsistentPoint(1, "00000003-00000002-1", "s", False, None)
    assert point.session_init_statement() == (
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '00000003-00000002-1'"
    )


def test_connection_parameters_come_from_the_jdbc_url() -> None:
    params = libpq_params(to_sqlalchemy_url("jdbc:postgresql://db.example:6543/shop", "app", "pw"))
    # libpq's default credential and certificate files (~/.pgpass, ~/.postgresql/*) are switched off.
    no_files = dict.fromkeys(("passfile", "sslcert", "sslkey", "sslrootcert", "sslcrl"), NO_FILE)
    assert params == {"dbname": "shop", "host": "db.example", "port": 6543, "user": "app", "password": "pw", **no_files}


def test_the_spec_names_a_bad_slot_or_mode() -> None:
    base = {
        "id": "j", "kind": "jdbc_to_topic",
        "source": {"connection.url": "jdbc:postgresql://h/db", "table": "t"}, "target": {"topic": "x"},
    }  # fmt: skip
    assert parse_spec(base).source.cdc_position == "auto"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="source.cdc.slot.name"):
        parse_spec({**base, "source": {**base["source"], "cdc.slot.name": "Bad-Name"}})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="source.cdc.position"):
        parse_spec({**base, "source": {**base["source"], "cdc.position": "sometimes"}})  # type: ignore[dict-item]


def test_producer_settings_weaker_than_at_least_once_are_refused() -> None:
    base = {"id": "j", "kind": "jdbc_to_topic", "source": {"connection.url": "jdbc:postgresql://h/db", "table": "t"}}
    for acks in ("0", "1"):
        with pytest.raises(ConfigError, match="target.producer.*acks=all"):
            parse_spec({**base, "target": {"topic": "x", "producer": {"acks": acks}}})
    spec = parse_spec({**base, "target": {"topic": "x", "producer": {"acks": "-1", "linger.ms": "5"}}})
    assert spec.target.producer == {"acks": "-1", "linger.ms": "5"}  # type: ignore[union-attr]
