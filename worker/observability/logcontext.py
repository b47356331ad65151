"""``[connector|task-N]`` on every log line a task writes (Connect's KIP-449 MDC context).

The tag lives in a context variable. A thread starts without one (``threading`` copies no
context), so the runtime sets it on each thread it runs connector or task code on; once
:func:`configure_logging` ran (the CLI's worker and task processes), a thread started from a
tagged thread (a task's own writer or upload threads, say) carries its creator's tag too.

Two line formats, one per process (``log.format``): ``text``, Connect's layout, and ``json``, one
object per line with ``ts``, ``level``, ``logger``, ``message``, ``connector``, ``task`` (only in a
task), ``thread`` and ``exc`` (a traceback). Secrets are masked in both.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any, Literal, NamedTuple

import orjson

from sluice.worker.config.masking import SecretMaskingFilter


class LogContext(NamedTuple):
    """Whose work a thread is doing: a connector, and the task when it is one."""

    connector: str
    task: int | None
    prefix: str  # what text lines show: ``[name|task-N] `` or ``[name|worker] ``


_NONE = LogContext("", None, "")
_context: contextvars.ContextVar[LogContext] = contextvars.ContextVar("sluice_log_context", default=_NONE)


def _make(connector: str, task: int | None) -> LogContext:
    return LogContext(connector, task, f"[{connector}|task-{task}] " if task is not None else f"[{connector}|worker] ")


def set_context(connector: str, task: int | None = None) -> None:
    """Tag the current thread's log lines; threads start with no tag."""
    _context.set(_make(connector, task))


def clear_context() -> None:
    """Drop the current thread's tag (a herder thread that worked on one connector moves on)."""
    _context.set(_NONE)


@contextlib.contextmanager
def connector_context(connector: str, task: int | None = None) -> Iterator[None]:
    """Tag the lines written inside the ``with`` block, then restore the thread's previous tag
    (for a thread that serves many connectors: a REST request's, a herder's)."""
    token = _context.set(_make(connector, task))
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> LogContext:
    """The current thread's tag (empty fields outside connector and task work)."""
    return _context.get()


class ContextFilter(logging.Filter):
    """Adds ``record.connector_context`` (empty outside tasks) for format strings, and
    ``record.sluice_connector`` / ``record.sluice_task`` (``None`` when absent) for the JSON lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get()
        record.connector_context = ctx.prefix
        record.sluice_connector = ctx.connector or None
        record.sluice_task = ctx.task
        return True


LOG_FORMAT = "[%(asctime)s] %(levelname)s %(connector_context)s%(message)s (%(name)s)"

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: How the worker's ``log.format`` reaches its task processes (spawned interpreters inherit it).
LOG_FORMAT_ENV = "SLUICE_LOG_FORMAT"


class JsonFormatter(logging.Formatter):
    """One JSON object per line. Runs after :class:`ContextFilter` and :class:`SecretMaskingFilter`,
    so the message and traceback it writes are the masked ones."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        connector = getattr(record, "sluice_connector", None)
        if connector:
            line["connector"] = connector
            task = getattr(record, "sluice_task", None)
            if task is not None:
                line["task"] = task
        line["thread"] = record.threadName
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return orjson.dumps(line, default=str).decode()


def current_connector() -> str | None:
    """The connector a line is about, whose secrets (and the worker's) it must not show."""
    return _context.get().connector or None


def configure_logging(level: str = "INFO", log_format: str | None = None) -> None:
    """Configure the root logger for the CLI (library code never calls this).

    ``log_format`` is ``text`` or ``json``; ``None`` takes the one the worker process chose (a task
    process), else ``text``. The handler hides secrets (:class:`~sluice.worker.config.masking.SecretMaskingFilter`)
    in every line, tracebacks included: a tagged line's connector's and the worker's, every one in
    a line no connector is named on.
    """
    chosen = (log_format or os.environ.get(LOG_FORMAT_ENV) or "text").strip().lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {chosen!r}")
    os.environ[LOG_FORMAT_ENV] = chosen  # task processes spawned from here write the same lines
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretMaskingFilter(owner=current_connector))
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per forwarded request
    inherit_in_new_threads()


_original_start = threading.Thread.start


def _start_tagged(self: threading.Thread) -> None:
    ctx = _context.get()
    if ctx is not _NONE:
        # Threads copy no context: hand the creator's tag to the new thread's run().
        run = self.run

        def run_tagged() -> None:
            _context.set(ctx)
            run()

        self.run = run_tagged  # type: ignore[method-assign]
    _original_start(self)


def inherit_in_new_threads() -> None:
    """From now on, a thread started by a tagged thread starts with its tag.

    Connectors start threads of their own (a JDBC sink's writer, an S3 sink's uploads) and cannot
    import the runtime to tag them; what such a thread logs is still the task's. Threads the
    runtime starts for several connectors set (or clear) their own tag.
    """
    threading.Thread.start = _start_tagged  # type: ignore[method-assign]
