"""Offsets of a connector over REST (KIP-875): read any time, altered or reset only while STOPPED."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sluice.connectors.api import ConfigError, NotFoundError, SinkConnector, SourceConnector
from sluice.plugins import PluginKind
from sluice.worker.config.connector_scope import effective_group
from sluice.worker.herder.api import BadRequest
from sluice.worker.herder.calls import NOT_STOPPED_MESSAGE, call_with_timeout, offsets_message
from sluice.worker.herder.offset_access import SinkOffsets, SourceOffsets, parse_changes, sink_changes
from sluice.worker.herder.plugins import PluginCatalog
from sluice.worker.herder.stores.config_store import ConfigStore
from sluice.worker.herder.strategy import AssignmentStrategy
from sluice.worker.status import TargetState
from sluice.worker.worker import ValidatedConnector, Worker

log = logging.getLogger(__name__)


class OffsetRequests:
    """A source connector's offsets live in the worker's offset store, a sink's in its consumer
    group; an alter or reset asks the connector first (its ``alter_offsets`` may refuse)."""

    def __init__(
        self, worker: Worker, store: ConfigStore, strategy: AssignmentStrategy, catalog: PluginCatalog
    ) -> None:
        self.worker = worker
        self.catalog = catalog
        self.store = store
        self.strategy = strategy

    def _sink_offsets(self) -> SinkOffsets:
        config = self.worker.config
        return SinkOffsets({"bootstrap.servers": config.bootstrap_servers, **config.prefixed("admin.")})

    @staticmethod
    def _group(raw: Mapping[str, Any]) -> str:
        # Never a group outside the connector's namespace, even from a config stored before that rule.
        return effective_group(raw)

    def _source_offsets(self, validated: ValidatedConnector) -> SourceOffsets:
        # The connector's own offsets topic (offsets.storage.topic) and the worker's, caught up.
        self.worker.use_offsets_topic(validated)
        self.strategy.catch_up_offsets()
        return SourceOffsets(self.worker.offset_store)

    def get(self, name: str) -> list[dict[str, Any]]:
        """``[{"partition": {...}, "offset": {...}}]``."""
        raw = self.store.snapshot().connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        if self.catalog.connector_type(raw) == PluginKind.SINK.value:
            return self._sink_offsets().get(self._group(raw))
        return self._source_offsets(self.worker.validate(raw)).get(name)

    def _stopped(self, name: str) -> ValidatedConnector:
        snapshot = self.store.snapshot()
        raw = snapshot.connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        if snapshot.target_state(name) is not TargetState.STOPPED:
            raise BadRequest(NOT_STOPPED_MESSAGE.format(name=name))
        return self.worker.validate(raw)

    def alter(self, name: str, entries: list[dict[str, Any]]) -> str:
        changes = parse_changes(entries)
        validated = self._stopped(name)
        if validated.plugin.kind is PluginKind.SINK:
            by_partition = sink_changes(changes)
            checked = self._ask_connector(validated, by_partition)
            self._sink_offsets().alter(self._group(validated.raw), by_partition)
        else:
            checked = self._ask_connector(validated, changes)
            self._source_offsets(validated).alter(name, changes)
        log.info("Altered the offsets of %d partition(s) of connector %s", len(changes), name)
        return offsets_message("altered", checked)

    def reset(self, name: str) -> str:
        validated = self._stopped(name)
        if validated.plugin.kind is PluginKind.SINK:
            sink = self._sink_offsets()
            group = self._group(validated.raw)
            current = sink_changes([(e["partition"], None) for e in sink.get(group)])
            checked = self._ask_connector(validated, current)
            sink.reset(group)
        else:
            source = self._source_offsets(validated)
            checked = self._ask_connector(validated, [(e["partition"], None) for e in source.get(name)])
            source.reset(name)
        log.info("Reset the offsets of connector %s", name)
        return offsets_message("reset", checked)

    def _ask_connector(self, validated: ValidatedConnector, offsets: Any) -> bool:
        """The connector's ``alter_offsets`` veto; a ``ConfigError`` from it is the user's 400."""
        connector = self.worker.new_connector(validated)
        assert isinstance(connector, (SourceConnector, SinkConnector))
        name = validated.common.name
        try:
            return bool(
                call_with_timeout(
                    lambda: connector.alter_offsets(validated.raw, offsets), f"alter offsets of {name}", name
                )
            )
        except ConfigError as exc:
            raise BadRequest(f"The connector {name} refused the offsets: {exc}") from exc
