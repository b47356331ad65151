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

On a cluster master (anything but ``local…``) the session ships the executors Sluice's Python code
and its dependencies (:mod:`.pyenv`, through ``spark.archives``), starts ``spark.pyspark.python``
there (default ``python<major>.<minor>``, never this process's path), and checks with one tiny task
that the executors can import it, failing with the reason if not.

Settings, lowest precedence first: Sluice's defaults, the worker's ``backfill.spark.*`` keys, then
a job's ``spark.conf``. Confs that only take effect at JVM start (master, jars, driver memory) are
fixed by the first job; a later job asking for a different master gets a clear error instead of
silently running elsewhere.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice.connectors.backfill.pyenv import ARCHIVE_ALIAS, executor_archive

log = logging.getLogger(__name__)

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
    # Executors log at the level the worker sets (spark.log.level, WARN by default), not at whatever
    # a cluster's log4j2 configuration says.
    "spark.executor.syncLogLevel.enabled": "true",
}


class SparkUnavailable(RuntimeError):
    """PySpark or its jars are missing, the JVM did not start, or a cluster's executors cannot run the jobs."""


def is_local_master(master: str) -> bool:
    """``local``, ``local[4]``, ``local[*]``, ``local-cluster[...]``: executors on this host, in this environment."""
    return master.strip().startswith("local")


def executor_python(confs: Mapping[str, str]) -> str:
    """The Python the executors start: ``spark.pyspark.python`` if set; else, on a local master,
    this interpreter; on a cluster, ``python<major>.<minor>`` from the executors' ``PATH`` (the
    version the packed code was built for; this process's path means nothing on another host)."""
    configured = confs.get("spark.pyspark.python")
    if configured:
        return configured
    if is_local_master(confs.get("spark.master", "local[*]")):
        return os.environ.get("PYSPARK_PYTHON") or sys.executable
    return f"python{sys.version_info[0]}.{sys.version_info[1]}"


def executor_imports(_: object) -> str:
    """Run on an executor by the session's start-up check: import what the Python-side jobs use."""
    import importlib

    for module in ("pyarrow", "confluent_kafka", "pydantic", "sluice.connectors.api"):
        importlib.import_module(module)
    return sys.version


def _append(confs: dict[str, str], key: str, values: Sequence[str]) -> None:
    existing = [v for v in confs.get(key, "").split(",") if v]
    confs[key] = ",".join(existing + list(values))


def _first_error_line(exc: BaseException) -> str:
    """The line of a Spark failure that names the cause (a Python error or a missing program)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line) or "Cannot run program" in line:
            return line[:500]
    return lines[0][:500] if lines else type(exc).__name__


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
            _append(confs, "spark.jars", jars)
        cluster = not is_local_master(confs["spark.master"])
        if cluster:
            self._ship_python(confs)
        else:
            # Spark otherwise binds to the host's first non-loopback address (and warns about it).
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # PySpark reads the executors' Python from the environment when the JVM starts, not from
        # spark.pyspark.python (only spark-submit copies one into the other).
        os.environ["PYSPARK_PYTHON"] = executor_python(confs)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = SparkSession.builder
        for key, value in confs.items():
            builder = builder.config(key, value)
        log.info("Starting the backfill SparkSession (master %s, executors' Python %s)", confs["spark.master"], os.environ["PYSPARK_PYTHON"])
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise SparkUnavailable(f"Spark did not start: {exc}") from exc
        session.sparkContext.setLogLevel(confs.get("spark.log.level", "WARN"))
        if cluster:
            self._check_executors(session, confs)
        return session

    def _ship_python(self, confs: dict[str, str]) -> None:
        """Send the executors Sluice's code and its dependencies (see :mod:`.pyenv`)."""
        try:
            archive = executor_archive()
        except (OSError, ModuleNotFoundError) as exc:
            raise SparkUnavailable(f"could not pack Sluice's Python code for the executors: {exc}") from exc
        _append(confs, "spark.archives", [f"{archive}#{ARCHIVE_ALIAS}"])
        # Relative to each Python worker's directory, the executor's, where Spark unpacks archives.
        existing = confs.get("spark.executorEnv.PYTHONPATH")
        confs["spark.executorEnv.PYTHONPATH"] = f"{ARCHIVE_ALIAS}{os.pathsep}{existing}" if existing else ARCHIVE_ALIAS

    def _check_executors(self, session: Any, confs: Mapping[str, str]) -> None:
        """Run one tiny task on the cluster: an executor that cannot start its Python, or import
        what the jobs need, fails now with the reason instead of in the middle of a job."""
        try:
            session.sparkContext.parallelize([0], 1).map(executor_imports).collect()
        except Exception as exc:
            session.stop()
            raise SparkUnavailable(
                f"the executors of {confs['spark.master']} cannot run Sluice's Python code with "
                f"{os.environ['PYSPARK_PYTHON']!r} (worker key backfill.spark.pyspark.python; it must be a Python "
                f"{sys.version_info[0]}.{sys.version_info[1]} on every Spark worker host): {_first_error_line(exc)}"
            ) from exc

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
                log.debug("Stopping the SparkSession failed", exc_info=True)
