"""The one way into the metadata table's files for the code that fills it.

Only :mod:`metadata_table` names, writes or deletes metadata-table files. The indexer (and any
table service to come) works through :class:`PartitionWriter` on the driver and through
:class:`PartitionBuild` in Spark tasks, which is small and picklable:

* schedule: :meth:`PartitionWriter.create_partition` makes every file group of a new partition;
* build: :meth:`PartitionWriter.begin_build` starts the metadata compaction instant that writes a
  partition's base files; in tasks, :meth:`PartitionBuild.records` makes a data file's records and
  :meth:`PartitionBuild.write_group` writes one file group's base file behind a marker;
  :meth:`PartitionWriter.complete_build` completes the instant;
* catch-up and sync: :meth:`PartitionWriter.logged_partitions` says which partitions a data
  instant is logged in, :meth:`PartitionWriter.log_instant` writes the logs it lacks (skipping
  those that exist), :meth:`PartitionWriter.apply` applies an instant that completed without the
  index (a commit, or a clean, rollback or restore);
* failure and drop: :meth:`PartitionWriter.discard_failed_builds`, :meth:`PartitionWriter.drop`.

An index type plugs in through :mod:`metadata_table.index_types` (its record schema, its key, how
its records are made from a data file's footer); nothing here or in the indexer changes per type.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from metadata_table.index_types import index_type
from metadata_table.layout import (
    FILES,
    METADATA_FOLDER,
    NOTHING,
    base_file_name,
    file_group_id,
    file_group_of,
    file_key,
)
from metadata_table.maintenance import compact
from metadata_table.migrate import MigrationResult, has_legacy_index, migrate
from metadata_table.partition_stats import superseded
from metadata_table.reader import MetadataReader
from metadata_table.records import DataFileInfo, aggregate_partition_stats, info_from_storage
from metadata_table.table import MetadataTable, check_indexable, split_by_group, write_base_file
from metadata_table.validate import PartitionReport, validate
from timeline.commit_metadata import CommitMetadata
from timeline.errors import MarkerAlreadyExistsError, StorageFileNotFoundError
from timeline.fs_view import FileSystemView
from timeline.index_state import IndexState
from timeline.instant import Action, Instant, State, normalize_timestamp
from timeline.locks import LockHandle
from timeline.markers import DirectMarkers, IOType, Marker, marker_folder
from timeline.removals import REMOVAL_ACTIONS
from timeline.storage import Storage
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

#: (partition path, file name, size, instant) of a committed data file
DataFile = tuple[str, str, int, str]


@dataclass(frozen=True)
class PartitionBuild:
    """One partition's base files, being written as metadata compaction instant ``instant`` over
    every data file committed up to ``covers_upto``. Shipped to Spark tasks."""

    partition: str
    groups: int
    columns: tuple[str, ...]
    instant: str
    covers_upto: str
    #: paths of committed files that are not the latest of their file group at ``covers_upto``
    #: (left out by an index type recomputed over latest files: ``partition_stats``)
    superseded: frozenset[str] = frozenset()

    def records(self, infos: Sequence[DataFileInfo]) -> pa.Table:
        """This partition's records of some data files (from their footers), as one table; for
        ``partition_stats``, partial aggregates that :meth:`write_group` combines."""
        kind = index_type(self.partition)
        if self.superseded:
            infos = [i for i in infos if i.path not in self.superseded]
        return kind.records(infos, self.columns)

    @property
    def written_where_read(self) -> bool:
        """Whether a build's read tasks write this partition's file groups (one task per group,
        holding the data files whose records go there), so its records are never shuffled."""
        return index_type(self.partition).written_where_read

    def group_of(self, file: DataFile) -> int:
        """The file group a data file's records go to (for a type keyed by data file)."""
        partition, name, _, _ = file
        return file_group_of(file_key(partition, name), self.groups)

    def write_group(
        self, storage: Storage, group: int, parts: Sequence[bytes], marker_instant: str
    ) -> tuple[str, str, int]:
        """Write file group ``group``'s base file, its marker first (in ``marker_instant``'s
        folder, so a failed attempt's files are found and deleted), from the group's records in
        ``parts`` (what :func:`file_records` made). ``storage`` is the data table's. A retried
        task finds its marker, and its file whole (creates are atomic). Returns (partition, file
        group, size)."""
        fg = file_group_id(self.partition, group)
        name = base_file_name(fg, self.instant)
        with contextlib.suppress(MarkerAlreadyExistsError):
            DirectMarkers(storage, marker_instant).create(
                Marker(f"{METADATA_FOLDER}/{self.partition}", name, IOType.CREATE)
            )
        kind = index_type(self.partition)
        tables = [_from_ipc(p).cast(kind.schema) for p in parts]
        records = pa.concat_tables(tables) if tables else kind.schema.empty_table()
        if kind.recomputed:  # the tasks' partial aggregates, as the table was at covers_upto
            records = aggregate_partition_stats(records, self.covers_upto)
        size = write_base_file(
            storage.child(METADATA_FOLDER),
            self.partition,
            fg,
            self.instant,
            records,
            self.covers_upto,
        )
        return self.partition, fg, size


@dataclass(frozen=True)
class Survey:
    unapplied: dict[str, tuple[Instant, list[str]]]
    lost: dict[str, str]
    described: dict[str, dict[str, Any]]


def _unapplied(
    reader: MetadataReader, partitions: Sequence[str], lost: Mapping[str, str] | None = None
) -> dict[str, tuple[Instant, list[str]]]:
    """``lost``, when the caller has it already, saves listing each partition again."""
    lost = _lost(reader, partitions) if lost is None else lost
    found: dict[str, tuple[Instant, list[str]]] = {}
    for partition in partitions:
        if partition in lost:
            continue
        for instant in reader.unapplied(partition):
            found.setdefault(instant.timestamp, (instant, []))[1].append(partition)
    return dict(sorted(found.items(), key=lambda item: normalize_timestamp(item[0])))


def _lost(reader: MetadataReader, partitions: Sequence[str]) -> dict[str, str]:
    found = {p: reader.lost(p) for p in partitions}
    return {p: reason for p, reason in found.items() if reason}


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()


#: data files whose records a build task makes at once (bounded: each holds its bloom filter)
RECORDS_CHUNK = 500


def file_records(
    storage: Storage, files: Iterator[DataFile], builds: Sequence[PartitionBuild]
) -> Iterator[tuple[int, int, bytes]]:
    """(build index, file group, records) for ``files``: each file's footer read once, and per
    file group of each build one Arrow table, as Arrow IPC stream bytes for the shuffle; no row
    is ever a Python object (a Spark task's body)."""
    per_build: list[list[pa.Table]] = [[] for _ in builds]
    chunk: list[DataFileInfo] = []

    def flush() -> None:
        for number, build in enumerate(builds):
            per_build[number].append(build.records(chunk))
        chunk.clear()

    for partition, name, size, instant in files:
        chunk.append(info_from_storage(storage, partition, name, size, instant))
        if len(chunk) == RECORDS_CHUNK:
            flush()
    if chunk:
        flush()
    for number, build in enumerate(builds):
        if per_build[number]:
            records = pa.concat_tables(per_build[number])
            for group, table in split_by_group(records, build.groups).items():
                yield number, group, _ipc(table)


class PartitionWriter:
    """The metadata table of ``table``, as the indexer writes it."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._mdt = MetadataTable(table)

    # --- what can be indexed, and how --------------------------------------------------------------

    def check_indexable(self) -> None:
        check_indexable(self.table)

    def configured_groups(self, partition: str) -> int:
        return index_type(partition).configured_groups(self.table.config)

    def takes_columns(self, partition: str) -> bool:
        return index_type(partition).takes_columns

    def migrate(self) -> MigrationResult:
        return migrate(self.table)

    def has_legacy_index(self) -> bool:
        return has_legacy_index(self.table)

    # --- schedule and build ------------------------------------------------------------------------

    def create_partition(self, partition: str, groups: int, lock: LockHandle) -> None:
        """Every file group of a new partition, as empty base files covering nothing, so writers
        never see a partial set of file groups."""
        empty = index_type(partition).schema.empty_table()
        instant_time = self.table.timeline.generator.next()
        self._mdt.write_base_files(partition, empty, NOTHING, instant_time, groups, lock)

    def visible_files(self, timeline: Timeline, upto: str, state: IndexState) -> list[DataFile]:
        """Every committed data file up to ``upto``, listed by the ``files`` partition when it is
        completed, else by storage."""
        listing = None
        if FILES in state.completed:
            from metadata_table.reads import IndexedSnapshot

            listing = IndexedSnapshot(self.table, timeline).indexed_files
        view = FileSystemView(self.table.timeline, timeline, listing=listing)
        committed = {i.timestamp for i in timeline.write_timeline().completed()}
        limit = normalize_timestamp(upto)
        return [
            (b.partition_path, b.file_name, b.size, b.instant_time)
            for b in view.all_base_files
            if b.instant_time in committed and normalize_timestamp(b.instant_time) <= limit
        ]

    def begin_build(
        self, partition: str, covers_upto: str, groups: int, columns: Sequence[str]
    ) -> PartitionBuild:
        instant_time = self.table.timeline.generator.next()
        older = frozenset[str]()
        if index_type(partition).recomputed:
            older = superseded(self.table, self.table.timeline.load(), covers_upto)
        self._mdt.begin_base_files(partition, covers_upto, instant_time, groups)
        return PartitionBuild(partition, groups, tuple(columns), instant_time, covers_upto, older)

    def complete_build(self, build: PartitionBuild, sizes: Mapping[str, int]) -> None:
        inflight = Instant(build.instant, Action.COMPACTION, State.INFLIGHT)
        self._mdt.complete_base_files(inflight, dict(sizes))

    def discard_failed_builds(
        self, partitions: Sequence[str], marker_instant: str | None = None
    ) -> None:
        """Delete the base files of metadata compaction instants that never completed (a crashed
        build), those instants, and the markers ``marker_instant``'s build left."""
        mdt = self._mdt
        for instant in mdt.timeline.load().with_actions(Action.COMPACTION).pending():
            for partition in partitions:
                for entry in mdt.storage.list(partition):
                    if entry.name.endswith(f"_{instant.timestamp}.parquet"):
                        mdt.storage.delete(entry.path)
            mdt.timeline.delete_pending(instant)
        if marker_instant is not None:
            self.delete_markers(marker_instant)

    def delete_markers(self, marker_instant: str) -> None:
        """The markers of ``marker_instant``'s build (once it completed, or was discarded)."""
        self.table.storage.delete(marker_folder(marker_instant), recursive=True)

    def drop(self, partitions: Sequence[str], marker_instant: str | None = None) -> None:
        """Delete partitions' files (their states are the caller's, under the lock), pending
        metadata compactions with them, and the markers ``marker_instant``'s build left."""
        for partition in partitions:
            self._mdt.storage.delete(partition, recursive=True)
        self.discard_failed_builds(partitions, marker_instant)

    # --- catch-up and sync -------------------------------------------------------------------------

    def logged_partitions(self, data_instant: str) -> set[str]:
        """The partitions a completed metadata deltacommit of ``data_instant`` wrote logs to."""
        delta = self._mdt.timeline.load().get(data_instant, Action.DELTA_COMMIT)
        if delta is None or not delta.is_completed:
            return set()
        return set(self._mdt.timeline.read_json(delta).get("logFiles", {}))

    def log_instant(
        self, lock: LockHandle, instant: Instant, columns: Mapping[str, Sequence[str]]
    ) -> None:
        """Write, under the lock, the log files completed data instant ``instant`` lacks in the
        partitions named by ``columns`` (partition -> its columns); logs that exist are kept."""
        metadata = CommitMetadata.from_bytes(self.table.timeline.read_content(instant))
        infos = self._infos_of(instant, metadata)
        touched = {s.partition_path for s in metadata.write_stats}
        for partition, cols in columns.items():
            rows = self._mdt.instant_records(partition, infos, cols, touched=touched)
            self._mdt.write_logs(partition, instant.timestamp, rows, lock)

    def apply(
        self, lock: LockHandle, instant: Instant, partitions: Sequence[str], state: IndexState
    ) -> None:
        """Apply, under the lock, a completed instant these partitions do not reflect: a commit
        (its files' records) or a clean, rollback or restore (deletion records)."""
        reader = self._mdt.reader(self.table.timeline.load())
        columns = tuple(state.column_stats_columns)
        records = {}
        if instant.action in REMOVAL_ACTIONS:
            removal = reader.removal(instant)
            touched = set(removal.deleted) | set(removal.whole_partitions)
            for p in partitions:
                if index_type(p).recomputed:
                    records[p] = self._mdt.instant_records(p, [], columns, touched=touched)
                else:
                    records[p] = self._mdt.tombstones(reader, p, removal)
        else:
            metadata = reader.commit_metadata(instant)
            infos = self._infos_of(instant, metadata)
            touched = {s.partition_path for s in metadata.write_stats}
            for p in partitions:
                records[p] = self._mdt.instant_records(p, infos, columns, touched=touched)
        self._mdt.apply_completed(instant.timestamp, records, lock)

    def _infos_of(
        self, instant: Instant, metadata: CommitMetadata | None = None
    ) -> list[DataFileInfo]:
        """The footers of the data files a completed instant wrote. A file a later clean or
        restore already deleted is left out: it is no longer live, and that removal's own
        deletion records account for it."""
        if metadata is None:
            metadata = CommitMetadata.from_bytes(self.table.timeline.read_content(instant))
        infos = []
        for s in metadata.write_stats:
            try:
                infos.append(
                    info_from_storage(
                        self.table.storage,
                        s.partition_path,
                        s.file_name,
                        s.file_size_in_bytes,
                        instant.timestamp,
                    )
                )
            except StorageFileNotFoundError:
                logger.warning("%s of %s is no longer on storage: not indexed", s.path, instant)
        return infos

    # --- what the partitions reflect ---------------------------------------------------------------

    def unapplied(self, partitions: Sequence[str]) -> dict[str, tuple[Instant, list[str]]]:
        """Completed data instants that ``partitions`` (completed ones) do not reflect, oldest
        first, each with those partitions; lost partitions are left out (they are rebuilt)."""
        if not partitions:
            return {}
        return _unapplied(self._mdt.reader(self.table.timeline.load()), partitions)

    def lost(self, partitions: Sequence[str]) -> dict[str, str]:
        """Completed partitions whose files vanished or were replaced, with the reason."""
        return _lost(self._mdt.reader(self.table.timeline.load()), partitions)

    def survey(self, completed: Sequence[str], inflight: Sequence[str]) -> Survey:
        """What status reports, from one snapshot read once: the unapplied instants and lost
        partitions of the completed partitions, and of every partition the newest data instant
        it reflects (None when lost), its files and bytes."""
        reader = self._mdt.reader(self.table.timeline.load())
        lost = _lost(reader, completed)
        described = {}
        for partition in [*completed, *inflight]:
            files, size = reader.size(partition)
            reflects = None if partition in lost else reader.reflects_upto(partition)
            described[partition] = {"reflects_upto": reflects, "files": files, "bytes": size}
        return Survey(_unapplied(reader, completed, lost) if completed else {}, lost, described)

    # --- maintenance -------------------------------------------------------------------------------

    def file_group_count(self, partition: str) -> int:
        return len(self._mdt.file_groups(partition))

    def compact(
        self, partition: str, progress: Callable[[int, int], None] | None = None
    ) -> Instant | None:
        return compact(self.table, partition, progress)

    def validate(self, progress: Callable[[int, int], None] | None = None) -> list[PartitionReport]:
        return validate(self.table, progress)


__all__ = [
    "NOTHING",
    "DataFile",
    "MigrationResult",
    "PartitionBuild",
    "PartitionReport",
    "PartitionWriter",
    "Survey",
    "file_records",
]
