"""Small rules every herder path shares: request configs, masked secrets, connector calls."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from sluice.connectors.api import ConnectError
from sluice.plugins import PluginKind
from sluice.worker.config.masking import MASK
from sluice.worker.herder.api import BadRequest
from sluice.worker.observability.logcontext import set_context

T = TypeVar("T")

CONNECTOR_CALL_TIMEOUT_S = 30.0

CONNECTOR_KINDS = (PluginKind.SOURCE, PluginKind.SINK)

NOT_STOPPED_MESSAGE = (
    "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the "
    "specified connector by issuing a 'PUT' request to the '/connectors/{name}/stop' endpoint"
)


def offsets_message(verb: str, connector_checked: bool) -> str:
    """Connect's answer to an offsets change; it warns when the connector did not vouch for them."""
    if connector_checked:
        return f"The offsets for this connector have been {verb} successfully"
    return (
        f"The Connect framework-managed offsets for this connector have been {verb} successfully. However, if this "
        f"connector manages offsets externally, they will need to be manually {verb} in the system that the "
        "connector uses."
    )


def request_config(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A connector config from a REST body: values as strings, ``name`` the one in the URL."""
    raw = {str(k): stringify(v) for k, v in config.items()}
    if "name" in raw and raw["name"] != name:
        raise BadRequest(f"Connector name configuration ({raw['name']}) doesn't match connector name in the URL ({name})")
    raw["name"] = name
    return raw


def merge_patch(config: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """KIP-477's merge: keys in ``patch`` replace, ``None`` values delete."""
    merged = dict(config)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def restore_masked_secrets(raw: dict[str, Any], stored: Mapping[str, Any], secret_keys: Iterable[str]) -> None:
    """A config read back over REST shows ``[hidden]`` for secrets; re-applying it keeps the stored ones."""
    for key in secret_keys:
        if raw.get(key) == MASK and key in stored:
            raw[key] = stored[key]


def stringify(value: Any) -> Any:
    """Connect configs are strings; JSON bodies may carry numbers and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def call_with_timeout(fn: Callable[[], T], what: str, connector: str, timeout: float = CONNECTOR_CALL_TIMEOUT_S) -> T:
    """Run a connector lifecycle call on its own thread, so a connector that hangs (a database that
    never answers) fails itself instead of freezing the herder and the REST API."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        set_context(connector)
        try:
            result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            error.append(exc)

    thread = threading.Thread(target=target, name=f"connector-{connector}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ConnectError(f"Timed out after {timeout:.0f}s trying to {what}")
    if error:
        raise error[0]
    return result[0]
