"""Spark auto-discovery shim: pyspark registers DefaultSource as the "embedlog" format.

Spark's Python workers import every top-level module named ``pyspark_*`` and register its
``DefaultSource`` under ``DefaultSource.name()``, so ``spark.read.format("embedlog")`` works with
no import and no ``spark.dataSource.register`` call once embedlog[spark] is installed.
"""

from embedlog.spark import EmbedlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
