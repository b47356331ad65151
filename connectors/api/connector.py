"""Connector classes: configuration in, task configurations out.

A connector does no data movement itself. The runtime instantiates it on one worker, calls
:meth:`Connector.start` with its validated configuration and asks :meth:`Connector.task_configs`
how to split the work; the tasks (:mod:`sluice.connectors.api.task`) move the data.
"""

from __future__ import annotations

import abc
import enum
import importlib
import inspect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from sluice.connectors.api.config import PluginConfig

if TYPE_CHECKING:
    from sluice.connectors.api.task import OffsetReader, SinkTask, SourceTask, Task


_T = TypeVar("_T")


class Deferred(Generic[_T]):
    """A class attribute naming a class by ``"package.module:Class"``, imported on first read.

    ``task_class = Deferred["SinkTask"]("sluice.connectors.sink.jdbc.task:JdbcSinkTask")`` reads
    as the task class itself (``Connector.task_class()`` makes a task), but the task's module and
    its drivers are imported only when something reads it: the worker, which loads every
    connector to list and validate them, keeps out of its memory the libraries only tasks use
    (pyarrow, psycopg, numpy), which the task host that starts such a task imports (or the hosts'
    fork server, for the connectors of the worker's ``task.host.preload``).
    """

    __slots__ = ("_cls", "_path")

    def __init__(self, path: str) -> None:
        module, sep, name = path.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"Deferred needs 'package.module:Class', got {path!r}")
        self._path = (module, name)
        self._cls: type[_T] | None = None

    @property
    def path(self) -> str:
        """Where the class is, as ``"package.module:Class"``."""
        return ":".join(self._path)

    def __get__(self, instance: object, owner: type | None = None) -> type[_T]:
        if self._cls is None:
            module, name = self._path
            self._cls = getattr(importlib.import_module(module), name)
        return self._cls


class ExactlyOnceSupport(enum.Enum):
    """Whether a source connector's tasks can deliver exactly once with a given configuration
    (Connect's ``ExactlyOnceSupport``), as :meth:`SourceConnector.exactly_once_support` answers.

    ``SUPPORTED`` means that, when the runtime commits each task's records and source offsets in one
    Kafka transaction, a restarted task resumes exactly after what was committed: its offsets name a
    position the external system can be read from again, and reading from there gives the same
    records in the same order.
    """

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"


class ConnectorTransactionBoundaries(enum.Enum):
    """Whether a source connector's tasks can say where transactions end themselves (Connect's
    ``ConnectorTransactionBoundaries``), as :meth:`SourceConnector.can_define_transaction_boundaries`
    answers; such tasks use :attr:`~connectors.api.SourceTaskContext.transaction_context`."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"


class TransactionBoundary(str, enum.Enum):  # noqa: UP042 - Connect-compatible values, str subclass on purpose
    """Where the runtime ends a source task's transactions (the connector key ``transaction.boundary``).

    ``POLL``: after the records of each poll; ``INTERVAL``: every ``transaction.boundary.interval.ms``
    (by default the worker's ``offset.flush.interval.ms``); ``CONNECTOR``: where the task asks, through
    :attr:`~connectors.api.SourceTaskContext.transaction_context`. Only with exactly-once source
    support enabled on the worker; otherwise records are not produced in transactions at all.
    """

    POLL = "poll"
    INTERVAL = "interval"
    CONNECTOR = "connector"


class ConnectorContext(Protocol):
    """What the runtime offers a connector instance."""

    def request_task_reconfiguration(self) -> None:
        """Ask the runtime to call :meth:`Connector.task_configs` again (the inputs changed).

        Safe to call from any thread.
        """

    def raise_error(self, error: BaseException) -> None:
        """Fail the connector from a background thread of its own; the status shows ``error``."""


class SourceConnectorContext(ConnectorContext, Protocol):
    """Context of a source connector: it may read the offsets its tasks stored."""

    @property
    def offset_reader(self) -> OffsetReader: ...


class Connector(abc.ABC):
    """Base of source and sink connectors.

    Subclasses set :attr:`Config` (a :class:`PluginConfig` model of the connector's own keys; the
    runtime handles the common keys such as ``name``, ``tasks.max`` and ``transforms``),
    :attr:`task_class` (the class, or a :class:`Deferred` naming it so that its module loads only
    where tasks run) and :attr:`version`.

    Threads: every method is called by the runtime's connector thread, never concurrently with
    another method of the same instance, except :meth:`stop`, which may come from a control thread
    while :meth:`task_configs` runs.
    """

    Config: ClassVar[type[PluginConfig]] = PluginConfig
    task_class: ClassVar[type[Task]]
    version: ClassVar[str] = "0.0.0"
    #: Keys the anchor connector (Debezium's, Confluent's) defines that this one accepts but does not
    #: honour, each with the reason. The runtime keeps them in the stored config, never hands them to
    #: :meth:`start`, and names them with the reason in the answer of the validate endpoint, so a
    #: config written for the anchor can be deployed unchanged and its author sees what is ignored.
    unimplemented_keys: ClassVar[Mapping[str, str]] = {}

    context: ConnectorContext

    @classmethod
    def task_class_name(cls) -> str:
        """``package.module.Class`` of the task, without importing it when :attr:`task_class` is
        :class:`Deferred` (what the worker stores as Connect's ``task.class``); the connector's
        own name when it declares no task class."""
        declared = inspect.getattr_static(cls, "task_class", None)
        if declared is None:
            return f"{cls.__module__}.{cls.__qualname__}"
        if isinstance(declared, Deferred):
            return declared.path.replace(":", ".")
        return f"{declared.__module__}.{declared.__qualname__}"

    def initialize(self, context: ConnectorContext) -> None:
        """Called once, before :meth:`start`, with the runtime's context."""
        self.context = context

    @abc.abstractmethod
    def start(self, config: Any) -> None:
        """Start with the validated configuration (an instance of :attr:`Config`)."""

    @abc.abstractmethod
    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """Split the work into at most ``max_tasks`` task configurations (JSON-able mappings)."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`start` acquired. Must not raise."""

    @classmethod
    def validate(cls, raw: Mapping[str, Any]) -> Any:
        """Validate the connector's own keys; raise :class:`~connectors.api.errors.ConfigError`.

        Override to add cross-field checks; call ``super().validate(raw)`` first.
        """
        return cls.Config.parse(raw)

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """Check that the external system named by ``config`` answers and accepts the credentials.

        ``config`` is what :meth:`validate` returned. Return ``{key: message}`` for each problem,
        on the key the user should fix (``connection.url`` for an unreachable database,
        ``connection.password`` for refused credentials); an empty mapping when all is well.
        Messages must not contain secrets. Give up after about ``timeout_s`` seconds.

        Called by the validate endpoint (``PUT /connector-plugins/{p}/config/validate``), as
        Connect's connectors do in ``validate``; creating or updating a connector calls it only when
        :meth:`validate_on_create` says so. Thread: a short-lived thread of the REST request, which
        stops waiting after ``timeout_s`` plus a margin and reports a timeout on
        ``connector.class``; the thread may outlive the answer.
        """
        return {}

    @classmethod
    def validate_on_create(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """Problems that refuse creating or updating the connector, ``{key: message}`` as
        :meth:`validate_connectivity` gives them; by default none, as Connect's connectors mostly
        leave their external systems to the tasks. Debezium's check their database in ``validate``,
        which Connect runs on create: a connector whose tasks could do nothing useful while such a
        problem lasts (a CDC source on a server without ``wal_level=logical``) overrides this, and
        leaves out what passes by itself (a slot another client is still reading). Same thread
        and timeout as :meth:`validate_connectivity`.
        """
        return {}


class SourceConnector(Connector):
    """A connector whose tasks read an external system and produce records to Kafka."""

    task_class: ClassVar[type[SourceTask]]  # type: ignore[assignment]
    context: SourceConnectorContext

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Veto or accept an offsets change made through the REST API (called while STOPPED).

        Return ``True`` when the connector checked the offsets; raise ``ConfigError`` to refuse.
        """
        return False

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport | None:
        """Whether this connector's tasks can deliver exactly once with ``config``; ``None`` (the
        default) when the connector does not say.

        ``config`` is the raw connector config, every value a string as the user gave it (config
        provider placeholders resolved), common keys included; it has not been validated by
        :attr:`Config`, so read it defensively. Asked only when the config sets
        ``exactly.once.support=required``: ``None`` or ``UNSUPPORTED`` then refuses the config, and
        an exception refuses it with the exception's message. Called on a fresh instance, never
        started nor initialized. Thread: the REST request thread that validates, creates or
        updates the connector (the herder's), never the connector or task thread.
        """
        return None

    def can_define_transaction_boundaries(self, config: Mapping[str, Any]) -> ConnectorTransactionBoundaries:
        """Whether this connector's tasks define their own transaction boundaries (through
        :attr:`~connectors.api.SourceTaskContext.transaction_context`) with ``config``; by default
        ``UNSUPPORTED``.

        Asked only when the config sets ``transaction.boundary=connector``, which anything but
        ``SUPPORTED`` refuses. ``config``, the instance and the thread are as for
        :meth:`exactly_once_support`.
        """
        return ConnectorTransactionBoundaries.UNSUPPORTED


def offset_pairs(offsets: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> Iterable[tuple[Any, Any]]:
    """The ``(partition, offset)`` pairs of what :meth:`SourceConnector.alter_offsets` receives:
    partitions are dicts, which cannot be dict keys, so the runtime may pass pairs instead of a mapping."""
    return offsets.items() if isinstance(offsets, Mapping) else offsets


class SinkConnector(Connector):
    """A connector whose tasks consume records from Kafka and write an external system.

    The runtime reads ``topics`` / ``topics.regex`` itself; the task configurations carry them.
    """

    task_class: ClassVar[type[SinkTask]]  # type: ignore[assignment]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Veto or accept a consumer-offsets change made through the REST API (called while STOPPED)."""
        return False
