"""Bulk loads and reprocessing on Spark: the only Sluice package that imports PySpark.

:func:`run_job` runs one backfill spec (see :mod:`sluice.worker.backfill.models`) of a job kind on the
process's shared SparkSession (:class:`~connectors.backfill.session.SparkSessionProvider`), inside a
Spark job group named after the run so :func:`cancel_job` can stop it. Failures come out as
:class:`BackfillJobError` carrying Spark's own error message (:mod:`sluice.connectors.backfill.errors`).

Job kinds are plugins (:mod:`~connectors.backfill.kinds`, the SPI): the worker finds them through the
``sluice.backfill_kinds`` entry points and hands :func:`run_job` the kind of the spec, so this module
names none. Sluice's are ``jdbc_to_topic`` and ``s3_to_topic`` (:mod:`~connectors.backfill.builtin_kinds`),
and ``topic_to_s3`` and ``topic_to_sink``, which run a sink connector's task and so live in the worker.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.context import BackfillRuntime, JobContext
from sluice.connectors.backfill.errors import BackfillCancelled, BackfillJobError, spark_error_message
from sluice.connectors.backfill.kinds import BackfillKind
from sluice.connectors.backfill.session import SparkSessionProvider, SparkUnavailable

__all__ = [
    "BackfillCancelled",
    "BackfillJobError",
    "BackfillKind",
    "BackfillRuntime",
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
    kind: BackfillKind,
    bootstrap_servers: str,
    runtime: BackfillRuntime | None = None,
) -> dict[str, Any]:
    """Run ``spec`` to completion with ``kind`` (the one its ``kind`` names) on the shared session;
    return the kind's summary. ``runtime`` is what the worker lends (the converter lookup).

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
        bootstrap = (
            getattr(spec.source, "bootstrap_servers", None)
            or getattr(spec.target, "bootstrap_servers", None)
            or bootstrap_servers
        )
        return kind.run(spark, spec, ctx, bootstrap, runtime or BackfillRuntime())
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


def cancel_job(provider: SparkSessionProvider, job_group: str) -> None:
    """Cancel the Spark jobs of ``job_group`` (a no-op before the session exists)."""
    if provider.started:
        provider.session().sparkContext.cancelJobGroup(job_group)
