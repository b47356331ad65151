"""Refuse, at submit, a backfill into a CDC connector's topic that does not hand off with ``target.cdc``.

Without ``target.cdc`` a ``jdbc_to_topic`` backfill keys and shapes records as the JDBC source
does; in the topic of a PostgreSQL CDC connector every row then has two keys, usually in two
partitions (see :mod:`sluice.connectors.backfill.cdc_owner`). The guard asks the job kind's
``topic_owner`` hook (:class:`~sluice.connectors.backfill.kinds.BackfillKind`, found through its
entry point) about every connector the herder stores (running, paused or stopped) when such a spec
is submitted:

* a CDC connector without transforms writes the topic: HTTP 400 on ``target.topic``, pointing at
  ``target.cdc`` (which writes exactly what that connector's snapshot would);
* a CDC connector whose records pass through transforms writes it: accepted, with a warning in the
  response and the log. ``target.cdc`` refuses such a connector (it cannot reproduce the
  transforms), so a plain backfill is the only bulk load left, and it can be right: after
  ``ExtractNewRecordState`` with key schemas off, the stream's keys and rows are the bytes the
  plain backfill writes. Whether they match is the user's to check; the warning says so.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from sluice.connectors.api import NotFoundError
from sluice.connectors.backfill.kinds import TopicOwner
from sluice.worker.backfill.kind_registry import BackfillKindRegistry, installed_kinds
from sluice.worker.backfill.models import JdbcToTopicSpec
from sluice.worker.herder import BadRequest, Forbidden

log = logging.getLogger(__name__)


class ConnectorDirectory(Protocol):
    """The stored connectors the guard reads (the herder's read side)."""

    def connectors(self) -> list[str]: ...

    def connector_config(self, name: str) -> dict[str, Any]: ...

    def connector_topics(self, name: str) -> list[str]: ...


def refusal(topic: str, owner: TopicOwner) -> str:
    return (
        f"Invalid backfill spec: target.topic: {topic} is the topic of the PostgreSQL CDC connector "
        f"{owner.connector} ({owner.how}). Without target.cdc this backfill keys rows as the JDBC source "
        "does, so every row would have two keys in two partitions and consumers could apply its changes "
        f'out of order. Hand off with target.cdc instead: {{"name": "{owner.connector}", "config": '
        "<its config>}; it writes what the connector's snapshot would, into its topic (leave target.topic "
        "out), see docs/backfill.md"
    )


def warning(topic: str, owner: TopicOwner) -> str:
    return (
        f"target.topic: {topic} is written by the PostgreSQL CDC connector {owner.connector} ({owner.how}), "
        "whose transforms target.cdc cannot reproduce. This backfill's records match the stream's only if "
        "its keys and values are what those transforms make (e.g. ExtractNewRecordState with "
        "key.converter.schemas.enable=false on both); otherwise every row has two keys in two partitions"
    )


class HandoffGuard:
    """Checks a submitted spec against the connectors of ``directory``, with the lookup of the spec's
    job kind in ``kinds`` (default: the installed ones). Thread-safe (reads only)."""

    def __init__(self, directory: ConnectorDirectory, kinds: BackfillKindRegistry | None = None) -> None:
        self._directory = directory
        self._kinds = kinds if kinds is not None else installed_kinds()

    def check(self, spec: Any) -> list[str]:
        """Raise :class:`BadRequest` for a spec that should use ``target.cdc``; return the warnings."""
        if not isinstance(spec, JdbcToTopicSpec) or spec.target.cdc is not None or not spec.target.topic:
            return []
        owner_of = self._kinds.topic_owner(spec.kind)
        if owner_of is None:
            return []
        topic, warnings = spec.target.topic, []
        for name in self._directory.connectors():
            try:
                config = self._directory.connector_config(name)
            except NotFoundError:
                continue  # deleted meanwhile
            owner = owner_of(topic, spec.source.table, name, config, self._written(name))
            if owner is None:
                continue
            if not owner.transformed:
                raise BadRequest(refusal(topic, owner))
            text = warning(topic, owner)
            log.warning("Backfill %s: %s", spec.id, text)
            warnings.append(text)
        return warnings

    def _written(self, name: str) -> list[str]:
        try:
            return self._directory.connector_topics(name)
        except (Forbidden, NotFoundError):
            return []  # topic tracking off (or the connector gone): the naming rule still applies
