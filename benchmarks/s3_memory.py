"""Peak memory of the S3 sink while 1,000 directories (field partitions or time buckets) are open.

One process drives an :class:`~connectors.sink.s3.S3SinkTask` against a real S3 server with
records that cycle over ``--directories`` encoded partitions in runs of ``--run`` records, so
without a cap every directory holds an open object at once. It prints the growth of the
process's peak RSS (sampled after every put) over its RSS after start-up, the task's own
accounting of buffered bytes, and the objects written. With ``partitioner.max.open.files`` at
50, memory stays near 50 open objects however many directories there are; with the cap at
1,000 it grows with the data. Records are generated batch by batch, so the input itself holds
no memory.

Run: ``python -m benchmarks.s3_memory`` (starts its own S3 server), or pass ``--endpoint`` and
``--bucket`` to use a running one; ``--json`` prints one JSON line (the integration test reads it).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import uuid
from typing import Any

import orjson

HOUR = 3_600_000
T0 = 1_700_000_000_000


def rss_bytes() -> int:
    """The process's resident set size now (Linux ``/proc``; ``ru_maxrss`` elsewhere, a high-water mark)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sink_config(args: argparse.Namespace, max_open: int) -> dict[str, str]:
    config = {
        "s3.bucket.name": args.bucket,
        "store.url": args.endpoint,
        "s3.region": args.region,
        "aws.access.key.id": args.access_key,
        "aws.secret.access.key": args.secret_key,
        "format.class": "json",
        "flush.size": str(10**9),  # only the cap commits objects
        "partitioner.max.open.files": str(max_open),
        "store.kafka.offsets": "false",
    }
    if args.mode == "time":
        config.update({
            "partitioner.class": "TimeBasedPartitioner",
            "path.format": "'d'=yyyy-MM-dd/'h'=HH",
            "partition.duration.ms": str(HOUR),
            "timestamp.extractor": "Record",
            "topics.dir": f"mem-{max_open}",
        })
    else:
        config.update({"partitioner.class": "FieldPartitioner", "partition.field.name": "dir", "topics.dir": f"mem-{max_open}"})
    return config


def measure(args: argparse.Namespace, max_open: int) -> dict[str, Any]:
    from sluice.connectors.api import SinkRecord, SinkRecordBatch, TopicPartition
    from sluice.connectors.sink.s3.task import S3SinkTask

    task = S3SinkTask()
    task.start(sink_config(args, max_open), None)  # type: ignore[arg-type]
    task.open([TopicPartition("t", 0)])
    pad = "x" * args.record_bytes
    baseline = peak = rss_bytes()
    peak_buffered = 0
    total = args.directories * args.per_directory
    offset = 0
    start = time.perf_counter()
    while offset < total:
        batch = []
        for o in range(offset, min(total, offset + 500)):
            directory = (o // args.run) % args.directories
            batch.append(SinkRecord("t", 0, o, {"dir": directory, "o": o, "pad": pad}, timestamp=T0 + directory * HOUR))
        task.put(SinkRecordBatch.of(batch))
        offset += len(batch)
        del batch
        peak_buffered = max(peak_buffered, task.memory_bytes)
        peak = max(peak, rss_bytes())
    open_objects = len(task.writers[TopicPartition("t", 0)].open)
    elapsed = time.perf_counter() - start
    task.stop()
    return {
        "max_open_files": max_open,
        "directories": args.directories,
        "records": total,
        "data_mb": round(total * (args.record_bytes + 30) / 1e6, 1),
        "peak_rss_growth_mb": round((peak - baseline) / 2**20, 1),
        "peak_buffered_mb": round(peak_buffered / 1e6, 1),
        "open_objects_at_end": open_objects,
        "seconds": round(elapsed, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint")
    parser.add_argument("--bucket")
    parser.add_argument("--access-key", default="sluice")
    parser.add_argument("--secret-key", default="sluice-secret")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--mode", choices=("field", "time"), default="field")
    parser.add_argument("--max-open", type=int, default=50)
    parser.add_argument("--directories", type=int, default=1_000)
    parser.add_argument("--per-directory", type=int, default=20)
    parser.add_argument("--run", type=int, default=10, help="consecutive records per directory")
    parser.add_argument("--record-bytes", type=int, default=5_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.endpoint:
        result = measure(args, args.max_open)
        print(orjson.dumps(result).decode() if args.json else result)
        return 0
    from tests.services.s3_server import S3Server

    with S3Server(kill_with_parent=True) as s3:
        args.endpoint, args.access_key, args.secret_key, args.region = s3.endpoint_url, s3.access_key, s3.secret_key, s3.region
        args.bucket = s3.create_bucket(f"mem-{uuid.uuid4().hex[:12]}")
        print(f"S3 sink memory: {args.directories:,} {args.mode} directories x {args.per_directory} records of "
              f"{args.record_bytes:,} bytes, runs of {args.run}")
        for max_open in (50, args.directories):
            # Each measurement in a fresh process, so one run's freed memory cannot hide the next one's.
            import subprocess

            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.s3_memory", "--endpoint", args.endpoint, "--bucket", args.bucket,
                 "--access-key", args.access_key, "--secret-key", args.secret_key, "--region", args.region, "--mode", args.mode,
                 "--max-open", str(max_open), "--directories", str(args.directories),
                 "--per-directory", str(args.per_directory), "--run", str(args.run),
                 "--record-bytes", str(args.record_bytes), "--json"],
                check=True, capture_output=True, text=True,
            )
            r = orjson.loads(out.stdout.strip().splitlines()[-1])
            print(f"  partitioner.max.open.files={max_open:>5}: peak RSS +{r['peak_rss_growth_mb']:>7.1f} MB, "
                  f"peak buffered {r['peak_buffered_mb']:>7.1f} MB, {r['data_mb']} MB written in {r['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
