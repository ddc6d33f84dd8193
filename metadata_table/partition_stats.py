"""How ``partition_stats`` stays exact: each record is recomputed from its whole data partition.

A partition's min and max cannot be kept by merging one commit's records into the last ones: an
upsert replaces a file version, a rollback or restore takes one away, and the old values must
leave the aggregate. So the records a data instant writes for ``partition_stats`` are not made
from its own files alone: for every data partition the instant touched, the files of its latest
file slices *as the table is now* (base files and, on a merge-on-read table, their log files;
plus, for a commit not completed yet, its own new files) are
aggregated again (:func:`recompute`), and a key no longer produced gets a tombstone.

Each record says when it was worked out (``computed``, an instant time taken under the table
lock); of several records of one key the newest computed wins (the reader's merge), whatever the
order of the data instants they were logged for, since a later computation saw every change the
earlier one saw. A base file written by an index build holds the table as of the instant it
covers up to, so its records are computed at that instant: every log written after the build
was scheduled wins over them. A change that did not go through this kernel (Apache Hudi's own
writer) is an instant ``partition_stats`` does not reflect: readers do not use the partition
until ``indexer sync`` applies it, which recomputes the partitions it touched.

The per-file stats come from base files' footers and log files' records (read once per process:
a path names one file's bytes, and a log file's size says how much of it was appended).
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
from metadata_table.records import (
    DataFileInfo,
    info_from_log,
    info_from_storage,
    partition_stats_records,
)
from timeline.errors import StorageFileNotFoundError
from timeline.fs_view import BaseFile, FileSystemView, LogFile
from timeline.storage import FileInfo, Storage
from timeline.table import Table
from timeline.timeline import CommittedWrites, Timeline

logger = logging.getLogger(__name__)

#: footers kept per process (data files are immutable: a path names one file's bytes forever)
FOOTER_CACHE_SIZE = 8192


class _Footers:
    def __init__(self, size: int) -> None:
        self.size = size
        self._cache: OrderedDict[tuple[str, int], pq.FileMetaData] = OrderedDict()
        #: a log file's info, and the instants of its blocks it counted
        self._logs: OrderedDict[tuple[str, int], tuple[DataFileInfo, frozenset[str]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def log_info(
        self, storage: Storage, log: LogFile, committed: CommittedWrites
    ) -> DataFileInfo | None:
        """A log file's info, its committed blocks counted; kept, and used again while the
        same of its blocks count (a rollback of a completed deltacommit makes some stop)."""
        key = (storage.uri(log.path), log.size)
        with self._lock:
            cached = self._logs.get(key)
            if cached is not None:
                self._logs.move_to_end(key)
        if cached is not None:
            kept, counted = cached
            if {i for i in kept.block_instants if i in committed} == counted:
                return kept
        info = info_from_log(
            storage, log.partition_path, log.file_name, log.size, committed.__contains__, False
        )
        if info is not None:
            counted = frozenset(i for i in info.block_instants if i in committed)
            with self._lock:
                self._logs[key] = (info, counted)
                while len(self._logs) > self.size:
                    self._logs.popitem(last=False)
        return info

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
) -> tuple[list[BaseFile | LogFile], CommittedWrites]:
    """The files of the latest file slices of ``partitions`` (listing those folders only), with
    the base files of a commit not completed yet (``pending``) in place of the versions they
    replace; and the instants the snapshot counts as committed."""
    wanted = sorted(set(partitions))
    storage = table.storage

    def listing() -> list[FileInfo]:
        return [e for p in wanted for e in storage.list(p) if not e.is_dir]

    view = FileSystemView(table.timeline, timeline, listing=listing)
    slices = {(s.partition_path, s.file_id): s for s in view.latest_file_slices(wanted)}
    files: dict[tuple[str, str], list[BaseFile | LogFile]] = {
        key: ([s.base_file] if s.base_file is not None else []) + list(s.log_files)
        for key, s in slices.items()
    }
    for info in pending:
        base = BaseFile.parse(info.partition, info.file_name, info.size)
        if base is not None:  # a new base file starts a new slice (our writer's: no log files)
            files[(base.partition_path, base.file_id)] = [base]
    out = [f for group in files.values() for f in group]
    return sorted(out, key=lambda f: f.path), view.committed


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
    files, committed = latest_files(table, reader.data_timeline, touched, infos if pending else ())
    for file in files:
        info = known.get((file.partition_path, file.file_name))
        if info is None:
            try:
                if isinstance(file, LogFile):
                    info = _FOOTERS.log_info(table.storage, file, committed)
                else:
                    info = _FOOTERS.info(table.storage, file)
            except StorageFileNotFoundError:
                logger.warning("%s is no longer on storage: left out of partition_stats", file)
                continue
        if info is not None:
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
    """Paths of committed files (base files up to ``upto``, and log files) that are not in the
    latest file slice of their file group as of ``upto`` (older versions, compacted slices,
    replaced file groups): an index build over every committed file leaves these out of
    ``partition_stats``."""
    view = FileSystemView(table.timeline, timeline, as_of=upto)
    latest = view.latest_paths()
    bases = (b.path for b in view.all_base_files if view.is_committed(b.instant_time))
    logs = (log.path for log in view.committed_log_files)
    return frozenset(path for path in (*bases, *logs) if path not in latest)


__all__ = ["latest_files", "recompute", "superseded"]
