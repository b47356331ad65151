"""Which partition of an offsets topic a key goes to: Kafka's default (Java) partitioner.

Every writer of an offsets topic must put a key on the same partition, or the order of its records
is lost (a reset's tombstone on one partition, an older offset on another). Kafka Connect's workers
and Sluice's :class:`~offsets.kafka_log.KafkaLog` (librdkafka's ``murmur2_random``) both pick
``murmur2(key) & 0x7fffffff % partitions``; a transactional source task, whose one producer keeps
librdkafka's default partitioner for its data, names the partition of its offset records itself.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` (seed ``0x9747b28c``), as a signed int like Java's."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``, as Kafka's Java producer chooses it."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
