"""The index build as a PySpark job: base files for every data file visible at t.

Driver: list the data files committed up to t (from the ``files`` partition when it is
completed, else a storage listing filtered by the timeline), start one metadata compaction
instant per partition, run the job, complete the instants. Executors: read each file's Parquet
footer (and key bloom filter) through the storage facade, turn it into records for every
partition being built, shuffle them by (partition, file group), and write one sorted base file per
file group, behind a marker in the indexing instant's marker folder (so an aborted attempt's
files are found and deleted). pyspark is imported here only, lazily, so the kernel needs no JVM.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from metadata_table.layout import (
    COLUMN_STATS,
    METADATA_FOLDER,
    SCHEMAS,
    base_file_name,
    file_group_id,
    file_group_of,
)
from metadata_table.records import info_from_storage, records_for
from metadata_table.table import MetadataTable, write_base_file
from timeline.errors import MarkerAlreadyExistsError
from timeline.failpoints import current, task_failpoint
from timeline.fs_view import FileSystemView
from timeline.instant import normalize_timestamp
from timeline.markers import DirectMarkers, IOType, Marker
from timeline.storage import Storage
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (tasks done, tasks total)


@dataclass(frozen=True)
class BuildTarget:
    partition: str
    groups: int
    columns: tuple[str, ...]
    instant: str  # the metadata compaction instant that writes this partition's base files


def visible_files(
    table: Table, timeline: Timeline, upto: str, use_files_index: bool
) -> list[tuple[str, str, int, str]]:
    """(partition, file name, size, instant) of every committed data file up to ``upto``, listed
    by the ``files`` partition when it is completed, else by storage."""
    listing = None
    if use_files_index:
        from metadata_table.reads import IndexedSnapshot

        listing = IndexedSnapshot(table, timeline).indexed_files
    view = FileSystemView(table.timeline, timeline, listing=listing)
    committed = {i.timestamp for i in timeline.write_timeline().completed()}
    limit = normalize_timestamp(upto)
    return [
        (b.partition_path, b.file_name, b.size, b.instant_time)
        for b in view.all_base_files
        if b.instant_time in committed and normalize_timestamp(b.instant_time) <= limit
    ]


def _records_task(
    files: Iterator[tuple[str, str, int, str]],
    storage: Storage,
    targets: list[BuildTarget],
    slots: dict[tuple[str, int], int],
    failpoint: str | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    if failpoint:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task_failpoint("build.task", failpoint, ctx.attemptNumber() if ctx else 0)
    for partition, name, size, instant in files:
        info = info_from_storage(storage, partition, name, size, instant)
        for target in targets:
            columns = list(target.columns) or None if target.partition == COLUMN_STATS else None
            for row in records_for(target.partition, [info], columns).to_pylist():
                yield slots[(target.partition, file_group_of(row["key"], target.groups))], row


def _write_task(
    index: int,
    rows: Iterator[tuple[int, dict[str, Any]]],
    storage: Storage,
    slot_targets: list[tuple[BuildTarget, int]],
    indexing_instant: str,
    covers_upto: str,
) -> Iterator[tuple[str, str, int]]:
    target, group = slot_targets[index]
    fg = file_group_id(target.partition, group)
    records = pa.Table.from_pylist([row for _, row in rows], schema=SCHEMAS[target.partition])
    name = base_file_name(fg, target.instant)
    with contextlib.suppress(MarkerAlreadyExistsError):  # a retried task attempt
        DirectMarkers(storage, indexing_instant).create(
            Marker(f"{METADATA_FOLDER}/{target.partition}", name, IOType.CREATE)
        )
    size = write_base_file(
        storage.child(METADATA_FOLDER), target.partition, fg, target.instant, records, covers_upto
    )
    yield target.partition, fg, size


def run_build(
    table: Table,
    timeline: Timeline,
    indexing_instant: str,
    targets: list[BuildTarget],
    covers_upto: str,
    spark: Any,
    parallelism: int | None = None,
    use_files_index: bool = False,
    progress: Progress | None = None,
) -> dict[str, dict[str, int]]:
    """Build base files for ``targets`` over the data files committed up to ``covers_upto``.
    Returns partition -> file group -> base file size. The metadata compaction instants of the
    targets must be inflight; the caller completes them."""
    files = visible_files(table, timeline, covers_upto, use_files_index)
    slot_targets = [(t, g) for t in targets for g in range(t.groups)]
    slots = {(t.partition, g): i for i, (t, g) in enumerate(slot_targets)}
    sc = spark.sparkContext
    slices = max(1, min(len(files), parallelism or sc.defaultParallelism * 2)) if files else 1
    storage = table.storage
    spec = current()
    logger.info(
        "building %s over %d data files in %d tasks",
        ",".join(t.partition for t in targets),
        len(files),
        slices,
    )
    stop = threading.Event()
    tasks = slices + len(slot_targets)
    watcher = _watch(sc, progress, stop, tasks) if progress else None
    try:
        written = (
            sc.parallelize(files, slices)
            .mapPartitions(lambda it: _records_task(it, storage, targets, slots, spec))
            .partitionBy(len(slot_targets), lambda slot: slot)
            .mapPartitionsWithIndex(
                lambda i, it: _write_task(
                    i, it, storage, slot_targets, indexing_instant, covers_upto
                )
            )
            .collect()
        )
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    if progress is not None:
        progress(tasks, tasks)
    sizes: dict[str, dict[str, int]] = {t.partition: {} for t in targets}
    for partition, fg, size in written:
        sizes[partition][fg] = size
    return sizes


def _watch(sc: Any, progress: Progress, stop: threading.Event, total: int) -> threading.Thread:
    """Report the build job's finished tasks out of ``total`` (both stages) every half second:
    a stage seen active and then gone counts as finished."""
    tracker = sc.statusTracker()
    seen: dict[int, tuple[int, int]] = {}

    def loop() -> None:
        while not stop.wait(0.5):
            active = set(tracker.getActiveStageIds())
            for stage_id in active:
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    seen[stage_id] = (info.numCompletedTasks, info.numTasks)
            done = sum(n if s not in active else d for s, (d, n) in seen.items())
            if seen:
                progress(min(done, total), total)

    thread = threading.Thread(target=loop, name="build-progress", daemon=True)
    thread.start()
    return thread


def cleanup_failed_attempts(mdt: MetadataTable, partitions: list[str]) -> None:
    """Delete base files of metadata compaction instants that never completed (a crashed build),
    and those instants' files."""
    from timeline.instant import Action

    pending = [i for i in mdt.timeline.load().with_actions(Action.COMPACTION).pending()]
    for instant in pending:
        for partition in partitions:
            for entry in mdt.storage.list(partition):
                if entry.name.endswith(f"_{instant.timestamp}.parquet"):
                    mdt.storage.delete(entry.path)
        mdt.timeline.delete_pending(instant)


__all__ = ["BuildTarget", "cleanup_failed_attempts", "run_build", "visible_files"]
