"""The backfill job kinds this worker can run, found through the ``sluice.backfill_kinds`` entry points.

The worker never imports a kind's module by name (the ``runtime-no-concrete-connectors`` import
contract): the JDBC and S3 kinds reuse the connectors' code, and a third-party distribution adds a
kind as it adds a connector. :func:`installed_kinds` reads the entry points once per process (a
worker restarts to see a newly installed kind, as for connectors); each kind is loaded the first
time a spec of it is checked or run. A kind that fails to load (a broken or incompatible package) is
logged once and refused with the reason; the other kinds are not affected.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.kinds import ENTRY_POINT_GROUP, BackfillKind, TopicOwnerLookup

log = logging.getLogger(__name__)


class BackfillKindRegistry:
    """Job kinds by name, each loaded from its entry point when first asked for. Thread-safe."""

    def __init__(self, entry_points: Iterable[EntryPoint]) -> None:
        self._entry_points: dict[str, EntryPoint] = {}
        for ep in entry_points:
            first = self._entry_points.setdefault(ep.name, ep)
            if first is not ep:
                log.warning(
                    "Backfill job kind %s is declared twice (%s, %s); the first is used", ep.name, first.value, ep.value
                )
        self._loaded: dict[str, BackfillKind] = {}
        self._broken: dict[str, str] = {}  # kind → why it did not load
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        """Every declared kind, loaded or not."""
        return sorted(self._entry_points)

    def get(self, name: str) -> BackfillKind:
        """The kind ``name``. Raises :class:`ConfigError` on ``kind`` when no entry point declares it
        (``kind: unknown job kind 'x'``) or when it cannot be loaded (with the reason)."""
        with self._lock:
            kind = self._loaded.get(name)
            if kind is None:
                kind = self._load(name)
                self._loaded[name] = kind
            return kind

    def _load(self, name: str) -> BackfillKind:
        entry_point = self._entry_points.get(name)
        if entry_point is None:
            raise ConfigError(f"kind: unknown job kind {name!r}", key="kind")
        problem = self._broken.get(name)
        if problem is None:
            try:
                kind = entry_point.load()
            except Exception as exc:  # noqa: BLE001 - a broken plugin is reported and refused, not fatal
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if isinstance(kind, BackfillKind) and kind.name == name:
                    return kind
                problem = f"{entry_point.value} is not a BackfillKind named {name!r}"
            log.error("Cannot load backfill job kind %s from entry point %s: %s", name, entry_point.value, problem)
            self._broken[name] = problem
        raise ConfigError(f"kind: job kind {name!r} cannot be loaded on this worker ({problem})", key="kind")

    def source_url_problem(self, kind: str, url: str) -> str | None:
        """What ``kind`` says of ``url`` as a job's source (``None``: accepted). A kind that cannot be
        loaded cannot vouch for a URL, so the URL is refused."""
        try:
            check = self.get(kind).source_url_problem
        except ConfigError as exc:
            return f"cannot be checked: {exc}"
        return check(url) if check is not None else None

    def topic_owner(self, kind: str) -> TopicOwnerLookup | None:
        """The hand-off guard's lookup of ``kind`` (``None`` when it has none or cannot be loaded)."""
        try:
            return self.get(kind).topic_owner
        except ConfigError:
            return None


@functools.cache
def installed_kinds() -> BackfillKindRegistry:
    """The kinds the installed distributions declare, read once per process."""
    return BackfillKindRegistry(entry_points(group=ENTRY_POINT_GROUP))
