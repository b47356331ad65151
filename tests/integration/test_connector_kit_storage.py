"""The connector kit's standard checks on the built-ins that write to or read from storage
services: the S3 sink and source (an S3-compatible server) and the Elasticsearch sink (OpenSearch)."""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from typing import Any

import orjson
import pytest

from sluice.connectors.api import SinkRecord, SourceRecord
from sluice.connectors.sink.elasticsearch.connector import ElasticsearchSinkConnector
from sluice.connectors.sink.s3.connector import S3SinkConnector
from sluice.connectors.source.s3.connector import S3SourceConnector
from sluice.connectors.testkit import InvalidConfig, SinkConnectorChecks, SourceConnectorChecks
from tests.services.opensearch import OpenSearchNode
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration


def _json_lines(s3: S3Server, bucket: str, prefix: str) -> list[Any]:
    """Every JSON line of every object under ``prefix``."""
    client = s3.client()
    values = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            if not item["Key"].endswith(".json"):  # directories listed by a filesystem backend
                continue
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            values += [orjson.loads(line) for line in body.splitlines() if line]
    return values


class TestS3Sink(SinkConnectorChecks):
    """JSON objects, one per ``flush.size`` records of a partition: each put fills one per partition."""

    connector_class = S3SinkConnector

    @pytest.fixture(autouse=True)
    def _bucket(self, s3: S3Server, s3_bucket: str) -> None:
        self.s3, self.bucket = s3, s3_bucket

    def valid_config(self) -> dict[str, Any]:
        return {
            **self.s3.connector_config(self.bucket),
            "topics": "kit-items",
            "format.class": "json",
            "flush.size": self.records_per_partition,
        }

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "flush.size": 0}, "flush.size", "no records per object"),
            InvalidConfig({**valid, "s3.compression.type": "zip"}, "s3.compression.type", "no such compression"),
        ]

    def read_written(self) -> list[Hashable]:
        return [value["id"] for value in _json_lines(self.s3, self.bucket, "topics/kit-items/")]


class TestS3Source(SourceConnectorChecks):
    """Generic mode: each added batch of items is a new object of JSON lines under ``landing/``."""

    connector_class = S3SourceConnector

    @pytest.fixture(autouse=True)
    def _bucket(self, s3: S3Server, s3_bucket: str) -> None:
        self.s3, self.bucket = s3, s3_bucket

    def valid_config(self) -> dict[str, Any]:
        return {
            **self.s3.connector_config(self.bucket),
            "mode": "GENERIC",
            "format.class": "json",
            "topics.dir": "landing",
            "topic.regex.list": r"kit-items:items/.*\.json",
            "s3.poll.interval.ms": 300,
        }

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "mode": "MIRROR"}, "mode", "no such mode"),
            InvalidConfig({**valid, "s3.poll.interval.ms": 10}, "s3.poll.interval.ms", "listing too often"),
        ]

    def add_source_data(self, start: int, count: int) -> None:
        body = b"".join(orjson.dumps({"id": n}) + b"\n" for n in range(start, start + count))
        self.s3.client().put_object(Bucket=self.bucket, Key=f"landing/items/part-{start:05d}.json", Body=body)

    def record_identity(self, record: SourceRecord) -> Hashable:
        return (record.topic, record.value["id"])

    def expected_identities(self, start: int, count: int) -> list[Hashable]:
        return [("kit-items", n) for n in range(start, start + count)]


class TestElasticsearchSink(SinkConnectorChecks):
    """Documents keyed by the record key, in an index named after the topic."""

    connector_class = ElasticsearchSinkConnector

    @pytest.fixture(autouse=True)
    def _node(self, opensearch: OpenSearchNode) -> None:
        self.opensearch = opensearch
        self.index = f"kit-{uuid.uuid4().hex[:10]}"

    def valid_config(self) -> dict[str, Any]:
        return {"connection.url": self.opensearch.url, "topics": self.index, "read.timeout.ms": 30000}

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "write.method": "replace"}, "write.method", "no such write method"),
            InvalidConfig({**valid, "batch.size": 0}, "batch.size", "no documents per request"),
        ]

    def read_written(self) -> list[Hashable]:
        self.opensearch.request("POST", f"/{self.index}/_refresh")
        status, body = self.opensearch.request("GET", f"/{self.index}/_search?size=1000")
        if status == 404:
            return []
        assert status == 200, body
        return [hit["_source"]["id"] for hit in body["hits"]["hits"]]

    def unwritable_record(self, topic: str, partition: int, offset: int) -> SinkRecord:
        # A document whose "id" is an object, where the index mapping (from the first records) says long.
        return SinkRecord(topic, partition, offset, value={"id": {"not": "a number"}, "name": "bad"}, key=f"bad-{offset}")
