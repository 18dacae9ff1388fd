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
from typing import Any

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
    check_read_options,
    parse_include_headers,
    parse_read_options,
    parse_write_options,
)
from .planning import RangeFilter, plan_batch
from .pushdown import push_filters
from .scan import make_tasks, read_task
from .schema import arrow_schema, kafka_schema, resolve_columns
from .stable import dense_topics, planning_view

__all__ = ["EmbedlogDataSource", "EmbedlogPushdownReader", "EmbedlogReader"]


class EmbedlogDataSource(DataSource):  # type: ignore[misc]
    """``format("embedlog")``: read (batch and streaming) and append to an embedlog or Kafka
    log directory with the schema and options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "embedlog"

    def schema(self) -> StructType:
        # Called by load() for batch and streaming alike, before Spark says which: every option
        # is checked here, so a bad one fails load() itself; what is valid for only one kind
        # (endingOffsets, startingOffsets=latest) is checked by reader() / streamReader().
        check_read_options(self.options)
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
    """Batch reader: plans tasks of one or more offset ranges and yields Arrow batches.

    The offsets are resolved once per reader (one query) against one snapshot of the selected
    partitions, so ``earliest``/``latest`` and the data-loss checks agree however the log moves
    meanwhile."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.columns = resolve_columns(schema)
        self._planned: list[InputPartition] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planned"] = None  # executors need the options and schema, not every task
        return state

    def _restrict(self) -> RangeFilter | None:
        return None

    def partitions(self) -> list[InputPartition]:
        if self._planned is None:
            opts = self.options
            view = planning_view(opts.path, opts.read_committed)
            try:
                planned = plan_batch(view, opts, self._restrict())
                dense = dense_topics(view)
            finally:
                view.close()
            self._planned = make_tasks(opts.path, planned,
                                       fail_on_data_loss=opts.fail_on_data_loss,
                                       read_committed=opts.read_committed, dense=dense)
        return list(self._planned)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
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
