"""JDBC sink: topics into database tables, with Confluent's ``JdbcSinkConnector`` configuration."""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connector, and the task's drivers load only where tasks run (``Deferred``).
from sluice.connectors.sink.jdbc.config import JdbcSinkConfig
from sluice.connectors.sink.jdbc.connector import JdbcSinkConnector

__all__ = ["JdbcSinkConfig", "JdbcSinkConnector"]
