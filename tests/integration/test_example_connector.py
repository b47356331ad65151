"""A third-party connector package, installed the way a user installs one, on a real worker.

``examples/sluice-example-connector`` is built and installed with pip into a directory of the
test's own (``--target``), which only the processes started here see through ``PYTHONPATH``: the
shared environment is never changed. Then: its own connector-kit tests pass in a pytest
subprocess; a worker finds both connectors through their ``sluice.connectors`` entry points and
lists them under ``GET /connector-plugins``; and they run a pipeline on a real broker, with tasks on
threads and in processes of their own, through a transform chain on each side, the JSON
converter, and a dead-letter queue that receives the record the sink refuses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sluice-example-connector"
JSON = "org.apache.kafka.connect.json.JsonConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
SOURCE_CLASS = "sluice_example_connector.inbox.InboxSourceConnector"
SINK_CLASS = "sluice_example_connector.jsonlines.JsonLinesSinkConnector"
POISON = {"note": "an order without an id"}


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The example's sources (a copy, so the build leaves nothing in the repository) and the
    environment of a process that has the package installed."""
    root = tmp_path_factory.mktemp("example-connector")
    sources, site = root / "src", root / "site"
    shutil.copytree(EXAMPLE, sources, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(sources)]
    built = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"pip install failed:\n{built.stdout}\n{built.stderr}"
    assert (site / "sluice_example_connector" / "inbox.py").exists()
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    yield sources, {"PYTHONPATH": path}


def test_the_package_passes_its_connector_kit_tests(example: tuple[Path, dict[str, str]]) -> None:
    sources, env = example
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=sources,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    # Every check of the kit ran on the package's connectors (6 for the source, 5 for the sink), none skipped.
    passed = re.match(r"(\d+) passed in ", summary)
    assert passed is not None and int(passed.group(1)) >= 11, summary


def _wait_for(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert response.status_code == 201, response.text


def _pipeline_configs(inbox: Path, out: Path, raw: str, dlq: str) -> tuple[dict[str, str], dict[str, str]]:
    topic = raw.removesuffix("-raw")
    source = {
        "connector.class": "ExampleInboxSource",
        "file": str(inbox),
        "topic": raw,
        "key.converter": STRING,
        "value.converter": JSON,
        "value.converter.schemas.enable": "false",
        # The source's chain: drop the "-raw" suffix from the topic, tag every record.
        "transforms": "route,tag",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)-raw",
        "transforms.route.replacement": "$1",
        "transforms.tag.type": "org.apache.kafka.connect.transforms.InsertHeader",
        "transforms.tag.header": "pipeline",
        "transforms.tag.value.literal": "example",
    }
    sink = {
        "connector.class": "ExampleJsonLinesSink",
        "topics": topic,
        "file": str(out),
        "key.converter": STRING,
        "value.converter": JSON,
        "value.converter.schemas.enable": "false",
        "transforms": "rename",
        "transforms.rename.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.rename.renames": "item:title",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    }
    return source, sink


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_worker_finds_and_runs_the_example_connectors(
    example: tuple[Path, dict[str, str]], kafka: Any, tmp_path: Path, executor: str
) -> None:
    _, env = example
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, env=env, **{"task.executor": executor}).start()
    try:
        plugins = httpx.get(f"{worker.url}/connector-plugins", timeout=10).json()
        found = {p["class"]: p["type"] for p in plugins}
        assert found.get(SOURCE_CLASS) == "source" and found.get(SINK_CLASS) == "sink", found

        inbox, out = tmp_path / "inbox.jsonl", tmp_path / "out.jsonl"
        orders = [{"id": n, "item": f"order {n}"} for n in range(10)]
        lines = [json.dumps(o) for o in orders[:4]] + [json.dumps(POISON)] + [json.dumps(o) for o in orders[4:]]
        inbox.write_text("".join(line + "\n" for line in lines))
        raw, dlq = unique_topic_name(f"example-{executor}") + "-raw", unique_topic_name("example-dlq")
        topic = raw.removesuffix("-raw")
        source, sink = _pipeline_configs(inbox, out, raw, dlq)
        _create(worker, "inbox", source)
        _create(worker, "jsonl", sink)
        worker.wait_running("inbox")
        worker.wait_running("jsonl")

        _wait_for(lambda: len(_lines(out)) >= 10, 60, f"10 lines in the sink's file\n{worker.log()}")
        rows = [json.loads(line) for line in _lines(out)]
        assert [r["value"] for r in rows] == [{"id": n, "title": f"order {n}"} for n in range(10)]
        assert [r["key"] for r in rows] == [str(n) for n in range(10)]
        assert {r["topic"] for r in rows} == {topic}

        produced = consume_all(kafka.bootstrap_servers, topic, 11)
        assert [orjson.loads(r.value or b"null") for r in produced] == orders[:4] + [POISON] + orders[4:]
        assert all(("pipeline", b"example") in r.headers for r in produced)

        [dead] = consume_all(kafka.bootstrap_servers, dlq, 1)
        assert orjson.loads(dead.value or b"null") == POISON
        headers = dict(dead.headers)
        assert headers["__connect.errors.stage"] == b"TASK_PUT"
        assert headers["__connect.errors.topic"] == topic.encode()
        assert headers["__connect.errors.offset"] == b"4"
        assert b"not an object with an 'id'" in (headers["__connect.errors.exception.message"] or b"")
    finally:
        assert worker.stop() == 0, worker.log()
