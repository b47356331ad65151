"""JDBC sink: topics into database tables, with Confluent's ``JdbcSinkConnector`` configuration."""

from __future__ import annotations

from connectors.sink.jdbc.config import JdbcSinkConfig
from connectors.sink.jdbc.connector import JdbcSinkConnector
from connectors.sink.jdbc.task import JdbcSinkTask

__all__ = ["JdbcSinkConfig", "JdbcSinkConnector", "JdbcSinkTask"]
