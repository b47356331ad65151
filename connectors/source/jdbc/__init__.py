"""JDBC source: tables (or a query) into topics, with Confluent's ``JdbcSourceConnector`` configuration."""

from __future__ import annotations

from sluice.connectors.source.jdbc.config import JdbcSourceConfig
from sluice.connectors.source.jdbc.connector import JdbcSourceConnector
from sluice.connectors.source.jdbc.task import JdbcSourceTask

__all__ = ["JdbcSourceConfig", "JdbcSourceConnector", "JdbcSourceTask"]
