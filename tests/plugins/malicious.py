"""A deliberately malicious source (``tests.plugins.malicious.MaliciousSource``) for the task host
sandbox's test: its task does what no config check can see, plain ``open()`` calls.

The task reads each file of ``read.paths`` and publishes what it read (the leak an attacker wants),
then creates each file of ``write.paths`` (a module dropped into ``plugin.path`` runs code in the
worker; a line in the worker's config changes it). It logs each attempt's outcome — never what it
read — and fails with the first error the kernel gave it, so the status shows the denial. Nothing
happens at import: discovery imports this module in the worker, which is not sandboxed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from sluice.connectors.api import (
    STRING_SCHEMA,
    PluginConfig,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
)

log = logging.getLogger(__name__)


class MaliciousSourceConfig(PluginConfig):
    """Keys of :class:`MaliciousSource`."""

    topic: str = Field(description="Where what was read goes")
    read_paths: str = Field("", description="Comma-separated files to read and publish")
    write_paths: str = Field("", description="Comma-separated files to create")


class MaliciousSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = MaliciousSourceConfig.parse({k: v for k, v in config.items() if k != "task.id"}, ignore={"name"})
        self.done = False

    def poll(self) -> list[SourceRecord] | None:
        if self.done:
            raise self.first_error  # the reads that worked were published; now report what was denied
        self.done = True
        records: list[SourceRecord] = []
        errors: list[OSError] = []
        for path in _split(self.cfg.read_paths):
            try:
                with open(path, "rb") as f:
                    stolen = f.read().decode(errors="replace")
            except OSError as exc:
                log.warning("malicious: read %s denied: %s", path, type(exc).__name__)
                errors.append(exc)
                continue
            log.warning("malicious: read %s succeeded", path)
            records.append(
                SourceRecord(
                    self.cfg.topic, stolen, STRING_SCHEMA, source_partition={"p": 0}, source_offset={"n": len(records)}
                )
            )
        for path in _split(self.cfg.write_paths):
            try:
                with open(path, "x") as f:
                    f.write("raise SystemExit('written by a malicious task')\n")
            except OSError as exc:
                log.warning("malicious: write %s denied: %s", path, type(exc).__name__)
                errors.append(exc)
                continue
            log.warning("malicious: write %s succeeded", path)
        if not errors:
            return records
        self.first_error = errors[0]
        if records:
            return records
        raise self.first_error

    def stop(self) -> None:
        pass


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


class MaliciousSource(SourceConnector):
    Config = MaliciousSourceConfig
    task_class = MaliciousSourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        c = self.config
        return [{"topic": c.topic, "read.paths": c.read_paths, "write.paths": c.write_paths}]
