"""The Spark job kinds Sluice ships in this package, named by ``sluice.backfill_kinds`` entry points.

* ``jdbc_to_topic`` (:data:`JDBC_TO_TOPIC`): a table into a topic as the JDBC source writes it
  (:mod:`~sluice.connectors.backfill.jdbc_topic`), or, with ``target.cdc``, as the PostgreSQL CDC
  connector's snapshot does (:mod:`~sluice.connectors.backfill.cdc_topic`, which builds on
  ``jdbc_topic``, so the choice is made here). It checks the source URL at submit and answers the
  hand-off guard (:mod:`~sluice.connectors.backfill.cdc_owner`).
* ``s3_to_topic`` (:data:`S3_TO_TOPIC`): replays what the S3 sink archived
  (:mod:`~sluice.connectors.backfill.s3_topic`), with the worker's converters.

The worker loads these objects to check a spec, so this module imports only the URL parser: each
kind's module is imported when a job of that kind runs, for they need optional extras (psycopg,
SQLAlchemy, boto3/pyarrow) that a worker running other kinds may not have.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.context import BackfillRuntime, JobContext
from sluice.connectors.backfill.kinds import BackfillKind, TopicOwner
from sluice.connectors.backfill.source_url import backfill_url_problem


def _run_jdbc_to_topic(
    spark: Any, spec: Any, ctx: JobContext, bootstrap: str, runtime: BackfillRuntime
) -> dict[str, Any]:
    if spec.target.cdc is not None:
        # Imported here: psycopg (the postgres extra).
        from sluice.connectors.backfill.cdc_topic import run_cdc_snapshot

        return run_cdc_snapshot(spark, spec, ctx, bootstrap)
    # Imported here too: checking a spec needs none of it (its reads need SQLAlchemy, the jdbc extra).
    from sluice.connectors.backfill.jdbc_topic import run_jdbc_to_topic

    return run_jdbc_to_topic(spark, spec, ctx, bootstrap)


def _cdc_topic_owner(
    topic: str, source_table: str, name: str, config: Mapping[str, Any], written: Collection[str]
) -> TopicOwner | None:
    try:
        # The rule reuses the CDC source's own table filter and topic naming, which need the
        # optional psycopg (the postgres extra); without it no CDC connector runs here to guard.
        from sluice.connectors.backfill.cdc_owner import cdc_topic_owner
    except ImportError:
        return None
    return cdc_topic_owner(topic, source_table, name, config, written)


def _run_s3_to_topic(
    spark: Any, spec: Any, ctx: JobContext, bootstrap: str, runtime: BackfillRuntime
) -> dict[str, Any]:
    if runtime.load_converters is None:
        raise ConfigError("kind: s3_to_topic needs the worker's converters (run it on a worker)", key="kind")
    # Imported here: boto3 and pyarrow (the s3 extra).
    from sluice.connectors.backfill.s3_topic import run_s3_to_topic

    return run_s3_to_topic(spark, spec, ctx, bootstrap, runtime.load_converters)


JDBC_TO_TOPIC = BackfillKind(
    "jdbc_to_topic", _run_jdbc_to_topic, source_url_problem=backfill_url_problem, topic_owner=_cdc_topic_owner
)
S3_TO_TOPIC = BackfillKind("s3_to_topic", _run_s3_to_topic)
