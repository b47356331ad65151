"""Connect's config metadata (``ConfigKeyInfo``) and per-key validation results (``ConfigInfos``).

Kafka Connect describes a plugin's settings with a ``ConfigDef``; Sluice plugins declare theirs as
pydantic models. This module translates one into the other, so ``GET
/connector-plugins/{plugin}/config`` and ``PUT .../config/validate`` answer with the exact JSON
shapes that Connect UIs and clients already parse.
"""

from __future__ import annotations

import logging
import threading
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from sluice.connectors.api import ConfigError, Connector, config_problems, dotted
from sluice.connectors.api.connectivity import classify_network_error
from sluice.plugins import PluginInfo, PluginKind
from sluice.worker.config.connector_keys import ignored_key_warnings, split_own_keys
from sluice.worker.config.exactly_once import SOURCE_ONLY_KEYS, exactly_once_problems, exactly_once_warnings
from sluice.worker.config.masking import MASK, mask_config, mask_text, secret_values
from sluice.worker.config.models import ConnectorConfig, split_connector_config
from sluice.worker.config.providers import has_placeholder

log = logging.getLogger(__name__)

COMMON_GROUP = "Common"

#: How long a connector's :meth:`~connectors.api.Connector.validate_connectivity` may take (the
#: request waits one second more, then reports a timeout).
CONNECTIVITY_TIMEOUT_S = 5.0

# Keys every connector has in Connect but only sinks use; sources don't list them.
_SINK_ONLY = {"topics", "topics.regex"}
# And the keys only sources use (KIP-618); sinks don't list them.
_SOURCE_ONLY = set(SOURCE_ONLY_KEYS)

#: The name a config without one is validated (and its secrets registered) under.
STAND_IN_NAME = "validation"


class ValidatedOwn(Protocol):
    """What the worker's full check of a connector config returns (its ``ValidatedConnector``):
    the connector's own keys as its ``Config`` model validated them, for the connectivity check."""

    @property
    def own(self) -> Any: ...


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X``; other unions keep their first non-None member."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(members[0]) if members else str
    return annotation


def config_type(key: str, annotation: Any) -> str:
    """The Connect ``ConfigDef.Type`` name of a field."""
    base = _unwrap(annotation)
    origin = typing.get_origin(base)
    if base is SecretStr:
        return "PASSWORD"
    if base is bool:
        return "BOOLEAN"
    if base is int:
        # Connect types durations and sizes as LONG; everything else integral fits an INT.
        return "LONG" if key.endswith((".ms", ".bytes")) else "INT"
    if base is float:
        return "DOUBLE"
    if base in (list, tuple, set) or origin in (list, tuple, set):
        return "LIST"
    if key.endswith((".class", "converter")):
        return "CLASS"
    return "STRING"


def _recommended(annotation: Any) -> list[str]:
    base = _unwrap(annotation)
    if typing.get_origin(base) is Literal:
        return [str(a) for a in typing.get_args(base)]
    return []


def _as_text(value: Any) -> str | None:
    """Connect shows defaults and values as strings (``true``, ``a,b``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, (list, tuple, set)):
        return ",".join(str(v) for v in value)
    return str(value)


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def key_info(key: str, info: FieldInfo, group: str | None, order: int) -> dict[str, Any]:
    """One ``ConfigKeyInfo`` from a model field; ``json_schema_extra`` may set importance/group/width."""
    extra = _extra(info)
    required = info.is_required()
    return {
        "name": key,
        "type": config_type(key, info.annotation),
        "required": required,
        "default_value": None if required else _as_text(info.get_default(call_default_factory=True)),
        "importance": str(extra.get("importance", "HIGH" if required else "MEDIUM")),
        "documentation": info.description or "",
        "group": extra.get("group", group),
        "order_in_group": order if extra.get("group", group) is not None else -1,
        "width": str(extra.get("width", "NONE")),
        "display_name": info.title or key,
        "dependents": list(extra.get("dependents", [])),
    }


def _model_keys(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    return [(info.alias or dotted(name), info) for name, info in model.model_fields.items()]


def _connector_class(plugin: PluginInfo) -> type[Connector]:
    return typing.cast(type[Connector], plugin.cls)


def _connector_fields(plugin: PluginInfo) -> list[tuple[dict[str, Any], FieldInfo]]:
    own = _model_keys(_connector_class(plugin).Config)
    own_names = {key for key, _ in own}
    result: list[tuple[dict[str, Any], FieldInfo]] = []
    order = 0
    for key, info in _model_keys(ConnectorConfig):
        if key in own_names or (key in _SINK_ONLY and plugin.kind is not PluginKind.SINK):
            continue
        if key in _SOURCE_ONLY and plugin.kind is not PluginKind.SOURCE:
            continue
        order += 1
        result.append((key_info(key, info, COMMON_GROUP, order), info))
    for order, (key, info) in enumerate(own, start=1):
        result.append((key_info(key, info, None, order), info))
    return result


def definitions(plugin: PluginInfo) -> list[dict[str, Any]]:
    """The ``ConfigKeyInfo`` list of a connector plugin: Connect's common keys, then its own."""
    return [d for d, _ in _connector_fields(plugin)]


def plugin_definitions(plugin: PluginInfo) -> list[dict[str, Any]]:
    """Definitions of any plugin kind: connectors get the common keys too, others only their model."""
    if plugin.kind in (PluginKind.SOURCE, PluginKind.SINK):
        return definitions(plugin)
    model = getattr(plugin.cls, "Config", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return [key_info(key, info, None, i) for i, (key, info) in enumerate(_model_keys(model), start=1)]


def _connect_message(key: str, message: str) -> str:
    """pydantic's words → Connect's, so existing tooling that greps them keeps working."""
    if message == "missing required configuration":
        return f'Missing required configuration "{key}" which has no default value.'
    if message == "unknown configuration key":
        return f'Configuration "{key}" is not defined by this connector (is it a typo?)'
    return message


def _attach(errors: dict[str, list[str]], problems: Mapping[str, str], keys: list[str], fallback: str) -> None:
    """Model-level errors have no field; give them to the first key their message names."""
    for key, message in problems.items():
        if key == "<config>":
            key = next((k for k in keys if f"{k} " in f"{message} " or f"'{k}'" in message), fallback)
        errors.setdefault(key, []).append(_connect_message(key, message))


def validate_config(
    plugin: PluginInfo,
    raw: Mapping[str, Any],
    full_check: typing.Callable[[Mapping[str, Any]], ValidatedOwn],
    resolve: typing.Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    *,
    exactly_once_enabled: bool = False,
    offsets_topics: bool = False,
) -> dict[str, Any]:
    """Connect's ``ConfigInfos`` for ``raw``: every defined key with its value and its errors.

    ``full_check`` is the worker's own validation (converters, sink topics, transforms); its first
    error is added under its key unless that key already has one. ``resolve`` is the worker's
    placeholder resolution: a key whose ``${provider:…}`` cannot be resolved (an undeclared provider,
    a path outside ``allowed.paths``) gets that error alone, and the other checks see resolved values,
    as creating the connector would. Values shown stay as given; messages have secrets masked.
    ``exactly_once_enabled`` says whether the worker has exactly-once source support enabled, for
    the checks of :mod:`~sluice.worker.config.exactly_once`; ``offsets_topics`` whether it honours
    a connector's ``offsets.storage.topic`` (a distributed worker does, a standalone one ignores it).
    """
    fields = _connector_fields(plugin)
    defs = [d for d, _ in fields]
    checks = _Checks(full_check, resolve, exactly_once_enabled, offsets_topics)
    errors, warnings = _config_errors(plugin, raw, checks, [d["name"] for d in defs])
    configs = _config_entries(fields, raw, errors, warnings)
    groups = list(dict.fromkeys(d["group"] for d in defs if d["group"] is not None))
    return {
        # Connect names the result after connector.class as the request spelled it.
        "name": str(raw.get("connector.class") or plugin.class_name),
        "error_count": sum(len(e) for e in errors.values()),
        "groups": groups,
        "configs": configs,
        # Sluice's addition: the keys accepted but ignored, so a client need not scan ``configs``.
        "warnings": [{"name": name, "message": message} for name, message in warnings.items()],
    }


class _Checks(typing.NamedTuple):
    """The worker's part of a validation: its full check, its placeholder resolution and whether it
    has exactly-once source support enabled."""

    full_check: typing.Callable[[Mapping[str, Any]], ValidatedOwn]
    resolve: typing.Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
    exactly_once_enabled: bool
    offsets_topics: bool


def _config_errors(
    plugin: PluginInfo, raw: Mapping[str, Any], checks: _Checks, defined: list[str]
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The errors of each key (secrets masked) and the warnings of the keys accepted but ignored."""
    errors: dict[str, list[str]] = {}
    full_check = checks.full_check
    # The name comes from the URL when a connector is created, so validate doesn't require it (as in
    # Connect); a stand-in lets the rest of the checks run.
    checked = raw if raw.get("name") else {**raw, "name": STAND_IN_NAME}
    resolved, unresolvable = _resolve_each(checked, checks.resolve)
    common_raw, own_raw = split_connector_config(resolved)
    try:
        ConnectorConfig.model_validate(common_raw)
    except ValidationError as exc:
        _attach(errors, config_problems(exc), defined, "connector.class")
    connector_cls = _connector_class(plugin)
    declared = {key for key, _ in _model_keys(connector_cls.Config)}
    own_raw.update({k: v for k, v in common_raw.items() if k in declared})
    own_raw, ignored = split_own_keys(connector_cls.Config, own_raw, common_raw)
    warnings = {
        **ignored_key_warnings(connector_cls, ignored),
        **exactly_once_warnings(connector_cls, resolved, offsets_topics=checks.offsets_topics),
    }
    try:
        connector_cls.Config.model_validate(own_raw)
    except ValidationError as exc:
        _attach(errors, config_problems(exc), sorted(declared), "connector.class")
    else:
        try:
            connector_cls.validate(own_raw)
        except ConfigError as exc:
            errors.setdefault(exc.key or "connector.class", []).append(str(exc))
    if not errors and not unresolvable:
        try:
            validated = full_check(checked)
        except ConfigError as exc:
            errors.setdefault(exc.key or "connector.class", []).append(str(exc))
        else:
            # Only a config that is valid otherwise is worth a round trip to the external system.
            for key, message in check_connectivity(connector_cls, validated.own).items():
                errors.setdefault(key, []).append(message)
    # As Connect's herder: checked whatever else failed, unless the key's own value is refused already.
    for key, messages in exactly_once_problems(
        connector_cls, resolved, worker_enabled=checks.exactly_once_enabled
    ).items():
        if key not in errors:
            errors[key] = messages
    # Other errors of such a key are about the placeholder's own text ("not a topic name"), not a value.
    errors.update({key: [message] for key, message in unresolvable.items()})
    # Checks of resolved values may quote them (pydantic's "invalid value ..."): hide this config's
    # secrets (resolve() registered what its placeholders gave) and the worker's, no other connector's.
    name, known = str(checked["name"]), secret_values(resolved, connector_cls.Config.secret_keys())
    errors = {key: [mask_text(m, name, known) for m in messages] for key, messages in errors.items()}
    return errors, warnings


def _config_entries(
    fields: list[tuple[dict[str, Any], FieldInfo]],
    raw: Mapping[str, Any],
    errors: dict[str, list[str]],
    warnings: dict[str, str],
) -> list[dict[str, Any]]:
    """One ``{"definition", "value"}`` entry per defined key, then per other key with errors or warnings."""
    defs = [d for d, _ in fields]
    secret = {d["name"] for d in defs if d["type"] == "PASSWORD"}
    shown = mask_config(raw, secret, connector=str(raw.get("name") or STAND_IN_NAME))
    configs = []
    for d, info in fields:
        name = d["name"]
        value = shown[name] if name in raw else d["default_value"]
        recommended = _recommended(info.annotation)
        configs.append({"definition": d, "value": _value_info(name, value, recommended, errors.get(name, []))})
    for name in sorted((set(errors) | set(warnings)) - {d["name"] for d in defs}):
        # A key the connector does not define gets an entry of its own so a UI can show it: its
        # errors (an unresolvable placeholder) count; its warning (ignored, why, did you mean) does
        # not, since Connect clients count only ``errors`` — Sluice adds ``warnings`` beside them.
        d = {**key_info(name, FieldInfo(annotation=str, default=None), None, -1), "importance": "LOW"}
        value = _value_info(name, shown.get(name), [], errors.get(name, []))
        if name in warnings:
            value["warnings"] = [warnings[name]]
        configs.append({"definition": d, "value": value})
    return configs


def check_connectivity(
    connector_cls: type[Connector], own: Any, timeout_s: float = CONNECTIVITY_TIMEOUT_S, *, on_create: bool = False
) -> dict[str, str]:
    """The connector's :meth:`~connectors.api.Connector.validate_connectivity` answer (with
    ``on_create``, its :meth:`~connectors.api.Connector.validate_on_create` one), on a thread of its
    own so that a system that never answers costs the request ``timeout_s`` + 1 s at most."""
    name = "validate_on_create" if on_create else "validate_connectivity"
    check = getattr(connector_cls, name)
    overridden = getattr(check, "__func__", None) is not getattr(getattr(Connector, name), "__func__", None)
    if own is None or not overridden:
        return {}
    result: dict[str, str] = {}
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.update(check(own, timeout_s))
        except Exception as exc:  # noqa: BLE001 - a connector bug must not turn validate into a 500
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"validate-connectivity-{connector_cls.__name__}", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    if thread.is_alive():
        return {"connector.class": f"{connector_cls.__name__} could not check connectivity within {timeout_s:g} s"}
    if failure:
        # The exception's text may be a driver's, quoting what a remote port sent: it goes to the
        # log; the caller gets its category when it is a network error, else its type.
        log.warning("%s.%s raised: %s", connector_cls.__name__, name, failure[0], exc_info=failure[0])
        found = classify_network_error(failure[0])
        what = found.describe() if found is not None else type(failure[0]).__name__
        return {"connector.class": f"Checking connectivity failed: {what}"}
    return dict(result)


def _resolve_each(
    config: Mapping[str, Any], resolve: typing.Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``config`` with the placeholders ``resolve`` can replace replaced, and the error of each key it cannot.

    Key by key, so that every bad placeholder is reported, not only the first; a key that fails
    keeps its placeholder text.
    """
    resolved = dict(config)
    failed: dict[str, str] = {}
    if resolve is None:
        return resolved, failed
    # With the name, what a placeholder resolves to is registered as this connector's secret only.
    owner = {"name": config["name"]} if "name" in config else {}
    for key, value in config.items():
        if has_placeholder(value):
            try:
                resolved.update(resolve({**owner, key: value}))
            except ConfigError as exc:
                failed[key] = str(exc)
    return resolved, failed


def _value_info(name: str, value: Any, recommended: list[str], errors: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "value": _as_text(value),
        "recommended_values": recommended,
        "errors": errors,
        "visible": True,
    }
