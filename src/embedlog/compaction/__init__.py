"""compaction subpackage."""
