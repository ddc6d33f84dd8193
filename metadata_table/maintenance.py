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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.index_types import index_type
from metadata_table.layout import (
    COLUMN_STATS,
    NON_PARTITIONED,
    NOTHING,
    RECORD_INDEX,
    check_partition,
    in_file_order,
    read_records,
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
from timeline.fs_view import FileSystemView
from timeline.index_state import LAYOUT
from timeline.instant import Instant, is_after
from timeline.table import Table
from timeline.timeline import Timeline

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
        partition,
        visible,
        upto,
        table.timeline.generator.next(),
        len(slices),
        progress=progress,
        layout=table.reload_index_state().layout(partition),
    )


def _restricted_reader(mdt: MetadataTable, timeline: Timeline, upto: str) -> MetadataReader:
    """A reader that applies only logs of data instants up to ``upto``."""
    limited = timeline.filter(lambda i: not is_after(i.timestamp, upto))
    return MetadataReader(mdt, limited, cache=False)  # compaction's whole read, once
