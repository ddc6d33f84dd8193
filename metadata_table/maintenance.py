"""Building metadata partitions from scratch, and compacting them.

``build_records`` computes a partition over a snapshot from the data files (base files' footers, log files'
records): the oracle
every incrementally kept partition must equal. ``initialize`` builds partitions synchronously
under the table lock (new or small tables; large ones use the asynchronous indexer).
``compact`` merges each file group's base file and applicable logs into a new base file.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa

from metadata_table.index_types import index_type
from metadata_table.layout import (
    COLUMN_STATS,
    NOTHING,
    check_partition,
    read_records,
)
from metadata_table.partition_stats import superseded
from metadata_table.reader import MetadataReader
from metadata_table.records import DataFileInfo, info_from_log, info_from_storage
from metadata_table.table import MetadataTable
from timeline.fs_view import FileSystemView
from timeline.instant import Instant, is_after
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)


def committed_data_files(
    table: Table, timeline: Timeline, upto: str | None = None
) -> list[DataFileInfo]:
    """Footers of every committed base file (every version still on storage), optionally only
    of instants up to ``upto``, and the committed blocks of every log file of a committed slice
    (those of instants up to ``upto``; a log file without any is left out)."""
    view = FileSystemView(table.timeline, timeline, as_of=upto)
    infos = [
        info_from_storage(table.storage, b.partition_path, b.file_name, b.size, b.instant_time)
        for b in view.all_base_files
        if view.is_committed(b.instant_time)
    ]
    counted = view.committed.__contains__
    for log in view.committed_log_files:
        info = info_from_log(table.storage, log.partition_path, log.file_name, log.size, counted)
        if info is not None:
            infos.append(info)
    return infos


def build_records(
    table: Table,
    timeline: Timeline,
    partition: str,
    columns: Sequence[str] | None = None,
    upto: str | None = None,
) -> pa.Table:
    """The records of ``partition`` computed from scratch over a snapshot: the oracle every
    incrementally maintained partition must equal."""
    return _base_records(table, timeline, partition, columns, upto).sort_by("key")


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
        infos = committed_data_files(table, timeline, upto)
    if kind.recomputed:
        older = superseded(table, timeline, upto)
        infos = [i for i in infos if i.path not in older]
    return kind.records(infos, columns or (), upto or "")


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
        base_infos = committed_data_files(table, timeline, upto)
        later = [i for i in committed_data_files(table, timeline) if i.instant in after]
        for partition in todo:
            kind = index_type(partition)
            count = (groups or {}).get(partition) or kind.configured_groups(table.config)
            records = _base_records(table, timeline, partition, columns, upto, base_infos)
            mdt.write_base_files(
                partition, records, upto, table.timeline.generator.next(), count, lock
            )
        by_instant: dict[str, list[DataFileInfo]] = defaultdict(list)
        for info in later:
            by_instant[info.instant].append(info)
        for instant_time, infos in sorted(by_instant.items()):
            for partition in todo:
                rows = mdt.instant_records(partition, infos, columns or ())
                mdt.write_logs(partition, instant_time, rows, lock)
        table.update_metadata_partitions(lock, add_inflight=todo)
        table.update_metadata_partitions(lock, complete=todo)
    return todo


def compact(
    table: Table, partition: str, progress: Callable[[int, int], None] | None = None
) -> Instant | None:
    """Merge each file group's base file and applicable logs into a new base file covering the
    last settled write W (no write, clean or rollback before W is pending). Readers
    see the same records before and after. Returns the compaction instant, or None if no file
    group had logs to merge or the partition does not reflect every completed instant yet (the
    daemon's sync applies them first)."""
    mdt = MetadataTable(table)
    mdt.discard_pending_base_files([partition], only_dead=True)  # a compaction that crashed
    timeline = table.timeline.load()
    last = timeline.last_settled_write()
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
        is_after(log.instant, base_marks[fg]) and not is_after(log.instant, upto)
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
    limited = timeline.filter(lambda i: not is_after(i.timestamp, upto))
    return MetadataReader(mdt, limited)
