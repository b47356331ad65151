"""JDBC sink: topics into database tables, with Confluent's ``JdbcSinkConnector`` configuration."""

from __future__ import annotations

from sluice.connectors.sink.jdbc.config import JdbcSinkConfig
from sluice.connectors.sink.jdbc.connector import JdbcSinkConnector
from sluice.connectors.sink.jdbc.task import JdbcSinkTask

__all__ = ["JdbcSinkConfig", "JdbcSinkConnector", "JdbcSinkTask"]
