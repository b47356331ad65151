"""The binlog CDC source's keys: Debezium's names and defaults, and errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.source.binlog_cdc.config import FLAVOR_KEY, BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connection import connection_args
from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector, MySqlCdcSourceConnector

BASE = {
    "database.user": "cdc",
    "topic.prefix": "shop",
    "snapshot.mode": "no_data",
    "schema.history.internal.kafka.topic": "shop-history",
    "schema.history.internal.kafka.bootstrap.servers": "kafka:9092",
}


def _error(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        BinlogCdcConfig.parse(raw)
    return caught.value


def test_defaults_are_debeziums() -> None:
    config = BinlogCdcConfig.parse(BASE)
    assert (config.database_port, config.database_ssl_mode, config.time_precision_mode) == (
        3306, "preferred", "adaptive_time_microseconds",
    )  # fmt: skip
    assert config.decimal_handling_mode == "precise" and config.bigint_unsigned_handling_mode == "long"
    assert config.tombstones_on_delete and config.skipped_operations == ["t"] and config.include_schema_changes
    assert 5400 <= config.server_id < 6400
    assert config.server_id == BinlogCdcConfig.parse(BASE).server_id  # stable across restarts
    assert BinlogCdcConfig.parse({**BASE, "database.server.id": "184054"}).server_id == 184054


@pytest.mark.parametrize("mode", ["never", "schema_only", "no_data"])
def test_streaming_only_snapshot_modes(mode: str) -> None:
    assert BinlogCdcConfig.parse({**BASE, "snapshot.mode": mode}).snapshot_mode == "no_data"


@pytest.mark.parametrize("raw", [{**BASE, "snapshot.mode": "configuration_based"}, {**BASE, "snapshot.mode": "custom"}])
def test_snapshot_modes_not_implemented_name_the_key(raw: dict[str, Any]) -> None:
    error = _error(raw)
    assert error.key == "snapshot.mode" and "not implemented yet" in str(error)


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({**BASE, "snapshot.mode": "sometimes"}, "snapshot.mode", "unknown mode"),
        ({**BASE, "time.precision.mode": "adaptive"}, "time.precision.mode", "adaptive_time_microseconds or connect"),
        ({**BASE, "database.hostname": "/var/run/mysqld"}, "database.hostname", "no socket path"),
        ({**BASE, "database.hostname": "a,b"}, "database.hostname", "one host name"),
        ({**BASE, "database.ssl.mode": "allow"}, "database.ssl.mode", "disabled"),
        ({**BASE, "bigint.unsigned.handling.mode": "string"}, "bigint.unsigned.handling.mode", "long"),
        ({**BASE, "database.include.list": "shop("}, "database.include.list", "invalid regular expression"),
        ({**BASE, "decimal.handling.mode": "exact"}, "decimal.handling.mode", "precise"),
        ({**BASE, "database.server.id": "0"}, "database.server.id", "greater than or equal to 1"),
        ({**BASE, "local.infile": "true"}, "local.infile", "unknown configuration key"),
        ({k: v for k, v in BASE.items() if k != "database.user"}, "database.user", "missing"),
    ],
)
def test_bad_values_name_the_key(raw: dict[str, Any], key: str, words: str) -> None:
    error = _error(raw)
    assert key in error.problems and words in error.problems[key]


def test_a_ca_file_needs_a_verifying_mode_and_is_a_confined_path() -> None:
    assert "verify_ca" in str(_error({**BASE, "database.ssl.ca": "/etc/ca.pem"}))
    config = BinlogCdcConfig.parse({**BASE, "database.ssl.mode": "verify_ca", "database.ssl.ca": "/etc/ca.pem"})
    assert config.local_paths() == {"database.ssl.ca": "/etc/ca.pem"}


def test_connections_never_read_local_files() -> None:
    args = connection_args(BinlogCdcConfig.parse({**BASE, "database.password": "s3cret", "database.ssl.mode": "disabled"}))
    assert args["local_infile"] is False and args["read_default_file"] is None and args["unix_socket"] is None
    assert args["init_command"] is None and args["ssl"] is None and args["password"] == "s3cret"


def test_task_configs_round_trip_and_name_the_flavor() -> None:
    for connector_cls, flavor in ((MySqlCdcSourceConnector, "mysql"), (MariaDbCdcSourceConnector, "mariadb")):
        connector = connector_cls()
        connector.start(connector_cls.validate({**BASE, "database.password": "pw", "table.include.list": "shop\\.a,shop\\.b"}))
        [task] = connector.task_configs(3)
        assert task[FLAVOR_KEY] == flavor and task["database.password"] == "pw"
        config = BinlogCdcConfig.from_task_config({**task, "name": "x", "task.class": "y"})
        assert config.table_include_list == ["shop\\.a", "shop\\.b"] and config.snapshot_mode == "no_data"
    assert "io.debezium.connector.mariadb.MariaDbConnector" in MariaDbCdcSourceConnector.aliases
    assert "io.debezium.connector.mysql.MySqlConnector" in MySqlCdcSourceConnector.aliases


@pytest.mark.parametrize(
    ("offset", "words"),
    [
        ({"pos": 4}, "needs 'file'"),
        ({"file": "mariadb-bin.000001", "pos": "4"}, "'pos' must be a non-negative integer"),
        ({"file": "mariadb-bin.000001", "pos": 4, "event": -1}, "'event'"),
        ({"file": "mariadb-bin.000001", "pos": 4, "gtids": 5}, "'gtids' must be a string"),
    ],
)
def test_altered_offsets_are_checked(offset: dict[str, Any], words: str) -> None:
    connector = MariaDbCdcSourceConnector()
    with pytest.raises(ConfigError, match=words):
        connector.alter_offsets({"topic.prefix": "shop"}, [({"server": "shop"}, offset)])
    assert connector.alter_offsets({"topic.prefix": "shop"}, [({"server": "shop"}, {"file": "f.000001", "pos": 4, "gtids": "0-1-5"})])
    with pytest.raises(ConfigError, match="topic.prefix"):
        connector.alter_offsets({"topic.prefix": "shop"}, [({"server": "other"}, None)])


@pytest.mark.parametrize("client", ["producer", "consumer"])
@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("sasl.kerberos.kinit.cmd", "touch {ran}", "runs a command"),
        ("ssl.ca.location", "/etc/shadow", "names a local file"),
        ("plugin.library.paths", "/tmp/evil.so", "loads code"),
        ("sasl.jaas.config", "com.sun.security.auth.module.JndiLoginModule required;", "JAAS login module"),
    ],
)
def test_history_client_settings_that_reach_the_worker_are_refused_before_a_client_exists(
    client: str, setting: str, value: str, reason: str, tmp_path: Any
) -> None:
    """A connector config is untrusted: the history's own client settings get the deny-list every
    client override gets, checked before librdkafka sees them (a Kerberos client would run kinit)."""
    prefix = f"schema.history.internal.{client}."
    ran = tmp_path / "ran"
    error = _error(
        {
            **BASE,
            f"{prefix}security.protocol": "SASL_PLAINTEXT",
            f"{prefix}sasl.mechanisms": "GSSAPI",
            prefix + setting: value.format(ran=ran),
        }
    )
    assert error.key == prefix + setting and reason in str(error)
    assert not ran.exists()


@pytest.mark.parametrize(
    ("given", "mode"),
    [("disable", "disabled"), ("trust", "required"), ("verify-ca", "verify_ca"), ("verify-full", "verify_identity"),
     ("verify_identity", "verify_identity"), ("preferred", "preferred")],
)  # fmt: skip
def test_debeziums_mariadb_ssl_mode_names_are_accepted(given: str, mode: str) -> None:
    """A config written for Debezium's MariaDB connector keeps its database.ssl.mode."""
    assert BinlogCdcConfig.parse({**BASE, "database.ssl.mode": given}).database_ssl_mode == mode


def test_an_unknown_ssl_mode_names_the_key() -> None:
    assert _error({**BASE, "database.ssl.mode": "sometimes"}).key == "database.ssl.mode"
