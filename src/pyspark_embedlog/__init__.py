"""Spark auto-discovery shim: pyspark registers DefaultSource as the "embedlog" format."""
