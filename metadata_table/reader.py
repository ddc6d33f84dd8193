"""Merged reads of the metadata table as of a data-timeline snapshot, and the merge rules.

Visibility (docs/architecture.md §3, invariants 3 and 4): a base file ``<fg>_<T>.parquet`` is
visible once metadata ``compaction`` instant T is completed, and the newest visible one of a file
group is used; a log file ``.<fg>.log.<D>`` is applied when data instant D is completed on the
*data* timeline and newer than the base file's watermark.

Several records of one key merge in data-instant order: ``files`` and ``bloom_filters`` keep the
newest record (a newer tombstone wins); ``column_stats`` combine min-of-mins, max-of-maxes and
summed counts since the newest tombstone; ``partition_stats`` keep the record computed last
(see :mod:`metadata_table.partition_stats`). A reader also says what a partition reflects: which
completed data instants it lacks (``unapplied``), whether its files were lost, its size.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.file_cache import Entry, process_cache
from metadata_table.layout import (
    NOTHING,
    PARTITION_STATS,
    MetadataFile,
    check_partition,
    column_values,
    in_file_order,
    keyed_by_column,
    keyed_by_record,
    read_records,
    schema_of,
)
from metadata_table.records import python_value
from metadata_table.workers import in_parallel
from timeline.archived import ArchivedInstant, ArchivedTimeline
from timeline.commit_metadata import CommitMetadata
from timeline.config import READ_CACHE_MAX_MB
from timeline.errors import CorruptInstantError, StorageFileNotFoundError, TableError
from timeline.fs_view import BaseFile, slice_instant
from timeline.instant import WRITE_ACTIONS, Action, Instant, State, is_after, normalize_timestamp
from timeline.removals import REMOVAL_ACTIONS, Removal, parse_removal, removal_from_record
from timeline.timeline import CommittedWrites, Timeline

if TYPE_CHECKING:
    from metadata_table.table import MetadataTable


@dataclass(frozen=True)
class GroupFiles:
    """One file group's files as a snapshot reads them: its base file (None: none visible) and
    the log files applied on top of it, oldest first (paths in the metadata table)."""

    file_group: str
    base: str | None
    logs: tuple[str, ...] = ()


logger = logging.getLogger(__name__)

T = TypeVar("T")


class MetadataReader:
    """Merged reads of the metadata table as of a data timeline snapshot."""

    def __init__(self, mdt: MetadataTable, data_timeline: Timeline, cache: bool = True) -> None:
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
        budget = mdt.table.config.get(READ_CACHE_MAX_MB) * 1024 * 1024 if cache else 0
        self._cache = process_cache(budget) if budget else None
        self._wrote: dict[str, bool] = {}
        self._removed: dict[str, Removal] = {}
        self._snapshot_times: dict[str, float | None] = {}
        self._slices: dict[str, dict[str, tuple[MetadataFile | None, list[MetadataFile]]]] = {}
        self._coverage: dict[str, str] = {}  # metadata compaction instant -> what it covers

    def lost(self, partition: str) -> str | None:
        """Why a completed partition cannot be read, or None. Every file group of a completed
        partition has a base file of ours; none at all, or a group with log files but no base
        file, means its folder was deleted or replaced by something we did not write. A
        partition whose lag cannot be known (:meth:`gap`) is lost too: it is rebuilt, not
        synced."""
        slices = self.slices(partition)
        where = self.storage.uri(partition)
        if not any(base is not None for base, _ in slices.values()):
            return f"no base file of ours in {where} (deleted or replaced)"
        orphans = sorted(fg for fg, (base, _) in slices.items() if base is None)
        if orphans:
            return f"file group(s) {', '.join(orphans)} in {where} have no base file"
        return self.gap(partition)

    def unapplied(self, partition: str) -> list[Instant]:
        """Completed data instants that changed data files and that ``partition`` does not
        reflect: newer than the watermark of its base files and with no log file in it (or one
        that a sync is still writing). These are commits and table services that did not go
        through this kernel (Apache Hudi's own writer and cleaner, hudi-rs, a backfill tool): the
        partition is stale for their files until they are applied (``indexer sync``, or the
        daemon's next tick). Instants Hudi has archived since count as much as active ones:
        Hudi archives cleans and commits by separate counts, so an unapplied clean may be in the
        archive while older commits are still active."""
        watermark, logged = self.applied(partition)
        active = self.data_timeline.filter(
            lambda i: i.action in WRITE_ACTIONS or i.action in REMOVAL_ACTIONS
        ).completed()
        known = {(i.timestamp, i.action) for i in active}
        archived = [
            i
            for i in self._archived_since(partition, watermark)
            if (i.timestamp, i.action) not in known
        ]
        changes = sorted([*active, *archived])
        return [
            i
            for i in changes
            if is_after(i.timestamp, watermark)
            and i.timestamp not in logged
            and self._changed_files(i, watermark)
            and not self._deltacommit_names(i.timestamp, partition)
        ]

    def _archived_since(self, partition: str, watermark: str) -> list[Instant]:
        """Completed data and removal instants after ``watermark`` in the archive files written
        since ``partition`` last took a snapshot for its base files (every instant archived
        before then is reflected by them, or was applied before they became readable)."""
        since = self._snapshot_time(partition)
        return [
            a.instant
            for a in self._archive.instants(written_since=since, newer_than=watermark)
            if a.instant.action in WRITE_ACTIONS or a.instant.action in REMOVAL_ACTIONS
        ]

    @cached_property
    def _archive(self) -> ArchivedTimeline:
        return self.mdt.table.archive()

    def built_after(self, partition: str, instant: Instant) -> bool:
        """Whether ``partition``'s base files took their snapshot of the table after completed
        instant ``instant`` completed (so they reflect it): its completed file is older than the
        snapshot, or Hudi archived it before then."""
        since = self._snapshot_time(partition)
        if since is None:
            return False
        try:
            table = self.mdt.table
            return table.storage.mtime(table.timeline.path(instant)) < since
        except StorageFileNotFoundError:  # archived: before the snapshot, unless since
            archived = self._archive.instants(written_since=since)
            return all(a.instant.timestamp != instant.timestamp for a in archived)

    def _snapshot_time(self, partition: str) -> float | None:
        """When ``partition`` last took a timeline snapshot for its base files (see
        :meth:`_started`): every instant Hudi archived before then is reflected by them."""
        self.slices(partition)
        return self._snapshot_times[partition]

    def _archived(self, instant: Instant) -> ArchivedInstant:
        """``instant`` from Hudi's archive (all of it is read if need be), or
        :class:`CorruptInstantError` when it is not there or has no metadata."""
        for archived in self._archive.instants():
            if archived.instant == instant:
                if archived.metadata is None:
                    raise CorruptInstantError(
                        f"{self._archive.folder} ({instant})", "archived without its metadata"
                    )
                return archived
        raise CorruptInstantError(
            self.mdt.table.timeline.path(instant),
            f"{instant} is neither on the active timeline nor in Hudi's archive "
            f"({self._archive.folder}); the archive may have been trimmed",
        )

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed data instant, from the active timeline, else from Hudi's
        archive (archived since the timeline was read, or before)."""
        timeline = self.mdt.table.timeline
        try:
            content = timeline.read_content(instant)
        except StorageFileNotFoundError:
            record = self._archived(instant).metadata or {}
            return CommitMetadata.from_json(record, f"{self._archive.folder} ({instant})")
        return CommitMetadata.from_bytes(content, timeline.path(instant))

    def newest_written(self, instant: Instant) -> BaseFile | None:
        """The newest base file the completed write ``instant`` wrote under its own instant time
        (its greatest path), or None: from its commit metadata, kept in the process's
        :mod:`file_cache` (a completed instant's file never changes; parsing a 2,000-file
        commit's took 22 ms, most of a new snapshot's plan when it was parsed each time)."""

        def read() -> BaseFile | None:
            written = (
                BaseFile.parse(s.partition_path, s.path.rpartition("/")[2], s.file_size_in_bytes)
                for s in self.commit_metadata(instant).write_stats
            )
            own = [b for b in written if b is not None and b.instant_time == instant.timestamp]
            return max(own, key=lambda b: b.path, default=None)

        timeline = self.mdt.table.timeline
        key = (timeline.storage.uri(timeline.path(instant)), "newest written base file")
        return self.kept(key, read, 256)

    def data_file_fact(self, file: BaseFile, what: Hashable, read: Callable[[], T]) -> T:
        """``read()``: something about the data file ``file`` (its schema, some rows' keys),
        kept in the process's :mod:`file_cache` under the file's URI and size (a base file is
        written once, under a name carrying its instant and write token)."""
        return self.kept((self.mdt.table.storage.uri(file.path), file.size, what), read, 4096)

    def kept(self, key: Hashable, read: Callable[[], T], size: int) -> T:
        """``read()``, kept in the process's :mod:`file_cache` under ``key`` as ``size`` bytes
        (read each time when the cache is off)."""
        return read() if self._cache is None else self._cache.get(key, read, lambda _: size)

    def gap(self, partition: str) -> str | None:
        """Why the instants ``partition`` lacks cannot be known, or None: the instant its base
        files cover up to left the active timeline (archived) and is not in Hudi's archive
        either (the archive was trimmed), so what came after it may be lost too."""
        watermark, _ = self.applied(partition)
        if watermark == NOTHING or self.data_timeline.get(watermark) is not None:
            return None
        first = self.data_timeline.first()
        if first is not None and is_after(watermark, first.timestamp):
            return None  # rolled back or restored away; the instants after it are active
        since = self._snapshot_time(partition)
        if any(a.instant.timestamp == watermark for a in self._archive.instants(since)):
            return None
        return (
            f"it reflects the table up to {watermark}, which is neither on the active timeline "
            f"nor in Hudi's archive ({self._archive.folder}): what came after it cannot be "
            "read (the archive was trimmed?)"
        )

    def reflects_upto(self, partition: str) -> str | None:
        """The newest data instant ``partition`` reflects (its base files' watermark, or a newer
        instant applied in a log file), or None when it reflects none."""
        watermark, logged = self.applied(partition)
        newest = max([watermark, *logged], key=normalize_timestamp)
        return None if newest == NOTHING else newest

    def applied(self, partition: str) -> tuple[str, set[str]]:
        """What ``partition`` reflects: the data instant its base files cover up to (the oldest
        of its file groups'), and the data instants applied in its log files (those of a sync
        still writing excluded)."""
        slices = self.slices(partition)
        watermark = min((self._covers(base) for base, _ in slices.values()), default=NOTHING)
        pending = {i.timestamp for i in self._mdt_timeline.pending()}
        logged = {log.instant for _, logs in slices.values() for log in logs} - pending
        return watermark, logged

    def delta_count(self, partition: str, upto: str | None = None) -> int:
        """How many data instants (up to ``upto``) ``partition`` applied since its base files
        were written: those with log files newer than a file group's base, and those our
        writers' deltacommits applied with nothing to write there (a record index's in-place
        updates). Its compaction by count is measured by this, as Apache Hudi counts its
        metadata table's deltacommits since the last compaction."""
        slices = self.slices(partition)
        watermark = min((self._covers(b) for b, _ in slices.values()), default=NOTHING)
        deltas = self._mdt_timeline.with_actions(Action.DELTA_COMMIT).completed()
        applied = {i.timestamp for i in deltas} | {
            log.instant
            for base, logs in slices.values()
            for log in logs
            if is_after(log.instant, self._covers(base))
        }
        return sum(
            1 for t in applied if is_after(t, watermark) and (upto is None or not is_after(t, upto))
        )

    def size(self, partition: str) -> tuple[int, int]:
        """Files and bytes of ``partition`` on storage."""
        entries = [e for e in self.storage.list(check_partition(partition)) if not e.is_dir]
        return len(entries), sum(e.size for e in entries)

    def removal(self, instant: Instant) -> Removal:
        """The data files a completed clean, rollback or restore deleted, from the active
        timeline, else from Hudi's archive."""
        timeline = self.mdt.table.timeline
        try:
            content = timeline.read_content(instant)
        except StorageFileNotFoundError:
            return removal_from_record(instant, self._archived(instant).metadata or {})
        return parse_removal(instant, content, timeline.path(instant))

    def _deltacommit_names(self, data_instant: str, partition: str) -> bool:
        """Whether a completed metadata deltacommit of ``data_instant`` lists ``partition`` with
        no log file: it was applied there with no records to write (say, a file without the
        indexed columns). One that lists log files counts only by those files (a partition
        rebuilt since has lost them)."""
        delta = self._mdt_timeline.get(data_instant, Action.DELTA_COMMIT)
        if delta is None or not delta.is_completed:
            return False
        logged: dict[str, list[str]] = self.mdt.timeline.read_json(delta).get("logFiles", {})
        return logged.get(partition) == []

    def _covers(self, base: MetadataFile | None) -> str:
        """The data instant a base file covers up to (recorded by the instant that wrote it)."""
        if base is None:
            return NOTHING
        if base.instant not in self._coverage:
            instant = self._mdt_timeline.get(base.instant, Action.COMPACTION)
            covers = NOTHING
            if instant is not None:
                covers = self.mdt.timeline.read_json(instant).get("coversUpto", NOTHING)
            self._coverage[base.instant] = covers
        return self._coverage[base.instant]

    def _changed_files(self, instant: Instant, watermark: str) -> bool:
        """Whether a completed instant wrote data files, or deleted files an index partition with
        base files covering up to ``watermark`` may list: committed ones (a clean), or ones as
        old as the watermark (a rollback or restore of commits the base files had covered). A
        log file is judged by the instant of its file slice."""
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
            at is not None and (at in self._committed or not is_after(at, watermark))
            for names in removal.deleted.values()
            for at in map(slice_instant, names)
        )

    def slices(self, partition: str) -> dict[str, tuple[MetadataFile | None, list[MetadataFile]]]:
        """Per file group: the newest visible base file and the log files that may apply (those
        of committed writes and of completed cleans, rollbacks and restores, active or archived
        by Hudi). Listed once per reader."""
        if partition in self._slices:
            return self._slices[partition]
        bases: dict[str, MetadataFile] = {}
        logs: dict[str, list[MetadataFile]] = defaultdict(list)
        unknown: list[MetadataFile] = []
        for entry in self.storage.list(check_partition(partition)):
            parsed = MetadataFile.parse(partition, entry.name, (entry.size, entry.mtime))
            if parsed is None:
                continue
            if parsed.is_log:
                if parsed.instant in self._committed or parsed.instant in self._removals:
                    logs[parsed.file_group].append(parsed)
                elif self.data_timeline.get(parsed.instant) is None:
                    unknown.append(parsed)  # archived, or rolled back
            elif parsed.instant in self._visible_bases:
                current = bases.get(parsed.file_group)
                if current is None or is_after(parsed.instant, current.instant):
                    bases[parsed.file_group] = parsed
        self._snapshot_times[partition] = self._started(bases.values())
        if unknown:
            since = self._snapshot_times[partition]
            archived = {
                a.instant.timestamp
                for a in self._archive.instants(written_since=since)
                if a.instant.action in REMOVAL_ACTIONS
            }
            for log in unknown:
                if log.instant in archived:
                    logs[log.file_group].append(log)
        groups = set(bases) | set(logs)
        self._slices[partition] = {
            fg: (
                bases.get(fg),
                sorted(logs.get(fg, []), key=lambda f: normalize_timestamp(f.instant)),
            )
            for fg in sorted(groups)
        }
        return self._slices[partition]

    def _started(self, bases: Iterable[MetadataFile]) -> float | None:
        """When (storage time) the oldest of ``bases`` began: its metadata compaction instant's
        requested file, written right after the timeline snapshot it covers. None when unknown
        (then the whole archive is read)."""
        times = []
        for instant in {base.instant for base in bases}:
            requested = Instant(instant, Action.COMPACTION, State.REQUESTED)
            try:
                times.append(self.storage.mtime(self.mdt.timeline.path(requested)))
            except StorageFileNotFoundError:
                return None
        return min(times) if times else None

    def keyed_files(self, partition: str) -> list[GroupFiles]:
        """The files a lookup in ``partition`` (keyed by record key) reads, per file group in
        group order: the base file and the log files applied on top of it."""
        out = []
        for fg, (base, logs) in self.slices(partition).items():
            watermark = self._covers(base) if base is not None else NOTHING
            applied = tuple(log.path for log in logs if is_after(log.instant, watermark))
            out.append(GroupFiles(fg, base.path if base is not None else None, applied))
        return sorted(out, key=lambda g: g.file_group)

    def _records(
        self,
        file: MetadataFile,
        columns: list[str] | None,
        prefix: str | None,
        derive: Derive | None,
    ) -> Entry:
        """:func:`read_records` of ``file`` (passed through ``derive``), from the process's
        :mod:`file_cache` when the listing gave the file's version."""

        def read() -> Entry:
            records, covers = read_records(self.storage, file.path, columns, prefix)
            return (records if derive is None else derive(records)), covers

        key = self._records_key(file, columns, prefix, derive)
        if key is None or self._cache is None:
            return read()
        return self._cache.records(key, read)

    def _records_key(
        self,
        file: MetadataFile,
        columns: list[str] | None,
        prefix: str | None,
        derive: Derive | None,
    ) -> tuple[Any, ...] | None:
        how = None if derive is None else f"{derive.__module__}.{derive.__qualname__}"
        projection = None if columns is None else tuple(columns)
        return self._cache_key(file, "records", projection, prefix, how)

    def _decoded(
        self,
        file: MetadataFile,
        columns: list[str] | None,
        prefix: str | None,
        derive: Derive | None,
    ) -> bool:
        """Whether :meth:`_records` of ``file`` is answered from the process's cache."""
        key = self._records_key(file, columns, prefix, derive)
        return key is not None and self._cache is not None and key in self._cache

    def _column_values(self, file: MetadataFile, column: str, prefix: str) -> set[Any] | None:
        def read() -> set[Any] | None:
            return column_values(self.storage, file.path, column, prefix)

        key = self._cache_key(file, "values", column, prefix)
        if key is None or self._cache is None:
            return read()
        return self._cache.get(key, read, lambda found: 64 * (1 + len(found or ())))

    def _cache_key(self, file: MetadataFile, *what: Any) -> tuple[Any, ...] | None:
        """The cache key of something read from ``file``: its URI and version (size and
        modification time as listed); None (not kept) when the listing did not give both."""
        if self._cache is None or file.stamp is None or file.stamp[1] is None:
            return None
        return (self.storage.uri(file.path), file.stamp, *what)

    def column_values(self, partition: str, prefix: str, column: str) -> set[Any] | None:
        """The values a string ``column`` of the records with keys starting with ``prefix``
        takes, from the statistics of the files a read would open (see
        :func:`~metadata_table.layout.column_values`); None when they do not tell."""
        values: set[Any] = set()
        for base, logs in self.slices(partition).values():
            files = ([base] if base is not None else []) + logs  # a superset of what applies
            for file in files:
                found = self._column_values(file, column, prefix)
                if found is None:
                    return None
                values |= found
        return values

    def read(
        self,
        partition: str,
        prefix: str | None = None,
        columns: Sequence[str] | None = None,
        include_deleted: bool = False,
        ordered: bool = True,
        derive: Derive | None = None,
        groups: Collection[str] | None = None,
    ) -> pa.Table:
        """Merged records of a partition (optionally only keys starting with ``prefix``, only of
        the file groups named in ``groups``), in the order its files keep them; in no set order
        with ``ordered`` False (a reader that matches records by key saves the sort: half a
        fresh snapshot's reads at 100,000 files).

        ``columns`` projects (``key``, ``is_deleted``, ``instant`` and what merging needs always
        come); a dotted name (``min_value.int``) reads one field of a struct column, as a struct
        of that field.
        ``derive`` adds columns to each file's records before they are merged (and kept with
        them in the process's cache, so a new snapshot works them out for new files only)."""
        schema = schema_of(check_partition(partition))
        wanted = None
        if columns is not None:
            merged_by = ["computed"] if partition == PARTITION_STATS else []  # (see _fold)
            wanted = list(dict.fromkeys(["key", "is_deleted", "instant", *merged_by, *columns]))
            schema = pa.schema([_projected_field(schema, c) for c in wanted])
        empty = _empty_records(schema, derive)
        slices = [
            file_slice
            for fg, file_slice in self.slices(partition).items()
            if groups is None or fg in groups
        ]

        def group_rows(file_slice: tuple[MetadataFile | None, list[MetadataFile]]) -> pa.Table:
            base, logs = file_slice
            watermark = NOTHING
            base_rows = empty
            if base is not None:
                base_rows, covers = self._records(base, wanted, prefix, derive)
                watermark = covers or NOTHING
            log_rows = [
                self._records(log, wanted, prefix, derive)[0]
                for log in logs
                if is_after(log.instant, watermark)
            ]
            return _merge(partition, base_rows, log_rows)

        # file groups whose base files are not decoded yet are read at once (Parquet's decoding
        # runs outside the GIL): a new process's first lookup at 100,000 files reads four
        # bloom_filters file groups of 3.6 MB each
        undecoded = sum(
            base is not None and not self._decoded(base, wanted, prefix, derive)
            for base, _ in slices
        )
        parts = in_parallel(group_rows, slices) if undecoded > 1 else list(map(group_rows, slices))
        merged = pa.concat_tables(parts) if parts else empty
        deleted = merged.column("is_deleted")
        if not include_deleted and (deleted.null_count or pc.any(deleted).as_py()):
            # (only then: a filter copies every column)
            merged = merged.filter(pc.invert(deleted))
        if not ordered:
            return merged
        if keyed_by_record(partition) and "key_hash" not in merged.column_names:
            return merged.sort_by("key")  # a projection without the hash to order by
        return in_file_order(partition, merged)


#: columns worked out from one file's records (see :meth:`MetadataReader.read`)
Derive = Callable[[pa.Table], pa.Table]


@lru_cache(maxsize=64)
def _empty_records(schema: pa.Schema, derive: Derive | None) -> pa.Table:
    """No records of ``schema``, with ``derive``'s columns: worked out once per projection, not
    on every read (a new snapshot's four reads spent 0.3 ms deriving columns of nothing)."""
    return schema.empty_table() if derive is None else derive(schema.empty_table())


def _projected_field(schema: pa.Schema, column: str) -> pa.Field:
    """The field ``column`` names in ``schema``; ``struct.field`` is the struct with that field
    alone (as Parquet readers return it)."""
    name, _, inner = column.partition(".")
    field = schema.field(name)
    if not inner:
        return field
    return field.with_type(pa.struct([field.type.field(inner)]))


def _merge(partition: str, base: pa.Table, logs: list[pa.Table]) -> pa.Table:
    logs = [log for log in logs if log.num_rows]
    if not logs:
        return base
    if not keyed_by_column(partition):
        return newest_records(base, logs)
    log_rows = pa.concat_tables(logs)
    touched = pc.is_in(base.column("key"), value_set=log_rows.column("key").unique())
    untouched = base
    history: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if pc.any(touched).as_py():  # (a filter copies every column: none when logs only add keys)
        untouched = base.filter(pc.invert(touched))
        for row in base.filter(touched).to_pylist():
            history[row["key"]].append(row)
    for row in log_rows.to_pylist():  # logs were concatenated in data-instant order
        history[row["key"]].append(row)
    merged = [_fold(partition, rows) for rows in history.values()]
    return pa.concat_tables([untouched, pa.Table.from_pylist(merged, schema=base.schema)])


def newest_records(base: pa.Table, logs: list[pa.Table]) -> pa.Table:
    """The newest record of each key (a newer tombstone wins), on Arrow: the logs' records, each
    log keeping the keys no newer log has, then the base file's other records. A log holds one
    record per key (one data instant's)."""
    logs = [log if log.schema == base.schema else log.cast(base.schema) for log in logs]
    newest = pa.concat_tables(logs)
    if pc.count_distinct(newest.column("key")).as_py() < newest.num_rows:
        # a key in two logs: the newer wins (else, as a writer's commits of new files add
        # keys, no log is filtered: a few calls, not a few per log)
        parts: list[pa.Table] = []
        seen: pa.Array | None = None
        for log in reversed(logs):
            if seen is not None:
                log = log.filter(pc.invert(pc.is_in(log.column("key"), value_set=seen)))
            parts.append(log)
            keys = log.column("key").combine_chunks()
            seen = keys if seen is None else pa.concat_arrays([seen, keys])
        newest = pa.concat_tables(parts[::-1])
    superseded = pc.is_in(base.column("key"), value_set=newest.column("key"))
    # (a filter copies every column: none when the logs only add keys, as new files do)
    kept = base.filter(pc.invert(superseded)) if pc.any(superseded).as_py() else base
    return pa.concat_tables([kept, newest])


def _fold(partition: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    if partition == PARTITION_STATS:
        return dict(max(rows, key=lambda r: (r["computed"] or "", r["instant"] or "")))
    state: dict[str, Any] | None = None
    for row in rows:  # column_stats: combined since the newest tombstone
        if state is None or row["is_deleted"] or state["is_deleted"]:
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
