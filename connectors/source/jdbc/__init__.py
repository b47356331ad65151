"""JDBC source: tables (or a query) into topics, with Confluent's ``JdbcSourceConnector`` configuration."""

from __future__ import annotations

from connectors.source.jdbc.config import JdbcSourceConfig
from connectors.source.jdbc.connector import JdbcSourceConnector
from connectors.source.jdbc.task import JdbcSourceTask

__all__ = ["JdbcSourceConfig", "JdbcSourceConnector", "JdbcSourceTask"]
