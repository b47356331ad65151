"""What ``sluice apply`` would change on a cluster: connectors to create, update, delete, keys that differ.

The worker hands configs back with secrets masked (:mod:`sluice.worker.config.masking`), so a literal secret in a
file cannot be compared with the one stored. Such a key counts as unchanged and is listed in
:attr:`ConnectorChange.unverifiable`; a config-provider placeholder (``${file:...}``) is returned as
written and compares exactly, which is why files should hold placeholders rather than secrets.
Re-applying an exported file works too: a ``[hidden]`` value tells the worker to keep what it has.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.worker.config.masking import MASK, mask_config


class Action(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    UNCHANGED = "unchanged"
    #: On the cluster, not in the files, and no ``--prune``: left alone.
    UNMANAGED = "unmanaged"


@dataclass(frozen=True)
class KeyChange:
    """One key whose value differs; ``None`` stands for an absent key."""

    key: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class ConnectorChange:
    """What happens to one connector."""

    name: str
    action: Action
    keys: tuple[KeyChange, ...] = ()
    #: Keys the worker returned masked while the file holds a literal value: not comparable.
    unverifiable: tuple[str, ...] = ()
    secret_keys: frozenset[str] = field(default=frozenset(), compare=False)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def diff_config(current: Mapping[str, Any], desired: Mapping[str, str]) -> tuple[list[KeyChange], list[str]]:
    """The keys that differ between the worker's (masked) config and the file's, and the keys that
    cannot be compared because the worker masked them. ``name`` is the connector's and never differs."""
    changes: list[KeyChange] = []
    unverifiable: list[str] = []
    for key in sorted(set(current) | set(desired)):
        if key == "name":
            continue
        old, new = _text(current.get(key)), desired.get(key)
        if old == new:
            continue
        if old == MASK and new is not None and mask_config({key: new}, {key})[key] == MASK:
            # A secret the worker will not show against a literal one (or [hidden], from an export):
            # they cannot be compared. A placeholder is never masked, so it does differ from this.
            if new != MASK:
                unverifiable.append(key)
            continue
        if new == MASK and old is not None:
            continue  # [hidden] in a file means "keep what the worker has"
        changes.append(KeyChange(key, old, new))
    return changes, unverifiable


def plan_changes(
    desired: Mapping[str, Mapping[str, str]],
    current: Mapping[str, Mapping[str, Any]],
    *,
    prune: bool,
    secret_keys: Mapping[str, Collection[str]] | None = None,
) -> list[ConnectorChange]:
    """One :class:`ConnectorChange` per connector in ``desired`` or ``current``, sorted by name.

    ``desired`` and ``current`` map connector names to configs; ``secret_keys`` names, per
    connector, the keys its plugin types as passwords (added to the conventional secret names).
    """
    secrets = secret_keys or {}
    plan: list[ConnectorChange] = []
    for name in sorted(set(desired) | set(current)):
        keys = frozenset(secrets.get(name, ()))
        if name not in current:
            added = tuple(KeyChange(k, None, v) for k, v in sorted(desired[name].items()) if k != "name")
            plan.append(ConnectorChange(name, Action.CREATE, added, secret_keys=keys))
        elif name not in desired:
            action = Action.DELETE if prune else Action.UNMANAGED
            plan.append(ConnectorChange(name, action, secret_keys=keys))
        else:
            changes, unverifiable = diff_config(current[name], desired[name])
            action = Action.UPDATE if changes else Action.UNCHANGED
            plan.append(ConnectorChange(name, action, tuple(changes), tuple(unverifiable), keys))
    return plan


def hidden_values_without_source(desired: Mapping[str, str], current: Mapping[str, Any] | None) -> list[str]:
    """Keys a file sets to ``[hidden]`` that the worker has no value for: applying would store the mask itself."""
    stored = current or {}
    return sorted(k for k, v in desired.items() if v == MASK and k not in stored)


# --- rendering -----------------------------------------------------------------------------------

_SIGN = {Action.CREATE: "+", Action.UPDATE: "~", Action.DELETE: "-", Action.UNCHANGED: "=", Action.UNMANAGED: "?"}


def _shown(key: str, value: str | None, secret_keys: Collection[str]) -> str:
    if value is None:
        return "(unset)"
    return str(mask_config({key: value}, secret_keys)[key])


def _key_line(change: KeyChange, secret_keys: Collection[str]) -> str:
    old, new = _shown(change.key, change.old, secret_keys), _shown(change.key, change.new, secret_keys)
    if change.old is None:
        return f"      + {change.key} = {new}"
    if change.new is None:
        return f"      - {change.key} (was {old})"
    if old == new:  # two different secrets, both masked
        return f"      ~ {change.key}: {old} (changed)"
    return f"      ~ {change.key}: {old} -> {new}"


def render_plan(plan: Collection[ConnectorChange], *, detailed: bool, sources: Mapping[str, str] | None = None) -> list[str]:
    """Lines that show ``plan``; with ``detailed`` each changed key too, secrets masked."""
    lines: list[str] = []
    origin = sources or {}
    for change in plan:
        where = f"  ({origin[change.name]})" if change.name in origin else ""
        if change.action is Action.UNMANAGED:
            lines.append(f"  ? {change.name}: on the worker, not in the files (kept; --prune deletes it)")
            continue
        count = f", {len(change.keys)} key(s)" if change.action is Action.UPDATE else ""
        lines.append(f"  {_SIGN[change.action]} {change.name}: {change.action.value}{count}{where}")
        if detailed and change.action in (Action.CREATE, Action.UPDATE):
            lines.extend(_key_line(k, change.secret_keys) for k in change.keys)
        for key in change.unverifiable:
            lines.append(
                f"      ! {key}: the worker hides this secret, so a change to it is not seen "
                "(use a ${file:...} or ${env:...} placeholder)"
            )
    counts = {a: sum(1 for c in plan if c.action is a) for a in Action}
    lines.append(
        f"Plan: {counts[Action.CREATE]} to create, {counts[Action.UPDATE]} to update, "
        f"{counts[Action.DELETE]} to delete, {counts[Action.UNCHANGED]} unchanged"
        + (f", {counts[Action.UNMANAGED]} not managed" if counts[Action.UNMANAGED] else "")
        + "."
    )
    return lines
