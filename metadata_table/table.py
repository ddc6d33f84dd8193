"""The metadata table's writes: base files behind metadata compaction instants, and a data
commit's log files behind its markers. Merged reads are in :mod:`metadata_table.reader`;
building from scratch and compaction in :mod:`metadata_table.maintenance`.

Visibility rules (docs/architecture.md §3, invariants 3 and 4):

* a base file ``<fg>_<T>.parquet`` is visible once the metadata-table ``compaction`` instant T is
  completed (initialisation, a from-scratch build, a compaction and an index build all write base
  files this way); the newest visible one of a file group is used;
* a log file ``.<fg>.log.<D>`` is applied when data instant D is completed on the *data* timeline
  and is newer than the base file's watermark; so the log a writer wrote inside its commit's
  critical section is invisible until that commit completes, and gone if it is rolled back (the
  writer creates a marker for every metadata file it writes, so rollback deletes them).

Merge rules for several records of one key, in data-instant order: ``files`` and
``bloom_filters`` keep the newest record (a newer tombstone wins); ``column_stats`` combine
min-of-mins, max-of-maxes and summed counts since the newest tombstone.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table import hudi_table
from metadata_table.index_types import index_type
from metadata_table.layout import (
    DEFAULT_FILE_GROUPS,
    METADATA_FOLDER,
    NON_PARTITIONED,
    RECORD_INDEX,
    MetadataFile,
    base_file_name,
    check_partition,
    data_partition,
    file_group_id,
    key_hashes,
    log_file_name,
    read_records,
    schema_of,
    stored_hashes,
    write_records,
)
from metadata_table.partition_stats import recompute
from metadata_table.reader import MetadataReader
from metadata_table.records import (
    RECORD_KEY,
    DataFileInfo,
    info_of,
    read_record_keys,
    virtual_keys,
)
from timeline.commit_metadata import NULL_COMMIT, CommitMetadata
from timeline.config import HEARTBEAT_TOLERABLE_MISSES
from timeline.errors import (
    CorruptInstantError,
    FileAlreadyExistsError,
    NotParquetError,
    RebuildRequiredError,
    StorageFileNotFoundError,
)
from timeline.fs_view import BaseFile, FileSystemView, LogFile, slice_instant
from timeline.heartbeat import Heartbeat, heartbeat_path
from timeline.hudi_metadata import keeps_hudi_metadata_table
from timeline.index_state import IndexState
from timeline.instant import Action, Instant, State, is_after
from timeline.locks import LockHandle
from timeline.markers import IOType, Marker, MarkerWriter, marker_folder
from timeline.removals import Removal, RemovalHook
from timeline.storage import Storage
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE, TableConfig, TableType
from timeline.timeline import META_FOLDER, ActiveTimeline, Timeline

logger = logging.getLogger(__name__)


class MetadataTable:
    """The metadata table of ``table`` (at ``<base>/.hoodie/.async-indexer``)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.storage = table.storage.child(METADATA_FOLDER)
        self.timeline = ActiveTimeline(self.storage, table.timeline.generator)
        #: heartbeats of the metadata compaction instants this object began
        self._beats: dict[str, Heartbeat] = {}

    def ensure_properties(self) -> None:
        """The metadata table's own ``hoodie.properties`` (a merge-on-read table keyed by ``key``)."""
        name = f"{self.table.table_config.name}_metadata"
        config = TableConfig.new(name, ["key"], [], None, TableType.MERGE_ON_READ)
        with contextlib.suppress(FileAlreadyExistsError):
            self.storage.create(PROPERTIES_FILE, config.to_bytes())

    def file_groups(self, partition: str) -> list[str]:
        found = set()
        for entry in self.storage.list(check_partition(partition)):
            parsed = MetadataFile.parse(partition, entry.name)
            if parsed is not None:
                found.add(parsed.file_group)
        return sorted(found)

    # --- base files ------------------------------------------------------------------------------

    def begin_base_files(
        self, partition: str, covers_upto: str, instant_time: str, groups: int
    ) -> Instant:
        """Start metadata compaction instant ``instant_time`` that will write one base file per
        file group of ``partition`` (by :func:`write_base_file`, possibly on Spark executors).
        It heartbeats until it completes or is discarded, so a crashed one is told apart from
        one in progress elsewhere (:meth:`discard_pending_base_files`)."""
        self.ensure_properties()
        self._beats[instant_time] = self.heartbeat(instant_time).start()
        plan = {"partition": partition, "fileGroups": groups, "coversUpto": covers_upto}
        requested = self.timeline.create_requested(
            Action.COMPACTION, json.dumps(plan).encode(), timestamp=instant_time
        )
        return self.timeline.transition_to_inflight(requested)

    def heartbeat(self, instant_time: str) -> Heartbeat:
        """The heartbeat of a metadata compaction instant (in the metadata table's own
        ``.hoodie/.heartbeat``), beaten as the table's writers beat theirs."""
        config = self.table.config
        return Heartbeat(
            self.storage,
            instant_time,
            interval=config.heartbeat_interval_seconds,
            tolerable_misses=config.get(HEARTBEAT_TOLERABLE_MISSES),
        )

    def _stop_beating(self, instant_time: str) -> None:
        beat = self._beats.pop(instant_time, None)
        if beat is not None:
            beat.stop()
        else:
            self.storage.delete(heartbeat_path(instant_time))

    def complete_base_files(
        self, inflight: Instant, sizes: dict[str, int], lock: LockHandle | None = None
    ) -> Instant:
        plan = json.loads(self.timeline.read_content(inflight.with_state(State.REQUESTED)))
        if lock is not None:
            lock.ensure_valid()
        done = self.timeline.complete(inflight, {**plan, "baseFiles": sizes})
        self._stop_beating(inflight.timestamp)
        logger.info(
            "metadata %s: %d base files covering %s (%s)",
            plan["partition"],
            len(sizes),
            plan["coversUpto"],
            done,
        )
        return done

    def write_base_files(
        self,
        partition: str,
        records: pa.Table,
        covers_upto: str,
        instant_time: str,
        groups: int | None = None,
        lock: LockHandle | None = None,
        progress: Callable[[int, int], None] | None = None,
        *,
        layout: int,
        unless_dropped: bool = False,
    ) -> Instant | None:
        """Write one sorted base file per file group (all groups, empty ones too) as metadata
        compaction instant ``instant_time``, the records routed as the partition's ``layout``
        routes them; visible once that instant completes. ``progress`` is called with (groups
        written, groups). With ``unless_dropped`` (a compaction, which writes outside the table
        lock), the instant completes under the lock and only while the partition is still a
        completed index: when it was dropped meanwhile, its files are deleted and None
        returned."""
        count = groups or len(self.file_groups(partition)) or DEFAULT_FILE_GROUPS.get(partition, 1)
        inflight = self.begin_base_files(partition, covers_upto, instant_time, count)
        try:
            by_group = split_by_group(records, count, partition, layout)
            sizes = {}
            for index in range(count):
                fg = file_group_id(partition, index)
                rows = by_group.get(index, schema_of(partition).empty_table())
                sizes[fg] = write_base_file(
                    self.storage, partition, fg, instant_time, rows, covers_upto
                )
                if progress is not None:
                    progress(index + 1, count)
            if not unless_dropped:
                return self.complete_base_files(inflight, sizes, lock)
            with self.table.lock(f"complete metadata compaction {instant_time}") as held:
                # a drop deletes the partition's pending compactions: a rebuild since is not it
                kept = self.timeline.load().get(instant_time, Action.COMPACTION) is not None
                if kept and partition in self.table.reload_index_state().completed:
                    return self.complete_base_files(inflight, sizes, held)
            logger.info("metadata compaction %s discarded: %s was dropped", instant_time, partition)
            self._discard_base_files(partition, instant_time)
            return None
        except BaseException:
            self._discard_base_files(partition, instant_time)
            raise

    def _discard_base_files(self, partition: str, instant_time: str) -> None:
        """The base files of compaction ``instant_time`` that did not complete, and the instant;
        its files too when a drop of the partition deleted the instant before they were all
        written."""
        self.discard_pending_base_files([partition], instants=[instant_time])
        for entry in self.storage.list(partition):
            if entry.name.endswith(f"_{instant_time}.parquet"):
                self.storage.delete(entry.path)
        self._stop_beating(instant_time)

    def discard_pending_base_files(
        self,
        partitions: Sequence[str],
        only_dead: bool = False,
        instants: Sequence[str] | None = None,
    ) -> list[str]:
        """Delete metadata compaction instants of ``partitions`` that never completed (a build,
        resync or compaction that failed or crashed; only ``instants``, when given), with their
        base files and heartbeats. With ``only_dead``, those whose heartbeat is still beating
        (in progress in another process) are left alone. The markers a resync's tasks left
        under such an instant go too. Returns the instants discarded."""
        discarded = []
        for instant in self.timeline.load().with_actions(Action.COMPACTION).pending():
            if instants is not None and instant.timestamp not in instants:
                continue
            planned = self.planned_partition(instant)
            if planned is not None and planned not in partitions:
                continue
            if only_dead and not self.heartbeat(instant.timestamp).is_expired():
                continue
            for name in [planned] if planned is not None else partitions:
                for entry in self.storage.list(name):
                    if entry.name.endswith(f"_{instant.timestamp}.parquet"):
                        self.storage.delete(entry.path)
            self.timeline.delete_pending(instant)
            self._stop_beating(instant.timestamp)
            self.table.storage.delete(marker_folder(instant.timestamp), recursive=True)
            discarded.append(instant.timestamp)
            logger.info("discarded metadata compaction %s that never completed", instant)
        return discarded

    def planned_partition(self, instant: Instant) -> str | None:
        """The partition a metadata compaction instant writes (None if its plan is unreadable)."""
        try:
            plan = self.timeline.read_json(instant.with_state(State.REQUESTED))
        except (CorruptInstantError, StorageFileNotFoundError):
            return None
        partition = plan.get("partition")
        return partition if isinstance(partition, str) else None

    # --- log files (a data commit's deltacommit) -------------------------------------------------

    def write_deltacommit(
        self,
        data_instant: str,
        records: dict[str, pa.Table],
        markers: MarkerWriter,
        state: IndexState,
        lock: LockHandle | None = None,
    ) -> None:
        """Write the records data instant ``data_instant`` adds to each partition as one log file
        per touched file group (routed as the partition's layout in ``state`` routes them), as
        metadata deltacommit ``data_instant``. Every file written gets a marker in the data
        instant's marker folder first, so rolling the data instant back removes them too."""

        def mark(partition_path: str, name: str) -> None:
            markers.create(Marker(f"{METADATA_FOLDER}/{partition_path}", name, IOType.CREATE))

        instant = Instant(data_instant, Action.DELTA_COMMIT, State.REQUESTED)
        mark(META_FOLDER, instant.file_name)
        requested = self.timeline.create_requested(Action.DELTA_COMMIT, timestamp=data_instant)
        written: dict[str, list[str]] = {partition: [] for partition in records}
        for partition, rows in records.items():
            groups = len(self.file_groups(partition))
            if groups == 0:  # lost: readers do not use it, and the daemon rebuilds it
                logger.warning(
                    "metadata partition %s has no file groups (its folder was deleted): data "
                    "instant %s is not written to it",
                    partition,
                    data_instant,
                )
                continue
            written[partition] = self._write_group_logs(
                partition,
                groups,
                state.layout(partition),
                data_instant,
                rows,
                lock,
                before=functools.partial(mark, partition),
            )
        mark(META_FOLDER, instant.file_name_for(State.INFLIGHT))
        inflight = self.timeline.transition_to_inflight(requested)
        mark(META_FOLDER, instant.file_name_for(State.COMPLETED))
        self.timeline.complete(inflight, {"logFiles": written})

    def apply_completed(
        self,
        data_instant: str,
        records: dict[str, pa.Table],
        state: IndexState,
        lock: LockHandle,
    ) -> None:
        """Apply a data instant that these partitions do not reflect, as metadata deltacommit
        ``data_instant``: one that completed without the index (a commit or clean that did not go
        through this kernel), or a rollback this kernel is completing. Readers take its log
        files as applied only once that deltacommit completes, and the data instant too, so
        they never see part of it; a pending one that an interrupted attempt left is resumed."""
        existing = self.timeline.load().get(data_instant, Action.DELTA_COMMIT)
        if existing is not None and existing.is_completed:
            # our own writer's deltacommit, which missed these partitions (a build's, scheduled
            # after it): add their logs, an empty one where there is nothing to write (a clean
            # the partition's base files never listed), as the deltacommit cannot name them now
            for partition, rows in records.items():
                layout = state.layout(partition)
                self.write_logs(partition, layout, data_instant, rows, lock, empty_too=True)
            return
        if existing is None:
            self.ensure_properties()
            existing = self.timeline.create_requested(Action.DELTA_COMMIT, timestamp=data_instant)
        written = {
            p: self.write_logs(p, state.layout(p), data_instant, rows, lock)
            for p, rows in records.items()
        }
        if existing.is_requested:
            existing = self.timeline.transition_to_inflight(existing)
        lock.ensure_valid()
        self.timeline.complete(existing, {"logFiles": written})

    def write_logs(
        self,
        partition: str,
        layout: int,
        data_instant: str,
        rows: pa.Table,
        lock: LockHandle,
        empty_too: bool = False,
    ) -> list[str]:
        """Log files of one data instant for one partition (of ``layout``), without markers (used
        under the lock for instants that are already completed); a log file that exists is kept
        (its records are the same: they come from the same data files). With ``empty_too``, no
        records still write one empty log file (in the first file group): the only sign that
        the partition applied the instant when no deltacommit can name it. Returns the
        partition's log names."""
        groups = len(self.file_groups(partition))
        return self._write_group_logs(
            partition, groups, layout, data_instant, rows, lock, keep=True, empty_too=empty_too
        )

    def _write_group_logs(
        self,
        partition: str,
        groups: int,
        layout: int,
        data_instant: str,
        rows: pa.Table,
        lock: LockHandle | None,
        before: Callable[[str], None] | None = None,
        keep: bool = False,
        empty_too: bool = False,
    ) -> list[str]:
        """The one loop that splits a data instant's records by file group and writes one log
        file per group: ``before(name)`` runs first (a marker), the lease is checked right
        before each write, and with ``keep`` a log that exists is kept (an interrupted attempt
        wrote it, from the same data files). With ``empty_too``, no records write an empty log
        in the first group. Returns the log files' names."""
        names = []
        parts = split_by_group(rows, groups, partition, layout)
        if not parts and empty_too:
            parts = {0: rows}
        for index, part in sorted(parts.items()):
            name = log_file_name(file_group_id(partition, index), data_instant)
            if before is not None:
                before(name)
            if lock is not None:
                lock.ensure_valid()
            try:
                write_records(self.storage, f"{partition}/{name}", part)
                logger.debug("wrote %s/%s for data instant %s", partition, name, data_instant)
            except FileAlreadyExistsError:
                if not keep:
                    raise
            names.append(name)
        return names

    def records_of(
        self, partitions: Iterable[str], infos: list[DataFileInfo], state: IndexState
    ) -> dict[str, pa.Table]:
        """The records a commit not completed yet adds to each of ``partitions``, from its
        files' footers (``infos``); under the table lock."""
        columns = state.column_stats_columns
        return {p: self.instant_records(p, infos, columns, pending=True) for p in partitions}

    def instant_records(
        self,
        partition: str,
        infos: Sequence[DataFileInfo],
        columns: Sequence[str],
        pending: bool = False,
        touched: Iterable[str] = (),
    ) -> pa.Table:
        """The records one data instant adds to ``partition``: its files' records (for an index
        keyed by record key, from the rows the writer says changed: see
        :func:`metadata_table.records.changed_rows`), or, for an index type that is recomputed
        (``partition_stats``), the data partitions it touched (its files' partitions and
        ``touched``) worked out again from the table as it is now, with ``infos`` in place of
        the files they replace when the instant is ``pending`` (not completed yet). Under the
        table lock."""
        kind = index_type(partition)
        if not kind.recomputed:
            return kind.records(infos, columns)
        partitions = {i.partition for i in infos} | set(touched)
        reader = self.reader(self.table.timeline.load())
        return recompute(self.table, reader, partitions, columns, infos, pending)

    def removal_records(
        self,
        reader: MetadataReader,
        partitions: Iterable[str],
        removal: Removal,
        columns: Sequence[str],
    ) -> dict[str, pa.Table]:
        """What a clean, rollback or restore changes in each partition: deletion records of the
        files it deleted, or, for a recomputed type, the data partitions it touched worked out
        again, or, for an index keyed by record key, :meth:`removal_delta` (under the table
        lock)."""
        touched = set(removal.deleted) | set(removal.whole_partitions)
        out = {}
        for p in partitions:
            kind = index_type(p)
            if kind.recomputed:
                out[p] = self.instant_records(p, [], columns, touched=touched)
            elif kind.keyed_by_record:
                out[p] = self.removal_delta(reader, p, removal)
            else:
                out[p] = self.tombstones(reader, p, removal)
        return out

    def placed_keys(self, instant: Instant) -> set[str]:
        """The record keys a completed data instant put somewhere new (inserted, or moved to
        another partition): from its ``record_index`` log files when it wrote them, else from
        the keys of the files its metadata says it inserted into."""
        delta = self.timeline.load().get(instant.timestamp, Action.DELTA_COMMIT)
        if delta is not None and delta.is_completed:
            logged = self.timeline.read_json(delta).get("logFiles", {})
            if RECORD_INDEX in logged:
                keys: set[str] = set()
                for name in logged[RECORD_INDEX]:
                    rows = read_records(
                        self.storage, f"{RECORD_INDEX}/{name}", ["key", "is_deleted"]
                    )[0]
                    live = rows.filter(pc.invert(rows.column("is_deleted")))
                    keys.update(live.column("key").to_pylist())
                return keys
        try:
            metadata = CommitMetadata.from_bytes(
                self.table.timeline.read_content(instant), self.table.timeline.path(instant)
            )
        except (StorageFileNotFoundError, CorruptInstantError):
            return set()
        keys = set()
        keygen = virtual_keys(self.table)
        for stat in metadata.write_stats:
            if stat.num_inserts > 0 or stat.prev_commit in (NULL_COMMIT, ""):
                try:
                    table = read_record_keys(self.table.storage, stat.path, keygen)
                except (StorageFileNotFoundError, NotParquetError):
                    continue
                keys.update(k for k in table.column(RECORD_KEY).to_pylist() if k is not None)
        return keys

    def instant_delta(
        self, reader: MetadataReader, partition: str, instant: Instant, metadata: CommitMetadata
    ) -> pa.Table:
        """What a completed commit of a writer that did not update the index (Apache Hudi's,
        hudi-rs's, a backfill's) changes in ``partition`` (keyed by record key), from the files
        it wrote and the partition as ``reader`` reads it (every instant before it applied):

        * a base file it wrote holds its file group's whole content after it;
        * a log file it appended to holds, in its blocks of this instant, the records it
          inserted or updated and the keys it deleted (the rest of the group is as before);
        * a group it replaced (clustering, insert_overwrite, delete_partition) holds nothing.

        The records are the keys in a new place (or, for a secondary index, with a new value)
        and tombstones of those gone; where a group loses keys, the partition's records of it
        are read to know which. A file it wrote that is gone (cleaned since) is
        :class:`StorageFileNotFoundError`, and the partition is rebuilt instead. A compaction
        moves no key; for the record index, neither does a rewritten base file whose write
        stat has no inserts or deletes (updates in place)."""
        kind = index_type(partition)
        empty = kind.schema.empty_table()
        if metadata.compacted:
            return empty
        by_key = "key" if partition == RECORD_INDEX else "record_key"
        stale: set[tuple[str, str]] = set()  # groups whose file of this commit is gone
        whole: dict[tuple[str, str], pa.Table] = {}  # group -> its records after the commit
        patches: dict[tuple[str, str], pa.Table] = {}  # group -> records of its appended blocks
        scan = False  # whether the partition's records of the groups must be read
        keygen = virtual_keys(self.table)
        for stat in metadata.write_stats:
            group = (stat.partition_path, stat.file_id)
            is_log = stat.file_name.startswith(".")
            new_group = stat.prev_commit in (NULL_COMMIT, "")
            in_place = not (stat.num_inserts or stat.num_deletes or is_log or new_group)
            if partition == RECORD_INDEX and in_place:
                continue  # updates in place
            try:
                info = info_of(
                    self.table.storage,
                    stat.partition_path,
                    stat.file_name,
                    stat.file_size_in_bytes,
                    instant.timestamp,
                    instant.timestamp.__eq__,
                    False,
                    kind.row_columns,
                    keygen,
                )
            except StorageFileNotFoundError:
                # cleaned since: a later commit superseded it, so the group is taken as it is
                # now (what that later commit, applied next, finds already there)
                stale.add(group)
                continue
            if info is None:
                continue  # a log file holding nothing of this instant
            records = kind.records([info])
            if is_log:
                patches[group] = records
                scan = scan or partition != RECORD_INDEX
            else:
                whole[group] = kind.combine(records, instant.timestamp)
                scan = scan or (
                    not new_group and (stat.num_deletes > 0 or partition != RECORD_INDEX)
                )
        for group in stale - whole.keys() - patches.keys():
            whole[group] = self._current_records(reader, partition, group)
            scan = True
        replaced = {
            (path, f)
            for path, file_ids in metadata.partition_to_replace_file_ids.items()
            for f in file_ids
        } - whole.keys()
        scan = scan or bool(replaced)
        groups = set(whole) | set(patches) | replaced
        if not groups:
            return empty
        old = _in_groups(reader.read(partition), groups) if scan else empty
        after = []
        removed: list[str] = []  # keys a log's delete blocks name
        for group, records in patches.items():
            deleted = records.filter(records.column("is_deleted"))
            removed.extend(deleted.column(by_key).to_pylist())
            live = records.filter(pc.invert(records.column("is_deleted")))
            touched = records.column(by_key)
            kept = _in_groups(old, {group})
            kept = kept.filter(pc.invert(pc.is_in(kept.column(by_key), value_set=touched)))
            after += [kept, kind.combine(live, instant.timestamp)]
        after += list(whole.values())
        result = pa.concat_tables([t.cast(kind.schema) for t in after]) if after else empty
        return _delta(kind.schema, old, result, instant.timestamp, by_key, removed)

    def _current_records(
        self, reader: MetadataReader, partition: str, group: tuple[str, str]
    ) -> pa.Table:
        """The records of ``partition`` (keyed by record key) that file ``group``'s latest slice
        holds now (none: replaced or gone)."""
        kind = index_type(partition)
        storage = self.table.storage
        data_partition_path, file_id = group
        view = FileSystemView(
            self.table.timeline,
            reader.data_timeline,
            listing=lambda: [e for e in storage.list(data_partition_path) if not e.is_dir],
        )
        infos = []
        keygen = virtual_keys(self.table)
        for piece in view.latest_file_slices([data_partition_path]):
            if piece.file_id != file_id:
                continue
            files: list[BaseFile | LogFile] = [piece.base_file] if piece.base_file else []
            for file in [*files, *piece.log_files]:
                written = file.instant_time if isinstance(file, BaseFile) else ""
                info = info_of(
                    storage,
                    file.partition_path,
                    file.file_name,
                    file.size,
                    written,
                    view.committed.__contains__,
                    False,
                    kind.row_columns,
                    keygen,
                )
                if info is not None:
                    infos.append(info)
        return kind.combine(kind.records(infos), "")

    def removal_delta(self, reader: MetadataReader, partition: str, removal: Removal) -> pa.Table:
        """What a clean, rollback or restore changes in ``partition`` (keyed by record key): a
        clean leaves every latest slice as it was, and a rollback of a write the partition
        applied in a log file needs nothing (that log no longer applies once its data instant
        is gone), nor one of a write that never completed, nor one its base files were built
        after. A rollback or restore of a commit its base files hold cannot be undone from
        records: :class:`RebuildRequiredError`, and the partition is rebuilt from storage."""
        kind = index_type(partition)
        if removal.instant.action is Action.CLEAN:
            return kind.schema.empty_table()
        watermark, _ = reader.applied(partition)
        undone = set(removal.rolled_back)
        if not undone:  # unknown: the instants of the base files it deleted
            undone = {
                at
                for names in removal.deleted.values()
                for name in names
                if (at := slice_instant(name)) is not None and not name.startswith(".")
            }
        held = sorted(t for t in undone if not is_after(t, watermark))
        if held and not reader.built_after(partition, removal.instant):
            raise RebuildRequiredError(
                partition,
                f"{removal.instant} undid {', '.join(held)}, which its base files (up to "
                f"{watermark}) hold",
            )
        return kind.schema.empty_table()

    def apply_removal(self, lock: LockHandle, removal: Removal) -> None:
        """The indexes' update for a clean or rollback this kernel performs, written under its
        lock before it completes (as a commit writes its own): passed to
        :func:`timeline.clean.clean`, :func:`timeline.rollback.rollback` and
        :func:`timeline.rollback.clean_failed_writes`. Ours first: a rollback of a write that
        never completed changes no record, but is recorded as applied, so it never shows as
        unapplied. Then Apache Hudi's own metadata table's, when this process keeps it
        (:func:`metadata_table.hudi_table.apply_removal`)."""
        self._apply_own_removal(lock, removal)
        if keeps_hudi_metadata_table(self.table):
            hudi_table.apply_removal(self.table, lock, removal)

    def _apply_own_removal(self, lock: LockHandle, removal: Removal) -> None:
        state = self.table.reload_index_state()
        if not state.partitions:
            return
        reader = self.reader(self.table.timeline.load())
        columns = state.column_stats_columns
        partitions = list(state.partitions)
        for partition in [p for p in partitions if index_type(p).keyed_by_record]:
            try:
                self.removal_delta(reader, partition, removal)
            except RebuildRequiredError as e:
                # left unapplied: readers do not trust it where the rollback touched, and the
                # next sync rebuilds it
                logger.warning("%s; the next sync rebuilds it", e)
                partitions.remove(partition)
        records = self.removal_records(reader, partitions, removal, columns)
        self.apply_completed(removal.instant.timestamp, records, state, lock)

    def tombstones(self, reader: MetadataReader, partition: str, removal: Removal) -> pa.Table:
        """Deletion records, at the removal's instant time, for every record of ``partition``
        that describes a data file ``removal`` deleted: its key and file, every other field
        null (a tombstone's values are never read). Only the columns that name the file are
        read, not the stats (a clean after every commit reads the partition each time)."""
        rows = reader.read(partition, columns=["partition", "file_name"], ordered=False)
        pairs = zip(
            rows.column("partition").to_pylist(), rows.column("file_name").to_pylist(), strict=True
        )
        gone = pa.array([removal.removes(data_partition(p), f) for p, f in pairs], pa.bool_())
        rows = rows.filter(gone)
        size = rows.num_rows
        given = {
            "is_deleted": pa.array([True] * size),
            "instant": pa.array([removal.instant.timestamp] * size, pa.string()),
        }
        schema = schema_of(partition)
        columns: list[pa.Array | pa.ChunkedArray] = []
        for f in schema:
            if f.name in given:
                columns.append(given[f.name])
            elif f.name in rows.column_names:
                columns.append(rows.column(f.name).cast(f.type))
            else:
                columns.append(pa.nulls(size, f.type))
        return pa.table(columns, schema=schema)

    # --- reads -----------------------------------------------------------------------------------

    def reader(self, data_timeline: Timeline, cache: bool = True) -> MetadataReader:
        """A reader of this metadata table at ``data_timeline``; with ``cache`` False it keeps
        nothing in the process's cache of decoded files (a one-off read of whole partitions,
        as validate's and compaction's, would push out what snapshots reuse)."""
        return MetadataReader(self, data_timeline, cache)

    def oldest_unapplied(self, data_timeline: Timeline) -> str | None:
        """The oldest completed data instant some partition of the index has not applied (None:
        every partition is current): archival stops there, so the index never needs an
        instant only the archive holds."""
        state = self.table.reload_index_state()
        if not state.partitions:
            return None
        reader = self.reader(data_timeline)
        oldest = [u[0] for p in state.partitions if (u := reader.unapplied(p))]
        return min(oldest).timestamp if oldest else None


def removal_hook(table: Table) -> RemovalHook:
    """The index's update of a clean or rollback of ``table`` the kernel performs (offered to it
    through the ``async_indexer.removal_hooks`` entry point, see :mod:`timeline.removals`)."""
    return MetadataTable(table).apply_removal


def _in_groups(records: pa.Table, groups: set[tuple[str, str]]) -> pa.Table:
    """The records (of a partition keyed by record key) of some file groups."""
    if not records.num_rows or not groups:
        return records.slice(0, 0)
    names = pc.binary_join_element_wise(records.column("partition"), records.column("file_id"), "/")
    wanted = pa.array(sorted(f"{p or NON_PARTITIONED}/{f}" for p, f in groups), pa.string())
    return records.filter(pc.is_in(names, value_set=wanted))


def _delta(
    schema: pa.Schema,
    before: pa.Table,
    after: pa.Table,
    instant_time: str,
    by_key: str = "key",
    removed: Sequence[str] = (),
) -> pa.Table:
    """The records that take an index keyed by record key from ``before`` to ``after`` (each
    what some file groups held): records new or in a new place, and tombstones of keys gone
    (those of ``before`` that ``after`` lacks, and the record keys in ``removed`` that ``after``
    does not hold anywhere)."""

    def places(table: pa.Table) -> Any:
        columns = [table.column(c) for c in ("key", "partition", "file_id")]
        return pc.binary_join_element_wise(*columns, "\x00")

    changed = after.filter(pc.invert(pc.is_in(places(after), value_set=places(before))))
    gone = before.filter(pc.invert(pc.is_in(before.column("key"), value_set=after.column("key"))))
    parts = [changed, _set(gone, "is_deleted", pa.repeat(pa.scalar(True), gone.num_rows))]
    if removed and by_key == "key":  # the record index: a deleted key's tombstone needs no value
        keys = pa.array(sorted(set(removed)), pa.string())
        keys = keys.filter(pc.invert(pc.is_in(keys, value_set=after.column("key"))))
        keys = keys.filter(pc.invert(pc.is_in(keys, value_set=gone.column("key"))))
        if len(keys):
            parts.append(
                pa.table(
                    {
                        "key": keys,
                        "key_hash": stored_hashes(key_hashes(keys)),
                        "partition": pa.repeat(pa.scalar(NON_PARTITIONED), len(keys)),
                        "file_id": pa.repeat(pa.scalar(""), len(keys)),
                        "is_deleted": pa.repeat(pa.scalar(True), len(keys)),
                        "instant": pa.repeat(pa.scalar(instant_time), len(keys)),
                    },
                    schema=schema,
                )
            )
    out = pa.concat_tables([p.cast(schema) for p in parts])
    return _set(out, "instant", pa.repeat(pa.scalar(instant_time), out.num_rows))


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def write_base_file(
    storage: Storage,
    partition: str,
    fg: str,
    instant_time: str,
    rows: pa.Table,
    covers_upto: str,
    order: np.ndarray | None = None,
) -> int:
    """One base file (of ``rows``; with ``order``, of the rows at those positions, in that
    order); a retried task finds it already written whole (creates are atomic)."""
    path = f"{partition}/{base_file_name(fg, instant_time)}"
    try:
        return write_records(storage, path, rows, covers_upto, order=order)
    except FileAlreadyExistsError:
        return storage.info(path).size


def split_by_group(
    records: pa.Table, groups: int, partition: str, layout: int
) -> dict[int, pa.Table]:
    """Records of ``partition`` (of ``layout``) by file group (of ``groups``), as its index type
    routes them; each group's records keep their order (slices of ``records`` when its groups
    come one after another, as records keyed by record key in hash order do)."""
    if records.num_rows == 0:
        return {}
    index = index_type(partition).groups_of(records, groups, layout)
    if groups == 1:
        return {0: records}
    if bool(np.all(index[1:] >= index[:-1])):  # each group's records together: slices
        cuts = np.flatnonzero(index[1:] != index[:-1]) + 1
        starts, ends = np.concatenate([[0], cuts]), np.append(cuts, len(index))
        return {
            int(index[a]): records.slice(a, b - a)
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
        }
    return {
        int(g): records.take(pa.array(np.flatnonzero(index == g), pa.int64()))
        for g in np.unique(index).tolist()
    }
