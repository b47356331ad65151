"""The live tap: a sample of the next records a connector moves, for a person debugging a pipeline.

``POST /connectors/{name}/tap`` subscribes to the connector's tasks in this process
(:data:`TAPS`), in the worker's task hosts (the same registry there, relayed over the host's
control pipe) and, in a cluster, on the other workers running its tasks; it returns once
``count`` records arrived or ``timeout`` passed, and unsubscribes. A record is shown as it moves:
a source's after its transforms and converters — what goes to Kafka, decoded again by the
connector's own converters — and a sink's after its converters and transforms, as its task gets it.

The runners pay one dict lookup per batch while nobody taps (:meth:`TapRegistry.watching`); a
subscribed task renders at most what its subscribers still want, on its own thread, and a failure
there is logged, never the task's.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

log = logging.getLogger(__name__)

#: The most records one tap may ask for, and the longest it may wait.
MAX_COUNT = 100
MAX_TIMEOUT_S = 30.0

#: One record as the tap shows it (JSON-able).
Tapped = dict[str, Any]
#: Renders up to ``n`` records of the batch at hand.
Render = Callable[[int], list[Tapped]]


def jsonable(value: Any) -> Any:
    """``value`` (Connect data: maps, lists, bytes, decimals, dates) as JSON can show it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)


def raw_value(data: bytes | None) -> Any:
    """Bytes a converter did not decode: their JSON if they hold some, else text, else base64."""
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return jsonable(bytes(data))


def headers_of(headers: Sequence[tuple[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"key": key, "value": raw_value(value) if isinstance(value, bytes) else jsonable(value)} for key, value in headers or ()]


class _Subscription:
    def __init__(self, connector: str, count: int, deliver: Callable[[list[Tapped]], None]) -> None:
        self.connector = connector
        self.remaining = count
        self.deliver = deliver
        self.lock = threading.Lock()

    def reserve(self) -> int:
        with self.lock:
            return self.remaining

    def took(self, n: int) -> None:
        with self.lock:
            self.remaining = max(0, self.remaining - n)


class TapRegistry:
    """The taps of one process: who wants records of which connector."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_connector: dict[str, list[_Subscription]] = {}
        self._tokens: dict[str, _Subscription] = {}

    def watching(self, connector: str) -> bool:
        """Whether anyone taps ``connector`` (the runners' per-batch check: a dict lookup)."""
        return connector in self._by_connector

    def subscribe(self, connector: str, count: int, deliver: Callable[[list[Tapped]], None]) -> str:
        """Hand up to ``count`` of ``connector``'s next records to ``deliver`` (called on a task's
        thread); returns the token :meth:`unsubscribe` takes."""
        token = uuid.uuid4().hex
        subscription = _Subscription(connector, count, deliver)
        with self._lock:
            self._tokens[token] = subscription
            self._by_connector.setdefault(connector, []).append(subscription)
        return token

    def unsubscribe(self, token: str) -> None:
        with self._lock:
            subscription = self._tokens.pop(token, None)
            if subscription is None:
                return
            left = [s for s in self._by_connector.get(subscription.connector, []) if s is not subscription]
            if left:
                self._by_connector[subscription.connector] = left
            else:
                self._by_connector.pop(subscription.connector, None)

    def offer(self, connector: str, task: int, render: Render) -> None:
        """A task moved a batch: render what the subscribers still want and hand it over."""
        with self._lock:
            subscriptions = list(self._by_connector.get(connector, ()))
        for subscription in subscriptions:
            wanted = subscription.reserve()
            if wanted <= 0:
                continue
            try:
                records = render(wanted)[:wanted]
            except Exception as exc:  # noqa: BLE001 - the tap must never fail a task
                log.debug("The live tap of %s could not render a batch: %s", connector, exc)
                return
            for record in records:
                record["task"] = task
            subscription.took(len(records))
            if records:
                subscription.deliver(records)


#: This process's taps (the worker's, or a task host's).
TAPS = TapRegistry()


class Collector:
    """What one tap request gathers, from any thread, until it has ``count`` records."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.records: list[Tapped] = []
        self._lock = threading.Lock()
        self._full = threading.Event()

    def add(self, records: list[Tapped]) -> None:
        with self._lock:
            self.records.extend(records[: self.count - len(self.records)])
            if len(self.records) >= self.count:
                self._full.set()

    def wait(self, timeout_s: float) -> list[Tapped]:
        self._full.wait(timeout_s)
        with self._lock:
            return list(self.records)


_tap_ids = itertools.count(1)


def next_tap_id() -> int:
    return next(_tap_ids)


def check_request(count: int, timeout_s: float) -> None:
    """Refuse a tap beyond its bounds (``ValueError`` naming the bound)."""
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"count must be between 1 and {MAX_COUNT}")
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout must be more than 0 and at most {MAX_TIMEOUT_S:g} s")


def deadline_left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
