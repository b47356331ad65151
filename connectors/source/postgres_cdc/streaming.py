"""The PostgreSQL streaming loop: replication stream → decoder, as Debezium's
``PostgresStreamingChangeEventSource`` runs it.

:class:`PostgresStreamingSource` owns the replication connection of one slot: it (re)opens it where
the decoder's delivered position says, reads messages into the decoder until a batch is full or
the poll interval ends, answers the server's keepalives, sends standby status updates (the slot's
confirmed position moves only to what the task confirmed, :meth:`PostgresStreamingSource.confirm`),
retries a slot another connection holds (``slot.max.retries`` times ``slot.retry.delay.ms`` apart),
and backs off after a lost connection. What a poll does with the decoded events is the task's.
"""

from __future__ import annotations

import logging
import threading
import time

from sluice.connectors.api import ConnectError
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder
from sluice.connectors.source.postgres_cdc.replication import ReplicationLost, ReplicationStream, SlotInUse

log = logging.getLogger(__name__)

_RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)


class PostgresStreamingSource:
    """Streams one slot into ``decoder``. Thread: the task thread; ``stopping`` is set by a control
    thread to cut waits short."""

    def __init__(self, cfg: PostgresCdcConfig, decoder: ChangeDecoder, stopping: threading.Event) -> None:
        self.cfg = cfg
        self.decoder = decoder
        self.stopping = stopping
        self.stream = ReplicationStream(cfg.conninfo(replication=True), cfg.slot_name, cfg.publication_name)
        #: The position the task confirmed (everything before it is in Kafka): the slot's flush position.
        self.flushed = 0
        self.next_status = time.monotonic() + cfg.status_update_interval_ms / 1000
        self.failures = 0
        self.slot_refusals = 0  # consecutive "slot is active for another PID" refusals

    @property
    def is_open(self) -> bool:
        return self.stream.is_open

    def open(self) -> None:
        """Start streaming after what was handed out: replayed events up to it are skipped."""
        cfg, decoder = self.cfg, self.decoder
        decoder.resume_from(*decoder.position)
        decoder.in_txn = False
        self.stream.open(0)
        self.slot_refusals = 0
        log.info("Streaming from slot %s (publication %s)", cfg.slot_name, cfg.publication_name)

    def read(self) -> None:
        """Read messages until a full batch, or the poll interval ends with nothing (more) to read."""
        cfg, decoder, stream = self.cfg, self.decoder, self.stream
        limit = cfg.max_batch_size
        deadline = time.monotonic() + cfg.poll_interval_ms / 1000
        read, handle, fetch = stream.read, decoder.handle, stream.buffered_reader()
        stopping = self.stopping
        records, encoded = decoder.records, decoder.encoded
        outbox = decoder.outbox
        while len(records) + len(encoded) < limit and not outbox:
            nbytes, data = fetch(1)  # a message libpq already has, with no Python call in between
            if nbytes <= 0:
                data = read(0)
            if data is None:
                if (records or encoded) and not decoder.in_txn:
                    return  # return what we have rather than wait
                remaining = deadline - time.monotonic()
                if remaining <= 0 or stopping.is_set():
                    return
                data = read(min(remaining, 0.2))
                if data is None:
                    continue
            tag = data[0]
            if tag == 119:  # w: XLogData
                handle(data)
                records, encoded = decoder.records, decoder.encoded
            elif tag == 107:  # k: primary keepalive
                wal_end = int.from_bytes(data[1:9], "big")
                stream.received_lsn = max(stream.received_lsn, wal_end)
                decoder.keepalive(wal_end)
                if data[17]:
                    stream.send_status(max(stream.received_lsn, self.flushed), self.flushed)
                if not records:
                    # Nothing pending: report the keepalive's position as written so the server
                    # keeps telling us where WAL ends (the basis of an idle slot's progress).
                    stream.received_lsn = wal_end

    def status_due(self) -> bool:
        return time.monotonic() >= self.next_status

    def send_status(self) -> None:
        """A standby status update with the confirmed position; the next one is due an interval later."""
        stream = self.stream
        self.next_status = time.monotonic() + self.cfg.status_update_interval_ms / 1000
        if stream.is_open:
            try:
                stream.send_status(max(stream.received_lsn, self.flushed), self.flushed)
            except ReplicationLost as exc:
                log.warning("Standby status update failed: %s", exc)

    def confirm(self, lsn: int) -> None:
        """Everything before ``lsn`` is in Kafka and its offsets are stored: the slot may move there."""
        if lsn > self.flushed:
            self.flushed = lsn
            self.send_status()

    def slot_in_use(self, exc: SlotInUse) -> None:
        """Another connection holds the slot: retry ``slot.max.retries`` times ``slot.retry.delay.ms``
        apart (Debezium's keys), then fail the task."""
        cfg = self.cfg
        self.slot_refusals += 1
        holder = f"PID {exc.pid}" if exc.pid is not None else "another process"
        if self.slot_refusals > cfg.slot_max_retries:
            raise ConnectError(
                f"Replication slot {exc.slot!r} is held by another connection ({holder}); gave up after "
                f"{self.slot_refusals} attempts {cfg.slot_retry_delay_ms} ms apart (slot.max.retries="
                f"{cfg.slot_max_retries}, slot.retry.delay.ms={cfg.slot_retry_delay_ms}). Stop the other reader "
                f"(SELECT pg_terminate_backend({exc.pid if exc.pid is not None else '<pid>'})) or give this "
                "connector a slot.name of its own."
            ) from exc
        log.warning(
            "Replication slot %s is active for %s; retry %d of %d in %d ms",
            exc.slot,
            holder,
            self.slot_refusals,
            cfg.slot_max_retries,
            cfg.slot_retry_delay_ms,
        )
        self.stopping.wait(cfg.slot_retry_delay_ms / 1000)

    def lost(self, exc: Exception) -> float:
        """The connection failed: close it; how long to wait before reconnecting (backing off)."""
        self.stream.close()
        self.failures += 1
        delay = _RECONNECT_BACKOFF_S[min(self.failures - 1, len(_RECONNECT_BACKOFF_S) - 1)]
        log.warning(
            "PostgreSQL connection lost (%s); reconnecting in %.1fs",
            str(exc).strip().splitlines()[0] if str(exc) else exc,
            delay,
        )
        return delay

    def close(self) -> None:
        """Close the replication connection (any thread: a blocked read fails promptly)."""
        self.stream.close()
