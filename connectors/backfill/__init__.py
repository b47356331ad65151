"""Bulk loads and reprocessing on Spark: the only Sluice package that imports PySpark.

:func:`run_job` runs one backfill spec (see :mod:`sluice.worker.backfill.models`) on the process's shared
SparkSession (:class:`~connectors.backfill.session.SparkSessionProvider`), inside a Spark job
group named after the run so :func:`cancel_job` can stop it. Failures come out as
:class:`BackfillJobError` carrying Spark's own error message (:mod:`sluice.connectors.backfill.errors`).

Job kinds: ``jdbc_to_topic`` (:mod:`~connectors.backfill.jdbc_topic`; with ``target.cdc``, the CDC
connector's snapshot records, :mod:`~connectors.backfill.cdc_topic`), ``s3_to_topic``
(:mod:`~connectors.backfill.s3_topic`); ``topic_to_s3`` and ``topic_to_sink`` run a sink
connector's task, so the worker lends them (:class:`BackfillRuntime`, from ``sluice.worker.backfill``).
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.context import BackfillRuntime, JobContext
from sluice.connectors.backfill.errors import BackfillCancelled, BackfillJobError, spark_error_message
from sluice.connectors.backfill.session import SparkSessionProvider, SparkUnavailable

__all__ = [
    "BackfillCancelled",
    "BackfillRuntime",
    "BackfillJobError",
    "JobContext",
    "SparkSessionProvider",
    "SparkUnavailable",
    "cancel_job",
    "run_job",
]

log = logging.getLogger(__name__)


def run_job(
    provider: SparkSessionProvider,
    spec: Any,
    ctx: JobContext,
    *,
    bootstrap_servers: str,
    runtime: BackfillRuntime | None = None,
) -> dict[str, Any]:
    """Run ``spec`` to completion on the shared session; return the kind's summary. ``runtime`` is
    what the worker lends (the kinds that run a connector's task, the converter lookup).

    Raises :class:`BackfillCancelled` when :func:`cancel_job` stopped it, :class:`BackfillJobError`
    with Spark's message when it failed, :class:`ConfigError` for a spec the data contradicts.
    """
    confs = dict(spec.spark.conf)
    if spec.spark.master:
        confs["spark.master"] = spec.spark.master
    spark = provider.session(confs)
    sc = spark.sparkContext
    # Job groups are per thread (PySpark pins Python threads to JVM threads), so this run's
    # Spark jobs — and only they — carry the group.
    sc.setJobGroup(ctx.job_group, f"sluice backfill {spec.id}", interruptOnCancel=True)
    for key, value in spec.spark.conf.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    try:
        bootstrap = getattr(spec.source, "bootstrap_servers", None) or getattr(spec.target, "bootstrap_servers", None) or bootstrap_servers
        return _dispatch(spark, spec, ctx, bootstrap, runtime or BackfillRuntime())
    except (BackfillJobError, BackfillCancelled, ConfigError):
        if ctx.cancelled:
            raise BackfillCancelled("cancelled") from None
        raise
    except Exception as exc:
        if ctx.cancelled:
            raise BackfillCancelled("cancelled") from None
        log.debug("Backfill %s failed", spec.id, exc_info=True)
        raise BackfillJobError(spark_error_message(exc)) from None
    finally:
        try:
            sc.setLocalProperty("spark.jobGroup.id", None)
        except Exception:  # noqa: BLE001 - best effort: the Spark context may be stopping
            pass


def _dispatch(spark: Any, spec: Any, ctx: JobContext, bootstrap: str, runtime: BackfillRuntime) -> dict[str, Any]:
    # Each kind's module is imported when a job of that kind runs: they need optional extras
    # (psycopg, SQLAlchemy, boto3/pyarrow) that a worker running other kinds may not have.
    if spec.kind in runtime.kinds:
        return runtime.kinds[spec.kind](spark, spec, ctx, bootstrap)
    if spec.kind == "jdbc_to_topic" and getattr(spec.target, "cdc", None) is not None:
        # The CDC connector's snapshot records; cdc_topic builds on jdbc_topic, so it is chosen here.
        from sluice.connectors.backfill.cdc_topic import run_cdc_snapshot

        return run_cdc_snapshot(spark, spec, ctx, bootstrap)
    if spec.kind == "jdbc_to_topic":
        from sluice.connectors.backfill.jdbc_topic import run_jdbc_to_topic

        return run_jdbc_to_topic(spark, spec, ctx, bootstrap)
    if spec.kind == "s3_to_topic":
        from sluice.connectors.backfill.s3_topic import run_s3_to_topic

        if runtime.load_converters is None:
            raise ConfigError("kind: s3_to_topic needs the worker's converters (run it on a worker)", key="kind")
        return run_s3_to_topic(spark, spec, ctx, bootstrap, runtime.load_converters)
    if spec.kind in ("topic_to_s3", "topic_to_sink"):
        raise ConfigError(f"kind: {spec.kind} runs a sink connector's task: run it on a worker", key="kind")
    raise ConfigError(f"kind: unknown job kind {spec.kind!r}", key="kind")


def cancel_job(provider: SparkSessionProvider, job_group: str) -> None:
    """Cancel the Spark jobs of ``job_group`` (a no-op before the session exists)."""
    if provider.started:
        provider.session().sparkContext.cancelJobGroup(job_group)
