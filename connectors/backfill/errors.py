"""Spark failures as the one line a user should read, not a page of py4j frames.

A failed Spark action surfaces in Python as ``Py4JJavaError`` (whose ``str`` is the whole Java
stack), or as one of PySpark's ``CapturedException`` subclasses (``AnalysisException``,
``SparkRuntimeException`` …) with a tidier ``desc``. The message users need is the innermost
cause's ``getMessage()``: "relation \"x\" does not exist", "Connection refused", not
``org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1
times, most recent failure: …``.
"""

from __future__ import annotations

import re
from typing import Any

_STAGE_FAILURE = re.compile(
    r"Job aborted due to stage failure: .*?most recent failure: Lost task [^)]*\): ", re.DOTALL
)
_JAVA_FRAME = re.compile(r"^\s+at [\w$.<>]+\(.*\)$", re.MULTILINE)


class BackfillJobError(RuntimeError):
    """A backfill failed for a reason the user can act on; ``str()`` is the Spark error message."""


class BackfillCancelled(RuntimeError):
    """The job was cancelled while it ran."""


def spark_error_message(exc: BaseException) -> str:
    """The innermost Java cause's message of a Spark failure, else a trimmed ``str(exc)``."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return _innermost(java)
        except Exception:  # the JVM may be gone; fall back to the Python-side text
            pass
    desc = getattr(exc, "desc", None)
    text = desc if isinstance(desc, str) and desc else str(exc)
    return _trim(text)


def _innermost(java: Any) -> str:
    messages: list[str] = []
    cause = java
    seen = 0
    while cause is not None and seen < 20:
        text = cause.getMessage()
        name = cause.getClass().getName()
        messages.append(f"{name}: {text}" if text else name)
        cause = cause.getCause()
        seen += 1
    # The deepest cause with a message is the most specific one.
    for text in reversed(messages):
        if ": " in text:
            return _trim(text.split(": ", 1)[1]) if _is_wrapper(text) else _trim(_drop_package(text))
    return _trim(messages[-1])


def _is_wrapper(text: str) -> bool:
    return text.startswith(("org.apache.spark.SparkException", "java.util.concurrent.ExecutionException"))


def _drop_package(text: str) -> str:
    """``org.postgresql.util.PSQLException: ERROR: …`` → ``PSQLException: ERROR: …``."""
    name, sep, rest = text.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}{sep}{rest}"


_PY_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit)): (.*)$")


def _python_worker_error(text: str) -> str | None:
    """The final ``Type: message`` of a Python worker's traceback embedded in a Spark error."""
    if "Traceback (most recent call last)" not in text:
        return None
    lines = text.split("Traceback (most recent call last)", 1)[1].splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _PY_EXCEPTION.match(lines[i].strip())
        if match and not lines[i].startswith(" "):
            rest = [ln.strip() for ln in lines[i + 1 :] if ln.strip() and "SQLSTATE" not in ln]
            message = " ".join([match.group(2), *rest]).strip()
            return f"{match.group(1)}: {message}" if match.group(1) not in ("ConfigError", "ConnectError", "RuntimeError") else message
    return None


def _trim(text: str) -> str:
    python = _python_worker_error(text)
    if python is not None:
        return python
    text = _STAGE_FAILURE.sub("", text)
    text = _JAVA_FRAME.sub("", text)
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "Spark job failed"
    kept = [line for line in lines if not line.lstrip().startswith(("Driver stacktrace", "JVM stacktrace"))]
    return "\n".join(kept[:5])
