"""S3 archive → topic: replay what the S3 sink wrote, partition by partition, in offset order.

The driver lists the archive (the S3 source's layout parsing, so the same ``topics.dir``,
delimiters and format settings apply) and groups the objects by archived topic and Kafka
partition, ordered by their start offset. Each group is one Spark task, so a partition's records
are produced by one idempotent producer in their original order — to the same partition number
of the target topic, with their keys, headers and timestamps from the sink's sidecar objects.

Why the producing happens in Python here, unlike the other kinds: Spark's Kafka sink cannot set a
record's timestamp (it writes ``topic, key, value, headers, partition`` only), and the archive's
objects must be decoded by the S3 formats' Python readers anyway. Reading is per object, so the
work is batched; records are never pickled between the JVM and Python.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

from confluent_kafka import KafkaException, Producer

from sluice.connectors.backfill.context import ConverterLoader, JobContext
from sluice.connectors.backfill.errors import BackfillJobError
from sluice.connectors.backfill.kafka_admin import ensure_topic
from sluice.connectors.s3_common.formats import FormatSettings, make_format
from sluice.connectors.s3_common.storage import S3Storage
from sluice.connectors.source.s3.config import S3SourceConfig
from sluice.connectors.source.s3.task import decode_headers

log = logging.getLogger(__name__)


def _source_config(source: Any) -> Any:
    return S3SourceConfig.parse({**source.config, "topics": ",".join(source.topics)})


def list_archive(source: Any) -> list[tuple[str, int, list[str]]]:
    """``(topic, kafka partition, object keys in offset order)`` of every archived partition."""
    cfg = _source_config(source)
    layout = cfg.layout()
    extension = make_format(cfg.format_settings()).extension
    storage = S3Storage(cfg.connection())
    groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for topic in source.topics:
        for key in storage.list_keys(layout.topic_prefix(topic)):
            parsed = layout.parse(key)
            if parsed is None or parsed.topic != topic or parsed.extension != extension:
                continue
            groups.setdefault((topic, parsed.kafka_partition), []).append((parsed.start_offset, key))
    return [(t, p, [k for _, k in sorted(objs)]) for (t, p), objs in sorted(groups.items())]


def replay_partition_function(
    source_config: Mapping[str, Any],
    topics: list[str],
    converters: Mapping[str, Any],
    targets: Mapping[str, str],
    bootstrap: str,
    producer_config: Mapping[str, str],
    load_converters: ConverterLoader,
) -> Any:
    """The ``mapPartitions`` function replaying groups of objects; yields ``(records, bytes)``.
    ``load_converters`` (the worker's, see :class:`~sluice.connectors.backfill.context.BackfillRuntime`)
    configures the converters in each Spark task."""
    source_config = dict(source_config)
    converters = dict(converters)

    def run(groups: Iterable[tuple[str, int, list[str]]]) -> Iterator[tuple[int, int]]:
        replay = _ArchiveReplay(source_config, topics, load_converters(converters), bootstrap, producer_config)
        total_records = total_bytes = 0
        for topic, partition, object_keys in groups:
            records, size = replay.partition(topic, partition, object_keys, targets.get(topic, topic))
            total_records += records
            total_bytes += size
        replay.finish()
        yield (total_records, total_bytes)

    return run


class _ArchiveReplay:
    """One Spark task's replay: the archive's reader, the source converters and an idempotent producer."""

    def __init__(
        self,
        source_config: Mapping[str, Any],
        topics: list[str],
        converters: tuple[Any, Any, Any],
        bootstrap: str,
        producer_config: Mapping[str, str],
    ) -> None:
        cfg = S3SourceConfig.parse({**source_config, "topics": ",".join(topics)})
        self.layout = cfg.layout()
        self.fmt = make_format(cfg.format_settings())
        self.keys_fmt = make_format(FormatSettings(format=cfg.keys_format_class, compression=cfg.s3_compression_type))
        self.json_fmt = make_format(FormatSettings(format="json"))
        self.storage = S3Storage(cfg.connection())
        self.key_conv, self.value_conv, self.header_conv = converters
        self.errors: list[str] = []
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",
            **producer_config,
        })

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and len(self.errors) < 5:
            self.errors.append(str(err))

    def partition(self, topic: str, partition: int, object_keys: list[str], target: str) -> tuple[int, int]:
        """Produce the objects of one archived partition, in order; ``(records, bytes)`` produced."""
        total_records = total_bytes = 0
        listed = set(self.storage.list_keys(self.layout.topic_prefix(topic)))
        for key in object_keys:
            parsed = self.layout.parse(key)
            assert parsed is not None
            values = list(self.fmt.read(self.storage.get_object(key)))
            keys = self.sidecar(parsed, listed, "keys", self.keys_fmt, len(values))
            headers = self.sidecar(parsed, listed, "headers", self.json_fmt, len(values))
            stamps = self.sidecar(parsed, listed, "timestamps", self.json_fmt, len(values))
            records, size = self.produce(target, partition, values, keys, headers, stamps)
            total_records += records
            total_bytes += size
            self.producer.poll(0)
            if self.errors:
                break
        return total_records, total_bytes

    def sidecar(self, parsed: Any, listed: set[str], kind: str, sfmt: Any, n: int) -> list[Any] | None:
        """The items of an object's ``kind`` sidecar, or ``None`` when it is missing or does not match."""
        skey = parsed.sidecar(kind, sfmt.extension)
        if skey not in listed:
            return None
        items = list(sfmt.read(self.storage.get_object(skey)))
        return items if len(items) == n else None

    def produce(
        self,
        target: str,
        partition: int,
        values: list[Any],
        keys: list[Any] | None,
        headers: list[Any] | None,
        stamps: list[Any] | None,
    ) -> tuple[int, int]:
        """Produce one object's records (with their sidecars' keys, headers and timestamps)."""
        producer, on_delivery = self.producer, self.on_delivery
        key_conv, value_conv, header_conv = self.key_conv, self.value_conv, self.header_conv
        total_records = total_bytes = 0
        for i, value in enumerate(values):
            k = keys[i] if keys else None
            kb = key_conv.from_connect_data(target, None, k) if k is not None else None
            vb = value_conv.from_connect_data(target, None, value) if value is not None else None
            hs = decode_headers(headers[i]) if headers else None
            hb = [(h, header_conv.from_connect_header(target, h, None, v)) for h, v in hs] if hs else None
            ts = stamps[i] if stamps else None
            while True:
                try:
                    producer.produce(
                        target, value=vb, key=kb, partition=partition, headers=cast(Any, hb),
                        timestamp=ts or 0, on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as exc:
                    raise RuntimeError(f"producing to {target} failed: {exc}") from None
            total_records += 1
            total_bytes += (len(vb) if vb else 0) + (len(kb) if kb else 0)
        return total_records, total_bytes

    def finish(self) -> None:
        """Wait for every record's delivery; raise if any failed."""
        remaining = self.producer.flush(120)
        if self.errors or remaining:
            raise RuntimeError(f"replay into Kafka failed: {'; '.join(self.errors) or f'{remaining} records undelivered'}")


def run_s3_to_topic(spark: Any, spec: Any, ctx: JobContext, bootstrap: str, load_converters: ConverterLoader) -> dict[str, Any]:
    """Replay the archived topics of ``spec.source`` into their target topics."""
    source, target = spec.source, spec.target
    groups = list_archive(source)
    if not groups:
        raise BackfillJobError(f"no objects of topics {', '.join(source.topics)} found in bucket {source.config.get('s3.bucket.name')}")
    needed: dict[str, int] = {}
    for topic, partition, _ in groups:
        t = target.topics.get(topic, topic)
        needed[t] = max(needed.get(t, 0), partition + 1)
    for t, n in needed.items():
        have = ensure_topic(bootstrap, t, n)
        if have < n:
            raise BackfillJobError(f"target topic {t} has {have} partitions; the archive needs {n}")
    ctx.record("objects", sum(len(g[2]) for g in groups))
    cc = source.converter_config
    converters = {
        "key.converter": source.key_converter,
        "value.converter": source.value_converter,
        "header.converter": source.header_converter,
        "key": {k.removeprefix("key.converter."): v for k, v in cc.items() if k.startswith("key.converter.")},
        "value": {k.removeprefix("value.converter."): v for k, v in cc.items() if k.startswith("value.converter.")},
        "header": {k.removeprefix("header.converter."): v for k, v in cc.items() if k.startswith("header.converter.")},
    }
    load_converters(converters)  # an unknown class or a bad setting fails here, not in an executor
    fn = replay_partition_function(
        source.config, list(source.topics), converters, dict(target.topics), bootstrap, dict(target.producer), load_converters
    )
    rows_acc = spark.sparkContext.accumulator(0)
    sc = spark.sparkContext

    def counted(part: Iterable[Any]) -> Iterator[tuple[int, int]]:
        for rows, size in fn(part):
            rows_acc.add(rows)
            yield rows, size

    log.info("Replaying %d archived partitions of %s", len(groups), ", ".join(source.topics))
    results = sc.parallelize(groups, len(groups)).mapPartitions(counted).collect()
    rows = sum(r for r, _ in results)
    size = sum(b for _, b in results)
    ctx.progress(rows_done=rows, bytes_done=size, rows_total=rows)
    return {"rows": rows, "bytes": size, "partitions": len(groups), "topics": {t: target.topics.get(t, t) for t in source.topics}}


