"""Offsets changes for a database source's one Debezium partition, ``{"server": <topic.prefix>}``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sluice.connectors.api import ConfigError, offset_pairs


def server_offsets(
    config: Mapping[str, Any], offsets: Mapping[Any, Any] | Iterable[tuple[Any, Any]]
) -> Iterator[Mapping[str, Any]]:
    """The offsets of an offsets change (``alter_offsets``) to check further, resets (``null``)
    left out; raises :class:`ConfigError` for a partition that is not ``{"server": <this
    connector's topic.prefix>}`` or an offset that is not an object."""
    prefix = config.get("topic.prefix")
    for partition, offset in offset_pairs(offsets):
        if not isinstance(partition, Mapping) or set(partition) != {"server"}:
            raise ConfigError(f"Partition {partition!r} must be an object with the single key 'server'")
        if prefix is not None and partition["server"] != prefix:
            raise ConfigError(f"Partition server {partition['server']!r} is not this connector's topic.prefix {prefix!r}")
        if offset is None:
            continue
        if not isinstance(offset, Mapping):
            raise ConfigError(f"Offset {offset!r} must be an object")
        yield offset
