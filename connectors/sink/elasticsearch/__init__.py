"""Elasticsearch / OpenSearch sink: topics indexed through the shared ``_bulk`` API."""

from __future__ import annotations

from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig
from sluice.connectors.sink.elasticsearch.connector import ElasticsearchSinkConnector
from sluice.connectors.sink.elasticsearch.task import ElasticsearchSinkTask

__all__ = ["ElasticsearchSinkConfig", "ElasticsearchSinkConnector", "ElasticsearchSinkTask"]
