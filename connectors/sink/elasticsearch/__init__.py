"""Elasticsearch / OpenSearch sink: topics indexed through the shared ``_bulk`` API."""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connector, and the task's drivers load only where tasks run (``Deferred``).
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig
from sluice.connectors.sink.elasticsearch.connector import ElasticsearchSinkConnector

__all__ = ["ElasticsearchSinkConfig", "ElasticsearchSinkConnector"]
