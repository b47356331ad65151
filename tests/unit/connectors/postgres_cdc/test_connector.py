"""The connector as the runtime sees it: plugin names, task configs, offset changes."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.source.postgres_cdc import PostgresCdcSourceConnector
from sluice.plugins import PluginRegistry

BASE = {"database.dbname": "inventory", "topic.prefix": "dbserver1", "database.password": "pw"}


def test_debezium_class_name_and_entry_point_name_resolve() -> None:
    registry = PluginRegistry()
    for name in ("io.debezium.connector.postgresql.PostgresConnector", "PostgresCdcSource"):
        assert registry.connector(name).cls is PostgresCdcSourceConnector


def test_one_task_whatever_tasks_max() -> None:
    connector = PostgresCdcSourceConnector()
    connector.start(PostgresCdcSourceConnector.validate(BASE))
    configs = connector.task_configs(4)
    assert len(configs) == 1
    assert configs[0]["database.password"] == "pw" and configs[0]["topic.prefix"] == "dbserver1"


def _pairs(*pairs: tuple[dict[str, Any], dict[str, Any]]) -> Any:
    """Offsets as the REST layer hands them over: (partition, offset) pairs."""
    return list(pairs)


def test_offsets_can_be_set_to_an_lsn() -> None:
    connector = PostgresCdcSourceConnector()
    ok = {"lsn": "0/16B6C50", "lsn_commit": 23817296}
    assert connector.alter_offsets(BASE, _pairs(({"server": "dbserver1"}, ok)))
    with pytest.raises(ConfigError, match="server"):
        connector.alter_offsets(BASE, _pairs(({"table": "x"}, ok)))
    with pytest.raises(ConfigError, match="lsn"):
        connector.alter_offsets(BASE, _pairs(({"server": "dbserver1"}, {"txId": 1})))
    with pytest.raises(ConfigError, match="not an LSN"):
        connector.alter_offsets(BASE, _pairs(({"server": "dbserver1"}, {"lsn": "zz/1"})))


def test_include_and_exclude_lists_are_anchored_regexes() -> None:
    from sluice.connectors.source.postgres_cdc.catalog import TableFilter
    from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig

    f = TableFilter(
        PostgresCdcConfig.parse(
            {
                **BASE,
                "table.include.list": r"public\.orders.*,sales\.items",
                "column.exclude.list": r"public\.orders\.secret",
            }
        )
    )
    assert f.captures("public", "orders") and f.captures("public", "orders_2024") and f.captures("sales", "items")
    assert not f.captures("public", "customers") and not f.captures("pg_catalog", "pg_class")
    assert not f.captures("xpublic", "orders")
    assert f.column_included("public", "orders", "amount") and not f.column_included("public", "orders", "secret")
    only_schema = TableFilter(PostgresCdcConfig.parse({**BASE, "schema.exclude.list": "audit"}))
    assert only_schema.captures("public", "x") and not only_schema.captures("audit", "log")


def test_schema_name_adjustment_makes_debezium_schema_names_avro_names() -> None:
    from sluice.connectors.cdc.envelope import adjust_schema_name
    from sluice.connectors.source.postgres_cdc.tables import Column, Table
    from sluice.connectors.source.postgres_cdc.types import INT4, TypeModes, column_type

    assert adjust_schema_name("my-server.public.items.Value", "none") == "my-server.public.items.Value"
    assert adjust_schema_name("my-server.public.items.Value", "avro") == "my_server.public.items.Value"
    assert adjust_schema_name("my-server.public.items.Value", "avro_unicode") == "my_u002dserver.public.items.Value"
    assert adjust_schema_name("1db.t€", "avro") == "_db.t_"
    assert adjust_schema_name("1db.t€", "avro_unicode") == "_u0031db.t_u20ac"

    id_column = Column("id", INT4, -1, False, column_type(INT4, -1, TypeModes()))
    table = Table(1, "public", "items", [id_column], ["id"], "d", "my-server", [True], "avro")
    assert table.topic == "my-server.public.items"  # topics keep their names
    assert table.value_schema.name == "my_server.public.items.Value"
    assert table.key_schema is not None and table.key_schema.name == "my_server.public.items.Key"
    assert table.envelope_schema.name == "my_server.public.items.Envelope"


def test_name_adjustment_modes_are_checked() -> None:
    assert PostgresCdcSourceConnector.validate({**BASE, "schema.name.adjustment.mode": "avro"})
    with pytest.raises(ConfigError, match="schema.name.adjustment.mode: .*none, avro, avro_unicode"):
        PostgresCdcSourceConnector.validate({**BASE, "schema.name.adjustment.mode": "avro_names"})
    with pytest.raises(ConfigError, match="field.name.adjustment.mode: .*scrub.invalid.names=true"):
        PostgresCdcSourceConnector.validate({**BASE, "field.name.adjustment.mode": "avro"})
