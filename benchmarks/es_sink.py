"""topic → Elasticsearch/OpenSearch sink against bare ``_bulk`` requests, measured in the same run.

* **Sluice**: an in-process standalone herder runs the sink: consume from a real broker,
  JsonConverter, build actions, ``_bulk`` to a real OpenSearch node (``tests.services.opensearch``),
  default ``batch.size`` (2000) and ``max.in.flight.requests`` (5), ids from the record keys. It
  ends when the node has indexed every document (``_stats/indexing`` ``index_total``, which needs
  no refresh). Each run also prints the CPU seconds per record of the sink's process (the worker:
  consumer, task thread, sending lanes; not the benchmark's thread polling the node's stats, nor
  the node, another process), and those of its task thread.
* **raw**: the same documents (the very JSON bytes the sink writes) and ids, in bulk requests of the
  same size, posted with bare httpx by the same number of threads, to a fresh index on the same
  node with the same mapping. It ends when the last response arrives. This is the cluster's own
  limit. A second raw run uses requests of ``batch.size / max.in.flight.requests`` actions, about
  what the sink's lanes send (each consumed batch is split across lanes by document id), so both
  ratios are printed.

Two topics (``SLUICE_BENCH_CASES``, default ``schemaless,realistic``):

* ``schemaless``: the friendliest case. Values are schemaless JSON objects of six fields (~200 B),
  keys strings (StringConverter), ``schema.ignore=true`` (dynamic mapping), Sluice's consumer
  defaults (``max.poll.records`` 10,000).
* ``realistic``: the topic a Connect user has. Keys are JsonConverter envelopes
  (``key.converter.schemas.enable=true``) of a primitive int64, the only kind of key besides a
  string that can be a document id (a struct key is refused, as Confluent's sink refuses it);
  values JsonConverter envelopes of :mod:`benchmarks.jdbc_sink`'s realistic rows: ``id`` int64,
  ``amount`` a Connect Decimal (scale 2, base64, a third negative), ``created_at`` a Timestamp
  (1960-2020), ``day`` a Date, ``qty`` int16, ``code`` a 40-byte text, ``name``, ``score`` a
  double, ``active`` a boolean, ``note`` an optional string (a quarter null). The index mapping
  comes from the value schema (``schema.ignore=false``, the default; the raw index gets the same
  mapping), ``consumer.override.max.poll.records`` is 500 (Connect's default) and ``batch.size``
  the default. The warm-up checks, untimed, that the sink wrote exactly the documents the raw run
  posts.

Run: ``python -m benchmarks.es_sink`` (``SLUICE_BENCH_RECORDS``, default 1,000,000;
``SLUICE_BENCH_ROUNDS``; ``SLUICE_BENCH_BOOTSTRAP`` to reuse a broker). Prints figures and the
ratio; asserts nothing. On 2 shared cores the node and the worker compete for CPU, so figures vary.
"""

from __future__ import annotations

import os
import queue
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from confluent_kafka import Producer

import sluice.connectors.sink.elasticsearch.task  # noqa: F401 - imported before timing, as a running worker has it
from benchmarks.common import RECORDS, ROUNDS, Result, broker, cpu_seconds, create_topic, median_result, wait_until
from benchmarks.jdbc_sink import encode_realistic, make_realistic_rows, task_thread_cpu
from sluice.connectors.sink.elasticsearch.documents import document_bytes
from sluice.connectors.sink.elasticsearch.mapping import mapping_for
from sluice.converters.json import JsonConverter
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
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
CASES = [c.strip() for c in os.environ.get("SLUICE_BENCH_CASES", "schemaless,realistic").split(",") if c.strip()]
#: Connect's default ``max.poll.records``: the records of one put() on the realistic topic.
REALISTIC_POLL = 500
#: The realistic key's schema: a primitive int64, as JsonConverter writes it.
KEY_SCHEMA = b'{"schema":{"type":"int64","optional":false},"payload":'


@dataclass
class Case:
    """One topic to measure: its records as produced, the documents and ids the sink writes from
    them, and the worker and connector settings that read them."""

    name: str
    #: ``(key bytes, value bytes)`` as produced.
    messages: list[tuple[bytes, bytes]]
    #: ``(id, document JSON)`` as the sink writes them (what the raw run posts).
    docs: list[tuple[str, bytes]]
    worker: dict[str, str]
    connector: dict[str, str]
    mapping: dict[str, Any] | None = None
    topic: str = ""
    nbytes: int = field(default=0)


def schemaless_case(count: int) -> Case:
    """``(id, JSON)`` pairs of about 200 bytes each; the JSON is the value and the document."""
    pad = "abcdefghijklmnopqrstuvwxyz0123456789" * 2
    docs = [
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
    return Case(
        "schemaless",
        [(doc_id.encode(), doc) for doc_id, doc in docs],
        docs,
        {"key.converter": "StringConverter", "value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "false"},
        {"schema.ignore": "true"},
    )


def realistic_case(count: int) -> Case:
    """The realistic topic (see the module docstring); its documents are what the sink's decoded
    path writes for each value (JsonConverter, then :func:`document_bytes`)."""
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true"}, False)
    messages, docs = [], []
    schema = None
    for row in make_realistic_rows(count):
        _, value = encode_realistic(row)
        key = KEY_SCHEMA + str(row[0]).encode() + b"}"
        schema, decoded = converter.to_connect_data("bench", value)
        messages.append((key, value))
        docs.append((str(row[0]), document_bytes(decoded)))
    return Case(
        "realistic",
        messages,
        docs,
        {
            "key.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": "true",
            "value.converter": JSON_CONVERTER,
            "value.converter.schemas.enable": "true",
        },
        {"consumer.override.max.poll.records": str(REALISTIC_POLL)},
        mapping_for(schema),
    )


def herder(bootstrap: str, converters: dict[str, str]) -> StandaloneHerder:
    config = WorkerConfig.from_mapping(
        {"bootstrap.servers": bootstrap, "listeners": "http://127.0.0.1:0", "offset.flush.interval.ms": "5000", **converters}
    )
    h = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
    h.start()
    tune_gc()
    return h


def fill_topic(bootstrap: str, case: Case) -> None:
    case.topic = create_topic(bootstrap, f"bench-es-{case.name}-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    for key, value in case.messages:
        case.nbytes += len(value)
        while True:
            try:
                producer.produce(case.topic, value, key)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()


def indexed(node: OpenSearchNode, index: str) -> int:
    status, body = node.request("GET", f"/{index}/_stats/indexing")
    if status != 200:
        return 0
    return int(body["_all"]["primaries"]["indexing"]["index_total"])


@dataclass
class SinkRun:
    """One timed sink run: its rate, the CPU seconds of its process and of its task thread."""

    result: Result
    cpu: float
    task_cpu: float

    @property
    def us_per_record(self) -> float:
        return self.cpu / self.result.records * 1e6


def sluice_sink(bootstrap: str, node: OpenSearchNode, case: Case, count: int) -> SinkRun:
    h = herder(bootstrap, case.worker)
    index = case.topic  # the sink writes to the index named after the topic
    try:
        config = {
            "connector.class": CONNECTOR,
            "topics": case.topic,
            "connection.url": node.url,
            "read.timeout.ms": "60000",
            **case.connector,
        }
        first: list[float] = []

        def done() -> bool:
            n = indexed(node, index)
            if n and not first:
                first.append(time.perf_counter())
            return n >= count

        cpu0, poller0 = cpu_seconds(), time.thread_time()
        start = time.perf_counter()
        h.put_connector_config(f"bench-es-{time.time_ns()}", config, allow_replace=False)
        wait_until(done, timeout=1800, poll=0.05)
        elapsed = time.perf_counter() - start
        # The worker's CPU: this (main) thread only polls the node's stats, so it is left out.
        cpu = cpu_seconds() - cpu0 - (time.thread_time() - poller0)
        task_cpu = task_thread_cpu()
    finally:
        h.stop()
    if first:
        print(
            f"    {case.name}: first documents indexed {first[0] - start:.2f} s after the connector was created, "
            f"then {count / (start + elapsed - first[0]):,.0f} docs/s"
        )
    return SinkRun(Result(f"Sluice topic → OpenSearch sink ({case.name})", count, case.nbytes, elapsed), cpu, task_cpu)


def raw_bulk(node: OpenSearchNode, case: Case, index: str, batch_size: int = BATCH, docs: Any = None) -> Result:
    """The case's documents and ids in bulk requests of ``batch_size`` actions, IN_FLIGHT threads posting."""
    docs = case.docs if docs is None else docs
    status, body = node.request("PUT", f"/{index}", {"mappings": case.mapping} if case.mapping else {})
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
    name = "bare httpx _bulk, same docs, same batch size" if batch_size == BATCH else f"bare httpx _bulk, batches of {batch_size}"
    return Result(name, len(docs), case.nbytes, elapsed)


def _delete(node: OpenSearchNode, index: str) -> Any:
    return node.request("DELETE", f"/{index}")


def check_documents(node: OpenSearchNode, case: Case, sample: int = 2000) -> None:
    """Untimed: the index the sink wrote holds, for a spread of ids, exactly the documents the raw
    run posts (a rate is only worth comparing if the sink wrote the same thing)."""
    step = max(1, len(case.docs) // sample)
    picked = case.docs[::step]
    status, body = node.request("POST", f"/{case.topic}/_mget", {"ids": [doc_id for doc_id, _ in picked]})
    assert status == 200, body
    for (doc_id, doc), hit in zip(picked, body["docs"], strict=True):
        if not hit.get("found") or hit["_source"] != orjson.loads(doc):
            raise RuntimeError(f"document {doc_id}: the sink wrote {hit.get('_source')}, the raw run posts {doc!r}")


def warm_up(bootstrap: str, node: OpenSearchNode, cases: list[Case]) -> None:
    """The node's JIT and first segments, the broker's offsets topic, the sink's first batches:
    paid before timing, by neither side. Each case's sink runs once on a small topic of its own,
    and what it wrote is checked."""
    for case in cases:
        n = min(len(case.docs), 30_000)
        raw_bulk(node, case, "bench-warmup", docs=case.docs[:n])
        _delete(node, "bench-warmup")
        small = Case(case.name, case.messages[:n], case.docs[:n], case.worker, case.connector, case.mapping)
        fill_topic(bootstrap, small)
        sluice_sink(bootstrap, node, small, n)
        check_documents(node, small)
        _delete(node, small.topic)


def measure(bootstrap: str, node: OpenSearchNode, case: Case) -> tuple[Result, Result]:
    count = len(case.docs)
    sinks: list[SinkRun] = []
    raws: list[Result] = []
    smalls: list[Result] = []
    small = BATCH // IN_FLIGHT
    for r in range(ROUNDS):
        raw_index = f"bench-raw-{r}"
        # Alternate which side goes first: the shared machine's load drifts during a run.
        for side in ("raw", "sluice", "small") if r % 2 == 0 else ("small", "sluice", "raw"):
            if side == "raw":
                raws.append(raw_bulk(node, case, raw_index))
                _delete(node, raw_index)
            elif side == "small":
                # The sink's lanes split each consumed batch by document id, so its requests
                # carry about batch.size / max.in.flight.requests actions: the same, bare.
                smalls.append(raw_bulk(node, case, raw_index, small))
                _delete(node, raw_index)
            else:
                sinks.append(sluice_sink(bootstrap, node, case, count))
                _delete(node, case.topic)
        run = sinks[-1]
        print(
            f"  round {r + 1} ({case.name}): raw {raws[-1].rate:>10,.0f} docs/s   raw/{small} {smalls[-1].rate:>10,.0f} docs/s"
            f"   sluice {run.result.rate:>10,.0f} docs/s   ratio {run.result.rate / raws[-1].rate:.2f}"
            f" ({run.result.rate / smalls[-1].rate:.2f} vs batches of {small})"
            f"   CPU {run.us_per_record:.2f} µs/record (task thread {run.task_cpu / count * 1e6:.2f})"
        )
    raw, sink, small_raw = median_result(raws), median_result([s.result for s in sinks]), median_result(smalls)
    print(raw.line())
    print(small_raw.line())
    print(sink.line(raw))
    us = statistics.median(s.us_per_record for s in sinks)
    task_us = statistics.median(s.task_cpu / count * 1e6 for s in sinks)
    print(
        f"{'':<42} ratio vs batches of {small}: {sink.rate / small_raw.rate:.2f}"
        f"   CPU {us:.2f} µs/record (median; task thread {task_us:.2f})"
    )
    return raw, sink


def main() -> list[tuple[Result, Result]]:
    tune_gc()
    makers = {"schemaless": schemaless_case, "realistic": realistic_case}
    cases = [makers[name](RECORDS) for name in CASES]
    print(
        f"topic → OpenSearch sink: {RECORDS:,} documents, cases {CASES}, batch.size={BATCH}, "
        f"{IN_FLIGHT} in flight, {ROUNDS} rounds"
    )
    results = []
    with broker() as bootstrap, OpenSearchNode(kill_with_parent=True) as node:
        print(f"OpenSearch {node.version} at {node.url}")
        warm_up(bootstrap, node, cases)
        for case in cases:
            fill_topic(bootstrap, case)
            results.append(measure(bootstrap, node, case))
    return results


if __name__ == "__main__":
    main()
