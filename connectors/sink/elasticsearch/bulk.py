"""Sending actions in ``_bulk`` requests: lanes, retries, and what is safe to commit.

:class:`BulkProcessor` owns ``max.in.flight.requests`` *lanes*. Each lane is a buffer plus a
thread that sends one bulk request at a time: it waits until the buffer holds ``batch.size``
actions or ``bulk.size.bytes`` bytes, or its oldest action is ``linger.ms`` old (or a flush asks),
then sends, and retries until the request's every action is settled:

* the request cannot reach a node, times out, or gets 429/5xx → the same request again after a
  backoff (``retry.backoff.ms``, doubling with jitter, at most 10 s), at most ``max.retries`` times,
  moving to the next ``connection.url`` each time;
* some items fail with 429/5xx → only those items again, same rules;
* an item is refused (400: mapping conflicts, unparsable values) → ``behavior.on.malformed.documents``:
  ``fail`` fails the task (or, when the task has an errant record reporter, hands the item to it,
  so ``errors.tolerance`` decides), ``warn``/``ignore`` hand it to the task thread, which reports
  it to the dead-letter queue and only then counts it settled;
* a version conflict (409) means the index already holds that version or a newer one: settled.

Nothing else is dropped. Offsets: every action belongs to a :class:`Chunk`; a partition is safe to
commit up to the first offset of its oldest chunk with unsettled actions (:meth:`committable`).
Threads: :meth:`submit`, :meth:`committable`, :meth:`process_reports`, :meth:`wait_drained`,
:meth:`wait_for_room` and :meth:`forget` run on the task thread; lanes run on their own; :meth:`close` on any.
"""

from __future__ import annotations

import contextvars
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any

from sluice.connectors.api import ConnectError, TopicPartition
from sluice.connectors.sink.elasticsearch.client import FatalHttpError, SearchClient, TransientHttpError
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig, MalformedDocBehavior
from sluice.connectors.sink.elasticsearch.documents import Built, Chunk

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 10.0
_RETRIABLE_ITEM_STATUS = frozenset({408, 429, 500, 502, 503, 504})

#: ``(chunk, record index, reason)`` of a document the server refused.
Malformed = tuple[Chunk, int, str]


class _Lane:
    """One buffer and the thread that drains it (one request in flight at a time)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.cond = threading.Condition()
        self.payloads: list[bytes] = []
        self.chunks: list[Chunk] = []
        self.positions: list[int] = []
        self.nbytes = 0
        self.oldest = 0.0
        self.flush_requested = False
        self.thread: threading.Thread | None = None


class BulkProcessor:
    """Buffers built actions and sends them in bulk requests; see the module docstring."""

    def __init__(self, config: ElasticsearchSinkConfig, client: SearchClient) -> None:
        self.config = config
        self.client = client
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._lanes = [_Lane(i) for i in range(config.max_in_flight_requests)]
        self._stopping = threading.Event()
        self._open: dict[TopicPartition, deque[Chunk]] = {}
        self._reports: list[Malformed] = []
        #: Actions submitted and not yet settled (sent, or refused and reported).
        self.buffered = 0
        self.failure: BaseException | None = None
        #: Documents the server refuses go to the task's errant record reporter even with
        #: ``behavior.on.malformed.documents=fail``, which then decides by ``errors.tolerance``.
        self.report_refused = False
        self.documents_written = 0
        self.requests_sent = 0
        for lane in self._lanes:
            ctx = contextvars.copy_context()  # keeps the task's [connector|task-N] log context
            lane.thread = threading.Thread(
                target=ctx.run, args=(self._run, lane), name=f"es-sink-lane-{lane.index}", daemon=True
            )
            lane.thread.start()

    @property
    def lanes(self) -> int:
        return len(self._lanes)

    # -- task thread --------------------------------------------------------------------------------

    def submit(self, built: Built) -> None:
        """Queue the actions of ``built`` and track its chunks for :meth:`committable`."""
        count = built.count
        with self._lock:
            self.buffered += count
            for chunk in built.all_chunks:
                if chunk.pending:
                    self._open.setdefault(chunk.tp, deque()).append(chunk)
        if not count:
            return
        now = time.monotonic()
        for lane, payloads in zip(self._lanes, built.payloads):
            if not payloads:
                continue
            added = sum(map(len, payloads))
            with lane.cond:
                if not lane.payloads:
                    lane.oldest = now
                lane.payloads += payloads
                lane.chunks += built.chunks[lane.index]
                lane.positions += built.positions[lane.index]
                lane.nbytes += added
                lane.cond.notify()

    def committable(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the offset up to which every action is settled (at most ``offsets``)."""
        safe: dict[TopicPartition, int] = {}
        with self._lock:
            for tp, offset in offsets.items():
                open_chunks = self._open.get(tp)
                while open_chunks and open_chunks[0].pending <= 0:
                    open_chunks.popleft()
                if open_chunks:
                    safe[tp] = min(offset, open_chunks[0].first_offset)
                else:
                    self._open.pop(tp, None)
                    safe[tp] = offset
        return safe

    def process_reports(self, report: Callable[[Chunk, int, str], None]) -> None:
        """Hand refused documents to ``report`` (which may raise to fail the task), then settle them."""
        with self._lock:
            reports, self._reports = self._reports, []
        if not reports:
            return
        done = 0
        try:
            for chunk, index, reason in reports:
                report(chunk, index, reason)
                done += 1
        finally:
            with self._lock:
                for chunk, _, _ in reports[:done]:
                    chunk.pending -= 1
                self.buffered -= done
                self._reports[:0] = reports[done:]
                self._settled.notify_all()

    def request_flush(self) -> None:
        """Send what the lanes hold now, without waiting for ``linger.ms``."""
        for lane in self._lanes:
            with lane.cond:
                if lane.payloads:
                    lane.flush_requested = True
                    lane.cond.notify()

    def wait_drained(self, timeout_s: float, report: Callable[[Chunk, int, str], None]) -> bool:
        """Flush and wait until nothing is buffered; ``False`` after ``timeout_s``. Raises a lane's failure."""
        self.request_flush()
        deadline = time.monotonic() + timeout_s
        while True:
            self.process_reports(report)
            with self._lock:
                self.raise_failure()
                if self.buffered <= 0:
                    return True
                if self._stopping.is_set():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if not self._reports:
                    self._settled.wait(min(remaining, 0.2))

    def wait_for_room(self, limit: int, timeout_s: float, report: Callable[[Chunk, int, str], None]) -> bool:
        """Wait until fewer than ``limit`` actions are buffered; ``False`` after ``timeout_s``.
        Refused documents are reported meanwhile (they count until then). Raises a lane's failure."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.process_reports(report)
            with self._lock:
                self.raise_failure()
                if self.buffered < limit:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping.is_set():
                    return False
                if not self._reports:
                    self._settled.wait(remaining)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop tracking revoked partitions (their actions may still be sent; that is harmless)."""
        with self._lock:
            for tp in partitions:
                self._open.pop(tp, None)

    def raise_failure(self) -> None:
        failure = self.failure
        if failure is not None:
            raise ConnectError(str(failure)) from failure

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the lanes; buffered actions are dropped (their offsets were never committed)."""
        self._stopping.set()
        for lane in self._lanes:
            with lane.cond:
                lane.cond.notify_all()
        with self._lock:
            self._settled.notify_all()
        self.client.close()
        deadline = time.monotonic() + timeout_s
        for lane in self._lanes:
            if lane.thread is not None and lane.thread is not threading.current_thread():
                lane.thread.join(max(0.0, deadline - time.monotonic()))

    # -- lanes ------------------------------------------------------------------------------------

    def _run(self, lane: _Lane) -> None:
        try:
            while True:
                batch = self._take(lane)
                if batch is None:
                    return
                self._send(lane, *batch)
        except BaseException as exc:  # a bug must fail the task, not silently stop a lane
            log.exception("Bulk lane %d failed", lane.index)
            self._fail(exc)

    def _take(self, lane: _Lane) -> tuple[list[bytes], list[Chunk], list[int]] | None:
        cfg = self.config
        linger = cfg.linger_ms / 1000
        with lane.cond:
            while True:
                if self._stopping.is_set() or self.failure is not None:
                    return None
                n = len(lane.payloads)
                if n:
                    if n >= cfg.batch_size or lane.nbytes >= cfg.bulk_size_bytes or lane.flush_requested:
                        break
                    wait = lane.oldest + linger - time.monotonic()
                    if wait <= 0:
                        break
                    lane.cond.wait(wait)
                else:
                    lane.flush_requested = False
                    lane.cond.wait()
            cut = min(n, cfg.batch_size)
            payloads = lane.payloads[:cut]
            sizes = list(accumulate(map(len, payloads)))
            if sizes[-1] > cfg.bulk_size_bytes:
                cut = max(1, sum(1 for s in sizes if s <= cfg.bulk_size_bytes))
                payloads = payloads[:cut]
            taken = sizes[cut - 1]
            chunks = lane.chunks[:cut]
            positions = lane.positions[:cut]
            del lane.payloads[:cut], lane.chunks[:cut], lane.positions[:cut]
            lane.nbytes -= taken
            if lane.payloads:
                lane.oldest = time.monotonic()
            else:
                lane.flush_requested = False
        return payloads, chunks, positions

    def _send(self, lane: _Lane, payloads: list[bytes], chunks: list[Chunk], positions: list[int]) -> None:
        cfg = self.config
        todo = list(range(len(payloads)))
        attempt = 0
        while todo:
            if self._stopping.is_set():
                return
            body = b"".join(payloads) if len(todo) == len(payloads) else b"".join([payloads[j] for j in todo])
            try:
                response = self.client.bulk(body)
                self.requests_sent += 1
            except TransientHttpError as exc:
                attempt += 1
                if attempt > cfg.max_retries:
                    self._fail(ConnectError(f"Bulk request failed {attempt} times (max.retries={cfg.max_retries}): {exc}"))
                    return
                self._backoff(attempt, f"Bulk request of {len(todo)} actions failed: {exc}")
                continue
            except FatalHttpError as exc:
                self._fail(ConnectError(f"Bulk request refused: {exc}"))
                return
            if not response.get("errors"):
                self._settle([chunks[j] for j in todo] if len(todo) != len(chunks) else chunks, written=len(todo))
                return
            retry = self._sort_items(todo, response.get("items") or [], chunks, positions)
            if retry is None:
                return
            todo = retry
            if todo:
                attempt += 1
                if attempt > cfg.max_retries:
                    self._fail(
                        ConnectError(
                            f"{len(todo)} actions of a bulk request still failed after {cfg.max_retries} retries "
                            f"(max.retries); the last: {self._last_item_error}"
                        )
                    )
                    return
                self._backoff(attempt, f"{len(todo)} actions of a bulk request failed ({self._last_item_error})")

    _last_item_error = ""

    def _sort_items(
        self, todo: list[int], items: list[Any], chunks: list[Chunk], positions: list[int]
    ) -> list[int] | None:
        """Settle the successful items, queue the refused ones, return the ones to retry (``None``: failed)."""
        if len(items) != len(todo):
            self._fail(ConnectError(f"_bulk answered {len(items)} items for {len(todo)} actions"))
            return None
        ok: list[Chunk] = []
        retry: list[int] = []
        refused: list[Malformed] = []
        for n, (j, item) in enumerate(zip(todo, items)):
            result = next(iter(item.values())) if isinstance(item, dict) and item else {}
            error = result.get("error")
            status = result.get("status", 500)
            if error is None or status == 409:
                ok.append(chunks[j])
            elif status in _RETRIABLE_ITEM_STATUS or (isinstance(error, dict) and error.get("type") == "cluster_block_exception"):
                # Retry this item and everything after it, in order: a later write of the same
                # document that succeeded now must not be overwritten by this one afterwards.
                retry = todo[n:]
                self._last_item_error = _describe(error)
                break
            else:
                refused.append((chunks[j], positions[j], _describe(error)))
        self._settle(ok, written=len(ok))
        if refused:
            behavior = self.config.behavior_on_malformed_documents
            first_chunk, first_index, first_reason = refused[0]
            if behavior is MalformedDocBehavior.FAIL and not self.report_refused:
                record = first_chunk.record(first_index)
                self._fail(
                    ConnectError(
                        f"The server refused the document of topic {record.topic!r} partition {record.partition} "
                        f"offset {record.kafka_offset}: {first_reason} "
                        "(behavior.on.malformed.documents=fail; use warn or ignore to send such records to the DLQ)"
                    )
                )
                return None
            for chunk, index, reason in refused:
                if behavior is MalformedDocBehavior.WARN:
                    record = chunk.record(index)
                    log.warning(
                        "Dropping a document the server refused (topic %r partition %d offset %d): %s",
                        record.topic,
                        record.partition,
                        record.kafka_offset,
                        reason,
                    )
                elif behavior is MalformedDocBehavior.IGNORE:
                    log.debug("Ignoring a document the server refused: %s", reason)
            with self._lock:
                self._reports += refused
                self._settled.notify_all()
        return retry

    def _settle(self, chunks: list[Chunk], *, written: int) -> None:
        with self._lock:
            for chunk in chunks:
                chunk.pending -= 1
            self.buffered -= len(chunks)
            self.documents_written += written
            self._settled.notify_all()

    def _backoff(self, attempt: int, why: str) -> None:
        base = self.config.retry_backoff_ms / 1000
        wait = min(base * 2 ** (attempt - 1), MAX_BACKOFF_S)
        wait *= random.uniform(0.5, 1.0)
        log.warning("%s; retry %d of %d in %.2fs", why, attempt, self.config.max_retries, wait)
        self._stopping.wait(wait)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = exc
                log.error("The Elasticsearch sink is failing: %s", exc)
            self._settled.notify_all()
        for lane in self._lanes:
            with lane.cond:
                lane.cond.notify_all()


def _describe(error: Any) -> str:
    if isinstance(error, dict):
        text = f"{error.get('type')}: {error.get('reason')}"
        cause = error.get("caused_by")
        if isinstance(cause, dict):
            text += f" (caused by {cause.get('type')}: {cause.get('reason')})"
        return text
    return str(error)
