"""Elasticsearch / OpenSearch sink: topics indexed through the shared ``_bulk`` API."""

from __future__ import annotations

from connectors.sink.elasticsearch.config import ElasticsearchSinkConfig
from connectors.sink.elasticsearch.connector import ElasticsearchSinkConnector
from connectors.sink.elasticsearch.task import ElasticsearchSinkTask

__all__ = ["ElasticsearchSinkConfig", "ElasticsearchSinkConnector", "ElasticsearchSinkTask"]
