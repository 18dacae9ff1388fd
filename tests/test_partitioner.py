"""embedlog.partitioner: Kafka's murmur2 and keyed partition choice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from embedlog.partitioner import murmur2, partition_for_key, partitions_for_keys

# Apache Kafka's UtilsTest.testMurmur2 vectors (signed 32-bit results).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), list(JAVA_VECTORS.items()))
def test_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_result_is_signed_32_bit() -> None:
    hashes = [murmur2(bytes([i]) * (i % 9)) for i in range(256)]
    assert all(-(2**31) <= h < 2**31 for h in hashes)
    assert any(h < 0 for h in hashes)


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_matches_kafka_python(key: bytes) -> None:
    # kafka-python returns the same 32 bits, unsigned
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == murmur2(key)


class _Cluster:
    """The three calls kafka-python's DefaultPartitioner makes on its cluster metadata."""

    def __init__(self, n: int) -> None:
        self.n = n

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.n))

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.n))


@given(st.binary(max_size=40), st.integers(1, 1000))
@settings(max_examples=200, deadline=None)
def test_partition_matches_kafka_python_partitioner(key: bytes, n: int) -> None:
    expected = DefaultPartitioner().partition("t", key, key, b"v", b"v", _Cluster(n))
    assert partition_for_key(key, n) == expected
    assert 0 <= expected < n


@given(st.lists(st.binary(max_size=33), max_size=60), st.integers(1, 64))
@settings(max_examples=150, deadline=None)
def test_vectorised_matches_scalar(keys: list[bytes], n: int) -> None:
    got = partitions_for_keys(keys, n)
    assert got.dtype == np.int64 and got.shape == (len(keys),)
    assert got.tolist() == [partition_for_key(k, n) for k in keys]


def test_invalid_partition_count() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
    with pytest.raises(ValueError):
        partitions_for_keys([b"k"], 0)
