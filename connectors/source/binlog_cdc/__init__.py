"""MySQL and MariaDB change data capture (Debezium-compatible) from the row-based binlog.

Named ``binlog_cdc`` as Debezium's shared base of its MySQL and MariaDB connectors is
(``debezium-connector-binlog``): one source, two connector classes.
"""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connectors, and the binlog reader loads only where tasks run (``Deferred``).
import importlib.util

# Checked, not imported: without the reader the connectors are not offered at all.
if importlib.util.find_spec("pymysqlreplication") is None or importlib.util.find_spec("pymysql") is None:  # pragma: no cover
    raise ImportError("The MySQL/MariaDB CDC source needs mysql-replication and PyMySQL: pip install 'sluice[mysql]'")

from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector, MySqlCdcSourceConnector

__all__ = ["BinlogCdcConfig", "MariaDbCdcSourceConnector", "MySqlCdcSourceConnector"]
