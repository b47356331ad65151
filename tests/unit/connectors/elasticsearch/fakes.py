"""An in-memory stand-in for the search cluster's HTTP API (unit tests only; the integration tests
use a real OpenSearch node), and a sink task context that records what the task asked for."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import orjson

from sluice.connectors.api import SinkRecord, TopicPartition
from sluice.connectors.sink.elasticsearch.client import TransientHttpError


class FakeCluster:
    """Applies ``_bulk`` bodies to dicts; ``fail_requests`` makes the next requests fail transiently,
    ``refuse`` decides which documents get a 400 item error, ``gate`` blocks bulk requests."""

    def __init__(self) -> None:
        self.indices: dict[str, dict[str, Any]] = {}
        self.mappings: dict[str, Any] = {}
        self.streams: set[str] = set()
        self.fail_requests = 0
        self.down = False
        self.refuse: Callable[[dict[str, Any]], bool] = lambda doc: False
        self.item_status: Callable[[str, dict[str, Any]], int | None] = lambda action, meta: None
        self.gate = threading.Event()
        self.gate.set()
        self.bulk_calls: list[int] = []
        self.lock = threading.Lock()

    # -- the SearchClient surface the task uses --------------------------------------------------

    def bulk(self, body: bytes) -> dict[str, Any]:
        self.gate.wait(10)
        with self.lock:
            if self.down:
                raise TransientHttpError("connection refused")
            if self.fail_requests > 0:
                self.fail_requests -= 1
                raise TransientHttpError("HTTP 503")
            lines = body.split(b"\n")
            assert lines[-1] == b"", "a bulk body ends with a newline"
            items: list[dict[str, Any]] = []
            i = 0
            while i < len(lines) - 1:
                action = orjson.loads(lines[i])
                (op, meta), = action.items()
                i += 1
                source = None
                if op != "delete":
                    source = orjson.loads(lines[i])
                    i += 1
                items.append({op: self._apply(op, meta, source)})
            self.bulk_calls.append(len(items))
            return {"errors": any("error" in next(iter(it.values())) for it in items), "items": items}

    def _apply(self, op: str, meta: dict[str, Any], source: Any) -> dict[str, Any]:
        index = self.indices.setdefault(meta["_index"], {})
        doc_id = meta.get("_id") or f"auto-{len(index)}"
        forced = self.item_status(op, meta)
        if forced is not None:
            return {"_id": doc_id, "status": forced, "error": {"type": "forced", "reason": f"status {forced}"}}
        if op == "delete":
            existed = index.pop(doc_id, None) is not None
            return {"_id": doc_id, "status": 200 if existed else 404, "result": "deleted" if existed else "not_found"}
        doc = source["doc"] if op == "update" else source
        if self.refuse(doc):
            return {"_id": doc_id, "status": 400, "error": {"type": "mapper_parsing_exception", "reason": "bad field"}}
        if op == "update":
            index[doc_id] = {**index.get(doc_id, {}), **doc}
        elif op == "create" and doc_id in index:
            return {"_id": doc_id, "status": 409, "error": {"type": "version_conflict_engine_exception", "reason": "exists"}}
        else:
            index[doc_id] = doc
        return {"_id": doc_id, "status": 201, "result": "created"}

    def index_exists(self, index: str) -> bool:
        if self.down:
            raise TransientHttpError("connection refused")
        return index in self.indices

    def create_index(self, index: str, mappings: dict[str, Any] | None) -> None:
        self.indices.setdefault(index, {})
        if mappings:
            self.mappings[index] = mappings

    def mapping_is_empty(self, index: str) -> bool:
        return index not in self.mappings

    def put_mapping(self, index: str, mappings: dict[str, Any]) -> None:
        self.mappings[index] = mappings

    def data_stream_exists(self, name: str) -> bool:
        return name in self.streams

    def create_data_stream(self, name: str, mappings: dict[str, Any] | None) -> None:
        self.streams.add(name)
        self.indices.setdefault(name, {})

    def close(self) -> None:
        pass


class RecordingContext:
    """A sink task context that records pauses, resumes, commit requests and reported records."""

    def __init__(self, partitions: set[TopicPartition], *, reporter: bool = True) -> None:
        self._assignment = set(partitions)
        self.paused: set[TopicPartition] = set()
        self.commit_requests = 0
        self.reported: list[tuple[SinkRecord, BaseException]] = []
        self._reporter = self if reporter else None

    connector_name = "es"
    task_id = 0

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused.difference_update(partitions)

    def rewind(self, offsets: Any) -> None:
        raise AssertionError("the sink never rewinds")

    def request_commit(self) -> None:
        self.commit_requests += 1

    @property
    def errant_record_reporter(self) -> Any:
        return self._reporter

    def report(self, record: SinkRecord, error: BaseException) -> None:
        self.reported.append((record, error))
