"""Connector keys a connector does not define: accepted, kept and named, as Kafka Connect does.

Connect hands a connector every key of its config and the connector ignores what it does not know,
so configs written for Debezium or Confluent carry keys a given implementation never reads.
Refusing them would make such a config undeployable; silently dropping them would hide a typo. So
the worker splits a connector's own keys once (:func:`split_own_keys`): the keys its model defines
are validated and handed to it, the others are stored and returned as given, logged once when the
connector is created, and listed as warnings — with the reason when the anchor defines the key
(:attr:`Connector.unimplemented_keys`, :data:`COMMON_UNIMPLEMENTED`), with a "did you mean" when it
is close to a key that is honoured — by the validate endpoint.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from sluice.connectors.api import Connector, dotted
from sluice.worker.config.models import ConnectorConfig
from sluice.worker.errors import CONNECTOR_ERRORS_KEYS

#: Connect's own connector keys (``ConnectorConfig``, ``SourceConnectorConfig``) Sluice accepts and
#: does not honour, with the reason. (The exactly-once keys of KIP-618 are honoured common keys:
#: :mod:`sluice.worker.config.exactly_once`.)
COMMON_UNIMPLEMENTED: Mapping[str, str] = {
    "connector.plugin.version": "one version of each plugin is installed; multi-version plugins (KIP-891) are not implemented",
}

# Below this difflib ratio a key is not offered as the one the user meant.
_SUGGESTION_CUTOFF = 0.75


def model_keys(model: type[BaseModel]) -> set[str]:
    """Every spelling a config model accepts: the dotted aliases and the attribute names."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        keys.add(info.alias or dotted(name))
    return keys


def split_own_keys(
    model: type[BaseModel], own: Mapping[str, Any], common: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``own`` split into ``(keys the model defines, keys it does not)``.

    ``common`` (the keys under the runtime's prefixes) adds the few connector keys that live under
    one of them (Debezium's ``errors.max.retries``) to the second part when the model does not
    define them.
    """
    known_keys = model_keys(model)
    prefixes = tuple(getattr(model, "prefixed_keys", {}))

    def owned(key: str) -> bool:
        return key in known_keys or (bool(prefixes) and key.startswith(prefixes))

    known = {k: v for k, v in own.items() if owned(k)}
    unknown = {k: v for k, v in own.items() if not owned(k)}
    unknown.update({k: v for k, v in (common or {}).items() if k in CONNECTOR_ERRORS_KEYS and k not in known_keys})
    return known, unknown


def _reason(key: str, reasons: Mapping[str, str]) -> str | None:
    """The reason for ``key``; a table key ending in ``*`` covers every key with that prefix."""
    if key in reasons:
        return reasons[key]
    for pattern, reason in reasons.items():
        if pattern.endswith("*") and key.startswith(pattern[:-1]):
            return reason
    return None


def _honoured_keys(connector_cls: type[Connector]) -> list[str]:
    own = [info.alias or dotted(name) for name, info in connector_cls.Config.model_fields.items()]
    return sorted(set(own) | ConnectorConfig.own_keys())


def suggestion(key: str, connector_cls: type[Connector]) -> str | None:
    """The honoured key closest to ``key`` (a likely typo of it), or None."""
    matches = difflib.get_close_matches(key, _honoured_keys(connector_cls), n=1, cutoff=_SUGGESTION_CUTOFF)
    return matches[0] if matches else None


def ignored_key_warnings(connector_cls: type[Connector], keys: Iterable[str]) -> dict[str, str]:
    """``{key: why it is ignored}`` for keys the connector's model does not define."""
    plugin = connector_cls.__name__
    reasons = {**COMMON_UNIMPLEMENTED, **connector_cls.unimplemented_keys}
    warnings: dict[str, str] = {}
    for key in sorted(keys):
        reason = _reason(key, reasons)
        if reason is not None:
            warnings[key] = f'"{key}" is accepted but not honoured by {plugin}: {reason}'
            continue
        message = f'"{key}" is not a configuration of {plugin}; it is kept but ignored'
        close = suggestion(key, connector_cls)
        if close is not None:
            message += f' (did you mean "{close}"?)'
        warnings[key] = message
    return warnings
