"""Keyed log compaction with Kafka's semantics (``cleanup.policy=compact``).

* :mod:`.digest` / :mod:`.offset_map` -- the key digest -> latest offset map, bounded in bytes;
* :mod:`.columns` -- many batches decoded at once;
* :mod:`.txn` -- producer and transaction facts a pass must respect;
* :mod:`.plan` -- the cleanable range, the dirty ratio, grouping of segments;
* :mod:`.cleaner` -- one pass over a partition (map, then rewrite);
* :mod:`.swap` -- the crash-safe ``.cleaned`` -> ``.swap`` -> final-name protocol;
* :mod:`.manager` / :mod:`.background` -- the cleaner checkpoint, manual and background runs.

Use it through :meth:`embedlog.Log.compact` and :meth:`embedlog.Log.start_cleaner`.
"""

from .manager import DEFAULT_MAP_BYTES, Compactor
from .offset_map import OffsetMap
from .stats import CompactionStats

__all__ = ["DEFAULT_MAP_BYTES", "CompactionStats", "Compactor", "OffsetMap"]
