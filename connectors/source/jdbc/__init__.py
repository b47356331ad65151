"""JDBC source: tables (or a query) into topics, with Confluent's ``JdbcSourceConnector`` configuration."""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connector, and the task's drivers load only where tasks run (``Deferred``).
from sluice.connectors.source.jdbc.config import JdbcSourceConfig
from sluice.connectors.source.jdbc.connector import JdbcSourceConnector

__all__ = ["JdbcSourceConfig", "JdbcSourceConnector"]
