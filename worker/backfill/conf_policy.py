"""What a backfill job may set on Spark and on the Kafka clients Spark runs for it.

A job arrives over ``POST /backfills`` from whoever may call the REST API, and Spark runs it in the
worker's JVM. Spark confs are as powerful as Kafka client keys: ``spark.driver.extraJavaOptions``
adds a Java agent, ``spark.jars`` loads code, ``spark.executorEnv.LD_PRELOAD`` loads a library,
``spark.eventLog.dir`` writes files, ``spark.master`` sends the job to another host. So a job's
``spark.conf`` and ``spark.master`` may tune the run (memory, parallelism, SQL settings) but not
choose code, files, hosts or listeners; the worker's ``backfill.spark.*`` keys are the operator's
and take any conf. A job's Kafka ``producer``/``consumer`` options pass the same deny-list as a
connector's client overrides (:mod:`sluice.worker.config.client_policy`) — they reach Java Kafka clients, where
``sasl.jaas.config`` with a JNDI login module is CVE-2023-25194.
"""

from __future__ import annotations

import re

from sluice.worker.config.client_policy import denied_reason

#: Conf prefixes that load code, change the JVM or the process environment, write or read files,
#: or reach other hosts.
_DENIED_PREFIXES = (
    "spark.jars",
    "spark.files",
    "spark.archives",
    "spark.submit.",
    "spark.pyspark.",
    "spark.python.",
    "spark.plugins",
    "spark.extralisteners",
    "spark.executorenv.",
    "spark.yarn.",
    "spark.kubernetes.",
    "spark.hadoop.",
    "spark.ui.",
    "spark.eventlog.",
    "spark.history.",
    "spark.metrics.",
    "spark.ssl.",
    "spark.authenticate",
    "spark.redaction.",
    "spark.driver.host",
    "spark.driver.bindaddress",
    "spark.driver.port",
    "spark.blockmanager.port",
    "spark.local.dir",
    "spark.serializer",
    "spark.sql.extensions",
    "spark.sql.catalog",
    "spark.sql.warehouse.dir",
    "spark.sql.hive.",
    "spark.sql.queryexecutionlisteners",
    "spark.sql.streaming.streamingquerylisteners",
    "spark.sql.streaming.checkpointlocation",
)
_DENIED_WORDS = ("extrajavaoptions", "extraclasspath", "extralibrarypath", "userclasspathfirst", "listener")
_LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\s*\d+)?\])?$")


def spark_conf_problem(key: str, value: str) -> str | None:
    """Why a job may not set Spark conf ``key`` to ``value``, or None when it may."""
    lowered = key.strip().lower()
    if lowered == "spark.master":
        return master_problem(value)
    last = lowered.rsplit(".", 1)[-1]
    if (
        lowered.startswith(_DENIED_PREFIXES)
        or any(word in lowered for word in _DENIED_WORDS)
        or last.endswith(("class", "classes"))
    ):
        return f"{key} can load code, change the JVM, touch files or reach hosts; only the worker's backfill.spark.* keys may set it"
    reason = denied_reason(lowered)  # *.location, *.path, *.url, … under any Spark prefix
    if reason is not None:
        return f"{key} {reason}; only the worker's backfill.spark.* keys may set it"
    return None


def master_problem(master: str) -> str | None:
    """A job may choose a local master (``local``, ``local[4]``, ``local[*]``); a cluster is the operator's."""
    if _LOCAL_MASTER.fullmatch(master.strip()):
        return None
    return (
        f"spark master {master!r} is not local: a job may ask for local[N]; the operator chooses a cluster "
        "with the worker key backfill.spark.master"
    )


def kafka_option_problem(key: str, value: str) -> str | None:
    """Why a job may not pass Kafka client option ``key`` (its Spark ``kafka.`` prefix removed), or None."""
    reason = denied_reason(key.removeprefix("kafka."), value)
    return None if reason is None else f"{key} {reason}"
