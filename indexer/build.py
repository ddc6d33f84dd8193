"""The index build: base files for every data file visible at t, as a PySpark job or, for a
table small enough that starting Spark would cost more than the build, in this process.

The driver lists the data files committed up to t and starts, through the metadata table's
:class:`~metadata_table.partition_writer.PartitionWriter`, one metadata compaction instant per
partition (a :class:`~metadata_table.partition_writer.PartitionBuild` each). Executors read each
data file's footer once and make every build's records from it, as Arrow tables: one per file
group per task, shipped as Arrow IPC bytes (no row is ever a Python object). A shuffle by
(partition, file group) then gives each task one file group, whose base file the build writes
behind a marker in the indexing instant's marker folder (so an aborted attempt's files are found
and deleted). This module only orchestrates Spark: it never names or writes a metadata-table file
itself. pyspark is imported here only, lazily, so the kernel needs no JVM.

:func:`run_build_local` runs the same two steps (records from each footer, then one base file per
file group behind its marker) in this process, with the same functions the Spark tasks call, so
both engines write the same files.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from metadata_table.partition_writer import (
    RECORDS_CHUNK,
    DataFile,
    PartitionBuild,
    file_records,
)
from timeline.failpoints import current, task_failpoint
from timeline.storage import Storage

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (tasks done, tasks total)


def _records_task(
    files: Iterator[DataFile],
    storage: Storage,
    builds: Sequence[PartitionBuild],
    slots: dict[tuple[int, int], int],
    failpoint: str | None = None,
) -> Iterator[tuple[int, bytes]]:
    if failpoint:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task_failpoint("build.task", failpoint, ctx.attemptNumber() if ctx else 0)
    for number, group, records in file_records(storage, files, builds):
        yield slots[(number, group)], records


def _write_task(
    index: int,
    parts: Iterator[tuple[int, bytes]],
    storage: Storage,
    slot_builds: list[tuple[PartitionBuild, int]],
    marker_instant: str,
) -> Iterator[tuple[str, str, int]]:
    build, group = slot_builds[index]
    yield build.write_group(storage, group, [records for _, records in parts], marker_instant)


def run_build(
    storage: Storage,
    files: list[DataFile],
    builds: Sequence[PartitionBuild],
    marker_instant: str,
    spark: Any,
    parallelism: int | None = None,
    progress: Progress | None = None,
) -> dict[str, dict[str, int]]:
    """Build every file group of ``builds`` over ``files`` (``storage`` is the data table's).
    Returns partition -> file group -> base file size. The builds' metadata compaction instants
    must be inflight; the caller completes them."""
    numbered = [(n, g) for n, b in enumerate(builds) for g in range(b.groups)]
    slot_builds = [(builds[n], g) for n, g in numbered]
    slots = {key: slot for slot, key in enumerate(numbered)}
    sc = spark.sparkContext
    slices = max(1, min(len(files), parallelism or sc.defaultParallelism * 2)) if files else 1
    spec = current()
    logger.info(
        "building %s over %d data files in %d tasks",
        ",".join(b.partition for b in builds),
        len(files),
        slices,
    )
    stop = threading.Event()
    tasks = slices + len(slot_builds)
    watcher = _watch(sc, progress, stop, tasks) if progress else None
    try:
        written = (
            sc.parallelize(files, slices)
            .mapPartitions(lambda it: _records_task(it, storage, builds, slots, spec))
            .partitionBy(len(slot_builds), lambda slot: slot)
            .mapPartitionsWithIndex(
                lambda i, it: _write_task(i, it, storage, slot_builds, marker_instant)
            )
            .collect()
        )
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    if progress is not None:
        progress(tasks, tasks)
    sizes: dict[str, dict[str, int]] = {b.partition: {} for b in builds}
    for partition, fg, size in written:
        sizes[partition][fg] = size
    return sizes


def run_build_local(
    storage: Storage,
    files: list[DataFile],
    builds: Sequence[PartitionBuild],
    marker_instant: str,
    progress: Progress | None = None,
) -> dict[str, dict[str, int]]:
    """:func:`run_build` in this process: no Spark session, so no JVM to start. Progress counts
    chunks of data files read, then file groups written."""
    chunks = [files[i : i + RECORDS_CHUNK] for i in range(0, len(files), RECORDS_CHUNK)]
    groups = [(n, build, g) for n, build in enumerate(builds) for g in range(build.groups)]
    total = len(chunks) + len(groups)
    logger.info(
        "building %s over %d data files in this process",
        ",".join(b.partition for b in builds),
        len(files),
    )
    parts: dict[tuple[int, int], list[bytes]] = defaultdict(list)
    for done, chunk in enumerate(chunks, start=1):
        for number, group, part in file_records(storage, iter(chunk), builds):
            parts[(number, group)].append(part)
        if progress is not None:
            progress(done, total)
    sizes: dict[str, dict[str, int]] = {b.partition: {} for b in builds}
    for done, (number, build, group) in enumerate(groups, start=len(chunks) + 1):
        records = parts.pop((number, group), [])
        partition, fg, size = build.write_group(storage, group, records, marker_instant)
        sizes[partition][fg] = size
        if progress is not None:
            progress(done, total)
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


__all__ = ["run_build", "run_build_local"]
