"""The exactly-once keys of a source connector (KIP-618), checked against the worker and the connector.

The connector keys themselves (``exactly.once.support``, ``transaction.boundary``,
``transaction.boundary.interval.ms``, ``offsets.storage.topic``) are fields of
:class:`~sluice.worker.config.models.ConnectorConfig`, which checks their values. What needs the
worker and the connector class too is here, with Kafka Connect's messages (its
``DistributedHerder`` checks, quoted so that tooling that reads them keeps working):

* ``exactly.once.support=required`` on a worker without exactly-once source support enabled
  (a standalone worker never has it; a distributed one has it with
  ``exactly.once.source.support=enabled``, not yet with ``preparing``);
* ``exactly.once.support=required`` and the connector's
  :meth:`~connectors.api.SourceConnector.exactly_once_support` does not answer ``SUPPORTED``;
* ``transaction.boundary=connector`` and its
  :meth:`~connectors.api.SourceConnector.can_define_transaction_boundaries` does not answer ``SUPPORTED``.

As in Connect, the first two are independent (a config may get both errors) and the boundary check
runs whatever the worker supports. Both the validate endpoint and creating or updating a connector
apply them; starting a stored connector does not ask again.

The keys mean nothing to a sink connector: Connect ignores them there, and so does Sluice, naming
them among the validate endpoint's warnings (:func:`exactly_once_warnings`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sluice.connectors.api import (
    ConnectorTransactionBoundaries,
    ExactlyOnceSupport,
    SourceConnector,
    TransactionBoundary,
)

log = logging.getLogger(__name__)

EXACTLY_ONCE_SUPPORT = "exactly.once.support"
TRANSACTION_BOUNDARY = "transaction.boundary"
TRANSACTION_BOUNDARY_INTERVAL_MS = "transaction.boundary.interval.ms"
OFFSETS_STORAGE_TOPIC = "offsets.storage.topic"

#: The connector keys only a source connector reads.
SOURCE_ONLY_KEYS = (EXACTLY_ONCE_SUPPORT, TRANSACTION_BOUNDARY, TRANSACTION_BOUNDARY_INTERVAL_MS, OFFSETS_STORAGE_TOPIC)

# Kafka Connect's messages, word for word.
WORKER_NOT_ENABLED = "This worker does not have exactly-once source support enabled."
NO_PREFLIGHT = (
    "The connector does not implement the API required for preflight validation of exactly-once source support. "
    "Please consult the documentation for the connector to determine whether it supports exactly-once semantics, "
    'and then consider reconfiguring the connector to use the value "requested" for this property (which will '
    "disable this preflight check and allow the connector to be created)."
)
NOT_SUPPORTED = "The connector does not support exactly-once semantics with the provided configuration."
NO_CONNECTOR_BOUNDARIES = (
    "The connector does not support connector-defined transaction boundaries with the given configuration. "
    "Please reconfigure it to use a different transaction boundary definition."
)
UNEXPECTED = "An unexpected error occurred during validation"


def exactly_once_problems(
    connector_cls: type[Any], config: Mapping[str, Any], *, worker_enabled: bool
) -> dict[str, list[str]]:
    """``{key: [messages]}`` of what the worker or the connector refuses in ``config`` (resolved,
    values as strings); empty for a sink connector, and for values the common model refuses anyway.

    ``worker_enabled``: whether this worker has exactly-once source support enabled. The hooks
    are asked on a fresh instance of ``connector_cls``, on the caller's thread.
    """
    if not (isinstance(connector_cls, type) and issubclass(connector_cls, SourceConnector)):
        return {}
    problems: dict[str, list[str]] = {}
    strings = {str(k): "" if v is None else str(v) for k, v in config.items()}
    if strings.get(EXACTLY_ONCE_SUPPORT, "").strip().lower() == "required":
        if not worker_enabled:
            problems.setdefault(EXACTLY_ONCE_SUPPORT, []).append(WORKER_NOT_ENABLED)
        support, failure = _ask(connector_cls, lambda c: c.exactly_once_support(strings), "exactly-once support")
        if failure is not None or support is not ExactlyOnceSupport.SUPPORTED:
            problems.setdefault(EXACTLY_ONCE_SUPPORT, []).append(failure or _support_message(support))
    if strings.get(TRANSACTION_BOUNDARY, "").strip().lower() == TransactionBoundary.CONNECTOR.value:
        boundaries, failure = _ask(
            connector_cls,
            lambda c: c.can_define_transaction_boundaries(strings),
            "connector-defined transaction boundaries",
        )
        if failure is not None or boundaries is not ConnectorTransactionBoundaries.SUPPORTED:
            problems.setdefault(TRANSACTION_BOUNDARY, []).append(failure or NO_CONNECTOR_BOUNDARIES)
    return problems


def _support_message(answer: Any) -> str:
    """Why ``exactly_once_support``'s ``answer`` (not ``SUPPORTED``) refuses the config."""
    if answer is None:
        return NO_PREFLIGHT
    if answer is ExactlyOnceSupport.UNSUPPORTED:
        return NOT_SUPPORTED
    return f"{UNEXPECTED}: exactly_once_support returned {answer!r}, not an ExactlyOnceSupport"


def _ask(
    connector_cls: type[SourceConnector], hook: Callable[[SourceConnector], Any], what: str
) -> tuple[Any, str | None]:
    """``(answer, None)``: what ``hook`` answers on a fresh connector instance; ``(None, message)``
    with Connect's message when it raises."""
    try:
        return hook(connector_cls()), None
    except Exception as exc:  # a connector bug must refuse the config, not fail the request
        log.error("%s failed while validating its support for %s", connector_cls.__name__, what, exc_info=exc)
        detail = str(exc).strip()
        return (
            None,
            f"{UNEXPECTED}: {detail}" if detail else f"{UNEXPECTED}; please see the worker logs for more details.",
        )


def exactly_once_warnings(
    connector_cls: type[Any], config: Mapping[str, Any], *, offsets_topics: bool
) -> dict[str, str]:
    """``{key: why it has no effect}`` for the exactly-once keys ``config`` sets in vain: any of them
    on a sink connector, ``transaction.boundary.interval.ms`` without ``transaction.boundary=interval``,
    ``offsets.storage.topic`` on a worker that does not honour it (``offsets_topics``: a standalone one)."""
    if not (isinstance(connector_cls, type) and issubclass(connector_cls, SourceConnector)):
        return {
            key: f'"{key}" applies to source connectors only; {connector_cls.__name__} is a sink and ignores it'
            for key in SOURCE_ONLY_KEYS
            if key in config
        }
    warnings: dict[str, str] = {}
    if str(config.get(OFFSETS_STORAGE_TOPIC) or "").strip() and not offsets_topics:
        warnings[OFFSETS_STORAGE_TOPIC] = (
            f'"{OFFSETS_STORAGE_TOPIC}" applies on a distributed worker; a standalone worker keeps every '
            "connector's offsets in its offset.storage.file.filename"
        )
    boundary = str(config.get(TRANSACTION_BOUNDARY, TransactionBoundary.POLL.value)).strip().lower()
    if TRANSACTION_BOUNDARY_INTERVAL_MS in config and boundary != TransactionBoundary.INTERVAL.value:
        warnings[TRANSACTION_BOUNDARY_INTERVAL_MS] = (
            f'"{TRANSACTION_BOUNDARY_INTERVAL_MS}" has no effect with '
            f"{TRANSACTION_BOUNDARY}={boundary}; it sets the interval of {TRANSACTION_BOUNDARY}=interval"
        )
    return warnings
