"""The offsets-topic partitioner is Kafka's: murmur2 as Java computes it (Kafka's own test vectors)."""

from __future__ import annotations

import pytest

from sluice.offsets.partitioning import key_partition, murmur2

# Kafka's UtilsTest.testMurmur2 vectors: every tail length (0-3 bytes) and a long key.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_equals_kafkas(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_a_key_partition_is_the_positive_hash_modulo_the_partition_count() -> None:
    key = b'["jdbc",{"table":"orders"}]'
    assert key_partition(key, 25) == (murmur2(key) & 0x7FFFFFFF) % 25
    assert {key_partition(bytes([i]) * 7, 5) for i in range(64)} == set(range(5))
