"""The metadata table: writes (deltacommits, base files, compaction) and merged reads.

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
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    DEFAULT_FILE_GROUPS,
    FILES,
    METADATA_FOLDER,
    NOTHING,
    PARTITIONS,
    SCHEMAS,
    MetadataFile,
    base_file_name,
    check_partition,
    data_partition,
    file_group_id,
    file_group_of,
    log_file_name,
    read_records,
    write_records,
)
from metadata_table.records import DataFileInfo, info_from_storage, python_value, records_for
from timeline.commit_metadata import CommitMetadata
from timeline.config import (
    BLOOM_FILTER_FILE_GROUPS,
    COLUMN_STATS_FILE_GROUPS,
    FILES_FILE_GROUPS,
    Config,
)
from timeline.errors import FileAlreadyExistsError, TableConfigError, TableError
from timeline.fs_view import BaseFile, FileSystemView
from timeline.index_state import IndexState
from timeline.instant import WRITE_ACTIONS, Action, Instant, State, normalize_timestamp
from timeline.locks import LockHandle
from timeline.markers import IOType, Marker, MarkerWriter
from timeline.removals import REMOVAL_ACTIONS, Removal, parse_removal, removal_from_record
from timeline.storage import Storage
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE, TYPE, TableConfig, TableType
from timeline.timeline import META_FOLDER, ActiveTimeline, CommittedWrites, Timeline

logger = logging.getLogger(__name__)


def _after(a: str, b: str) -> bool:
    return normalize_timestamp(a) > normalize_timestamp(b)


def check_indexable(table: Table) -> None:
    """Refuse, by name, a table whose index would be wrong. A merge-on-read file slice's log files
    change its rows, and column stats and bloom filters built from its base file alone would let
    data skipping drop a slice that holds a matching row: such tables are not indexed (yet)."""
    config = table.table_config
    if config.table_type is TableType.MERGE_ON_READ:
        raise TableConfigError(
            table.storage.uri(PROPERTIES_FILE),
            f"{TYPE}=MERGE_ON_READ: merge-on-read tables are not indexed, since stats of base "
            "files alone could make data skipping drop file slices whose log files hold matching "
            "rows (copy-on-write tables are)",
        )


def configured_file_groups(config: Config, partition: str) -> int:
    """File groups a new partition gets, from the configuration (defaults 1 / 2 / 4)."""
    key = {
        FILES: FILES_FILE_GROUPS,
        COLUMN_STATS: COLUMN_STATS_FILE_GROUPS,
        BLOOM_FILTERS: BLOOM_FILTER_FILE_GROUPS,
    }
    return config.get(key[check_partition(partition)])


class MetadataTable:
    """The metadata table of ``table`` (at ``<base>/.hoodie/.async-indexer``)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.storage = table.storage.child(METADATA_FOLDER)
        self.timeline = ActiveTimeline(self.storage, table.timeline.generator)

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
        file group of ``partition`` (by :func:`write_base_file`, possibly on Spark executors)."""
        self.ensure_properties()
        plan = {"partition": partition, "fileGroups": groups, "coversUpto": covers_upto}
        requested = self.timeline.create_requested(
            Action.COMPACTION, json.dumps(plan).encode(), timestamp=instant_time
        )
        return self.timeline.transition_to_inflight(requested)

    def complete_base_files(
        self, inflight: Instant, sizes: dict[str, int], lock: LockHandle | None = None
    ) -> Instant:
        plan = json.loads(self.timeline.read_content(inflight.with_state(State.REQUESTED)))
        if lock is not None:
            lock.ensure_valid()
        done = self.timeline.complete(inflight, {**plan, "baseFiles": sizes})
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
    ) -> Instant:
        """Write one sorted base file per file group (all groups, empty ones too) as metadata
        compaction instant ``instant_time``; visible once that instant completes. ``progress``
        is called with (groups written, groups)."""
        count = groups or len(self.file_groups(partition)) or DEFAULT_FILE_GROUPS[partition]
        inflight = self.begin_base_files(partition, covers_upto, instant_time, count)
        by_group = _split_by_group(records, count)
        sizes = {}
        for index in range(count):
            fg = file_group_id(partition, index)
            rows = by_group.get(index, SCHEMAS[partition].empty_table())
            sizes[fg] = write_base_file(
                self.storage, partition, fg, instant_time, rows, covers_upto
            )
            if progress is not None:
                progress(index + 1, count)
        return self.complete_base_files(inflight, sizes, lock)

    # --- log files (a data commit's deltacommit) -------------------------------------------------

    def write_deltacommit(
        self,
        data_instant: str,
        records: dict[str, pa.Table],
        markers: MarkerWriter,
        lock: LockHandle | None = None,
    ) -> None:
        """Write the records data instant ``data_instant`` adds to each partition as one log file
        per touched file group, as metadata deltacommit ``data_instant``. Every file written gets
        a marker in the data instant's marker folder first, so rolling the data instant back
        removes them too."""

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
            for index, part in sorted(_split_by_group(rows, groups).items()):
                name = log_file_name(file_group_id(partition, index), data_instant)
                mark(partition, name)
                if lock is not None:
                    lock.ensure_valid()
                write_records(self.storage, f"{partition}/{name}", part)
                written[partition].append(name)
        mark(META_FOLDER, instant.file_name_for(State.INFLIGHT))
        inflight = self.timeline.transition_to_inflight(requested)
        mark(META_FOLDER, instant.file_name_for(State.COMPLETED))
        self.timeline.complete(inflight, {"logFiles": written})

    def apply_completed(
        self, data_instant: str, records: dict[str, pa.Table], lock: LockHandle
    ) -> None:
        """Apply a data instant that is already completed but that these partitions do not
        reflect (a commit that did not go through this kernel), as metadata deltacommit
        ``data_instant``. Readers take its log files as applied only once that deltacommit
        completes, so they never see part of it; a pending one that an interrupted attempt left
        is resumed."""
        existing = self.timeline.load().get(data_instant, Action.DELTA_COMMIT)
        if existing is not None and existing.is_completed:
            # our own writer's deltacommit, which missed these partitions: add their logs
            for partition, rows in records.items():
                self.write_logs(partition, data_instant, rows, lock)
            return
        if existing is None:
            self.ensure_properties()
            existing = self.timeline.create_requested(Action.DELTA_COMMIT, timestamp=data_instant)
        written = {p: self.write_logs(p, data_instant, rows, lock) for p, rows in records.items()}
        if existing.is_requested:
            existing = self.timeline.transition_to_inflight(existing)
        lock.ensure_valid()
        self.timeline.complete(existing, {"logFiles": written})

    def write_logs(
        self, partition: str, data_instant: str, rows: pa.Table, lock: LockHandle
    ) -> list[str]:
        """Log files of one data instant for one partition, without markers (used under the lock
        for instants that are already completed); a log file that exists is kept (its records
        are the same: they come from the same data files). Returns the partition's log names."""
        groups = len(self.file_groups(partition))
        names = []
        for index, part in sorted(_split_by_group(rows, groups).items()):
            name = log_file_name(file_group_id(partition, index), data_instant)
            names.append(name)
            lock.ensure_valid()
            try:
                write_records(self.storage, f"{partition}/{name}", part)
            except FileAlreadyExistsError:
                continue  # written by an earlier, interrupted attempt
            logger.info("wrote %s/%s for data instant %s", partition, name, data_instant)
        return names

    def records_of(
        self, partitions: Iterable[str], infos: list[DataFileInfo], state: IndexState
    ) -> dict[str, pa.Table]:
        columns = list(state.column_stats_columns) or None
        return {
            p: records_for(p, infos, columns if p == COLUMN_STATS else None) for p in partitions
        }

    def tombstones(self, reader: MetadataReader, partition: str, removal: Removal) -> pa.Table:
        """Deletion records, at the removal's instant time, for every record of ``partition``
        that describes a data file ``removal`` deleted."""
        rows = reader.read(partition)
        pairs = zip(
            rows.column("partition").to_pylist(), rows.column("file_name").to_pylist(), strict=True
        )
        gone = [removal.removes(data_partition(p), f) for p, f in pairs]
        rows = rows.filter(pa.array(gone, pa.bool_()))
        size = rows.num_rows
        rows = rows.set_column(
            rows.schema.get_field_index("is_deleted"), "is_deleted", pa.array([True] * size)
        )
        instant = pa.array([removal.instant.timestamp] * size, pa.string())
        return rows.set_column(rows.schema.get_field_index("instant"), "instant", instant)

    # --- reads -----------------------------------------------------------------------------------

    def reader(self, data_timeline: Timeline) -> MetadataReader:
        return MetadataReader(self, data_timeline)


def write_base_file(
    storage: Storage, partition: str, fg: str, instant_time: str, rows: pa.Table, covers_upto: str
) -> int:
    """One base file; a retried task finds it already written whole (creates are atomic)."""
    try:
        return write_records(
            storage, f"{partition}/{base_file_name(fg, instant_time)}", rows, covers_upto
        )
    except FileAlreadyExistsError:
        return storage.info(f"{partition}/{base_file_name(fg, instant_time)}").size


def _split_by_group(records: pa.Table, groups: int) -> dict[int, pa.Table]:
    if records.num_rows == 0:
        return {}
    index = [file_group_of(k, groups) for k in records.column("key").to_pylist()]
    rows: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(index):
        rows[g].append(i)
    return {g: records.take(pa.array(r, pa.int64())) for g, r in rows.items()}


class MetadataReader:
    """Merged reads of the metadata table as of a data timeline snapshot."""

    def __init__(self, mdt: MetadataTable, data_timeline: Timeline) -> None:
        self.mdt = mdt
        self.storage = mdt.storage
        self.data_timeline = data_timeline
        # log files are named by the data instant they apply: a committed (or archived) write,
        # or a completed clean/rollback/restore whose deletions they record
        self._committed = CommittedWrites(data_timeline)
        self._removals = {
            i.timestamp for i in data_timeline.with_actions(*REMOVAL_ACTIONS).completed()
        }
        self._mdt_timeline = mdt.timeline.load()
        self._visible_bases = {
            i.timestamp for i in self._mdt_timeline.with_actions(Action.COMPACTION).completed()
        }
        self._wrote: dict[str, bool] = {}
        self._removed: dict[str, Removal] = {}

    def lost(self, partition: str) -> str | None:
        """Why a completed partition's files cannot be read, or None. Every file group of a
        completed partition has a base file of ours; none at all, or a group with log files but
        no base file, means its folder was deleted or replaced by something we did not write."""
        slices = self.slices(partition)
        where = self.storage.uri(partition)
        if not any(base is not None for base, _ in slices.values()):
            return f"no base file of ours in {where} (deleted or replaced)"
        orphans = sorted(fg for fg, (base, _) in slices.items() if base is None)
        if orphans:
            return f"file group(s) {', '.join(orphans)} in {where} have no base file"
        return None

    def unapplied(self, partition: str) -> list[Instant]:
        """Completed data instants that changed data files and that ``partition`` does not
        reflect: newer than the watermark of its base files and with no log file in it (or one
        that a sync is still writing). These are commits and table services that did not go
        through this kernel (Apache Hudi's own writer and cleaner, hudi-rs, a backfill tool): the
        partition is stale for their files until they are applied (``indexer sync``, or the
        daemon's next tick)."""
        watermark, logged = self._applied(partition)
        changes = list(
            self.data_timeline.filter(
                lambda i: i.action in WRITE_ACTIONS or i.action in REMOVAL_ACTIONS
            ).completed()
        )
        start = self._committed.start
        if start is not None and _after(start, watermark):
            # Hudi archived instants this partition may not reflect: read its archive
            archived = [i for i in self._archived if _after(i.timestamp, watermark)]
            changes = archived + changes
        return [
            i
            for i in changes
            if _after(i.timestamp, watermark)
            and i.timestamp not in logged
            and self._changed_files(i, watermark)
            and not self._deltacommit_names(i.timestamp, partition)
        ]

    @cached_property
    def _archived(self) -> dict[Instant, Mapping[str, Any] | None]:
        """Completed data and removal instants of Hudi's archived timeline, with their metadata
        (read once, and only when a partition lags behind the start of the active timeline)."""
        return {
            a.instant: a.metadata
            for a in self.mdt.table.archived_timeline()
            if a.instant.action in WRITE_ACTIONS or a.instant.action in REMOVAL_ACTIONS
        }

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed data instant, active or archived."""
        if self._committed.is_archived(instant.timestamp) and instant in self._archived:
            return CommitMetadata.from_json(self._archived[instant] or {}, f"archived {instant}")
        timeline = self.mdt.table.timeline
        return CommitMetadata.from_bytes(timeline.read_content(instant), timeline.path(instant))

    def reflects_upto(self, partition: str) -> str | None:
        """The newest data instant ``partition`` reflects (its base files' watermark, or a newer
        instant applied in a log file), or None when it reflects none."""
        watermark, logged = self._applied(partition)
        newest = max([watermark, *logged], key=normalize_timestamp)
        return None if newest == NOTHING else newest

    def _applied(self, partition: str) -> tuple[str, set[str]]:
        """What ``partition`` reflects: the data instant its base files cover up to (the oldest
        of its file groups'), and the data instants applied in its log files (those of a sync
        still writing excluded)."""
        slices = self.slices(partition)
        watermark = min((self._covers(base) for base, _ in slices.values()), default=NOTHING)
        pending = {i.timestamp for i in self._mdt_timeline.pending()}
        logged = {log.instant for _, logs in slices.values() for log in logs} - pending
        return watermark, logged

    def size(self, partition: str) -> tuple[int, int]:
        """Files and bytes of ``partition`` on storage."""
        entries = [e for e in self.storage.list(check_partition(partition)) if not e.is_dir]
        return len(entries), sum(e.size for e in entries)

    def removal(self, instant: Instant) -> Removal:
        """The data files a completed clean, rollback or restore deleted (active or archived)."""
        if self._committed.is_archived(instant.timestamp) and instant in self._archived:
            return removal_from_record(instant, self._archived[instant] or {})
        timeline = self.mdt.table.timeline
        return parse_removal(instant, timeline.read_content(instant), timeline.path(instant))

    def _deltacommit_names(self, data_instant: str, partition: str) -> bool:
        """Whether a completed metadata deltacommit of ``data_instant`` lists ``partition``: it
        was applied there with no records to write (say, a file without the indexed columns)."""
        delta = self._mdt_timeline.get(data_instant, Action.DELTA_COMMIT)
        if delta is None or not delta.is_completed:
            return False
        return partition in self.mdt.timeline.read_json(delta).get("logFiles", {})

    def _covers(self, base: MetadataFile | None) -> str:
        """The data instant a base file covers up to (recorded by the instant that wrote it)."""
        if base is None:
            return NOTHING
        instant = self._mdt_timeline.get(base.instant, Action.COMPACTION)
        if instant is None:
            return NOTHING
        covers: str = self.mdt.timeline.read_json(instant).get("coversUpto", NOTHING)
        return covers

    def _changed_files(self, instant: Instant, watermark: str) -> bool:
        """Whether a completed instant wrote data files, or deleted files an index partition with
        base files covering up to ``watermark`` may list: committed ones (a clean), or ones as
        old as the watermark (a rollback or restore of commits the base files had covered)."""
        try:
            if instant.action not in REMOVAL_ACTIONS:
                if instant.timestamp not in self._wrote:
                    wrote = bool(self.commit_metadata(instant).write_stats)
                    self._wrote[instant.timestamp] = wrote
                return self._wrote[instant.timestamp]
            if instant.timestamp not in self._removed:
                self._removed[instant.timestamp] = self.removal(instant)
            removal = self._removed[instant.timestamp]
        except TableError:  # unreadable: assume it changed files (never answer stale)
            return True
        return bool(removal.whole_partitions) or any(
            base is not None
            and (base.instant_time in self._committed or not _after(base.instant_time, watermark))
            for partition, names in removal.deleted.items()
            for base in (BaseFile.parse(partition, n) for n in names)
        )

    def slices(self, partition: str) -> dict[str, tuple[MetadataFile | None, list[MetadataFile]]]:
        """Per file group: the newest visible base file and the log files that may apply."""
        bases: dict[str, MetadataFile] = {}
        logs: dict[str, list[MetadataFile]] = defaultdict(list)
        for entry in self.storage.list(check_partition(partition)):
            parsed = MetadataFile.parse(partition, entry.name)
            if parsed is None:
                continue
            if parsed.is_log:
                if parsed.instant in self._committed or parsed.instant in self._removals:
                    logs[parsed.file_group].append(parsed)
            elif parsed.instant in self._visible_bases:
                current = bases.get(parsed.file_group)
                if current is None or _after(parsed.instant, current.instant):
                    bases[parsed.file_group] = parsed
        groups = set(bases) | set(logs)
        return {
            fg: (
                bases.get(fg),
                sorted(logs.get(fg, []), key=lambda f: normalize_timestamp(f.instant)),
            )
            for fg in sorted(groups)
        }

    def read(
        self,
        partition: str,
        prefix: str | None = None,
        columns: Sequence[str] | None = None,
        include_deleted: bool = False,
    ) -> pa.Table:
        """Merged records of a partition (optionally only keys starting with ``prefix``)."""
        schema = SCHEMAS[check_partition(partition)]
        wanted = None
        if columns is not None:
            wanted = list(dict.fromkeys(["key", "is_deleted", "instant", *columns]))
            schema = pa.schema([schema.field(c) for c in wanted])
        parts = []
        for base, logs in self.slices(partition).values():
            watermark = NOTHING
            base_rows = schema.empty_table()
            if base is not None:
                base_rows, covers = read_records(self.storage, base.path, wanted)
                watermark = covers or NOTHING
            log_rows = [
                _prefixed(read_records(self.storage, log.path, wanted)[0], prefix)
                for log in logs
                if _after(log.instant, watermark)
            ]
            parts.append(_merge(partition, _prefixed(base_rows, prefix), log_rows))
        merged = pa.concat_tables(parts) if parts else schema.empty_table()
        if not include_deleted:
            merged = merged.filter(pc.invert(merged.column("is_deleted")))
        return merged.sort_by("key")


def _prefixed(rows: pa.Table, prefix: str | None) -> pa.Table:
    if not prefix or rows.num_rows == 0:
        return rows
    return rows.filter(pc.starts_with(rows.column("key"), prefix))


def _merge(partition: str, base: pa.Table, logs: list[pa.Table]) -> pa.Table:
    logs = [log for log in logs if log.num_rows]
    if not logs:
        return base
    log_rows = pa.concat_tables(logs)
    touched = log_rows.column("key").unique()
    untouched = base.filter(pc.invert(pc.is_in(base.column("key"), value_set=touched)))
    history: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in base.filter(pc.is_in(base.column("key"), value_set=touched)).to_pylist():
        history[row["key"]].append(row)
    for row in log_rows.to_pylist():  # logs were concatenated in data-instant order
        history[row["key"]].append(row)
    merged = [_fold(partition, rows) for rows in history.values()]
    return pa.concat_tables([untouched, pa.Table.from_pylist(merged, schema=base.schema)])


def _fold(partition: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[str, Any] | None = None
    for row in rows:
        if state is None or row["is_deleted"] or state["is_deleted"] or partition != COLUMN_STATS:
            state = dict(row)
            continue
        state = _combine_stats(state, row)
    assert state is not None
    return state


def _combine_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(b)
    kind = b.get("value_type")
    if "min_value" in a:
        lo_a, lo_b = python_value(kind, a["min_value"]), python_value(kind, b["min_value"])
        hi_a, hi_b = python_value(kind, a["max_value"]), python_value(kind, b["max_value"])
        known = None not in (lo_a, lo_b)
        out["min_value"] = (a["min_value"] if lo_a <= lo_b else b["min_value"]) if known else None
        out["max_value"] = (a["max_value"] if hi_a >= hi_b else b["max_value"]) if known else None
    for count in ("null_count", "value_count", "total_size", "total_uncompressed_size"):
        if count in a:
            out[count] = None if a[count] is None or b[count] is None else a[count] + b[count]
    return out


# --- building from scratch -----------------------------------------------------------------------


def committed_data_files(
    table: Table, timeline: Timeline, upto: str | None = None
) -> list[DataFileInfo]:
    """Footers of every committed base file (every version still on storage), optionally only
    of instants up to ``upto``."""
    view = FileSystemView(table.timeline, timeline)
    files = [
        b
        for b in view.all_base_files
        if view.is_committed(b.instant_time) and (upto is None or not _after(b.instant_time, upto))
    ]
    return [
        info_from_storage(table.storage, b.partition_path, b.file_name, b.size, b.instant_time)
        for b in files
    ]


def build_records(
    table: Table,
    timeline: Timeline,
    partition: str,
    columns: Sequence[str] | None = None,
    upto: str | None = None,
) -> pa.Table:
    """The records of ``partition`` computed from scratch over a snapshot: the oracle every
    incrementally maintained partition must equal."""
    infos = committed_data_files(table, timeline, upto)
    return records_for(
        check_partition(partition), infos, columns if partition == COLUMN_STATS else None
    ).sort_by("key")


def initialize(
    table: Table,
    partitions: Sequence[str],
    columns: Sequence[str] | None = None,
    groups: dict[str, int] | None = None,
) -> list[str]:
    """Build ``partitions`` synchronously and mark them completed, holding the table lock
    throughout: for new or small tables (large ones use the asynchronous indexer). Returns the
    partitions built (already completed or inflight ones are skipped)."""
    check_indexable(table)
    mdt = MetadataTable(table)
    with table.lock("initialize metadata") as lock:
        state = table.reload_index_state()
        todo = [p for p in partitions if check_partition(p) not in state.partitions]
        if not todo:
            return []
        if columns and COLUMN_STATS in todo:
            table.update_index_state(
                lock, lambda s: replace(s, column_stats_columns=tuple(columns))
            )
        timeline = table.timeline.load()
        last = timeline.last_contiguous_completed_write()
        upto = last.timestamp if last else NOTHING
        after = [
            i.timestamp for i in timeline.write_timeline().completed() if _after(i.timestamp, upto)
        ]
        base_infos = committed_data_files(table, timeline, upto)
        later = [i for i in committed_data_files(table, timeline) if i.instant in after]
        for partition in todo:
            count = (groups or {}).get(partition) or configured_file_groups(table.config, partition)
            records = records_for(
                partition, base_infos, columns if partition == COLUMN_STATS else None
            )
            mdt.write_base_files(
                partition, records, upto, table.timeline.generator.next(), count, lock
            )
        by_instant: dict[str, list[DataFileInfo]] = defaultdict(list)
        for info in later:
            by_instant[info.instant].append(info)
        for instant_time, infos in sorted(by_instant.items()):
            for partition in todo:
                rows = records_for(partition, infos, columns if partition == COLUMN_STATS else None)
                mdt.write_logs(partition, instant_time, rows, lock)
        table.update_metadata_partitions(lock, add_inflight=todo)
        table.update_metadata_partitions(lock, complete=todo)
    return todo


def compact(
    table: Table, partition: str, progress: Callable[[int, int], None] | None = None
) -> Instant | None:
    """Merge each file group's base file and applicable logs into a new base file covering the
    last contiguous completed data instant W (so no data instant before W is pending). Readers
    see the same records before and after. Returns the compaction instant, or None if no file
    group had logs to merge or the partition does not reflect every completed instant yet (the
    daemon's sync applies them first)."""
    mdt = MetadataTable(table)
    timeline = table.timeline.load()
    last = timeline.last_contiguous_completed_write()
    if last is None:
        return None
    upto = last.timestamp
    reader = mdt.reader(timeline)
    behind = reader.unapplied(partition)
    if behind:
        # a base covering W would record these as applied without their records: sync first
        logger.info(
            "compaction of %s waits: %d completed instant(s) not applied yet (%s)",
            partition,
            len(behind),
            behind[0].timestamp,
        )
        return None
    slices = reader.slices(partition)
    base_marks = {}
    for fg, (base, _logs) in slices.items():
        mark = NOTHING
        if base is not None:
            mark = read_records(mdt.storage, base.path, ["key"])[1] or NOTHING
        base_marks[fg] = mark
    pending_logs = any(
        _after(log.instant, base_marks[fg]) and not _after(log.instant, upto)
        for fg, (_, logs) in slices.items()
        for log in logs
    )
    if not pending_logs:
        return None
    # every record visible up to W, merged, becomes the new base
    visible = _restricted_reader(mdt, timeline, upto).read(partition)
    return mdt.write_base_files(
        partition, visible, upto, table.timeline.generator.next(), len(slices), progress=progress
    )


def _restricted_reader(mdt: MetadataTable, timeline: Timeline, upto: str) -> MetadataReader:
    """A reader that applies only logs of data instants up to ``upto``."""
    limited = timeline.filter(lambda i: not _after(i.timestamp, upto))
    return MetadataReader(mdt, limited)


__all__ = [
    "PARTITIONS",
    "MetadataReader",
    "MetadataTable",
    "build_records",
    "check_indexable",
    "committed_data_files",
    "compact",
    "initialize",
]
