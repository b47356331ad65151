"""Outages of the systems a task depends on: bookkeeping, the degraded status, and quiet logs.

A task that cannot reach Kafka or its external system keeps retrying and stays ``RUNNING`` (as in
Kafka Connect, whose clients expect nothing else), but an outage must never be silent:

* the log names it once when it starts (WARNING), repeats a summary with the retry count at most
  every :data:`SUMMARY_INTERVAL_S` while it lasts, and names its end once (INFO) — instead of one
  ERROR line per failed connection attempt;
* once it has lasted ``task.degraded.after.ms``, the task's status carries a degraded ``trace``
  (``Degraded since <UTC time>: cannot reach <system> (<reason>); <n> retries``), the way Connect
  reports problems; recovery clears it.

A task may also report a degraded state of its own (``connectors.api.metrics.ReportsDegraded``:
a replication slot holding too much WAL, say): :meth:`OutageTracker.notice` puts its text in the
same trace at once (the task applied its own bound), and takes it out when the task withdraws it.

:class:`OutageTracker` holds one task's outages (one per system); the task runners feed it from
librdkafka's error and statistics callbacks and from the task's own ``RetriableError``\\ s.
:class:`LibrdkafkaLog` is the ``logger`` handed to librdkafka: it keeps librdkafka's per-retry
connection lines out of the log (where a tracker reports the outage) or throttles them.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError

log = logging.getLogger(__name__)

#: How often a lasting outage is summarised in the log (and its status trace refreshed).
SUMMARY_INTERVAL_S = 60.0

#: ``task.degraded.after.ms`` when the worker does not set it.
DEFAULT_DEGRADED_AFTER_MS = 10_000


class DegradedNotice(Exception):
    """A degraded status ``trace`` on its way to the status store.

    The herders turn errors into status traces with their secrets blanked out; a notice goes the
    same way, its text taken as it is (``remote_trace``, as for a task process's failure).
    """

    def __init__(self, trace: str) -> None:
        super().__init__(trace)
        self.remote_trace = trace


@dataclass
class _Outage:
    system: str
    reason: str
    since_wall: float  # time.time() of the first failure, for the trace
    since: float  # monotonic
    retries: int = 0
    announced: bool = False
    next_summary: float = 0.0
    #: The count the trace shows: it moves with the summaries, not with every retry, because
    #: each change of the trace is a status write (a record in a cluster's status topic).
    shown_retries: int = 0


class OutageTracker:
    """One task's view of the systems it cannot reach.

    ``failure(system, reason)`` counts a failed attempt and opens an outage; ``reached(system)``
    closes it; ``tick()`` (called at least every second or so while the task runs) escalates an
    outage that lasted ``degraded_after_s`` and writes the periodic summary. An unconfirmed
    failure (a dropped Kafka connection that may be re-established at once) opens an outage
    silently; :meth:`confirm` announces it, :meth:`reached` closes it without a log line.

    ``on_degraded(trace)`` is called when the task becomes degraded and when its trace changes
    (another system, a new summary); ``on_recovered()`` when the last degraded outage ends. Both
    run on the caller's thread (the task's), never under the tracker's lock.
    """

    def __init__(
        self,
        degraded_after_s: float,
        on_degraded: Callable[[str], None],
        on_recovered: Callable[[], None],
        *,
        summary_interval_s: float = SUMMARY_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.degraded_after_s = degraded_after_s
        self._on_degraded = on_degraded
        self._on_recovered = on_recovered
        self._summary_interval_s = summary_interval_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._outages: dict[str, _Outage] = {}
        self._reported: str | None = None  # the degraded trace last handed to on_degraded
        self._notices: dict[str, tuple[float, str]] = {}  # the task's own: source → (since, text)

    # -- what the runners report ------------------------------------------------------------------

    def failure(self, system: str, reason: str, *, confirmed: bool = True) -> None:
        """A failed attempt to reach ``system``; ``reason`` says why (``Connection refused``)."""
        now = self._clock()
        with self._lock:
            outage = self._outages.get(system)
            if outage is None:
                outage = self._outages[system] = _Outage(system, reason, self._wall_clock(), now)
            outage.retries += 1
            outage.reason = reason
            if confirmed:
                self._announce(outage, now)
            else:
                log.debug("Cannot reach %s: %s", system, reason)
        self.tick()

    def confirm(self, system: str) -> None:
        """The open outage of ``system`` is real (nothing of it is reachable): announce it."""
        with self._lock:
            outage = self._outages.get(system)
            if outage is not None:
                self._announce(outage, self._clock())
        self.tick()

    def reached(self, system: str) -> None:
        """``system`` answered again. Cheap when it never failed (called on hot paths)."""
        if system not in self._outages:
            return
        with self._lock:
            outage = self._outages.pop(system, None)
            if outage is None:
                return
            lasted = self._clock() - outage.since
            if outage.announced:
                log.info("Reached %s again after %.1f s (%d retries)", system, lasted, outage.retries)
            else:
                log.debug("Reached %s again after %.1f s", system, lasted)
        self.tick()

    def is_open(self, system: str) -> bool:
        return system in self._outages

    def notice(self, source: str, text: str | None) -> None:
        """The task reports itself degraded (``text``) or no longer (``None``); ``source`` tells
        its notices apart. Cheap when nothing changes (called on the task's metrics cadence)."""
        known = self._notices.get(source)
        if (known[1] if known is not None else None) == text:
            return
        with self._lock:
            if text is None:
                self._notices.pop(source, None)
            else:
                self._notices[source] = (known[0] if known is not None else self._wall_clock(), text)
        self.tick()

    # -- escalation -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Escalate outages that lasted the bound, summarise lasting ones, report trace changes."""
        now = self._clock()
        with self._lock:
            for outage in self._outages.values():
                if outage.announced and now >= outage.next_summary:
                    outage.next_summary = now + self._summary_interval_s
                    outage.shown_retries = outage.retries
                    log.warning(
                        "Still cannot reach %s after %.0f s (%d retries): %s",
                        outage.system,
                        now - outage.since,
                        outage.retries,
                        outage.reason,
                    )
            trace = self._trace_locked(now)
            if trace == self._reported:
                return
            self._reported = trace
        if trace is None:
            self._on_recovered()
        else:
            self._on_degraded(trace)

    @property
    def degraded(self) -> bool:
        return self._reported is not None

    @property
    def trace(self) -> str | None:
        """The degraded trace last reported, or ``None`` while the task is not degraded."""
        return self._reported

    def _announce(self, outage: _Outage, now: float) -> None:
        if outage.announced:
            return
        outage.announced = True
        # The first summary comes when the task turns degraded, then every summary interval.
        outage.next_summary = outage.since + self.degraded_after_s
        log.warning(
            "Cannot reach %s: %s; retrying (the status shows the task degraded after %.0f s)",
            outage.system,
            outage.reason,
            self.degraded_after_s,
        )

    def _trace_locked(self, now: float) -> str | None:
        lines = []
        for outage in sorted(self._outages.values(), key=lambda o: o.since):
            if not outage.announced or now - outage.since < self.degraded_after_s:
                continue
            since = _utc(outage.since_wall)
            lines.append(
                f"Degraded since {since}: cannot reach {outage.system} ({outage.reason}); {outage.shown_retries} retries"
            )
        for since_wall, text in self._notices.values():
            lines.append(f"Degraded since {_utc(since_wall)}: {text}")
        return "\n".join(lines) or None


def _utc(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- Kafka ----------------------------------------------------------------------------------------

#: librdkafka errors that mean a broker could not be reached (``_ALL_BROKERS_DOWN``: none could).
KAFKA_UNREACHABLE_CODES = frozenset({KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._ALL_BROKERS_DOWN})

#: ``statistics.interval.ms`` of task clients: how soon a Kafka outage is confirmed, or seen to end.
KAFKA_STATS_INTERVAL_MS = 1_000

_KAFKA_REASON = re.compile(r"failed: (?P<reason>.+?)(?: \(after \d+ms in state \w+.*\))?$")
_KAFKA_SUFFIX = re.compile(r" \(after \d+ms in state \w+.*\)$")


def kafka_system(bootstrap_servers: Any) -> str:
    """How a tracker and the log name Kafka: ``Kafka at <bootstrap.servers>``."""
    return f"Kafka at {bootstrap_servers}"


def kafka_reason(text: str) -> str:
    """The short reason of a librdkafka connection error (``Connection refused``)."""
    match = _KAFKA_REASON.search(text)
    if match:
        return match.group("reason")
    text = _KAFKA_SUFFIX.sub("", text)
    # "127.0.0.1:9092/bootstrap: Disconnected" → "Disconnected"
    head, sep, tail = text.partition(": ")
    return tail if sep and "/" in head else text


def any_broker_up(stats: dict[str, Any]) -> bool:
    """Whether librdkafka's statistics show a connection to some broker in state ``UP``."""
    brokers = stats.get("brokers") or {}
    return any(isinstance(b, dict) and b.get("state") == "UP" for b in brokers.values())


# -- librdkafka's own log lines ---------------------------------------------------------------------

#: librdkafka log lines about connections that failed or broke: one per retry while a broker is down.
_CONNECTIVITY = re.compile(
    r"Connect to .* failed|Connection refused|brokers are down|Disconnected|timed out|Failed to resolve|"
    r"Connection reset|No route to host|Network is unreachable|Broker transport failure",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")

_LIBRDKAFKA = logging.getLogger("librdkafka")


class LibrdkafkaLog:
    """The ``logger`` librdkafka writes through (it calls ``log(level, fmt, *args)``).

    With ``tracked=True`` (a task's client, whose :class:`OutageTracker` reports outages from the
    error callback) connection-failure lines go to DEBUG. Otherwise each distinct line (numbers
    ignored) is logged once, connection failures as WARNING rather than ERROR, and its repeats
    within ``interval_s`` are counted into the next one logged.
    """

    def __init__(
        self,
        *,
        tracked: bool = False,
        interval_s: float = SUMMARY_INTERVAL_S,
        target: logging.Logger = _LIBRDKAFKA,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tracked = tracked
        self._interval_s = interval_s
        self._target = target
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}  # line pattern → (when logged, repeats since)

    @property
    def name(self) -> str:
        return self._target.name

    def log(self, level: int, msg: str, *args: Any) -> None:
        text = msg % args if args else msg
        if not _CONNECTIVITY.search(text):
            self._target.log(level, "%s", text)
            return
        if self.tracked:
            self._target.debug("%s", text)
            return
        level = min(level, logging.WARNING)
        key = _DIGITS.sub("#", text)
        now = self._clock()
        with self._lock:
            logged, repeats = self._seen.get(key, (None, 0))
            if logged is not None and now - logged < self._interval_s:
                self._seen[key] = (logged, repeats + 1)
                quiet = True
            else:
                self._seen[key] = (now, 0)
                quiet = False
                if len(self._seen) > 1_000:  # broker addresses and ids vary: keep the table small
                    self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self._interval_s}
        if quiet:
            self._target.debug("%s", text)
        elif repeats:
            self._target.log(level, "%s (and %d more like it in the last %.0f s)", text, repeats, now - (logged or now))
        else:
            self._target.log(level, "%s", text)
