"""Offsets topics of their own for source connectors: Kafka Connect's ``offsets.storage.topic``
connector key (KIP-618), on a distributed worker.

:class:`OffsetTopics` is the worker's :class:`~offsets.base.OffsetStore`. A connector that names no
topic of its own (or the worker's ``offset.storage.topic``) is served by the worker's store as
before. For one that names another topic the worker opens a store on that topic (creating it,
compacted, when it is missing) and serves the connector from both, as Connect does:

* **reads**: the connector's topic answers for every partition it holds a record of — an offset,
  or a tombstone, so what was deleted there stays deleted; the worker's topic answers for the
  rest. A running connector given a topic of its own therefore goes on from the offsets it stored
  in the worker's topic.
* **writes** through the store (commits at least once, REST alter and reset): the connector's
  topic, and a copy in the worker's topic — tombstones first, and a failure there fails the write
  (else a later read could fall back to the deleted offset); offsets after, best effort — so
  removing the key later goes on from the latest offsets too.
* **exactly once**: a task's transactions write its offsets to the connector's topic with the
  task's own producer (:class:`~worker.runners.source_transactions.ExactlyOnce` names the topic);
  they are not copied to the worker's topic, so that producer needs no access to it. Removing the
  key from such a connector goes back to the offsets it had in the worker's topic before.

The worker learns which topic a connector uses from its config (:meth:`OffsetTopics.use`) before
anything of the connector reads or writes offsets: when it builds the connector's tasks, starts
the connector, or serves its offsets over REST. A topic's store stays open until the worker stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from sluice.offsets.base import JsonMap, OffsetStoreError, partition_identity
from sluice.offsets.kafka import KafkaOffsetStore

log = logging.getLogger(__name__)

#: Opens (creates when missing, then reads to its end) the store of a connector's offsets topic.
TopicOpener = Callable[[str], KafkaOffsetStore]


class OffsetTopics:
    """The offsets of every source connector of a distributed worker: the worker's topic and the
    connectors' own topics. Thread-safe, as every offset store."""

    def __init__(self, worker_store: KafkaOffsetStore, open_topic: TopicOpener) -> None:
        self.worker_store = worker_store
        self._open_topic = open_topic
        self._lock = threading.Lock()
        self._opening = threading.Lock()  # one topic opened at a time: opening reads the whole topic
        self._stores: dict[str, KafkaOffsetStore] = {}
        self._routes: dict[str, KafkaOffsetStore] = {}

    @property
    def topic(self) -> str:
        """The worker's ``offset.storage.topic``."""
        return self.worker_store.topic

    def use(self, connector: str, topic: str | None) -> None:
        """Keep ``connector``'s offsets in ``topic`` from now on (``None`` or the worker's topic:
        the worker's store). Opens the topic the first time; raises :class:`OffsetStoreError`
        naming it when it cannot be created or read."""
        if not topic or topic == self.topic:
            with self._lock:
                self._routes.pop(connector, None)
            return
        store = self._store(topic)
        with self._lock:
            self._routes[connector] = store

    def topic_of(self, connector: str) -> str:
        """The topic ``connector``'s offsets are written to."""
        with self._lock:
            store = self._routes.get(connector)
        return self.topic if store is None else store.topic

    def _store(self, topic: str) -> KafkaOffsetStore:
        with self._opening:
            with self._lock:
                store = self._stores.get(topic)
            if store is None:
                try:
                    store = self._open_topic(topic)
                except OffsetStoreError:
                    raise
                except Exception as exc:
                    raise OffsetStoreError(f"Cannot open the connector offsets topic {topic}: {exc}") from exc
                with self._lock:
                    self._stores[topic] = store
                log.info("Reading source offsets from the connector offsets topic %s", topic)
            return store

    def _route(self, connector: str) -> KafkaOffsetStore | None:
        with self._lock:
            return self._routes.get(connector)

    def _opened(self) -> list[KafkaOffsetStore]:
        with self._lock:
            return list(self._stores.values())

    # -- the OffsetStore protocol -------------------------------------------------------------------

    def start(self) -> None:
        self.worker_store.start()

    def stop(self) -> None:
        for store in self._opened():
            store.stop()
        self.worker_store.stop()

    def get(self, connector: str, partitions: Sequence[JsonMap]) -> list[JsonMap | None]:
        own = self._route(connector)
        if own is None:
            return self.worker_store.get(connector, partitions)
        found = own.get(connector, partitions)
        absent = [i for i, offset in enumerate(found) if offset is None]
        if absent:
            known = own.knows(connector, [partitions[i] for i in absent])
            ask = [i for i, k in zip(absent, known, strict=True) if not k]
            if ask:
                earlier = self.worker_store.get(connector, [partitions[i] for i in ask])
                for i, offset in zip(ask, earlier, strict=True):
                    found[i] = offset
        return found

    def put(self, connector: str, offsets: Sequence[tuple[JsonMap, JsonMap | None]]) -> None:
        own = self._route(connector)
        if own is None:
            self.worker_store.put(connector, offsets)
            return
        tombstones = [(partition, None) for partition, offset in offsets if offset is None]
        if tombstones:
            self.worker_store.put(connector, tombstones)
        own.put(connector, offsets)
        copies = [(partition, offset) for partition, offset in offsets if offset is not None]
        if copies:
            try:
                self.worker_store.put(connector, copies)
            except OffsetStoreError as exc:
                log.warning(
                    "The offsets of %s are stored in %s, but their copy in the worker's offsets topic %s failed: %s",
                    connector,
                    own.topic,
                    self.topic,
                    exc,
                )

    def all(self, connector: str) -> list[tuple[JsonMap, JsonMap]]:
        own = self._route(connector)
        if own is None:
            return self.worker_store.all(connector)
        entries = own.all(connector)
        earlier = self.worker_store.all(connector)
        if earlier:
            known = own.knows(connector, [partition for partition, _ in earlier])
            seen = {partition_identity(partition) for partition, _ in entries}
            entries += [
                (partition, offset)
                for (partition, offset), k in zip(earlier, known, strict=True)
                if not k and partition_identity(partition) not in seen
            ]
        return entries

    def delete(self, connector: str) -> None:
        self.worker_store.delete(connector)
        own = self._route(connector)
        if own is not None:
            own.delete(connector)

    def read_to_end(self, timeout: float = 30.0) -> None:
        self.worker_store.read_to_end(timeout)
        for store in self._opened():
            store.read_to_end(timeout)
