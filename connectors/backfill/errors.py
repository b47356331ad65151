"""Spark failures as the message a user should read, not a page of py4j frames.

A failed Spark action surfaces in Python as ``Py4JJavaError`` (whose ``str`` is the whole Java
stack), or as one of PySpark's ``CapturedException`` subclasses (``AnalysisException``,
``SparkRuntimeException`` …) with a tidier ``desc``. The message users need is the root cause:
"relation \"x\" does not exist", "ERROR: division by zero", not ``org.apache.spark.SparkException:
Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: …``.

The root cause is not always reachable as a Java object. A task's exception travels from the
executor to the driver serialized; when the driver cannot deserialize it (its class is only on
the executor's class path, a field is not serializable) Spark keeps only its text, embedded in
the ``SparkException``'s message with the executor's stack frames, and ``getCause()`` is
``None``; and when the JVM cannot be asked any more, ``str(exc)`` — the printed stack — is all
there is. Every shape must give the same message, so the text is parsed the way the chain is
walked: wrappers (the stage failure, ``ExecutionException`` …) are peeled off, the innermost
``Caused by:`` wins, and Java frames (``java.base/…`` ones too), ``... N more`` and ``Driver
stacktrace:`` sections never reach the user. The root message itself (PostgreSQL's ``Detail:``
and ``Where:`` lines included) is never cut short; only an absurdly long one is capped at its end.
"""

from __future__ import annotations

import re
from typing import Any

#: Throwables that only wrap the interesting one; their own message is context, not the error.
_WRAPPERS = (
    "org.apache.spark.SparkException",
    "org.apache.spark.SparkDriverExecutionException",
    "org.apache.spark.util.TaskCompletionListenerException",
    "java.util.concurrent.ExecutionException",
    "java.util.concurrent.CompletionException",
    "java.lang.reflect.InvocationTargetException",
    "java.lang.reflect.UndeclaredThrowableException",
    "py4j.Py4JException",
)

#: ``Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure:
#: Lost task 0.0 in stage 3.0 (TID 9) (localhost executor driver): `` (Spark 3/4; older releases
#: had ``(TID 9, localhost, executor driver)`` — both end at the first ``): ``).
_STAGE_FAILURE = re.compile(
    r"(?:\[[A-Z_.]+\] )?Job aborted due to stage failure: .*?most recent failure: Lost task .*?\): ", re.DOTALL
)
#: ``An error occurred while calling o123.save.`` then ``: <throwable>`` (py4j's ``str``).
_PY4J_HEADER = re.compile(r"\AAn error occurred while calling [\w.$]+\.\s*\n:\s*")
#: A stack frame: ``\tat org.x.Y.m(Y.java:1)``, ``at java.base/java.lang.Thread.run(Thread.java:840)``,
#: ``at app//org.x.Y.m(Unknown Source)``, ``at jdk.internal.reflect.GeneratedMethodAccessor1.invoke(Unknown Source)``.
_FRAME = re.compile(r"^\s*at [^\s(]+\(.*\)\s*$")
_MORE = re.compile(r"^\s*\.\.\. \d+ more\s*$")
_SECTION_END = ("Driver stacktrace:", "JVM stacktrace:", "Suppressed:")
_CAUSED_BY = "Caused by: "
_THROWABLE_HEAD = re.compile(r"^([a-zA-Z_$][\w$]*(?:\.[a-zA-Z_$][\w$]*)+)(?::\s?(.*))?$", re.DOTALL)
_MAX_CHARS = 4000


class BackfillJobError(RuntimeError):
    """A backfill failed for a reason the user can act on; ``str()`` is the Spark error message."""


class BackfillCancelled(RuntimeError):
    """The job was cancelled while it ran."""


def spark_error_message(exc: BaseException) -> str:
    """The root cause's message of a Spark failure (see the module docstring)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        java = getattr(exc, "_origin", None)  # PySpark's CapturedException keeps the Java one here
    if java is not None:
        try:
            return _from_chain(java)
        except Exception:  # noqa: BLE001 - the JVM may be gone; fall back to the Python-side text
            pass
    desc = getattr(exc, "desc", None)
    try:
        text = desc if isinstance(desc, str) and desc else str(exc)
    except Exception:  # noqa: BLE001 - py4j's str() asks the JVM for the stack trace
        text = type(exc).__name__
    return _from_text(text)


def _from_chain(java: Any) -> str:
    """Walk ``getCause()`` to the end; the innermost throwable that is not a bare wrapper wins."""
    chain: list[tuple[str, str | None]] = []
    cause = java
    while cause is not None and len(chain) < 32:  # a cycle or absurd depth ends the walk
        chain.append((str(cause.getClass().getName()), _str_or_none(cause.getMessage())))
        cause = cause.getCause()
    # Deepest first; a throwable without a message (InterruptedException under "Flush interrupted")
    # says less than the one that wraps it, so it is only the answer if nothing says more.
    for name, message in reversed(chain):
        if not message:
            continue
        if name in _WRAPPERS:
            # A wrapper whose message embeds what it wraps (a task failure the driver could not
            # deserialize, "java.util.concurrent.ExecutionException: org.x.Y: msg" …).
            inner = _root_in_text(message)
            if inner is not None:
                return inner
            continue
        return _cap(_message_lines(f"{_short(name)}: {message}"))
    bare = [name for name, message in chain if name not in _WRAPPERS]
    if bare:
        return _short(bare[-1])
    # Only wrappers, none embedding a cause: the outermost one's text, cleaned.
    name, message = chain[0]
    return _from_text(f"{name}: {message}" if message else name)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _from_text(text: str) -> str:
    """The root cause in a printed Java (or Python) failure, else the cleaned text."""
    root = _root_in_text(text)
    if root is not None:
        return root
    cleaned = _message_lines(_unwrap_head(_PY4J_HEADER.sub("", text.strip())))
    return _cap(cleaned) if cleaned else "Spark job failed"


def _root_in_text(text: str) -> str | None:
    """The innermost non-wrapper throwable (or Python exception) printed in ``text``, if any."""
    python = _python_worker_error(text)
    if python is not None:
        return python
    text = _PY4J_HEADER.sub("", text.replace("\r\n", "\n").strip())
    # The head is the outermost throwable, each "Caused by:" section one level deeper.
    sections = re.split(r"^\s*" + re.escape(_CAUSED_BY), text, flags=re.MULTILINE)
    for section in reversed(sections):
        root = _root_of_section(section)
        if root is not None:
            return root
    return None


def _root_of_section(section: str) -> str | None:
    """``Class: message`` at the start of ``section``, peeled of wrappers; ``None`` if only wrappers."""
    head = _unwrap_head(section.strip())
    lines = _message_lines(head)
    if not lines:
        return None
    match = _THROWABLE_HEAD.match(lines)
    if match is None:
        return _cap(lines)  # not a "Class: message" head: a plain message (e.g. a stage failure's text)
    name, message = match.group(1), match.group(2)
    if name in _WRAPPERS:
        return None
    return _cap(f"{_short(name)}: {message}" if message else _short(name))


def _unwrap_head(text: str) -> str:
    """Strip leading wrapper class names and the stage-failure preamble off ``text``."""
    for _ in range(8):
        before = text
        match = _THROWABLE_HEAD.match(text.split("\n", 1)[0])
        if match is not None and match.group(1) in _WRAPPERS and match.group(2):
            text = text.split(": ", 1)[1]
        text = _STAGE_FAILURE.sub("", text, count=1).lstrip()
        if text == before:
            break
    return text


def _message_lines(text: str) -> str:
    """The message part of a printed throwable: its lines up to the first frame or section end."""
    kept: list[str] = []
    for line in text.strip().splitlines():
        stripped = line.strip()
        if _FRAME.match(line) or _MORE.match(line) or stripped.startswith(_SECTION_END) or stripped.startswith(_CAUSED_BY):
            break
        if stripped:
            kept.append(line.rstrip())
    return "\n".join(kept)


def _short(name: str) -> str:
    """``org.postgresql.util.PSQLException`` → ``PSQLException``."""
    return name.rsplit(".", 1)[-1]


def _cap(text: str) -> str:
    """Only an absurd message is shortened, and then at its end: the cause is at its start."""
    text = text.strip()
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1].rstrip() + "…"


_PY_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit)): (.*)$")


def _python_worker_error(text: str) -> str | None:
    """The final ``Type: message`` of a Python worker's traceback embedded in a Spark error."""
    if "Traceback (most recent call last)" not in text:
        return None
    lines = text.split("Traceback (most recent call last)", 1)[1].splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _PY_EXCEPTION.match(lines[i].strip())
        if match and not lines[i].startswith(" "):
            rest = []
            for ln in lines[i + 1 :]:
                if _FRAME.match(ln) or _MORE.match(ln) or ln.strip().startswith(_SECTION_END):
                    break
                if ln.strip() and "SQLSTATE" not in ln:
                    rest.append(ln.strip())
            message = " ".join([match.group(2), *rest]).strip()
            return message if match.group(1) in ("ConfigError", "ConnectError", "RuntimeError") else f"{match.group(1)}: {message}"
    return None
