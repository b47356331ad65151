"""PostgreSQL change data capture (Debezium-compatible) from logical decoding with ``pgoutput``."""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connector, and the task's drivers load only where tasks run (``Deferred``).
import importlib.util

# Checked, not imported: without the driver the connector is not offered at all.
if importlib.util.find_spec("psycopg") is None:  # pragma: no cover - depends on the installed extras
    raise ImportError("The PostgreSQL CDC source needs psycopg 3: pip install 'sluice[postgres]'")

from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector

__all__ = ["PostgresCdcConfig", "PostgresCdcSourceConnector"]
