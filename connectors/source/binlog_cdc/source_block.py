"""The ``source`` block of the binlog source's events, as Debezium's MySQL and MariaDB connectors
write it (``io.debezium.connector.binlog.BinlogSourceInfoStructMaker``): the fields every Debezium
connector has, then ``table``, ``server_id``, ``gtid``, ``file``, ``pos``, ``row``, ``thread`` and
``query``. Only the schema's name tells the two connectors apart
(``io.debezium.connector.mysql.Source``, ``io.debezium.connector.mariadb.Source``)."""

from __future__ import annotations

from functools import cache

from sluice.connectors.api import Schema, Type
from sluice.connectors.cdc.envelope import COMMON_SOURCE_FIELDS

#: The Debezium release whose events these follow (the peer of the differential tests).
VERSION = "3.6.1.Final"


@cache
def source_schema(connector: str) -> Schema:
    """The Source schema of Debezium's ``connector`` (``mysql`` or ``mariadb``)."""
    return Schema.struct(
        [
            *COMMON_SOURCE_FIELDS,
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
