"""Tiered storage: the write side of Kafka's KIP-405 for a local log folder.

A log opened with ``remote_uri=`` (``s3://bucket/prefix``, ``file:///path``: any URI
:func:`pyarrow.fs.FileSystem.from_uri` understands) copies, for every topic with
``remote.storage.enable=true``, each sealed segment with its indexes to the remote in the
background (the upkeep thread's tiering round, every ``remote.log.manager.task.interval.ms``),
publishes it in the partition's remote manifest only once every file of it is complete, and
deletes the local copy after ``local.retention.ms`` / ``local.retention.bytes``. Reads,
consumers and the command line read offsets below the first local segment from the remote
transparently; ``retention.ms`` / ``retention.bytes`` and ``delete_records`` delete remote
segments too.

Modules: :mod:`.store` (the remote folder: atomic puts, bounded gets, deletes, behind the
``_io.mark`` fault-injection seam), :mod:`.remote_manifest` (the manifest's format, checked as
untrusted input), :mod:`.tier` (a partition's published segments), :mod:`.read_cache` (the
fetched segments: index files whole, the ``.log`` by ranged reads from where reads start),
:mod:`.upload` (the upload protocol, local and total retention), :mod:`.manager` (the folder's
remote URI, the tiering round, the cache folder). Remote layout::

    <remote>/embedlog.json                                   copy of the topic table
    <remote>/<topic>-<partition>/<20 digits>.log|.index|.timeindex|.txnindex
    <remote>/<topic>-<partition>/embedlog.remote-manifest    the published segments
"""
