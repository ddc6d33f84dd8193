"""Building metadata partitions from scratch, and compacting them.

``build_records`` computes a partition over a snapshot from the data files (base files' footers, log files'
records): the oracle
every incrementally kept partition must equal. ``initialize`` builds partitions synchronously
under the table lock (new or small tables; large ones use the asynchronous indexer).
``compact`` merges each file group's base file and applicable logs into a new base file;
``upkeep`` compacts by count and ``clean_index`` deletes what compactions replaced, so the index
stays as small as a fresh build plus the logs since its last compaction.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.index_types import index_type
from metadata_table.layout import (
    COLUMN_STATS,
    NON_PARTITIONED,
    NOTHING,
    RECORD_INDEX,
    MetadataFile,
    check_partition,
    in_file_order,
)
from metadata_table.partition_stats import superseded
from metadata_table.reader import MetadataReader
from metadata_table.records import (
    DataFile,
    DataFileInfo,
    info_from_log,
    info_from_storage,
    live_copies,
    virtual_keys,
)
from metadata_table.table import MetadataTable
from timeline.clean import time_ago
from timeline.config import CLEAN_GRACE_SECONDS, INDEX_COMPACT_MAX_DELTA_COMMITS
from timeline.errors import CorruptInstantError, StorageFileNotFoundError
from timeline.fs_view import FileSystemView
from timeline.index_state import LAYOUT
from timeline.instant import (
    Action,
    Instant,
    State,
    is_after,
    normalize_timestamp,
)
from timeline.storage import FileInfo
from timeline.table import Table
from timeline.timeline import COMPLETION_TIME_KEY, META_FOLDER, Timeline

logger = logging.getLogger(__name__)


def committed_data_files(
    table: Table,
    timeline: Timeline,
    upto: str | None = None,
    rows: Sequence[str] | None = None,
    latest: bool = False,
) -> list[DataFileInfo]:
    """Footers of every committed base file (every version still on storage; with ``latest``,
    only the files of the latest file slices), optionally only of instants up to ``upto``, and
    the committed blocks of every log file of a committed slice (those of instants up to
    ``upto``; a log file without any is left out); with ``rows``, each file's rows too."""
    return list(iter_committed_data_files(table, timeline, upto, rows, latest))


def iter_committed_data_files(
    table: Table,
    timeline: Timeline,
    upto: str | None = None,
    rows: Sequence[str] | None = None,
    latest: bool = False,
) -> Iterator[DataFileInfo]:
    """:func:`committed_data_files` one file at a time (a caller that keeps only what it
    makes of each holds one file's footer at a time)."""
    view = FileSystemView(table.timeline, timeline, as_of=upto)
    keygen = virtual_keys(table)
    bases = view.all_base_files
    logs = view.committed_log_files
    if latest:
        slices = view.latest_file_slices()
        bases = [s.base_file for s in slices if s.base_file is not None]
        logs = [log for s in slices for log in s.log_files]
    for b in bases:
        if view.is_committed(b.instant_time):
            yield info_from_storage(
                table.storage,
                b.partition_path,
                b.file_name,
                b.size,
                b.instant_time,
                rows=rows,
                keygen=keygen,
            )
    counted = view.committed.__contains__
    for log in logs:
        info = info_from_log(
            table.storage,
            log.partition_path,
            log.file_name,
            log.size,
            counted,
            rows=rows,
            keygen=keygen,
        )
        if info is not None:
            yield info


def build_records(
    table: Table,
    timeline: Timeline,
    partition: str,
    columns: Sequence[str] | None = None,
    upto: str | None = None,
) -> pa.Table:
    """The records of ``partition`` computed from scratch over a snapshot: the oracle every
    incrementally maintained partition must equal."""
    return in_file_order(partition, _base_records(table, timeline, partition, columns, upto))


def rebuilt_files(view: FileSystemView) -> list[DataFile]:
    """The data files a rebuild of ``view``'s snapshot reads: every committed base file, then
    every log file (whose committed blocks count)."""
    files: list[DataFile] = view.committed_base_files()
    files += [(log.partition_path, log.file_name, log.size, "") for log in view.committed_log_files]
    return files


def per_file(partition: str) -> bool:
    """Whether each data file's records of ``partition`` come from that file alone."""
    kind = index_type(partition)
    return not (kind.recomputed or kind.keyed_by_record)


def _base_records(
    table: Table,
    timeline: Timeline,
    partition: str,
    columns: Sequence[str] | None,
    upto: str | None,
    infos: Sequence[DataFileInfo] | None = None,
) -> pa.Table:
    """The records of ``partition`` over the committed data files up to ``upto`` (``infos``,
    when the caller has read them): the latest ones for a recomputed type."""
    kind = index_type(partition)
    if infos is None:
        latest = kind.keyed_by_record  # what the latest slices hold: older versions not read
        infos = committed_data_files(table, timeline, upto, kind.row_columns, latest)
    if kind.recomputed or kind.keyed_by_record:
        older = superseded(table, timeline, upto)
        infos = [i for i in infos if i.path not in older]
    records = kind.records(infos, columns or (), upto or "")
    return kind.combine(records, upto or "") if kind.keyed_by_record else records


def key_copies(table: Table, timeline: Timeline | None = None) -> pa.Table:
    """The record index's records (:func:`~metadata_table.records.live_copies`) of every live
    copy of the record keys the latest file slices hold in more than one file group, ordered
    by key: what a record index build refuses, read as it reads them."""
    timeline = timeline if timeline is not None else table.timeline.load()
    kind = index_type(RECORD_INDEX)
    infos = committed_data_files(table, timeline, None, kind.row_columns, latest=True)
    older = superseded(table, timeline, None)
    return live_copies(kind.records([i for i in infos if i.path not in older]))


def duplicate_keys(table: Table, timeline: Timeline | None = None) -> pa.Table:
    """:func:`key_copies` as a table of plain strings: ``record_key``, ``partition_path``,
    ``file_id``, ``instant`` (the instant that wrote the copy)."""
    copies = key_copies(table, timeline)

    def text(name: str) -> pa.ChunkedArray:  # plain strings (records hold dictionaries)
        return copies.column(name).cast(pa.string())

    partitions = text("partition")
    return pa.table(
        {
            "record_key": text("key"),
            "partition_path": pc.if_else(pc.equal(partitions, NON_PARTITIONED), "", partitions),
            "file_id": text("file_id"),
            "instant": text("instant"),
        }
    )


def initialize(
    table: Table,
    partitions: Sequence[str],
    columns: Sequence[str] | None = None,
    groups: dict[str, int] | None = None,
) -> list[str]:
    """Build ``partitions`` synchronously and mark them completed, holding the table lock
    throughout: for new or small tables (large ones use the asynchronous indexer). Returns the
    partitions built (already completed or inflight ones are skipped)."""
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
        last = timeline.last_settled_write()
        upto = last.timestamp if last else NOTHING
        after = [
            i.timestamp
            for i in timeline.write_timeline().completed()
            if is_after(i.timestamp, upto)
        ]
        kinds = [index_type(p) for p in todo]
        wanted = [k.row_columns for k in kinds if k.row_columns is not None]
        rows = tuple(sorted({c for cs in wanted for c in cs})) if wanted else None
        base_infos = committed_data_files(table, timeline, upto, rows)
        later = [i for i in committed_data_files(table, timeline) if i.instant in after]
        for partition in todo:
            kind = index_type(partition)
            rows = sum(i.metadata.num_rows for i in base_infos if i.metadata is not None)
            count = (groups or {}).get(partition) or kind.configured_groups(
                table.config, rows, len(base_infos)
            )
            records = _base_records(table, timeline, partition, columns, upto, base_infos)
            mdt.write_base_files(
                partition,
                records,
                upto,
                table.timeline.generator.next(),
                count,
                lock,
                layout=LAYOUT,  # (what a partition made now gets: see add_inflight below)
            )
        by_instant: dict[str, list[DataFileInfo]] = defaultdict(list)
        for info in later:
            by_instant[info.instant].append(info)
        reader = mdt.reader(timeline)
        for instant_time, infos in sorted(by_instant.items()):
            instant = timeline.get(instant_time)
            for partition in todo:
                if index_type(partition).keyed_by_record and instant is not None:
                    metadata = reader.commit_metadata(instant)
                    records = mdt.instant_delta(reader, partition, instant, metadata)
                else:
                    records = mdt.instant_records(partition, infos, columns or ())
                mdt.write_logs(partition, LAYOUT, instant_time, records, lock)
        table.update_metadata_partitions(lock, add_inflight=todo)
        table.update_metadata_partitions(lock, complete=todo)
    return todo


def compact(
    table: Table,
    partition: str,
    progress: Callable[[int, int], None] | None = None,
    min_deltas: int = 1,
) -> Instant | None:
    """Merge each file group's base file and applicable logs into a new base file covering the
    last settled write W (no write, clean or rollback before W is pending). Readers
    see the same records before and after. Returns the compaction instant, or None if fewer
    than ``min_deltas`` data instants were applied since the base files (counted on this
    call's own reading of the index: another process's upkeep may have compacted since its
    caller counted) or the partition does not reflect every completed instant yet (the
    daemon's sync applies them first)."""
    mdt = MetadataTable(table)
    mdt.discard_pending_base_files([partition], only_dead=True)  # a compaction that crashed
    timeline = table.timeline.load()
    last = timeline.last_settled_write()
    if last is None:
        return None
    upto = last.timestamp
    reader = mdt.reader(timeline, cache=False)  # whole partitions, once
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
    if reader.delta_count(partition, upto) < max(min_deltas, 1):
        return None
    # every record visible up to W, merged, becomes the new base
    visible = _restricted_reader(mdt, timeline, upto).read(partition)
    return mdt.write_base_files(
        partition,
        visible,
        upto,
        table.timeline.generator.next(),
        len(reader.slices(partition)),
        progress=progress,
        layout=table.reload_index_state().layout(partition),
        unless_dropped=True,
    )


@dataclass(frozen=True)
class UpkeepResult:
    """What one round of the index's upkeep did: the partitions compacted (with their
    compaction instants), the replaced files deleted (and their bytes), and the instants trimmed
    from the index's own timeline."""

    compacted: dict[str, str] = field(default_factory=dict)
    removed_files: int = 0
    removed_bytes: int = 0
    trimmed_instants: int = 0

    def __bool__(self) -> bool:
        return bool(self.compacted or self.removed_files or self.trimmed_instants)


def upkeep(table: Table, force: bool = False, now: float | None = None) -> UpkeepResult:
    """The index's own upkeep, as Apache Hudi's metadata table keeps itself: compact each
    completed partition that applied ``hoodie.metadata.compact.max.delta.commits`` data
    instants or more since its base files (:meth:`MetadataReader.delta_count`; any, with
    ``force``), then delete what compactions replaced and trim the index's timeline
    (:func:`clean_index`)."""
    state = table.reload_index_state()
    if not state.partitions:
        return UpkeepResult()
    limit = table.config.get(INDEX_COMPACT_MAX_DELTA_COMMITS)
    reader = MetadataTable(table).reader(table.timeline.load(), cache=False)
    compacted = {}
    for partition in state.completed:
        if force or reader.delta_count(partition) >= limit:
            # counted again in compact(): a writer's upkeep and the daemon's may race
            instant = compact(table, partition, min_deltas=1 if force else limit)
            if instant is not None:
                compacted[partition] = instant.timestamp
    cleaned = clean_index(table, now)
    return replace(cleaned, compacted=compacted)


def clean_index(table: Table, now: float | None = None) -> UpkeepResult:
    """Delete the index files no reader can need any more, and trim the index's own timeline.

    The rule: in each file group, the newest base file whose compaction completed at least
    ``indexer.clean.grace.seconds`` ago (N, covering data instant C) stays, with everything
    newer; base files older than N, and log files of data instants up to C, go (a reader that
    uses N never reads them; one that listed the group before N completed has had the grace
    period to finish, and a plan that finds a file gone plans again on a fresh snapshot).
    A partition with a compaction or build in progress (its heartbeat beating) is left alone.
    Then the completed metadata compactions none of whose base files remain, and the completed
    deltacommits up to the oldest C of every partition (and of every pending build), leave
    the index's timeline, pending states first. Every step is recomputed from a listing, so a
    run killed part-way is finished by the next."""
    mdt = MetadataTable(table)
    state = table.reload_index_state()
    timeline = mdt.timeline.load()
    compactions = timeline.with_actions(Action.COMPACTION)
    done = {i.timestamp: i for i in compactions.completed()}
    busy: set[str | None] = {
        mdt.planned_partition(i)
        for i in compactions.pending()
        if not mdt.heartbeat(i.timestamp).is_expired()
    }
    cutoff = time_ago(table.config.get(CLEAN_GRACE_SECONDS), now)

    def plan(instant: str) -> dict[str, Any]:
        """A completed compaction's content (immutable: kept for the process)."""
        key = (mdt.storage.base_uri, instant)
        if key not in _COMPLETED_PLANS:
            if len(_COMPLETED_PLANS) >= 4096:
                _COMPLETED_PLANS.clear()
            _COMPLETED_PLANS[key] = mdt.timeline.read_json(done[instant])
        return _COMPLETED_PLANS[key]

    def aged(instant: str) -> bool:
        when = plan(instant).get(COMPLETION_TIME_KEY)
        if not isinstance(when, str):
            when = mdt.timeline.completion_time(done[instant])
        return normalize_timestamp(when) <= cutoff

    doomed: list[FileInfo] = []
    floors: list[str] = []
    #: per partition looked at: the instants of the base files left in it
    bases_left: dict[str, set[str]] = {}
    named = {plan(t).get("partition") for t in done}
    for partition in sorted({*state.partitions, *(p for p in named if isinstance(p, str))}):
        if partition in busy or None in busy:
            floors.append(NOTHING)
            continue
        groups: dict[str, list[tuple[MetadataFile, FileInfo]]] = defaultdict(list)
        for entry in mdt.storage.list(partition):
            parsed = MetadataFile.parse(partition, entry.name)
            if parsed is not None:
                groups[parsed.file_group].append((parsed, entry))
        left = bases_left[partition] = set()
        if partition not in state.partitions:  # dropped: only its timeline is trimmed
            left.update(f.instant for files in groups.values() for f, _ in files if not f.is_log)
            continue
        if not groups:
            floors.append(NOTHING)
        for files in groups.values():
            bases = [f.instant for f, _ in files if not f.is_log and f.instant in done]
            kept = max((b for b in bases if aged(b)), key=normalize_timestamp, default=None)
            covers = NOTHING if kept is None else plan(kept).get("coversUpto", NOTHING)
            floors.append(covers)
            for f, entry in files:
                if kept is None:
                    replaced = False
                elif f.is_log:
                    replaced = not is_after(f.instant, covers)
                else:
                    replaced = f.instant in done and is_after(kept, f.instant)
                if replaced:
                    doomed.append(entry)
                elif not f.is_log:
                    left.add(f.instant)
    for entry in doomed:
        mdt.storage.delete(entry.path)
    floor = min(floors, key=normalize_timestamp, default=NOTHING)
    for pending in compactions.pending():  # a build's catch-up reads the deltacommits after t
        floor = min(floor, _plan_covers(mdt, pending), key=normalize_timestamp)
    present = set(mdt.storage.file_names(META_FOLDER))
    trimmed = 0
    for instant in done.values():
        of = plan(instant.timestamp).get("partition")
        if of in bases_left and instant.timestamp not in bases_left[of]:
            mdt.timeline.remove(instant, present)
            trimmed += 1
    for instant in timeline.with_actions(Action.DELTA_COMMIT).completed():
        if floor != NOTHING and not is_after(instant.timestamp, floor):
            mdt.timeline.remove(instant, present)
            trimmed += 1
    if doomed or trimmed:
        logger.info(
            "index upkeep of %s: deleted %d replaced files (%d bytes), trimmed %d instants",
            table.base_uri,
            len(doomed),
            sum(e.size for e in doomed),
            trimmed,
        )
    return UpkeepResult(
        removed_files=len(doomed),
        removed_bytes=sum(e.size for e in doomed),
        trimmed_instants=trimmed,
    )


#: (metadata table, instant) -> a completed metadata compaction's content, read once per process
_COMPLETED_PLANS: dict[tuple[str, str], dict[str, Any]] = {}


def _plan_covers(mdt: MetadataTable, instant: Instant) -> str:
    """What a pending metadata compaction's plan covers up to (NOTHING when unreadable)."""
    try:
        covers = mdt.timeline.read_json(instant.with_state(State.REQUESTED)).get("coversUpto")
    except (CorruptInstantError, StorageFileNotFoundError):
        return NOTHING
    return covers if isinstance(covers, str) else NOTHING


def _restricted_reader(mdt: MetadataTable, timeline: Timeline, upto: str) -> MetadataReader:
    """A reader that applies only logs of data instants up to ``upto``."""
    limited = timeline.filter(lambda i: not is_after(i.timestamp, upto))
    return MetadataReader(mdt, limited, cache=False)  # compaction's whole read, once
