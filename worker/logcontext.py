"""``[connector|task-N]`` on every log line a task writes (Connect's KIP-449 MDC context)."""

from __future__ import annotations

import contextvars
import logging

from sluice.worker.masking import SecretMaskingFilter

_context: contextvars.ContextVar[str] = contextvars.ContextVar("sluice_log_context", default="")


def set_context(connector: str, task: int | None = None) -> None:
    """Tag the current thread's log lines; threads start with no tag."""
    _context.set(f"[{connector}|task-{task}] " if task is not None else f"[{connector}|worker] ")


def clear_context() -> None:
    """Drop the current thread's tag (a herder thread that worked on one connector moves on)."""
    _context.set("")


class ContextFilter(logging.Filter):
    """Adds ``record.connector_context`` (empty outside tasks) for format strings."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.connector_context = _context.get()
        return True


LOG_FORMAT = "[%(asctime)s] %(levelname)s %(connector_context)s%(message)s (%(name)s)"


def configure_logging(level: str = "INFO") -> None:
    """Configure the root logger for the CLI (library code never calls this).

    The handler hides registered secrets (:class:`~worker.masking.SecretMaskingFilter`) in every
    line, tracebacks included.
    """
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretMaskingFilter())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per forwarded request
