"""``${provider:path:key}`` references in a backfill spec, resolved with the worker's config
providers (``config.providers``), as a connector's config is.

The stored spec keeps the reference, never the value: it is resolved when a run starts (so a
rotated secret is read anew by the next run) and checked when a spec is submitted or validated,
so an undeclared provider or a missing key is refused then, named by its path. Every value found
is registered as a secret of the worker, masked wherever the worker shows text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.worker.backfill.models import AnySpec, SpecProblem, parse_spec, spec_to_json

#: The worker's :meth:`ConfigProviders.resolve <sluice.worker.config.providers.ConfigProviders.resolve>`.
Resolver = Callable[[Mapping[str, Any]], dict[str, Any]]


def _strings(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every string in a spec's JSON with its path (one JSON key per level)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, (*path, str(key)))


def _resolve(raw: Mapping[str, Any], resolve: Resolver) -> dict[str, Any]:
    """``raw`` with its references replaced; raises :class:`ConfigError` whose ``key`` is the dotted path."""
    paths = {".".join(path): path for path, text in _strings(raw) if "${" in text}
    if not paths:
        return dict(raw)
    flat = {key: _get(raw, path) for key, path in paths.items()}
    values = resolve(flat)
    out: dict[str, Any] = _copy(raw)
    for key, path in paths.items():
        _set(out, path, values[key])
    return out


def _get(raw: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = raw
    for part in path:
        value = value[part]
    return value


def _set(raw: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        raw = raw[part]
    raw[path[-1]] = value


def _copy(value: Any) -> Any:
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def reference_problems(spec: AnySpec, resolve: Resolver) -> list[SpecProblem]:
    """Why the references of ``spec`` cannot be resolved now (none: they can)."""
    try:
        _resolve(spec_to_json(spec), resolve)
    except ConfigError as exc:
        key = exc.key or "spec"
        path = next((p for p, _ in _strings(spec_to_json(spec)) if ".".join(p) == key), (key,))
        return [SpecProblem(path, str(exc))]
    return []


def resolved_spec(spec: AnySpec, resolve: Resolver | None) -> AnySpec:
    """``spec`` with every reference replaced by its value, for one run. Raises :class:`ConfigError`."""
    if resolve is None:
        return spec
    raw = spec_to_json(spec)
    done = _resolve(raw, resolve)
    return spec if done == raw else parse_spec(done)
