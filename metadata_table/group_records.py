"""A build's records per file group: made from data files by :func:`file_records` (in a Spark
task, or in a worker of :func:`hold_group_records`), held by :class:`GroupRecords` in memory up to
a budget and spilled to local disk beyond it, as Spark's shuffle spills (an index build without
Spark then holds about the budget plus the file groups being written, whatever the table's
size), and written by :meth:`PartitionBuild.write_group`: the half of a build that ``validate``'s
rebuild shares."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa

from metadata_table.index_types import index_type
from metadata_table.layout import (
    BLOOM_FILTERS,
    METADATA_FOLDER,
    base_file_name,
    file_group_id,
    file_group_of,
    file_key,
    in_file_order,
)
from metadata_table.records import DataFile, DataFileInfo, info_of
from metadata_table.table import split_by_group, write_base_file
from metadata_table.workers import chunked, map_chunks, start_processes, workers_for
from timeline.errors import MarkerAlreadyExistsError
from timeline.index_state import LAYOUT
from timeline.keys import KeyGenerator
from timeline.markers import DirectMarkers, IOType, Marker
from timeline.storage import Storage
from timeline.timeline import CommittedWrites

logger = logging.getLogger(__name__)


class GroupRecords:
    """Each file group's records of a local build, held in memory up to ``budget`` bytes and
    beyond that appended to one Arrow IPC file per file group in a temporary folder (deleted on
    exit): what :meth:`take` gives back is the group's parts, read whole from its file."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.spilled = 0
        self._parts: dict[tuple[int, int], list[pa.Table]] = defaultdict(list)
        self._writers: dict[tuple[int, int], pa.ipc.RecordBatchStreamWriter] = {}
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> GroupRecords:
        return self

    def __exit__(self, *exc: object) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        self._parts.clear()
        if self._folder is not None:
            self._folder.cleanup()

    def add(self, key: tuple[int, int], table: pa.Table) -> None:
        """Hold ``table`` (all of a group's tables have one schema)."""
        self._parts[key].append(table)
        self.held += table.nbytes
        if self.held > self.budget:
            self._spill()

    def _spill(self) -> None:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="aix-build-")
        for key, tables in self._parts.items():
            for table in tables:
                self._writer(key, table.schema).write_table(table)
                self.spilled += table.nbytes
        self._parts.clear()
        self.held = 0

    def _writer(self, key: tuple[int, int], schema: pa.Schema) -> pa.ipc.RecordBatchStreamWriter:
        writer = self._writers.get(key)
        if writer is None:
            writer = self._writers[key] = pa.ipc.new_stream(self._path(key), schema)
        return writer

    def _path(self, key: tuple[int, int]) -> str:
        assert self._folder is not None
        return os.path.join(self._folder.name, f"{key[0]}-{key[1]}.arrow")

    def take(self, key: tuple[int, int]) -> list[pa.Table]:
        """The group's parts (those spilled first, read back whole); its file is deleted."""
        parts = self._parts.pop(key, [])
        writer = self._writers.pop(key, None)
        if writer is None:
            return parts
        writer.close()
        path = self._path(key)
        with pa.OSFile(path) as source:
            spilled = pa.ipc.open_stream(source).read_all()
        os.remove(path)
        return [spilled, *parts]


__all__ = ["GroupRecords"]


#: a file group's records from one task: Arrow IPC bytes (from Spark tasks) or a table (in process)
RecordsPart: TypeAlias = bytes | pa.Table


@dataclass(frozen=True)
class PartitionBuild:
    """One partition's base files, being written as metadata compaction instant ``instant`` over
    every data file committed up to ``covers_upto``. Shipped to Spark tasks."""

    partition: str
    groups: int
    columns: tuple[str, ...]
    instant: str
    covers_upto: str
    #: paths of committed files that are not in the latest file slice of their file group at
    #: ``covers_upto`` (left out by the index types over latest files: ``partition_stats``, the
    #: record and secondary indexes)
    superseded: frozenset[str] = frozenset()
    #: the write instants committed up to ``covers_upto``: the log blocks a build counts
    counted: CommittedWrites | None = None
    #: the key generator of a table without meta fields (record keys made from key fields)
    keygen: KeyGenerator | None = None
    #: the partition's layout (:data:`~timeline.index_state.LAYOUT`), which routes its records
    layout: int = LAYOUT

    def records(self, infos: Sequence[DataFileInfo]) -> pa.Table:
        """This partition's records of some data files (from footers, or log files' records), as
        one table; for
        ``partition_stats``, partial aggregates that :meth:`write_group` combines."""
        kind = index_type(self.partition)
        if self.superseded:
            infos = [i for i in infos if i.path not in self.superseded]
        return kind.records(infos, self.columns)

    @property
    def row_columns(self) -> tuple[str, ...] | None:
        """The columns (beside the record key) of data files' rows this build reads; None: no
        rows (its records come from footers)."""
        return index_type(self.partition).row_columns

    @property
    def written_where_read(self) -> bool:
        """Whether a build's read tasks write this partition's file groups (one task per group,
        holding the data files whose records go there), so its records are never shuffled."""
        return index_type(self.partition).written_where_read

    def group_of(self, file: DataFile) -> int:
        """The file group a data file's records go to (for a type keyed by data file)."""
        partition, name, _, _ = file
        return file_group_of(file_key(partition, name), self.groups)

    def conformed(self, part: RecordsPart) -> pa.Table:
        """A part of this partition's records (what :func:`file_records` made) as a table of
        the partition's schema in memory, as :meth:`write_group` takes them all."""
        table = _from_ipc(part) if isinstance(part, bytes) else part
        return table.cast(index_type(self.partition).memory_schema)

    def write_group(
        self,
        storage: Storage,
        group: int,
        parts: Sequence[RecordsPart],
        marker_instant: str,
    ) -> tuple[str, str, int]:
        """Write file group ``group``'s base file, its marker first (in ``marker_instant``'s
        folder, so a failed attempt's files are found and deleted), from the group's records in
        ``parts`` (what :func:`file_records` made). ``storage`` is the data table's. A retried
        task finds its marker, and its file whole (creates are atomic). Returns (partition, file
        group, size)."""
        fg = file_group_id(self.partition, group)
        name = base_file_name(fg, self.instant)
        with contextlib.suppress(MarkerAlreadyExistsError):
            DirectMarkers(storage, marker_instant).create(
                Marker(f"{METADATA_FOLDER}/{self.partition}", name, IOType.CREATE)
            )
        kind = index_type(self.partition)
        tables = [self.conformed(p) for p in parts]
        records = pa.concat_tables(tables) if tables else kind.memory_schema.empty_table()
        # the tasks' partial aggregates, or records of a slice's files in several tasks, as the
        # table was at covers_upto
        records, order = kind.combined(records, self.covers_upto)
        size = write_base_file(
            storage.child(METADATA_FOLDER),
            self.partition,
            fg,
            self.instant,
            records,
            self.covers_upto,
            order,
        )
        return self.partition, fg, size


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()


def _nothing(instant: str) -> bool:
    return False


#: data files whose records a build task makes at once (bounded: each holds its bloom filter)
RECORDS_CHUNK = 500

#: of a build reading data files' rows (record and secondary indexes), data files' bytes a
#: chunk of :func:`read_chunks` holds about: a chunk's records are hashed, sorted and moved
#: together, which a chunk of about a million keys does in the CPU's caches (10M keys in 1,000
#: files: 2.5 s on two threads in chunks of 64 to 250 files, 3.4 s in chunks of 500), and a
#: table of large files does not hold 500 files' rows at once
ROWS_CHUNK_BYTES = 64 * 2**20


def file_records(
    storage: Storage,
    files: Iterator[DataFile],
    builds: Sequence[PartitionBuild],
    shuffled: bool = True,
) -> Iterator[tuple[int, int, RecordsPart]]:
    """(build index, file group, records) for ``files``: each file read once (a base file's
    footer, a log file's blocks of :attr:`PartitionBuild.counted` instants), and per
    file group of each build one Arrow table; no row is ever a Python object (a Spark task's
    body). Each table is a run in file order (the write step lays the tasks' runs end to end,
    or merges them); with ``shuffled`` (Spark) it goes as Arrow IPC stream bytes, in one
    process it stays a table."""
    per_build: list[list[pa.Table]] = [[] for _ in builds]
    chunk: list[DataFileInfo] = []
    # the builds of one job cover the same instant (one plan, or one resync)
    counted = builds[0].counted if builds else None
    is_counted = counted.__contains__ if counted is not None else _nothing
    rows = row_columns(builds)
    bloom = any(b.partition == BLOOM_FILTERS for b in builds)
    keygen = builds[0].keygen if builds else None

    def flush() -> None:
        for number, build in enumerate(builds):
            per_build[number].append(build.records(chunk))
        chunk.clear()

    for partition, name, size, instant in files:
        info = info_of(storage, partition, name, size, instant, is_counted, bloom, rows, keygen)
        if info is None:
            continue  # a log file without counted blocks
        chunk.append(info)
        if len(chunk) == RECORDS_CHUNK:
            flush()
    if chunk:
        flush()
    for number, build in enumerate(builds):
        if per_build[number]:
            records = pa.concat_tables(per_build[number])
            if index_type(build.partition).keyed_by_record:
                # in hash order, each group's records are a range of it: sorted once, and cut
                records = in_file_order(build.partition, records)
            by_group = split_by_group(records, build.groups, build.partition, build.layout)
            for group, table in by_group.items():
                # a sorted run: the writer lays runs end to end (merges those of record keys)
                table = in_file_order(build.partition, table)
                yield number, group, _ipc(table) if shuffled else table


def hold_group_records(
    storage: Storage,
    chunks: Sequence[list[DataFile]],
    builds: Sequence[PartitionBuild],
    held: GroupRecords,
    workers: int,
    processes: bool,
    progress: Callable[[int], None] | None = None,
    doing: str = "building",
) -> None:
    """The records of ``builds`` over the data files of ``chunks``, read by ``workers`` workers
    (processes or threads) and held in ``held`` per (build number, file group), as
    :meth:`PartitionBuild.conformed` tables: the reading half of a build without Spark, and of
    ``validate``'s rebuild (logged as ``doing``). ``progress(chunks read)`` after each chunk."""
    logger.info(
        "%s %s over %d data files without Spark (%d %s)",
        doing,
        ",".join(b.partition for b in builds),
        sum(len(chunk) for chunk in chunks),
        workers,
        "processes" if processes else "threads",
    )
    read = map_chunks(_chunk_records, (storage, builds, processes), chunks, workers, processes)
    for done, made in enumerate(read, start=1):
        for number, group, part in made:
            held.add((number, group), builds[number].conformed(part))
        if progress is not None:
            progress(done)


def run_build_local(
    storage: Storage,
    files: list[DataFile],
    builds: Sequence[PartitionBuild],
    marker_instant: str,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 0,
    memory_mb: int = 512,
) -> dict[str, dict[str, int]]:
    """The index build of ``builds`` over ``files`` without Spark, so no JVM to start (the
    Spark job is :func:`metadata_table.spark_build.run_build`; both call :func:`file_records`
    and :meth:`PartitionBuild.write_group`, so they write the same files). The chunks of data
    files are read by ``workers`` workers (0: one per core, at most four; processes from
    :data:`~metadata_table.workers.PROCESS_MIN_FILES` data files on, else threads), their
    records coming back to this process (from processes as Arrow IPC bytes) in chunk order
    (the files taken in key order, so each file group's sorted runs follow one another). Past
    ``memory_mb`` of records held, they are spilled per file group to Arrow files in a
    temporary folder (as Spark's shuffle spills), so memory does not grow with the table. The
    file groups are then written by up to twice as many threads (Parquet writes, hashing and
    sorting run outside the GIL), each from its group's records alone; by ``workers`` threads
    when it is given, so that one worker writes in one order. Progress counts chunks of data
    files read, then file groups written."""
    configured = workers
    workers, processes = workers_for(len(files), workers)
    chunks = read_chunks(in_key_order(files), workers, builds)
    groups = [(n, build, g) for n, build in enumerate(builds) for g in range(build.groups)]
    total = len(chunks) + len(groups)
    sizes: dict[str, dict[str, int]] = {b.partition: {} for b in builds}
    with GroupRecords(memory_mb * 1024 * 1024) as held:
        read = None if progress is None else lambda done: progress(done, total)
        hold_group_records(storage, chunks, builds, held, workers, processes, read)
        if held.spilled:
            logger.info("spilled %d MB of records to local disk", held.spilled // 2**20)

        def write(job: tuple[int, PartitionBuild, int]) -> tuple[str, str, int]:
            number, build, group = job
            records = held.take((number, group))  # freed once written
            return build.write_group(storage, group, records, marker_instant)

        # by default up to twice as many threads as workers: the writes run mostly outside the
        # GIL, and 3 groups on 2 cores then end together instead of the third written alone
        writers = max(1, min(len(groups), workers if configured else 2 * workers))
        with ThreadPoolExecutor(writers, thread_name_prefix="build") as threads:
            written = threads.map(write, groups)
            for done, (partition, fg, bytes_) in enumerate(written, start=len(chunks) + 1):
                sizes[partition][fg] = bytes_
                if progress is not None:
                    progress(done, total)
    return sizes


def read_chunks(
    files: list[DataFile], workers: int, builds: Sequence[PartitionBuild]
) -> list[list[DataFile]]:
    """``files`` in the chunks a build without Spark reads (cut by :func:`chunked`, as many
    for each worker): at most :data:`RECORDS_CHUNK` files and, when ``builds`` read rows,
    about :data:`ROWS_CHUNK_BYTES` of them (by their average size)."""
    most = RECORDS_CHUNK
    if files and row_columns(builds) is not None:
        average = sum(size for _, _, size, _ in files) / len(files)
        most = max(1, min(most, int(ROWS_CHUNK_BYTES // max(average, 1))))
    return chunked(files, workers, most)


def in_key_order(files: Sequence[DataFile]) -> list[DataFile]:
    """Data files in the order of their keys (:func:`file_key`): read in chunks in this order,
    the sorted runs of a partition keyed by data file follow one another without overlapping,
    so the write step lays them end to end instead of sorting every record."""
    return sorted(files, key=lambda file: file_key(file[0], file[1]))


def start_record_workers(files: int, configured: int = 0) -> None:
    """Start the worker processes' fork server of :func:`hold_group_records` over ``files``
    data files now, when it reads them with processes (``configured`` workers, 0: the
    default), so it is up by the time the caller has listed them."""
    if workers_for(files, configured)[1]:
        start_processes(__name__)


def _chunk_records(
    context: tuple[Storage, Sequence[PartitionBuild], bool], chunk: list[DataFile]
) -> list[tuple[int, int, RecordsPart]]:
    """A worker's part of :func:`hold_group_records`. A worker process's records go back as
    Arrow IPC bytes, which the caller reads without a copy, not as pickled tables (whose
    unpickling rebuilds every array of every column: 0.84 ms against 0.02 for a column_stats
    part of 2,800 records, the caller's CPU competing with the workers')."""
    storage, builds, processes = context
    return list(file_records(storage, iter(chunk), builds, shuffled=processes))


def row_columns(builds: Sequence[PartitionBuild]) -> tuple[str, ...] | None:
    """The columns of data files' rows the builds need (None: none reads rows)."""
    wanted = [b.row_columns for b in builds if b.row_columns is not None]
    if not wanted:
        return None
    return tuple(sorted({c for columns in wanted for c in columns}))
