"""Topic range → any sink connector (and → S3 through the S3 sink, so the export has its layout).

The worker's own job kinds, ``topic_to_sink`` (:data:`TOPIC_TO_SINK`) and ``topic_to_s3``
(:data:`TOPIC_TO_S3`): they run a sink connector's task, which only the worker can build. They are
declared as ``sluice.backfill_kinds`` entry points like the kinds of :mod:`sluice.connectors.backfill`,
so the worker finds every kind one way, and loads this module only when it needs one of them.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.connectors.backfill.context import BackfillRuntime, JobContext
from sluice.connectors.backfill.kinds import BackfillKind
from sluice.connectors.backfill.topic_range import read_range, resolve_range
from sluice.worker.backfill.sink_runner import InProcessSink, sink_partition_function

log = logging.getLogger(__name__)


def run_topic_to_sink(
    spark: Any, spec: Any, ctx: JobContext, bootstrap: str, sink_config: dict[str, Any]
) -> dict[str, Any]:
    """Read the range with Spark and feed each Kafka partition's records to a sink task."""
    source = spec.source
    rng = resolve_range(source, bootstrap)
    ctx.progress(rows_total=rng.total, rows_done=0, bytes_done=0)
    df = read_range(spark, source, rng, bootstrap)
    if df is None:
        return {"rows": 0, "partitions": 0}
    config = {"name": f"backfill-{spec.id}", **sink_config, "topics": source.topic}
    # Validate the connector config here, so a typo fails now with the key named, not in an executor.
    InProcessSink(f"backfill-{spec.id}", config, bootstrap).stop()
    rows_acc = spark.sparkContext.accumulator(0)
    bytes_acc = spark.sparkContext.accumulator(0)
    fn = sink_partition_function(f"backfill-{spec.id}", config, bootstrap)

    def counted(batches: Any) -> Any:
        for out in fn(batches):
            rows_acc.add(out.column(0)[0].as_py())
            bytes_acc.add(out.column(1)[0].as_py())
            yield out

    log.info(
        "Reprocessing %s partitions %s (%d records) into %s",
        rng.topic,
        rng.partitions,
        rng.total,
        sink_config.get("connector.class"),
    )
    stats = df.mapInArrow(counted, "rows long, bytes long").groupBy().sum("rows", "bytes").collect()
    rows = int(stats[0][0] or 0) if stats else 0
    size = int(stats[0][1] or 0) if stats else 0
    ctx.progress(rows_done=rows, bytes_done=size)
    return {
        "rows": rows,
        "bytes": size,
        "partitions": len(rng.partitions),
        "offsets": {"start": rng.start, "end": rng.end},
    }


def s3_sink_config(target_config: dict[str, Any]) -> dict[str, Any]:
    """The S3 sink config of an export: the user's keys with keys, headers and timestamps kept,
    so a replay restores the records exactly, and a flush size when none is given."""
    config = {
        "connector.class": "S3Sink",
        "flush.size": 100_000,
        "store.kafka.keys": True,
        "store.kafka.headers": True,
        "store.kafka.timestamps": True,
        **target_config,
    }
    return config


def run_topic_to_s3(spark: Any, spec: Any, ctx: JobContext, bootstrap: str, runtime: BackfillRuntime) -> dict[str, Any]:
    """The ``topic_to_s3`` kind: the range through the S3 sink, in its layout."""
    return run_topic_to_sink(spark, spec, ctx, bootstrap, s3_sink_config(spec.target.config))


def run_topic_to_connector(
    spark: Any, spec: Any, ctx: JobContext, bootstrap: str, runtime: BackfillRuntime
) -> dict[str, Any]:
    """The ``topic_to_sink`` kind: the range through the sink connector the spec configures."""
    return run_topic_to_sink(spark, spec, ctx, bootstrap, dict(spec.target.config))


TOPIC_TO_S3 = BackfillKind("topic_to_s3", run_topic_to_s3)
TOPIC_TO_SINK = BackfillKind("topic_to_sink", run_topic_to_connector)
