"""The ``source`` block of the binlog source's events, as Debezium's MySQL and MariaDB connectors
write it (``io.debezium.connector.binlog.BinlogSourceInfoStructMaker``): the fields every Debezium
connector has, then ``table``, ``server_id``, ``gtid``, ``file``, ``pos``, ``row``, ``thread`` and
``query``. Only the schema's name tells the two connectors apart
(``io.debezium.connector.mysql.Source``, ``io.debezium.connector.mariadb.Source``)."""

from __future__ import annotations

from functools import cache

from sluice.connectors.api import Schema, Type
from sluice.connectors.cdc.envelope import SNAPSHOT_FIELD

#: The Debezium release whose events these follow (the peer of the differential tests).
VERSION = "3.6.1.Final"


@cache
def source_schema(connector: str) -> Schema:
    """The Source schema of Debezium's ``connector`` (``mysql`` or ``mariadb``)."""
    return Schema.struct(
        [
            ("version", Schema(Type.STRING)),
            ("connector", Schema(Type.STRING)),
            ("name", Schema(Type.STRING)),
            ("ts_ms", Schema(Type.INT64)),
            ("snapshot", SNAPSHOT_FIELD),
            ("db", Schema(Type.STRING)),
            ("sequence", Schema(Type.STRING, optional=True)),
            ("ts_us", Schema(Type.INT64, optional=True)),
            ("ts_ns", Schema(Type.INT64, optional=True)),
            ("table", Schema(Type.STRING, optional=True)),
            ("server_id", Schema(Type.INT64)),
            ("gtid", Schema(Type.STRING, optional=True)),
            ("file", Schema(Type.STRING)),
            ("pos", Schema(Type.INT64)),
            ("row", Schema(Type.INT32)),
            ("thread", Schema(Type.INT64, optional=True)),
            ("query", Schema(Type.STRING, optional=True)),
        ],
        name=f"io.debezium.connector.{connector}.Source",
        version=1,
    )
