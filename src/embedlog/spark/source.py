"""The ``embedlog`` Spark data source: batch reader, opt-in pushdown reader, and the hooks to the
stream reader and writer.

``spark.read.format("embedlog").load(path)`` gives the rows of Spark's Kafka source. The default
reader does not override ``pushFilters``: pyspark 4.3 fails any query whose reader does while
``spark.sql.python.filterPushdown.enabled`` is false (the default). With
``.option("pushFilters", "true")`` (and that conf on) the :class:`EmbedlogPushdownReader` turns
filters on topic, partition, offset and timestamp into narrower offset ranges.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from .options import (
    ReadOptions,
    parse_include_headers,
    parse_read_options,
    parse_write_options,
)
from .planning import RangeFilter, plan_batch
from .pushdown import push_filters
from .scan import ReadTask, planning_log, read_task
from .schema import arrow_schema, kafka_schema, resolve_columns

__all__ = ["EmbedlogDataSource", "EmbedlogPushdownReader", "EmbedlogReader"]


class EmbedlogDataSource(DataSource):  # type: ignore[misc]
    """``format("embedlog")``: read (batch and streaming) and append to an embedlog or Kafka
    log directory with the schema and options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "embedlog"

    def schema(self) -> StructType:
        # Called for batch and streaming alike, before Spark says which: check only what the
        # schema depends on; reader() / streamReader() validate the rest.
        return kafka_schema(parse_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        cls = EmbedlogPushdownReader if opts.push_filters else EmbedlogReader
        return cls(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import EmbedlogStreamReader

        return EmbedlogStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import EmbedlogWriter

        return EmbedlogWriter(parse_write_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import EmbedlogStreamWriter

        return EmbedlogStreamWriter(parse_write_options(self.options), schema, overwrite)


class EmbedlogReader(DataSourceReader):  # type: ignore[misc]
    """Batch reader: plans one task per (partition, segment run) and yields Arrow batches."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.columns = resolve_columns(schema)

    def _restrict(self) -> RangeFilter | None:
        return None

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        with planning_log(opts.path) as log:
            ranges = plan_batch(log, opts, self._restrict())
        return [
            ReadTask(opts.path, r.topic, r.partition, r.start, r.end, opts.fail_on_data_loss,
                     r.size_bytes)
            for r in ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadTask)
        return read_task(
            partition, self.columns, arrow_schema(self.schema), self.options.batch_rows
        )


class EmbedlogPushdownReader(EmbedlogReader):
    """Batch reader that also narrows its offset ranges with pushed-down filters."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.constraints: RangeFilter | None = None

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        self.constraints, rest = push_filters(filters)
        return rest

    def _restrict(self) -> RangeFilter | None:
        return self.constraints
