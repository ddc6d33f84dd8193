"""The index build: base files for every data file visible at t, as a PySpark job or, for a
table whose records one process holds well, without Spark (no JVM to start).

The indexer's driver lists the data files committed up to t and starts, through the metadata
table's :class:`~metadata_table.partition_writer.PartitionWriter`, one metadata compaction instant
per partition (a :class:`~metadata_table.partition_writer.PartitionBuild` each), then hands them
to :meth:`~metadata_table.partition_writer.PartitionWriter.run_builds`, which runs this job. Executors read each
data file once (a base file's footer, a log file's records) and make every build's records from it, as Arrow tables: one per file
group per task, shipped as Arrow IPC bytes (no row is ever a Python object). A shuffle by
(partition, file group) then gives each task one file group, whose base file the build writes
behind a marker in the indexing instant's marker folder (so an aborted attempt's files are found
and deleted). The bloom filters (about 16 KB per data file) never go through the shuffle: the
read tasks are laid out by the bloom_filters file groups and each writes its group's base file.
This module only orchestrates Spark: the files are named and written by the functions of
:mod:`metadata_table.group_records` the tasks call.
pyspark is imported here only, lazily, so the kernel needs no JVM.

:func:`metadata_table.group_records.run_build_local` runs the same two steps (records from
each footer, then one base file per file group behind its marker) without Spark, with the same
functions the Spark tasks call, so both engines write the same files.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from metadata_table.group_records import PartitionBuild, file_records, in_key_order
from metadata_table.records import DataFile
from timeline.failpoints import current, task_failpoint
from timeline.storage import Storage

logger = logging.getLogger(__name__)


Progress = Callable[[int, int], None]  # (tasks done, tasks total)


#: what a read task sends a file group's write task: records to write, or (for a partition
#: written where read) the base file the read task wrote
Payload = tuple[str, Any]


def _records_task(
    files: Iterator[DataFile],
    storage: Storage,
    builds: Sequence[PartitionBuild],
    slots: dict[tuple[int, int], int],
    failpoint: str | None = None,
    anchor: tuple[int, int, str] | None = None,
) -> Iterator[tuple[int, Payload]]:
    """Read ``files``' footers and send each file group its records. With ``anchor`` (build
    number, file group, marker instant), ``files`` are exactly those whose records go to that
    group of that build: the task writes that base file itself and sends only its size."""
    if failpoint:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task_failpoint("build.task", failpoint, ctx.attemptNumber() if ctx else 0)
    own: list[bytes] = []
    for number, group, records in file_records(storage, files, builds):
        if anchor is not None and number == anchor[0]:
            own.append(records)
        else:
            yield slots[(number, group)], ("records", records)
    if anchor is not None:
        number, group, marker_instant = anchor
        written = builds[number].write_group(storage, group, own, marker_instant)
        yield slots[(number, group)], ("written", written)


def _write_task(
    index: int,
    parts: Iterator[tuple[int, Payload]],
    storage: Storage,
    slot_builds: list[tuple[PartitionBuild, int]],
    marker_instant: str,
) -> Iterator[tuple[str, str, int]]:
    build, group = slot_builds[index]
    payloads = [payload for _, payload in parts]
    written = [value for kind, value in payloads if kind == "written"]
    if written:  # its read task wrote it
        yield written[0]
        return
    yield build.write_group(storage, group, [value for _, value in payloads], marker_instant)


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
    must be inflight; the caller completes them.

    When a build's partition is written where read (``bloom_filters``: large records, keyed by
    data file), the read tasks are that partition's file groups, each over the data files whose
    records go there; each writes its group's base file, and only the other partitions' records
    are shuffled (``parallelism`` is then the number of those file groups)."""
    files = in_key_order(files)  # so each task's sorted runs follow one another
    numbered = [(n, g) for n, b in enumerate(builds) for g in range(b.groups)]
    slot_builds = [(builds[n], g) for n, g in numbered]
    slots = {key: slot for slot, key in enumerate(numbered)}
    sc = spark.sparkContext
    spec = current()
    anchor = next((n for n, b in enumerate(builds) if b.written_where_read), None)
    if anchor is not None:
        by_group: list[list[DataFile]] = [[] for _ in range(builds[anchor].groups)]
        for file in files:
            by_group[builds[anchor].group_of(file)].append(file)
        slices = len(by_group)
        number = anchor

        def read(index: int, it: Iterator[list[DataFile]]) -> Iterator[tuple[int, Payload]]:
            group_files = (f for chunk in it for f in chunk)
            owner = (number, index, marker_instant)
            return _records_task(group_files, storage, builds, slots, spec, owner)

        records = sc.parallelize(by_group, slices).mapPartitionsWithIndex(read)
    else:
        slices = max(1, min(len(files), parallelism or sc.defaultParallelism * 2)) if files else 1
        records = sc.parallelize(files, slices).mapPartitions(
            lambda it: _records_task(it, storage, builds, slots, spec)
        )
    logger.info(
        "building %s over %d data files in %d tasks",
        ",".join(b.partition for b in builds),
        len(files),
        slices,
    )
    writes = records.partitionBy(len(slot_builds), lambda slot: slot).mapPartitionsWithIndex(
        lambda i, it: _write_task(i, it, storage, slot_builds, marker_instant)
    )
    written = _collect(sc, writes, slices + len(slot_builds), progress)
    sizes: dict[str, dict[str, int]] = {b.partition: {} for b in builds}
    for partition, fg, size in written:
        sizes[partition][fg] = size
    return sizes


def run_grouped(
    spark: Any,
    items: Sequence[Any],
    read: Callable[[list[Any]], Mapping[str, Sequence[Sequence[Any]]]],
    slots: Sequence[tuple[str, int]],
    seeded: Mapping[tuple[str, int], Sequence[Any]],
    write: Callable[[tuple[str, int], list[Any]], list[Any]],
    progress: Progress | None = None,
) -> list[Any]:
    """A build of another format as one Spark job (Apache Hudi's metadata table,
    :mod:`metadata_table.hudi_build`): tasks over ``items`` (data files) each ``read`` their
    items into what each file group receives, by (partition, file group); a shuffle gives every
    slot of ``slots`` one task, which gets that content (and ``seeded``'s, made by the driver)
    concatenated and ``write``s the group (every slot is written, with or without content).
    Returns what the writes returned, concatenated."""
    sc = spark.sparkContext
    index = {slot: i for i, slot in enumerate(slots)}
    slices = max(1, min(len(items), sc.defaultParallelism * 2))

    def read_task(it: Iterator[Any]) -> Iterator[tuple[int, Sequence[Any]]]:
        for partition, by_group in read(list(it)).items():
            for group, content in enumerate(by_group):
                if content:
                    yield index[(partition, group)], content

    def write_task(slot: int, it: Iterator[tuple[int, Sequence[Any]]]) -> list[Any]:
        return write(slots[slot], [x for _, content in it for x in content])

    found = sc.parallelize(list(items), slices).mapPartitions(read_task)
    if seeded:
        given = [(index[slot], content) for slot, content in seeded.items()]
        found = found.union(sc.parallelize(given, 1))
    writes = found.partitionBy(len(slots), lambda slot: slot).mapPartitionsWithIndex(write_task)
    return _collect(sc, writes, slices + len(slots), progress)


def _collect(sc: Any, rdd: Any, tasks: int, progress: Progress | None) -> list[Any]:
    """``rdd.collect()`` of a build's job, its ``tasks`` (both stages) reported as they finish."""
    stop = threading.Event()
    watcher = _watch(sc, progress, stop, tasks) if progress else None
    try:
        found: list[Any] = rdd.collect()
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    if progress is not None:
        progress(tasks, tasks)
    return found


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


__all__ = ["run_build", "run_grouped"]
