"""Debezium's signals from their channels (``signal.enabled.channels``), run on the task thread.

* ``source``: rows inserted into the ``signal.data.collection`` table, seen in the replication
  stream (the decoder's ``on_signal`` hook);
* ``kafka``: records on ``signal.kafka.topic`` whose key is the connector's ``topic.prefix``
  (others are ignored), value ``{"type": …, "data": {…}}``. A consumer thread of its own reads
  them and hands them over through a queue, so the replication stream never waits on Kafka; the
  task runs them at the start of its next poll.

Signals: ``execute-snapshot`` (``data.type`` ``incremental``, the default, or ``blocking``),
``stop-snapshot``, ``pause-snapshot``, ``resume-snapshot``, ``log``.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Callable
from typing import Any

import orjson

from sluice.connectors.cdc.config import SignalSettings
from sluice.connectors.cdc.snapshot import BLOCKING, INCREMENTAL, ChunkedSnapshot

log = logging.getLogger(__name__)


class SignalDispatcher:
    """Runs signals against the task's snapshot. ``list_tables`` gives the captured tables'
    ``schema.table`` names (what ``data-collections`` regexes are matched against); the Kafka
    channel's thread is named after ``thread_prefix`` (the source's, e.g. ``postgres-cdc``).

    Thread: the task thread, except :meth:`close` (any thread)."""

    def __init__(
        self,
        cfg: SignalSettings,
        snapshot: ChunkedSnapshot,
        list_tables: Callable[[], list[str]],
        *,
        thread_prefix: str = "cdc",
    ) -> None:
        self.snapshot = snapshot
        self.list_tables = list_tables
        self.source = "source" in cfg.signal_enabled_channels
        self.kafka = (
            KafkaSignalChannel(cfg, thread_prefix=thread_prefix) if "kafka" in cfg.signal_enabled_channels else None
        )

    def on_table_signal(self, row: dict[str, Any], lsn: int) -> None:
        """A row inserted into the signal table (the ``source`` channel)."""
        if not self.source:
            return
        try:
            data = orjson.loads(row.get("data") or "{}")
        except orjson.JSONDecodeError:
            log.warning("Signal %s has data that is not JSON; ignored", row.get("id"))
            return
        self.run(str(row.get("id")), str(row.get("type")), data)

    def drain(self) -> None:
        """Run the signals the Kafka channel received since the last call."""
        if self.kafka is not None:
            for signal_id, kind, data in self.kafka.take():
                self.run(signal_id, kind, data)

    def run(self, signal_id: str, kind: str, data: Any) -> None:
        """One signal of Debezium's types; unknown ones are logged and ignored."""
        data = data if isinstance(data, dict) else {}
        snapshot = self.snapshot
        if kind == "execute-snapshot":
            chosen = self._tables(data)
            mode = str(data.get("type") or INCREMENTAL).lower()
            if mode not in (INCREMENTAL, BLOCKING):
                log.warning("Signal %s: snapshot type %r is not supported; ignored", signal_id, data.get("type"))
                return
            if data.get("additional-conditions"):
                log.warning("Signal %s: additional-conditions are not supported; whole tables are read", signal_id)
            log.info("Signal %s: %s snapshot of %s", signal_id, mode, chosen)
            snapshot.add(chosen, mode)
        elif kind == "stop-snapshot":
            tables = self._tables(data) if data.get("data-collections") else None
            log.info("Signal %s: snapshot stopped (%s)", signal_id, tables if tables is not None else "all tables")
            snapshot.stop(tables)
        elif kind == "pause-snapshot":
            log.info("Signal %s: incremental snapshot paused", signal_id)
            snapshot.pause()
        elif kind == "resume-snapshot":
            log.info("Signal %s: incremental snapshot resumed", signal_id)
            snapshot.resume()
        elif kind == "log":
            log.info("Signal %s: %s", signal_id, data.get("message"))
        else:
            log.warning("Signal %s of unknown type %r ignored", signal_id, kind)

    def _tables(self, data: dict[str, Any]) -> list[str]:
        """The captured tables the ``data-collections`` regexes match, in catalog order."""
        patterns = [re.compile(str(p)) for p in data.get("data-collections") or []]
        return [n for n in self.list_tables() if any(p.fullmatch(n) for p in patterns)]

    def close(self) -> None:
        if self.kafka is not None:
            self.kafka.close()


class KafkaSignalChannel:
    """Consumes ``signal.kafka.topic`` in a daemon thread (confluent_kafka), keeping the signals
    addressed to this connector for :meth:`take`.

    A signal's offset is committed once it is queued: a signal is run at most once, and one that
    arrives while the task is down is run when it starts again."""

    def __init__(self, cfg: SignalSettings, *, thread_prefix: str = "cdc") -> None:
        self.topic = cfg.signal_kafka_topic or f"{cfg.topic_prefix}-signal"
        self.prefix = cfg.topic_prefix
        self.settings = {
            "bootstrap.servers": cfg.signal_kafka_bootstrap_servers,
            "group.id": cfg.signal_kafka_group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "topic.metadata.refresh.interval.ms": 5000,  # a signal topic created later is found soon
            **cfg.signal_consumer,  # signal.consumer.*: security, SASL, timeouts
        }
        self._queue: queue.SimpleQueue[tuple[str, str, Any]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        # Started by the first poll, so a task whose start() fails leaves no consumer behind.
        self._thread = threading.Thread(target=self._consume, daemon=True, name=f"{thread_prefix}-kafka-signals")

    def take(self) -> list[tuple[str, str, Any]]:
        """The signals received since the last call, in topic order. Thread: the task thread."""
        if not self._thread.is_alive() and not self._stopping.is_set() and self._thread.ident is None:
            self._thread.start()
        taken = []
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return taken

    def _consume(self) -> None:
        # confluent_kafka is a dependency of the worker, not of this connector's other code paths.
        from confluent_kafka import Consumer

        consumer = Consumer(self.settings)
        consumer.subscribe([self.topic])
        log.info("Reading signals from Kafka topic %s", self.topic)
        try:
            while not self._stopping.is_set():
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error():
                    log.warning("Kafka signal channel: %s", message.error())
                    continue
                self._accept(message)
                consumer.store_offsets(message)
        except Exception:  # the stream must go on without signals
            log.exception("The Kafka signal channel failed; signals over Kafka are not read any more")
        finally:
            consumer.close()

    def _accept(self, message: Any) -> None:
        key = message.key()
        if (key.decode(errors="replace") if key is not None else None) != self.prefix:
            return  # a signal for another connector
        signal_id = f"{message.partition()}-{message.offset()}"
        try:
            value = orjson.loads(message.value() or b"{}")
        except orjson.JSONDecodeError:
            log.warning("Kafka signal %s is not JSON; ignored", signal_id)
            return
        if not isinstance(value, dict):
            log.warning("Kafka signal %s is not a JSON object; ignored", signal_id)
            return
        data = value.get("data")
        if isinstance(data, str):  # the data as a JSON string, as in the signal table
            try:
                data = orjson.loads(data)
            except orjson.JSONDecodeError:
                data = {}
        self._queue.put((signal_id, str(value.get("type")), data))

    def close(self) -> None:
        self._stopping.set()
