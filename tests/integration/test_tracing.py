"""OpenTelemetry traces of task batches, received by a real OTLP/HTTP endpoint.

What an operator checks: point ``tracing.otlp.endpoint`` at a collector and see, per batch, a
source trace ``poll → convert → produce`` and a sink trace ``consume → convert → put → commit``,
with the batch's topic-partitions, offsets and record count; leave it unset and the worker does
not even load OpenTelemetry. The receiver here is a small HTTP server decoding the protobuf
requests with ``opentelemetry-proto``, as a collector would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.unavailable import unavailable

pytestmark = pytest.mark.integration

try:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
except ImportError:  # the otel extra; `make setup` installs it, so under CI=true its absence fails
    unavailable("the otel extra is not installed: pip install -e '.[otel]'", allow_module_level=True)

LINES = 3_000


class OtlpReceiver:
    """Collects the spans of OTLP/HTTP (protobuf) trace exports, as plain dicts."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(self.path, request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, path: str, request: Any) -> None:
        assert path == "/v1/traces", path
        spans = []
        for resource_spans in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource_spans.resource.attributes}.get("service.name")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        {
                            "name": span.name,
                            "service": service,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                        }
                    )
        with self.lock:
            self.spans.extend(spans)

    def summary(self) -> str:
        with self.lock:
            names = [s["name"] for s in self.spans]
        return ", ".join(f"{n}: {names.count(n)}" for n in sorted(set(names)))

    def roots(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["name"] == name]

    def children(self, root: dict[str, Any]) -> list[dict[str, Any]]:
        with self.lock:
            found = [s for s in self.spans if s["parent"] == root["span_id"]]
        return sorted(found, key=lambda s: s["start"])


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.server.shutdown()


def _deploy(worker: WorkerProcess, tmp_path: Path) -> tuple[str, Path]:
    """File source → topic → file sink; returns the topic and the output file."""
    topic = unique_topic_name("traced")
    infile, outfile = tmp_path / "in.txt", tmp_path / "out.txt"
    infile.write_text("".join(f"line {i}\n" for i in range(LINES)))
    configs = {
        unique_topic_name("traced-src"): {"connector.class": "FileStreamSource", "file": str(infile), "topic": topic},
        unique_topic_name("traced-sink"): {"connector.class": "FileStreamSink", "file": str(outfile), "topics": topic},
    }
    for name, config in configs.items():
        r = httpx.put(f"{worker.url}/connectors/{name}/config", json=config, timeout=30)
        assert r.status_code in (200, 201), r.text
    return topic, outfile


def _wait(predicate: Any, what: Any, worker: WorkerProcess, timeout: float = 60) -> None:
    """Wait for ``predicate``; ``what`` (a string or a function returning one) says what failed."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what() if callable(what) else what} within {timeout}s:\n{worker.log()}"
        time.sleep(0.2)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_each_batch_is_a_trace_with_its_offsets(
    kafka: Any, tmp_path: Path, receiver: OtlpReceiver, executor: str
) -> None:
    worker = WorkerProcess(
        tmp_path,
        kafka.bootstrap_servers,
        env={"OTEL_BSP_SCHEDULE_DELAY": "200"},  # export every 200 ms, not every 5 s
        **{"tracing.otlp.endpoint": receiver.url, "task.executor": executor},
    ).start()
    try:
        topic, outfile = _deploy(worker, tmp_path)
        _wait(
            lambda: outfile.exists() and len(outfile.read_text().splitlines()) >= LINES,
            "every line in the sink's file",
            worker,
        )

        def sink_done() -> bool:
            roots = receiver.roots("sluice.sink.batch")
            return any(r["attributes"]["sluice.offset.last"] == [LINES - 1] for r in roots) and any(
                c["name"] == "commit" for r in roots for c in receiver.children(r)
            )

        _wait(sink_done, lambda: f"the sink's last batch and a commit traced (spans: {receiver.summary()})", worker)
    finally:
        assert worker.stop() == 0

    sources = receiver.roots("sluice.source.batch")
    assert sources and sum(r["attributes"]["messaging.batch.message_count"] for r in sources) == LINES
    for root in sources:
        assert root["service"] == "sluice" and root["parent"] == ""
        assert root["attributes"]["sluice.topics"] == [topic] and root["attributes"]["sluice.task"] == 0
        assert isinstance(json.loads(root["attributes"]["sluice.source.offset.last"]), dict)
        steps = receiver.children(root)
        assert [s["name"] for s in steps] == ["poll", "convert", "produce"]
        assert {s["trace_id"] for s in steps} == {root["trace_id"]}
        assert root["start"] == steps[0]["start"] and steps[-1]["end"] == root["end"]
        assert all(a["end"] == b["start"] for a, b in zip(steps, steps[1:]))

    sinks = sorted(receiver.roots("sluice.sink.batch"), key=lambda r: r["attributes"]["sluice.offset.first"])
    assert sum(r["attributes"]["messaging.batch.message_count"] for r in sinks) == LINES
    expected_first = 0
    for root in sinks:
        attributes = root["attributes"]
        assert attributes["sluice.topic_partitions"] == [f"{topic}-0"]
        assert attributes["sluice.offset.first"] == [expected_first]
        expected_first = attributes["sluice.offset.last"][0] + 1
        assert (
            attributes["sluice.offset.last"][0] - attributes["sluice.offset.first"][0] + 1
            == attributes["messaging.batch.message_count"]
        )
        steps = receiver.children(root)
        assert [s["name"] for s in steps][:3] == ["consume", "convert", "put"] and len(steps) in (3, 4)
        assert {s["trace_id"] for s in steps} == {root["trace_id"]}
        if len(steps) == 4:
            commit = steps[3]
            assert commit["name"] == "commit" and commit["attributes"]["sluice.topic_partitions"] == [f"{topic}-0"]
            assert commit["attributes"]["sluice.offset.committed"][0] <= attributes["sluice.offset.last"][0] + 1
    assert expected_first == LINES


EMBEDDED = """
import json, sys, time
from pathlib import Path
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker

bootstrap, infile, outfile, topic, lines = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
config = WorkerConfig.from_mapping({"bootstrap.servers": bootstrap, "listeners": "http://127.0.0.1:0", "offset.flush.interval.ms": "500", "connector.allowed.paths": "*"})
herder = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
herder.start()
herder.put_connector_config("src", {"connector.class": "FileStreamSource", "file": infile, "topic": topic}, allow_replace=False)
herder.put_connector_config("sink", {"connector.class": "FileStreamSink", "file": outfile, "topics": topic}, allow_replace=False)
deadline = time.monotonic() + 60
while not (Path(outfile).exists() and len(Path(outfile).read_text().splitlines()) >= lines):
    assert time.monotonic() < deadline, "the sink wrote too little"
    time.sleep(0.1)
time.sleep(1)  # a commit or two
herder.stop()
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
"""


def test_an_untraced_runtime_imports_no_opentelemetry(kafka: Any, tmp_path: Path) -> None:
    """Herder, worker and runners moving data with tracing off (tasks on threads, no REST server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    infile, outfile = tmp_path / "in.txt", tmp_path / "out.txt"
    infile.write_text("".join(f"line {i}\n" for i in range(LINES)))
    args = [kafka.bootstrap_servers, str(infile), str(outfile), unique_topic_name("untraced"), str(LINES)]
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_an_untraced_worker_loads_no_opentelemetry_sdk(kafka: Any, tmp_path: Path) -> None:
    """``sluice standalone`` with tracing off: none of the otel extra is loaded. (FastAPI itself
    imports ``opentelemetry-api``, its own dependency, for the REST server; the runtime without it
    imports nothing of OpenTelemetry, as the test above shows.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, env=env, **{"task.executor": "thread"})
    report = tmp_path / "modules.json"
    wrapper = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(report)!r}, 'w').write(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry')))))\n"
        "from sluice.cli.main import main\n"
        f"sys.argv = ['sluice', 'standalone', {str(worker.props_path)!r}]\n"
        "main()\n"
    )
    with worker.log_path.open("ab") as log:
        worker.proc = subprocess.Popen(
            [sys.executable, "-c", wrapper],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
            env={**env, "PYTHONUNBUFFERED": "1"},
        )
    worker.wait_healthy()
    try:
        _, outfile = _deploy(worker, tmp_path)
        _wait(
            lambda: outfile.exists() and len(outfile.read_text().splitlines()) >= LINES,
            "every line in the sink's file",
            worker,
        )
    finally:
        assert worker.stop() == 0
    loaded = json.loads(report.read_text())
    assert not [
        m for m in loaded if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto"))
    ], loaded
