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
  instant is logged in, :meth:`PartitionWriter.apply` applies an instant to the partitions that
  lack it (a commit, or a clean, rollback or restore; logs that exist are kept),
  :meth:`PartitionWriter.lag` says what completed partitions lack, and a partition is rebuilt in
  place by :meth:`PartitionWriter.ensure_file_groups` and a build;
* failure and drop: :meth:`PartitionWriter.discard_failed_builds`, :meth:`PartitionWriter.drop`;
* requests: :func:`secondary_index_refusal` says why a column cannot have a secondary index,
  :func:`key_fields_refusal` why a table's record keys cannot be made from its files.

An index type plugs in through :mod:`metadata_table.index_types` (its record schema, its key, how
its records are made from a data file's footer or a log file's records); nothing here or in the indexer changes per type.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa

from metadata_table.group_records import GroupRecords
from metadata_table.index_types import index_type
from metadata_table.layout import (
    BLOOM_FILTERS,
    FILES,
    METADATA_FOLDER,
    NOTHING,
    base_file_name,
    file_group_id,
    file_group_of,
    file_key,
    in_file_order,
)
from metadata_table.maintenance import compact
from metadata_table.migrate import MigrationResult, has_legacy_index, migrate
from metadata_table.partition_stats import superseded
from metadata_table.reader import MetadataReader
from metadata_table.records import DataFile, DataFileInfo, info_of, virtual_keys
from metadata_table.records import key_fields_refusal as key_fields_refusal
from metadata_table.records import secondary_index_refusal as secondary_index_refusal
from metadata_table.table import MetadataTable, split_by_group, write_base_file
from metadata_table.validate import PartitionReport, validate
from metadata_table.workers import chunked as chunked  # the build's readers
from metadata_table.workers import map_chunks as map_chunks
from metadata_table.workers import workers_for as workers_for
from timeline.commit_metadata import CommitMetadata
from timeline.errors import MarkerAlreadyExistsError, StorageFileNotFoundError
from timeline.fs_view import FileSystemView, parquet_file_rows
from timeline.index_state import IndexState
from timeline.instant import Action, Instant, State, normalize_timestamp
from timeline.keys import KeyGenerator
from timeline.locks import LockHandle
from timeline.markers import DirectMarkers, IOType, Marker, marker_folder
from timeline.removals import REMOVAL_ACTIONS, Removal
from timeline.storage import Storage
from timeline.table import Table
from timeline.timeline import CommittedWrites, Timeline

logger = logging.getLogger(__name__)

#: a file group's records from one task: Arrow IPC bytes (from Spark tasks) or a table (in process)
RecordsPart: TypeAlias = bytes | pa.Table


@dataclass(frozen=True)
class PartitionBuild:
    """One partition's base files, being written as metadata compaction instant ``instant`` over
    every data file committed up to ``covers_upto``. Shipped to Spark tasks."""

    partition: str
    groups: int
    columns: tuple[str, ...]
    instant: str
    covers_upto: str
    #: paths of committed files that are not in the latest file slice of their file group at
    #: ``covers_upto`` (left out by the index types over latest files: ``partition_stats``, the
    #: record and secondary indexes)
    superseded: frozenset[str] = frozenset()
    #: the write instants committed up to ``covers_upto``: the log blocks a build counts
    counted: CommittedWrites | None = None
    #: the key generator of a table without meta fields (record keys made from key fields)
    keygen: KeyGenerator | None = None

    def records(self, infos: Sequence[DataFileInfo]) -> pa.Table:
        """This partition's records of some data files (from footers, or log files' records), as
        one table; for
        ``partition_stats``, partial aggregates that :meth:`write_group` combines."""
        kind = index_type(self.partition)
        if self.superseded:
            infos = [i for i in infos if i.path not in self.superseded]
        return kind.records(infos, self.columns)

    @property
    def row_columns(self) -> tuple[str, ...] | None:
        """The columns (beside the record key) of data files' rows this build reads; None: no
        rows (its records come from footers)."""
        return index_type(self.partition).row_columns

    @property
    def written_where_read(self) -> bool:
        """Whether a build's read tasks write this partition's file groups (one task per group,
        holding the data files whose records go there), so its records are never shuffled."""
        return index_type(self.partition).written_where_read

    def group_of(self, file: DataFile) -> int:
        """The file group a data file's records go to (for a type keyed by data file)."""
        partition, name, _, _ = file
        return file_group_of(file_key(partition, name), self.groups)

    def conformed(self, part: RecordsPart) -> pa.Table:
        """A part of this partition's records (what :func:`file_records` made) as a table of
        the partition's schema in memory, as :meth:`write_group` takes them all."""
        table = _from_ipc(part) if isinstance(part, bytes) else part
        return table.cast(index_type(self.partition).memory_schema)

    def write_group(
        self,
        storage: Storage,
        group: int,
        parts: Sequence[RecordsPart],
        marker_instant: str,
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
        tables = [self.conformed(p) for p in parts]
        records = pa.concat_tables(tables) if tables else kind.memory_schema.empty_table()
        # the tasks' partial aggregates, or records of a slice's files in several tasks, as the
        # table was at covers_upto
        records = kind.combine(records, self.covers_upto)
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


def _nothing(instant: str) -> bool:
    return False


#: data files whose records a build task makes at once (bounded: each holds its bloom filter)
RECORDS_CHUNK = 500


def file_records(
    storage: Storage,
    files: Iterator[DataFile],
    builds: Sequence[PartitionBuild],
    shuffled: bool = True,
) -> Iterator[tuple[int, int, RecordsPart]]:
    """(build index, file group, records) for ``files``: each file read once (a base file's
    footer, a log file's blocks of :attr:`PartitionBuild.counted` instants), and per
    file group of each build one Arrow table; no row is ever a Python object (a Spark task's
    body). With ``shuffled`` (Spark) the tables go as Arrow IPC stream bytes, those of an index
    keyed by record key as runs in file order (the write step merges the tasks' runs); in one
    process they stay tables."""
    per_build: list[list[pa.Table]] = [[] for _ in builds]
    chunk: list[DataFileInfo] = []
    # the builds of one job cover the same instant (one plan, or one resync)
    counted = builds[0].counted if builds else None
    is_counted = counted.__contains__ if counted is not None else _nothing
    rows = row_columns(builds)
    bloom = any(b.partition == BLOOM_FILTERS for b in builds)
    keygen = builds[0].keygen if builds else None

    def flush() -> None:
        for number, build in enumerate(builds):
            per_build[number].append(build.records(chunk))
        chunk.clear()

    for partition, name, size, instant in files:
        info = info_of(storage, partition, name, size, instant, is_counted, bloom, rows, keygen)
        if info is None:
            continue  # a log file without counted blocks
        chunk.append(info)
        if len(chunk) == RECORDS_CHUNK:
            flush()
    if chunk:
        flush()
    for number, build in enumerate(builds):
        if per_build[number]:
            records = pa.concat_tables(per_build[number])
            for group, table in split_by_group(records, build.groups, build.partition).items():
                if not shuffled:
                    yield number, group, table
                    continue
                if build.row_columns is not None:  # a sorted run: the writer merges runs
                    table = in_file_order(build.partition, table)
                yield number, group, _ipc(table)


def hold_group_records(
    storage: Storage,
    chunks: Sequence[list[DataFile]],
    builds: Sequence[PartitionBuild],
    held: GroupRecords,
    workers: int,
    processes: bool,
    progress: Callable[[int], None] | None = None,
) -> None:
    """The records of ``builds`` over the data files of ``chunks``, read by ``workers`` workers
    (processes or threads) and held in ``held`` per (build number, file group), as
    :meth:`PartitionBuild.conformed` tables: the reading half of a build without Spark, and of
    ``validate``'s rebuild. ``progress(chunks read)`` after each chunk."""
    read = map_chunks(_chunk_records, (storage, builds), chunks, workers, processes)
    for done, made in enumerate(read, start=1):
        for number, group, part in made:
            held.add((number, group), builds[number].conformed(part))
        if progress is not None:
            progress(done)


def _chunk_records(
    context: tuple[Storage, Sequence[PartitionBuild]], chunk: list[DataFile]
) -> list[tuple[int, int, RecordsPart]]:
    """A worker's part of :func:`hold_group_records`."""
    storage, builds = context
    return list(file_records(storage, iter(chunk), builds, shuffled=False))


@dataclass(frozen=True)
class TableSize:
    """What the file-group counts of new index partitions are laid out for."""

    #: the files of the latest file slices (base and log files)
    data_files: int
    #: the records of the latest base files, estimated (None: not worked out)
    records: int | None = None


def table_size(table: Table, records: bool = True) -> TableSize:
    """The latest file slices' files, and (with ``records``) their base files' records estimated
    without reading them: their bytes times the rows per byte of the newest one (its footer
    read), as the record and secondary indexes' file-group count needs it."""
    from metadata_table.read.snapshot import IndexedSnapshot

    snapshot = IndexedSnapshot(table)
    data_files = len(snapshot.view.latest_paths())
    if not records:
        return TableSize(data_files)
    newest = snapshot.newest_base_file
    if newest is None:
        return TableSize(data_files, 0)
    rows = parquet_file_rows(table.storage, newest.path)
    total = sum(b.size for b in snapshot.view.latest_base_files())
    return TableSize(data_files, int(total * rows / max(1, newest.size)))


def table_schema(table: Table) -> pa.Schema | None:
    """The table's schema, that of its newest base file (None: no data yet)."""
    from metadata_table.read.snapshot import IndexedSnapshot

    schema = IndexedSnapshot(table).table_schema
    return schema if len(schema) else None


def row_columns(builds: Sequence[PartitionBuild]) -> tuple[str, ...] | None:
    """The columns of data files' rows the builds need (None: none reads rows)."""
    wanted = [b.row_columns for b in builds if b.row_columns is not None]
    if not wanted:
        return None
    return tuple(sorted({c for columns in wanted for c in columns}))


class PartitionWriter:
    """The metadata table of ``table``, as the indexer writes it."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._mdt = MetadataTable(table)

    # --- what can be indexed, and how --------------------------------------------------------------

    def configured_groups(self, partition: str, size: TableSize | None = None) -> int:
        """File groups a new ``partition`` gets, by the table's ``size`` (worked out here when
        not given) where its type's count grows with the table."""
        kind = index_type(partition)
        if size is None and (kind.keyed_by_record or kind.keyed_by_data_file):
            size = self.layout_size([partition])
        data_files, records = (size.data_files, size.records) if size else (None, None)
        return kind.configured_groups(self.table.config, records, data_files)

    def table_size(self, records: bool = True) -> TableSize:
        return table_size(self.table, records)

    def layout_size(self, partitions: Sequence[str]) -> TableSize | None:
        """The table's size, as new ``partitions`` are laid out for (None: their counts do not
        grow with the table); the records only when one of them is keyed by record key."""
        kinds = [index_type(p) for p in partitions]
        if not any(k.keyed_by_record or k.keyed_by_data_file for k in kinds):
            return None
        return table_size(self.table, records=any(k.keyed_by_record for k in kinds))

    def table_schema(self) -> pa.Schema | None:
        return table_schema(self.table)

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

    def visible_files(
        self, timeline: Timeline, upto: str, state: IndexState, use_index: bool = True
    ) -> list[DataFile]:
        """Every committed data file up to ``upto`` (archived commits' included), listed by the
        ``files`` partition when it is usable and current (and ``use_index``), else by
        storage; and the log files of committed file slices (a build counts their blocks of
        instants up to ``upto``)."""
        view = FileSystemView(self.table.timeline, timeline)
        if use_index and FILES in state.completed:
            from metadata_table.read.snapshot import IndexedSnapshot

            view = IndexedSnapshot(self.table, timeline).view
        limit = normalize_timestamp(upto)
        bases = [
            (b.partition_path, b.file_name, b.size, b.instant_time)
            for b in view.all_base_files
            if view.is_committed(b.instant_time) and normalize_timestamp(b.instant_time) <= limit
        ]
        logs = [
            (log.partition_path, log.file_name, log.size, "")
            for log in view.committed_log_files
            if normalize_timestamp(log.name.base_instant) <= limit
        ]
        return bases + logs

    def begin_build(
        self, partition: str, covers_upto: str, groups: int, columns: Sequence[str]
    ) -> PartitionBuild:
        instant_time = self.table.timeline.generator.next()
        timeline = self.table.timeline.load()
        older = frozenset[str]()
        kind = index_type(partition)
        if kind.recomputed or kind.keyed_by_record:
            older = superseded(self.table, timeline, covers_upto)
        counted = CommittedWrites(timeline, as_of=covers_upto)
        keygen = virtual_keys(self.table)
        self._mdt.begin_base_files(partition, covers_upto, instant_time, groups)
        return PartitionBuild(
            partition, groups, tuple(columns), instant_time, covers_upto, older, counted, keygen
        )

    def complete_build(
        self, build: PartitionBuild, sizes: Mapping[str, int], lock: LockHandle | None = None
    ) -> None:
        inflight = Instant(build.instant, Action.COMPACTION, State.INFLIGHT)
        self._mdt.complete_base_files(inflight, dict(sizes), lock)

    def discard_failed_builds(
        self, partitions: Sequence[str], marker_instant: str | None = None, only_dead: bool = False
    ) -> list[str]:
        """Delete the metadata compaction instants of ``partitions`` that never completed (a
        crashed build, resync or compaction), their base files, and the markers
        ``marker_instant``'s build left; with ``only_dead``, only those whose heartbeat stopped.
        Pending ones of other partitions are left alone."""
        discarded = self._mdt.discard_pending_base_files(partitions, only_dead)
        if marker_instant is not None:
            self.delete_markers(marker_instant)
        return discarded

    def abandon(self, builds: Sequence[PartitionBuild], marker_instant: str) -> None:
        """Undo builds that failed in this process: their instants, base files and markers."""
        partitions = [b.partition for b in builds]
        self._mdt.discard_pending_base_files(partitions, instants=[b.instant for b in builds])
        self.delete_markers(marker_instant)

    def ensure_file_groups(self, partition: str, lock: LockHandle) -> int:
        """The file groups of completed ``partition``, for a rebuild in place: when its files
        were lost (a file group without a base file of ours, or none at all), its folder is
        emptied and every file group made again (empty base files), so that writers keep
        writing to it while it is rebuilt. Returns the file-group count."""
        slices = self._mdt.reader(self.table.timeline.load()).slices(partition)
        if slices and all(base is not None for base, _ in slices.values()):
            return len(slices)
        groups = self.configured_groups(partition)
        lock.ensure_valid()
        self._mdt.storage.delete(partition, recursive=True)
        self.create_partition(partition, groups, lock)
        return groups

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
        """The partitions a completed metadata deltacommit of ``data_instant`` wrote logs to,
        whose logs are still there: an aborted build's partitions were deleted after its
        catch-up logged them, and the build that resumes its plan must log them again."""
        delta = self._mdt.timeline.load().get(data_instant, Action.DELTA_COMMIT)
        if delta is None or not delta.is_completed:
            return set()
        logged = self._mdt.timeline.read_json(delta).get("logFiles", {})
        present = set()
        for partition, names in logged.items():
            existing = {e.name for e in self._mdt.storage.list(partition)} if names else set()
            if all(name in existing for name in names):
                present.add(partition)
        return present

    def apply(
        self, lock: LockHandle, instant: Instant, partitions: Sequence[str], state: IndexState
    ) -> None:
        """Apply, under the lock, a completed instant these partitions do not reflect: a commit
        (its files' records) or a clean, rollback or restore (deletion records), read from the
        active timeline or from Hudi's archive."""
        reader = self._mdt.reader(self.table.timeline.load())
        columns = tuple(state.column_stats_columns)
        records = {}
        if instant.action in REMOVAL_ACTIONS:
            removal = reader.removal(instant)
            records = self._mdt.removal_records(reader, partitions, removal, columns)
        else:
            metadata = reader.commit_metadata(instant)
            by_files = [p for p in partitions if not index_type(p).keyed_by_record]
            infos = self._infos_of(instant, metadata) if by_files else []
            touched = {s.partition_path for s in metadata.write_stats}
            for p in partitions:
                if p in by_files:
                    records[p] = self._mdt.instant_records(p, infos, columns, touched=touched)
                else:
                    records[p] = self._mdt.instant_delta(reader, p, instant, metadata)
        self._mdt.apply_completed(instant.timestamp, records, lock)

    def apply_removal(self, lock: LockHandle, removal: Removal) -> None:
        """The index's update for a rollback this kernel performs, inside its critical section
        (the hook :func:`timeline.rollback.clean_failed_writes` takes)."""
        self._mdt.apply_removal(lock, removal)

    def _infos_of(self, instant: Instant, metadata: CommitMetadata) -> list[DataFileInfo]:
        """The footers of the data files a completed instant wrote (of a log file, its blocks of
        that instant). A file a later clean or restore already deleted is left out: it is no
        longer live, and that removal's own deletion records account for it."""
        infos = []
        keygen = virtual_keys(self.table)
        for s in metadata.write_stats:
            try:
                info = info_of(
                    self.table.storage,
                    s.partition_path,
                    s.file_name,
                    s.file_size_in_bytes,
                    instant.timestamp,
                    instant.timestamp.__eq__,
                    keygen=keygen,
                )
            except StorageFileNotFoundError:
                logger.warning("%s of %s is no longer on storage: not indexed", s.path, instant)
                continue
            if info is not None:
                infos.append(info)
        return infos

    # --- what the partitions reflect ---------------------------------------------------------------

    def lag(
        self, partitions: Sequence[str]
    ) -> tuple[dict[str, tuple[Instant, list[str]]], dict[str, str]]:
        """What ``partitions`` (completed ones) lack, from one snapshot: the completed instants
        they do not reflect, oldest first, each with those partitions; and the lost ones (files
        gone or replaced, or a lag that cannot be known), with why."""
        if not partitions:
            return {}, {}
        reader = self._mdt.reader(self.table.timeline.load())
        lost = _lost(reader, partitions)
        return _unapplied(reader, partitions, lost), lost

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
    "GroupRecords",
    "MigrationResult",
    "PartitionBuild",
    "PartitionReport",
    "PartitionWriter",
    "Survey",
    "TableSize",
    "file_records",
    "hold_group_records",
]
