"""topic → Elasticsearch/OpenSearch sink against bare ``_bulk`` requests, measured in the same run.

* **Sluice**: an in-process standalone herder runs the sink: consume from a real broker,
  JsonConverter (schemaless), build actions, ``_bulk`` to a real OpenSearch node
  (``tests.services.opensearch``), default ``batch.size`` (2000) and ``max.in.flight.requests`` (5),
  ids from the record keys. It ends when the node has indexed every document
  (``_stats/indexing`` ``index_total``, which needs no refresh).
* **raw**: the same documents (the very JSON bytes in the topic) and ids, in bulk requests of the
  same size, posted with bare httpx by the same number of threads, to a fresh index on the same
  node. It ends when the last response arrives. This is the cluster's own limit. A second raw run
  uses requests of ``batch.size / max.in.flight.requests`` actions, about what the sink's lanes
  send (each consumed batch is split across lanes by document id), so both ratios are printed.

Run: ``python -m benchmarks.es_sink`` (``SLUICE_BENCH_RECORDS``, default 1,000,000;
``SLUICE_BENCH_ROUNDS``; ``SLUICE_BENCH_BOOTSTRAP`` to reuse a broker). Prints figures and the
ratio; asserts nothing. On 2 shared cores the node and the worker compete for CPU, so figures vary.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import httpx
import orjson
from confluent_kafka import Producer

from benchmarks.common import RECORDS, ROUNDS, Result, broker, create_topic, median_result, wait_until
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.runtime import tune_gc
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.services.opensearch import OpenSearchNode

CONNECTOR = "sluice.connectors.sink.elasticsearch.connector.ElasticsearchSinkConnector"
BATCH = 2000
IN_FLIGHT = 5


def herder(bootstrap: str) -> StandaloneHerder:
    config = WorkerConfig.from_mapping(
        {
            "bootstrap.servers": bootstrap,
            "listeners": "http://127.0.0.1:0",
            "offset.flush.interval.ms": "5000",
            "key.converter": "StringConverter",
            "value.converter": "JsonConverter",
            "value.converter.schemas.enable": "false",
        }
    )
    h = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
    h.start()
    tune_gc()
    return h


def make_docs(count: int) -> list[tuple[str, bytes]]:
    """``(id, JSON)`` pairs of about 200 bytes each."""
    pad = "abcdefghijklmnopqrstuvwxyz0123456789" * 2
    return [
        (
            f"order-{i}",
            orjson.dumps(
                {
                    "id": i,
                    "customer": f"customer-{i % 5000:05d}",
                    "amount": i * 0.25,
                    "paid": i % 3 == 0,
                    "ts": 1_700_000_000_000 + i,
                    "note": pad,
                }
            ),
        )
        for i in range(count)
    ]


def fill_topic(bootstrap: str, docs: list[tuple[str, bytes]]) -> tuple[str, int]:
    topic = create_topic(bootstrap, f"bench-es-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    nbytes = 0
    for key, value in docs:
        nbytes += len(value)
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()
    return topic, nbytes


def indexed(node: OpenSearchNode, index: str) -> int:
    status, body = node.request("GET", f"/{index}/_stats/indexing")
    if status != 200:
        return 0
    return int(body["_all"]["primaries"]["indexing"]["index_total"])


def sluice_sink(bootstrap: str, node: OpenSearchNode, topic: str, count: int, nbytes: int, index: str) -> Result:
    h = herder(bootstrap)
    try:
        start = time.perf_counter()
        config = {
            "connector.class": CONNECTOR,
            "topics": topic,
            "connection.url": node.url,
            "schema.ignore": "true",
            "read.timeout.ms": "60000",
        }
        h.put_connector_config(f"bench-es-{time.time_ns()}", config, allow_replace=False)
        wait_until(lambda: indexed(node, index) >= count, timeout=1800, poll=0.05)
        elapsed = time.perf_counter() - start
    finally:
        h.stop()
    return Result("Sluice topic → OpenSearch sink", count, nbytes, elapsed)


def raw_bulk(
    node: OpenSearchNode, docs: list[tuple[str, bytes]], nbytes: int, index: str, batch_size: int = BATCH
) -> Result:
    """The same documents and ids in bulk requests of ``batch_size`` actions, IN_FLIGHT threads posting."""
    status, body = node.request("PUT", f"/{index}", {})
    assert status == 200, body
    prefix = b'{"index":{"_index":' + orjson.dumps(index) + b',"_id":'
    batches: queue.Queue[list[tuple[str, bytes]] | None] = queue.Queue()
    for i in range(0, len(docs), batch_size):
        batches.put(docs[i : i + batch_size])
    errors: list[str] = []

    def post() -> None:
        with httpx.Client(timeout=60) as client:
            while True:
                try:
                    batch = batches.get_nowait()
                except queue.Empty:
                    return
                assert batch is not None
                body = b"".join(prefix + orjson.dumps(doc_id) + b"}}\n" + doc + b"\n" for doc_id, doc in batch)
                r = client.post(f"{node.url}/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"})
                if r.status_code != 200 or orjson.loads(r.content).get("errors"):
                    errors.append(r.text[:300])

    start = time.perf_counter()
    threads = [threading.Thread(target=post) for _ in range(IN_FLIGHT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"the raw bulk run failed: {errors[0]}")
    name = (
        "bare httpx _bulk, same docs, same batch size"
        if batch_size == BATCH
        else f"bare httpx _bulk, batches of {batch_size}"
    )
    return Result(name, len(docs), nbytes, elapsed)


def _delete(node: OpenSearchNode, index: str) -> Any:
    return node.request("DELETE", f"/{index}")


def main() -> list[tuple[Result, Result]]:
    tune_gc()
    docs = make_docs(RECORDS)
    print(
        f"topic → OpenSearch sink: {RECORDS:,} documents (~200 B JSON), batch.size={BATCH}, {IN_FLIGHT} in flight, {ROUNDS} rounds"
    )
    with broker() as bootstrap, OpenSearchNode(kill_with_parent=True) as node:
        print(f"OpenSearch {node.version} at {node.url}")
        topic, nbytes = fill_topic(bootstrap, docs)
        # Warm the node up (JIT, first segments) so neither side pays for it.
        raw_bulk(node, docs[: min(len(docs), 50_000)], 0, "bench-warmup")
        _delete(node, "bench-warmup")
        sinks, raws, smalls = [], [], []
        small = BATCH // IN_FLIGHT
        for r in range(ROUNDS):
            raw_index, sink_index = f"bench-raw-{r}", topic  # the sink writes to the index named after the topic
            # Alternate which side goes first: the shared machine's load drifts during a run.
            for side in ("raw", "sluice", "small") if r % 2 == 0 else ("small", "sluice", "raw"):
                if side == "raw":
                    raws.append(raw_bulk(node, docs, nbytes, raw_index))
                    _delete(node, raw_index)
                elif side == "small":
                    # The sink's lanes split each consumed batch by document id, so its requests
                    # carry about batch.size / max.in.flight.requests actions: the same, bare.
                    smalls.append(raw_bulk(node, docs, nbytes, raw_index, small))
                    _delete(node, raw_index)
                else:
                    sinks.append(sluice_sink(bootstrap, node, topic, RECORDS, nbytes, sink_index))
                    _delete(node, sink_index)
            print(
                f"  round {r + 1}: raw {raws[-1].rate:>10,.0f} docs/s   raw/{small} {smalls[-1].rate:>10,.0f} docs/s"
                f"   sluice {sinks[-1].rate:>10,.0f} docs/s   ratio {sinks[-1].rate / raws[-1].rate:.2f}"
                f" ({sinks[-1].rate / smalls[-1].rate:.2f} vs batches of {small})"
            )
        raw, sink, small_raw = median_result(raws), median_result(sinks), median_result(smalls)
        print(raw.line())
        print(small_raw.line())
        print(sink.line(raw))
        print(f"{'':<42} ratio vs batches of {small}: {sink.rate / small_raw.rate:.2f}")
    return [(raw, sink)]


if __name__ == "__main__":
    main()
