"""How ``partition_stats`` stays exact: each record is recomputed from its whole data partition.

A partition's min and max cannot be kept by merging one commit's records into the last ones: an
upsert replaces a file version, a rollback or restore takes one away, and the old values must
leave the aggregate. So the records a data instant writes for ``partition_stats`` are not made
from its own files alone: for every data partition the instant touched, the partition's latest
base files *as the table is now* (plus, for a commit not completed yet, its own new files) are
aggregated again (:func:`recompute`), and a key no longer produced gets a tombstone.

Each record says when it was worked out (``computed``, an instant time taken under the table
lock); of several records of one key the newest computed wins (the reader's merge), whatever the
order of the data instants they were logged for, since a later computation saw every change the
earlier one saw. A base file written by an index build holds the table as of the instant it
covers up to, so its records are computed at that instant: every log written after the build
was scheduled wins over them. A change that did not go through this kernel (Apache Hudi's own
writer) is an instant ``partition_stats`` does not reflect: readers do not use the partition
until ``indexer sync`` applies it, which recomputes the partitions it touched.

The per-file stats come from the files' footers (read once per process: files never change).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata_table.layout import NON_PARTITIONED, PARTITION_STATS, PARTITION_STATS_SCHEMA
from metadata_table.reader import MetadataReader
from metadata_table.records import DataFileInfo, info_from_storage, partition_stats_records
from timeline.errors import StorageFileNotFoundError
from timeline.fs_view import BaseFile, FileSystemView
from timeline.storage import FileInfo, Storage
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

#: footers kept per process (data files are immutable: a path names one file's bytes forever)
FOOTER_CACHE_SIZE = 8192


class _Footers:
    def __init__(self, size: int) -> None:
        self.size = size
        self._cache: OrderedDict[tuple[str, int], pq.FileMetaData] = OrderedDict()
        self._lock = threading.Lock()

    def info(self, storage: Storage, base: BaseFile) -> DataFileInfo:
        key = (storage.uri(base.path), base.size)
        with self._lock:
            metadata = self._cache.get(key)
            if metadata is not None:
                self._cache.move_to_end(key)
        if metadata is None:
            info = info_from_storage(
                storage, base.partition_path, base.file_name, base.size, base.instant_time, False
            )
            with self._lock:
                self._cache[key] = info.metadata
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
            return info
        return DataFileInfo(
            base.partition_path, base.file_name, base.size, base.instant_time, metadata
        )


_FOOTERS = _Footers(FOOTER_CACHE_SIZE)


def latest_files(
    table: Table,
    timeline: Timeline,
    partitions: Iterable[str],
    pending: Sequence[DataFileInfo] = (),
) -> list[BaseFile]:
    """The latest committed base files of ``partitions`` (listing those folders only), with the
    files of a commit not completed yet (``pending``) in place of the versions they replace."""
    wanted = sorted(set(partitions))
    storage = table.storage

    def listing() -> list[FileInfo]:
        return [e for p in wanted for e in storage.list(p) if not e.is_dir]

    view = FileSystemView(table.timeline, timeline, listing=listing)
    latest = {(b.partition_path, b.file_id): b for b in view.latest_base_files(wanted)}
    for info in pending:
        base = BaseFile.parse(info.partition, info.file_name, info.size)
        if base is not None:
            latest[(base.partition_path, base.file_id)] = base
    return sorted(latest.values(), key=lambda b: b.path)


def recompute(
    table: Table,
    reader: MetadataReader,
    partitions: Iterable[str],
    columns: Sequence[str],
    infos: Sequence[DataFileInfo] = (),
    pending: bool = False,
) -> pa.Table:
    """The ``partition_stats`` records of data ``partitions`` as the table is now (``reader``'s
    data timeline, plus ``infos`` in place of the files they replace when their instant is
    ``pending``; footers in ``infos`` are not read again); keys of those partitions that
    ``reader`` holds and that are no longer produced (a column or a whole partition gone) become
    tombstones. Called under the table lock; the records' ``computed`` is later than every
    record ``reader`` holds for these partitions."""
    touched = set(partitions)
    if not touched:
        return PARTITION_STATS_SCHEMA.empty_table()
    current = reader.read(PARTITION_STATS, include_deleted=True)
    current = current.filter(pc.is_in(current.column("partition"), value_set=_names(touched)))
    newest = pc.max(current.column("computed")).as_py() if current.num_rows else None
    computed = table.timeline.generator.unclaimed_after(newest)
    known = {(i.partition, i.file_name): i for i in infos}
    latest = []
    for base in latest_files(table, reader.data_timeline, touched, infos if pending else ()):
        info = known.get((base.partition_path, base.file_name))
        if info is None:
            try:
                info = _FOOTERS.info(table.storage, base)
            except StorageFileNotFoundError:
                logger.warning("%s is no longer on storage: left out of partition_stats", base)
                continue
        latest.append(info)
    fresh = partition_stats_records(latest, list(columns) or None, computed)
    gone = current.filter(
        pc.and_(
            pc.invert(current.column("is_deleted")),
            pc.invert(pc.is_in(current.column("key"), value_set=fresh.column("key"))),
        )
    )
    if gone.num_rows:
        gone = _set(gone, "is_deleted", pa.array([True] * gone.num_rows))
        gone = _set(gone, "computed", pa.array([computed] * gone.num_rows, pa.string()))
        fresh = pa.concat_tables([fresh, gone.cast(PARTITION_STATS_SCHEMA)])
    return fresh.sort_by("key")


def _names(partitions: Iterable[str]) -> pa.Array:
    """Data partition paths as the records' ``partition`` values."""
    return pa.array([p or NON_PARTITIONED for p in partitions], pa.string())


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def superseded(table: Table, timeline: Timeline, upto: str | None = None) -> frozenset[str]:
    """Paths of committed base files (up to ``upto``) that are not the latest of their file
    group as of ``upto`` (older versions, replaced file groups): an index build over every
    committed file leaves these out of ``partition_stats``."""
    view = FileSystemView(table.timeline, timeline, as_of=upto)
    latest = {b.path for b in view.latest_base_files()}
    return frozenset(
        b.path
        for b in view.all_base_files
        if view.is_committed(b.instant_time) and b.path not in latest
    )


__all__ = ["latest_files", "recompute", "superseded"]
