"""Generic mode of the S3 source through a real worker, Kafka broker and S3 server: any objects
whose keys match ``topic.regex.list`` become records, a new object is picked up on the next
listing, and the stored offset (per object and position) decides where a restart resumes."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration


def _lines(*values: Any) -> bytes:
    return b"".join(orjson.dumps(v) + b"\n" for v in values)


def _ids(records: list[Any]) -> list[Any]:
    return [orjson.loads(r.value)["id"] for r in records]


def test_generic_mode_reads_matching_objects_and_resumes_per_object_position(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    orders, clicks = unique_topic_name("gen-orders"), unique_topic_name("gen-clicks")
    create_topic(bootstrap, orders)
    create_topic(bootstrap, clicks)
    client = s3.client()
    client.put_object(
        Bucket=s3_bucket, Key="landing/orders/2024-01-01.json", Body=_lines(*({"id": i} for i in range(3)))
    )
    client.put_object(Bucket=s3_bucket, Key="landing/orders/2024-01-02.json.gz", Body=gzip.compress(_lines({"id": 3})))
    client.put_object(Bucket=s3_bucket, Key="landing/clicks/part-0.json", Body=_lines({"id": "c1"}, {"id": "c2"}))
    client.put_object(Bucket=s3_bucket, Key="landing/README.txt", Body=b"not data")

    worker = WorkerProcess(
        tmp_path,
        bootstrap,
        **{
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "offset.flush.interval.ms": "300",
        },
    ).start()
    name = "generic-source"
    try:
        config = {
            "connector.class": "sluice.connectors.source.s3.connector.S3SourceConnector",
            **s3.connector_config(s3_bucket),
            "mode": "GENERIC",
            "format.class": "json",
            "topics.dir": "landing",
            "topic.regex.list": rf"{orders}:orders/.*\.json(\.gz)?,{clicks}:clicks/.*",
            "s3.poll.interval.ms": "500",
            "tasks.max": "2",
        }
        response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
        assert response.status_code == 201, response.text
        worker.wait_running(name, tasks=2)
        assert sorted(_ids(consume_all(bootstrap, orders, 4, timeout=60))) == [0, 1, 2, 3]
        assert sorted(_ids(consume_all(bootstrap, clicks, 2, timeout=30))) == ["c1", "c2"]

        # A new object is read on the next listing; the old ones are not read again.
        client.put_object(Bucket=s3_bucket, Key="landing/orders/2024-01-03.json", Body=_lines({"id": 4}))
        assert sorted(_ids(consume_all(bootstrap, orders, 5, timeout=30, settle=1.5))) == [0, 1, 2, 3, 4]

        # The offsets are per object and position: rewind one object to its first record.
        def offsets() -> list[dict[str, Any]]:
            return httpx.get(f"{worker.url}/connectors/{name}/offsets", timeout=10).json()["offsets"]

        deadline = time.monotonic() + 30
        while len(offsets()) < 5 and time.monotonic() < deadline:
            time.sleep(0.3)
        stored = {o["partition"]["object"]: o["offset"] for o in offsets()}
        assert stored["landing/orders/2024-01-01.json"] == {"position": 3, "complete": True}
        assert stored["landing/clicks/part-0.json"] == {"position": 2, "complete": True}
        assert httpx.put(f"{worker.url}/connectors/{name}/stop", timeout=30).status_code == 204
        rewind = {
            "offsets": [
                {
                    "partition": {"bucket": s3_bucket, "object": "landing/orders/2024-01-01.json"},
                    "offset": {"position": 1, "complete": False},
                }
            ]
        }
        response = httpx.patch(f"{worker.url}/connectors/{name}/offsets", json=rewind, timeout=30)
        assert response.status_code == 200, response.text
        assert httpx.put(f"{worker.url}/connectors/{name}/resume", timeout=30).status_code == 202
        # Resumed mid-object: records 2 and 3 of that object again, nothing else.
        assert sorted(_ids(consume_all(bootstrap, orders, 7, timeout=60, settle=2.0))) == [0, 1, 1, 2, 2, 3, 4]
        assert len(consume_all(bootstrap, clicks, 2, timeout=10, settle=1.0)) == 2
    finally:
        assert worker.stop() == 0, worker.log()
