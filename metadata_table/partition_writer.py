"""The one way into the metadata table's files for the code that fills it.

Only :mod:`metadata_table` names, writes or deletes metadata-table files. The indexer (and any
table service to come) works through :class:`PartitionWriter` on the driver and through
:class:`PartitionBuild` in Spark tasks, which is small and picklable (it lives in
:mod:`metadata_table.group_records`, below this module and validate, and is re-exported here):

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
* Apache Hudi's own metadata table (``indexer run --format hudi``): :class:`HudiPartitionWriter`
  (from :mod:`metadata_table.hudi_build`, re-exported here) plans a build (Hudi's Avro plan),
  builds its partitions, catches them up, publishes them, and drops, syncs and validates them;
* requests: :func:`secondary_index_refusal` says why a column cannot have a secondary index,
  :func:`key_fields_refusal` why a table's record keys cannot be made from its files.

An index type plugs in through :mod:`metadata_table.index_types` (its record schema, its key, how
its records are made from a data file's footer or a log file's records); nothing here or in the indexer changes per type.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from metadata_table.group_records import (
    PartitionBuild,
    file_records,
    in_key_order,
    run_build_local,
    start_record_workers,
)
from metadata_table.hudi_build import HudiPartitionWriter
from metadata_table.hudi_table import hudi_status
from metadata_table.index_types import index_type
from metadata_table.layout import (
    FILES,
    NOTHING,
    is_secondary_index,
    secondary_column,
)
from metadata_table.maintenance import UpkeepResult, clean_index, compact, key_copies, upkeep
from metadata_table.migrate import MigrationResult, has_legacy_index, migrate
from metadata_table.partition_stats import superseded
from metadata_table.reader import MetadataReader
from metadata_table.records import (
    DataFile,
    DataFileInfo,
    duplicates_error,
    indexed_columns,
    info_of,
    key_fields_refusal,
    secondary_index_refusal,
    virtual_keys,
)
from metadata_table.table import MetadataTable
from metadata_table.validate import PartitionReport, validate, validate_hudi
from timeline.commit_metadata import CommitMetadata
from timeline.config import LOCAL_BUILD_MEMORY_MB, LOCAL_BUILD_WORKERS
from timeline.errors import (
    ConfigError,
    DuplicateRecordKeyError,
    StorageFileNotFoundError,
    TableConfigError,
)
from timeline.fs_view import FileSystemView, data_file_paths, parquet_file_rows
from timeline.index_state import LAYOUT, IndexState
from timeline.instant import Action, Instant, State, normalize_timestamp
from timeline.locks import LockHandle
from timeline.markers import marker_folder
from timeline.removals import REMOVAL_ACTIONS, Removal
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE
from timeline.timeline import CommittedWrites, Timeline

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Survey:
    unapplied: dict[str, tuple[Instant, list[str]]]
    lost: dict[str, str]
    described: dict[str, dict[str, Any]]
    #: per partition that indexes some columns, which (:meth:`PartitionWriter.survey`)
    columns: dict[str, list[str]]


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
    read), as the record and secondary indexes' file-group count needs it. Without ``records``
    and the ``files`` partition, the data folders are listed by name alone (no file's size is
    asked: 0.2 s against 0.7 at 100,000 local files)."""
    from metadata_table.read.snapshot import IndexedSnapshot

    snapshot = IndexedSnapshot(table)
    if not records:
        view = snapshot.view
        if view.lists_storage:
            paths = functools.partial(data_file_paths, table.storage)
            view = FileSystemView(table.timeline, view.timeline, listing=paths)
        return TableSize(view.latest_file_count())
    data_files = snapshot.view.latest_file_count()
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


class PartitionWriter:
    """The metadata table of ``table``, as the indexer writes it."""

    #: the watermark of a partition that covers no data instant yet
    NOTHING = NOTHING

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

    def check_buildable(self, partitions: Sequence[str], columns: Sequence[str]) -> None:
        """Refuse, by name, partitions the table's data cannot give: key fields its files lack
        (a table without meta fields), ``columns`` it does not have, a secondary index on a
        column of a type it does not take."""
        schema = self.table_schema()
        refusal = key_fields_refusal(self.table, schema)
        if refusal is not None:
            raise TableConfigError(self.table.storage.uri(PROPERTIES_FILE), refusal)
        if schema is None:
            return
        secondary = [secondary_column(p) for p in partitions if is_secondary_index(p)]
        unknown = sorted((set(columns) | set(secondary)) - set(schema.names))
        if unknown:
            raise ConfigError("--columns", f"not columns of the table: {', '.join(unknown)}")
        for column in secondary:
            refusal = secondary_index_refusal(schema.field(column))
            if refusal is not None:
                raise ConfigError("--columns", refusal)

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
        # (no records, so none routed: any layout)
        self._mdt.write_base_files(
            partition, empty, NOTHING, instant_time, groups, lock, layout=LAYOUT
        )

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
        bases: list[DataFile] = view.committed_base_files(upto)
        logs = [
            (log.partition_path, log.file_name, log.size, "")
            for log in view.committed_log_files
            if normalize_timestamp(log.name.base_instant) <= limit
        ]
        return bases + logs

    def begin_build(
        self,
        partition: str,
        covers_upto: str,
        groups: int,
        columns: Sequence[str],
        layout: int,
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
            partition,
            groups,
            tuple(columns),
            instant_time,
            covers_upto,
            older,
            counted,
            keygen,
            layout,
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

    def run_builds(
        self,
        files: list[DataFile],
        builds: Sequence[PartitionBuild],
        marker_instant: str,
        progress: Callable[[int, int], None] | None = None,
        spark: Any = None,
        parallelism: int | None = None,
    ) -> dict[str, dict[str, int]]:
        """The base files of ``builds`` over ``files``, behind markers of ``marker_instant``:
        on ``spark`` (a session: :func:`metadata_table.spark_build.run_build`), or without it
        in this process and its workers (``indexer.build.local.workers``, spilling past
        ``indexer.build.local.memory.mb``). Returns partition -> file group -> base file size."""
        storage = self.table.storage
        if spark is None:
            config = self.table.config
            workers, memory_mb = config.get(LOCAL_BUILD_WORKERS), config.get(LOCAL_BUILD_MEMORY_MB)
            return run_build_local(
                storage, files, builds, marker_instant, progress, workers, memory_mb
            )
        from metadata_table.spark_build import run_build  # imports pyspark

        return run_build(
            storage, files, builds, marker_instant, spark, parallelism, progress=progress
        )

    def start_workers(self, files: int) -> None:
        """Start the worker processes a build without Spark over ``files`` data files reads
        with, while the caller lists the table (see
        :func:`metadata_table.workers.start_processes`)."""
        start_record_workers(files, self.table.config.get(LOCAL_BUILD_WORKERS))

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
        self._mdt.apply_completed(instant.timestamp, records, state, lock)

    def apply_removal(self, lock: LockHandle, removal: Removal) -> None:
        """The index's update for a clean or rollback this kernel performs, inside its critical
        section (the hook :func:`timeline.clean.clean` and
        :func:`timeline.rollback.clean_failed_writes` take)."""
        self._mdt.apply_removal(lock, removal)

    def hudi_status(self) -> dict[str, Any] | None:
        """Apache Hudi's own metadata table as ``indexer status`` shows it
        (:func:`metadata_table.hudi_table.hudi_status`), or None when the table has none."""
        return hudi_status(self.table)

    def oldest_unapplied(self, data_timeline: Timeline) -> str | None:
        """Where archival stops (:meth:`MetadataTable.oldest_unapplied`)."""
        return self._mdt.oldest_unapplied(data_timeline)

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

    def survey(self, state: IndexState) -> Survey:
        """What status reports, from one snapshot read once: the unapplied instants and lost
        partitions of the completed partitions, and of every partition the newest data instant
        it reflects (None when lost), its files and bytes, and the columns it indexes: those
        column_stats and partition_stats were asked for (all: every top-level column of a type
        they index, in the table's newest schema), a secondary index's own column."""
        from metadata_table.read.snapshot import IndexedSnapshot

        completed, inflight = state.completed, state.inflight
        timeline = self.table.timeline.load()
        reader = self._mdt.reader(timeline)
        lost = _lost(reader, completed)
        described = {}
        columns: dict[str, list[str]] = {}
        for partition in [*completed, *inflight]:
            files, size = reader.size(partition)
            reflects = None if partition in lost else reader.reflects_upto(partition)
            described[partition] = {"reflects_upto": reflects, "files": files, "bytes": size}
            if is_secondary_index(partition):
                columns[partition] = [secondary_column(partition)]
            elif self.takes_columns(partition):
                asked = list(state.column_stats_columns)
                if not asked:  # every column: the newest file's, read with the same reader
                    snapshot = IndexedSnapshot(self.table, timeline, reader)
                    asked = indexed_columns(snapshot.table_schema)
                columns[partition] = asked
        unapplied = _unapplied(reader, completed, lost) if completed else {}
        return Survey(unapplied, lost, described, columns)

    # --- maintenance -------------------------------------------------------------------------------

    def file_group_count(self, partition: str) -> int:
        return len(self._mdt.file_groups(partition))

    def compact(
        self, partition: str, progress: Callable[[int, int], None] | None = None
    ) -> Instant | None:
        return compact(self.table, partition, progress)

    def upkeep(self, force: bool = False) -> UpkeepResult:
        """Compact the partitions due by count (all with logs, with ``force``), then delete
        what compactions replaced (:func:`metadata_table.maintenance.upkeep`)."""
        return upkeep(self.table, force)

    def last_compaction(self) -> dict[str, Any] | None:
        """The newest completed metadata compaction (a compaction, build or rebuild that wrote
        base files): its instant, partition, when it completed and what it covers up to."""
        timeline = self._mdt.timeline
        last = timeline.load().with_actions(Action.COMPACTION).completed().last()
        if last is None:
            return None
        plan = timeline.read_json(last)
        return {
            "instant": last.timestamp,
            "partition": plan.get("partition"),
            "completed": timeline.completion_time(last),
            "covers_upto": plan.get("coversUpto"),
        }

    def clean_index(self) -> UpkeepResult:
        """Delete the index files compactions replaced that no reader can need, and trim the
        index's own timeline (:func:`metadata_table.maintenance.clean_index`)."""
        return clean_index(self.table)

    def validate(self, progress: Callable[[int, int], None] | None = None) -> list[PartitionReport]:
        """Our index's completed partitions against a rebuild, then Apache Hudi's own metadata
        table against the data files when the table has one (``hudi:<partition>`` reports)."""
        return [*validate(self.table, progress), *validate_hudi(self.table)]

    def duplicate_keys_error(self) -> DuplicateRecordKeyError | None:
        """The record keys of the table in more than one file group, as one error naming how
        many, one of them, and the commands that resolve them (None: there are none)."""
        copies = key_copies(self.table)
        return duplicates_error(copies, base=self.table.base_uri) if copies.num_rows else None


__all__ = [
    "NOTHING",
    "DataFile",
    "HudiPartitionWriter",
    "MigrationResult",
    "PartitionBuild",
    "PartitionReport",
    "PartitionWriter",
    "Survey",
    "TableSize",
    "UpkeepResult",
    "file_records",
    "in_key_order",
    "run_build_local",
    "start_record_workers",
]
