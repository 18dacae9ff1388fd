"""Helpers shared by the Spark tests: build small logs and compute the rows the Python API
says a Spark read must return."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

import embedlog

BASE_TS = 1_700_000_000_000


def make_log(path: str, *, segment_bytes: int = 2048) -> dict[str, int]:
    """Topic ``events`` (3 partitions, several segments each, keys, null values, headers,
    increasing timestamps) and ``other`` (1 partition). Returns records per topic."""
    with embedlog.open(path) as log:
        log.create_topic("events", partitions=3, config={"segment.bytes": segment_bytes})
        log.create_topic("other", partitions=1)
        for i in range(300):
            headers = [("i", str(i).encode()), ("n", None)] if i % 7 == 0 else None
            log.append(
                "events",
                None if i % 50 == 49 else f"value-{i}".encode() * (1 + i % 3),
                key=None if i % 11 == 0 else f"key-{i % 13}".encode(),
                headers=headers,
                timestamp=BASE_TS + 10 * i,
                partition=i % 3,
            )
        log.append_batch("other", [f"o{i}".encode() for i in range(20)],
                         timestamps=[BASE_TS + i for i in range(20)])
    return {"events": 300, "other": 20}


def expected_rows(
    path: str,
    topics: Iterable[str] | None = None,
    *,
    ranges: dict[tuple[str, int], tuple[int, int]] | None = None,
    headers: bool = False,
) -> list[dict[str, Any]]:
    """The rows of Spark's Kafka schema, from the Python API, sorted by topic/partition/offset."""
    rows: list[dict[str, Any]] = []
    with embedlog.open(path, read_only=True) as log:
        for topic in topics if topics is not None else log.topics():
            for p in range(log.partition_count(topic)):
                lo, hi = (ranges or {}).get((topic, p), (None, None))
                if ranges is not None and (topic, p) not in ranges:
                    continue
                for r in log.read(topic, p, lo, end_offset=hi):
                    row = {
                        "key": r.key,
                        "value": r.value,
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000,
                                                               tz=dt.timezone.utc),
                        "timestampType": r.timestamp_type,
                    }
                    if headers:
                        row["headers"] = (
                            [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
                        )
                    rows.append(row)
    return rows


def spark_rows(df: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows through Arrow (exact bytes and tz-aware timestamps), sorted."""
    rows: list[dict[str, Any]] = df.toArrow().to_pylist()
    return sorted(rows, key=lambda r: (r.get("topic", ""), r.get("partition", 0),
                                       r.get("offset", 0)))


def project(rows: list[dict[str, Any]], columns: Iterable[str]) -> list[dict[str, Any]]:
    cols = list(columns)
    return [{c: r[c] for c in cols} for r in rows]


def run_available_now(spark: Any, path: str, checkpoint: str, collect: Any,
                      options: dict[str, str]) -> Any:
    """Run an ``availableNow`` stream of the embedlog log at ``path`` (``startingOffsets``
    earliest unless ``options`` say otherwise) into ``foreachBatch(collect)`` to its end; the
    stopped query."""
    reader = spark.readStream.format("embedlog")
    for key, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, value)
    query = (reader.load(path).writeStream.foreachBatch(collect)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    return query
