"""One SparkSession per worker process, started on first use.

Starting Spark's JVM costs 10-20 s on a small machine, so every backfill of a worker shares one
session (jobs are told apart by Spark job groups, which also make them cancellable). The session
puts the extra jars its caller provisions (Kafka data source, S3A, PostgreSQL JDBC) on ``spark.jars``
— never ``spark.jars.packages``, whose Ivy resolution is not allowed everywhere — and stays on
loopback with the UI off unless the configuration says otherwise.

Where the jars come from is the deployment's business, not this module's: a caller hands a
:data:`JarSource` to the provider, or once per process to :func:`use_jar_source` (the ``sluice``
CLI points it at the dev-stack fetcher). The source is called when the first job starts the
session, so a worker that never backfills never fetches a jar.

Settings, lowest precedence first: Sluice's defaults, the worker's ``backfill.spark.*`` keys, then
a job's ``spark.conf``. Confs that only take effect at JVM start (master, jars, driver memory) are
fixed by the first job; a later job asking for a different master gets a clear error instead of
silently running elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

#: Returns the paths of the jars to add to ``spark.jars``; called once, when the session starts.
#: Any error it raises makes the session :class:`SparkUnavailable`, with its message.
JarSource = Callable[[], Sequence[str]]

_process_jar_source: JarSource | None = None


def use_jar_source(source: JarSource | None) -> None:
    """Set the jars of the sessions whose provider names no :data:`JarSource` (``None``: no extra jars).

    Called by whoever provisions Spark for this process (the ``sluice`` CLI before it starts a
    worker), before the first backfill starts a session.
    """
    global _process_jar_source
    _process_jar_source = source

#: Confs that cannot change once the JVM runs.
STATIC_CONFS = frozenset(
    {"spark.master", "spark.jars", "spark.driver.memory", "spark.driver.extraClassPath", "spark.driver.extraJavaOptions"}
)

DEFAULT_CONFS: Mapping[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "sluice-backfill",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Epoch conversions (Connect's Timestamp is UTC milliseconds) must not depend on the host's zone.
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.sql.shuffle.partitions": "8",
}


class SparkUnavailable(RuntimeError):
    """PySpark or its jars are missing, or the JVM did not start."""


class SparkSessionProvider:
    """Lazily creates and shares the process's SparkSession. Thread-safe."""

    def __init__(self, confs: Mapping[str, str] | None = None, *, jars: JarSource | None = None, fetch_jars: bool = True) -> None:
        """``jars`` (default: the process's, see :func:`use_jar_source`) adds to ``spark.jars``;
        ``fetch_jars=False`` adds none."""
        self._confs = {**DEFAULT_CONFS, **{k: str(v) for k, v in (confs or {}).items()}}
        self._jars = jars
        self._fetch_jars = fetch_jars
        self._lock = threading.Lock()
        self._session: Any = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self, job_confs: Mapping[str, str] | None = None) -> Any:
        """The shared session (started now if needed); ``job_confs`` apply to it where Spark allows."""
        job_confs = {k: str(v) for k, v in (job_confs or {}).items()}
        with self._lock:
            if self._session is None:
                self._session = self._start({**self._confs, **job_confs})
            else:
                self._check_static(job_confs)
        return self._session

    def _check_static(self, job_confs: Mapping[str, str]) -> None:
        conf = self._session.sparkContext.getConf()
        for key in STATIC_CONFS & set(job_confs):
            current = conf.get(key, None)
            if key != "spark.jars" and current is not None and current != job_confs[key]:
                raise SparkUnavailable(
                    f"spark.conf: {key}={job_confs[key]!r} differs from the running session's {current!r}; "
                    "it can only be set before the worker's first backfill (worker key backfill.spark."
                    f"{key.removeprefix('spark.')})"
                )

    def _start(self, confs: dict[str, str]) -> Any:
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise SparkUnavailable(
                "PySpark is not installed; install Sluice's spark extra: pip install 'sluice[spark]'"
            ) from None
        jars = self._extra_jars()
        if jars:
            existing = [j for j in confs.get("spark.jars", "").split(",") if j]
            confs["spark.jars"] = ",".join(existing + jars)
        # Spark otherwise binds to the host's first non-loopback address (and warns about it).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = SparkSession.builder
        for key, value in confs.items():
            builder = builder.config(key, value)
        logger.info("Starting the backfill SparkSession (master %s)", confs.get("spark.master"))
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise SparkUnavailable(f"Spark did not start: {exc}") from exc
        session.sparkContext.setLogLevel(confs.get("spark.log.level", "WARN"))
        return session

    def _extra_jars(self) -> list[str]:
        source = self._jars or _process_jar_source
        if not self._fetch_jars or source is None:
            return []
        try:
            return list(source())
        except Exception as exc:  # a fetch that failed (no Maven, no network): Spark cannot start
            raise SparkUnavailable(str(exc)) from exc

    def stop(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            try:
                session.stop()
            except Exception:
                logger.debug("Stopping the SparkSession failed", exc_info=True)
