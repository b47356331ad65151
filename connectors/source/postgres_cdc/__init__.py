"""PostgreSQL change data capture (Debezium-compatible) from logical decoding with ``pgoutput``."""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("The PostgreSQL CDC source needs psycopg 3: pip install 'sluice[postgres]'") from exc

from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.connectors.source.postgres_cdc.task import PostgresCdcTask

__all__ = ["PostgresCdcConfig", "PostgresCdcSourceConnector", "PostgresCdcTask"]
