"""The file-system view: which base files make up a snapshot of the table.

A base file is visible when the instant in its name is a *completed* write instant (at or before
the snapshot's instant) and it is the newest such file of its file group; file groups replaced by
a completed replacecommit are dropped. Files of pending or failed writes are never visible, even
before they are rolled back (hudi-rs does not filter them on v6 tables, see docs/architecture.md §7.2, which is
why rollbacks delete them).

Merge-on-read tables have *file slices* (:meth:`FileSystemView.latest_file_slices`): a file
group's base file and the log files written after it, keyed by the base instant their names
carry (a log file's ``_<baseInstant>``), or log files alone. A slice counts when its base instant
is a committed write, or a compaction still pending; the latest slice of a group whose
compaction is pending has no base file yet, and is read together with the slice before it, as
Hudi's view merges them. Which blocks of the log files count is decided when they are read
(:func:`timeline.log_format.effective_blocks`): a log file may hold blocks of failed writes.
"""

from __future__ import annotations

import contextlib
import importlib
import operator
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from timeline.commit_metadata import CommitMetadata
from timeline.errors import NotParquetError, StorageFileNotFoundError
from timeline.instant import Action, Instant, normalize_timestamp
from timeline.log_format import LogFileName
from timeline.storage import FileInfo, Storage
from timeline.timeline import META_FOLDER, ActiveTimeline, CommittedWrites, Timeline

PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
_Taken = TypeVar("_Taken", pa.Table, pa.ChunkedArray, pa.Array)
_BASE_FILE = re.compile(
    r"^(?P<file_id>[^_/]+)_(?P<token>\d+-\d+-\d+)_(?P<ts>\d{17}|\d{14})\.parquet$"
)


@dataclass(frozen=True, order=True)
class BaseFile:
    """A base file ``<fileId>_<writeToken>_<instant>.parquet`` in a partition."""

    partition_path: str
    file_id: str
    instant_time: str
    write_token: str
    file_name: str
    size: int = 0

    @property
    def path(self) -> str:
        return f"{self.partition_path}/{self.file_name}" if self.partition_path else self.file_name

    @classmethod
    def parse(cls, partition_path: str, file_name: str, size: int = 0) -> BaseFile | None:
        match = _BASE_FILE.match(file_name)
        if match is None:
            return None
        return cls(partition_path, match["file_id"], match["ts"], match["token"], file_name, size)


#: BaseFile's own order (its fields in turn), as a key: much cheaper than the dataclass's __lt__
_ORDER_COLUMNS = ("partition_path", "file_id", "instant_time", "write_token", "file_name", "size")
_order = operator.attrgetter(*_ORDER_COLUMNS)

#: the columns of a listing given as an Arrow table (a partition path is "" at the base path)
_LISTED = ("partition_path", "file_name", "path", "size")


#: at most this many partitions are listed on their own (see FileSystemView._base_table_of): a
#: listing of the ``files`` index's records of one partition costs about a tenth of the whole
#: table's at a million files
_FEW_PARTITIONS = 8

#: what :func:`with_base_name_fields` adds to a listing
_BASE_NAME_FIELDS = ("is_base", "file_id", "instant_time", "write_token")

#: columns a listing table may bring (two 64-bit hashes of each path, :func:`key_hash64` of two
#: seeds), which the view passes on in its base-file tables: a reader aligns other records with
#: the listing by the first, and takes the 128 bits of both for the path's identity, instead of
#: hashing or comparing every path again
PATH_HASH = "path_hash"
PATH_CHECK = "path_check"
PATH_HASHES = (PATH_HASH, PATH_CHECK)


def with_base_name_fields(listed: pa.Table) -> pa.Table:
    """A listing (a ``file_name`` column) with whether each file is a base file and, for those,
    the fields of its name, worked out on Arrow arrays (a regex match and a split: RE2's group
    extraction costs several times more). A listing that is read again and again (the metadata
    table's ``files`` partition, file by file) can keep them: see :class:`FileSystemView`."""
    name = listed.column("file_name")
    is_base = pc.match_substring_regex(name, _BASE_FILE.pattern)
    # a file id holds no "_"; other files split as "__" does (their fields mean nothing)
    parts = pc.split_pattern(pc.if_else(is_base, name, "__"), "_", max_splits=2)
    fields = {
        "is_base": is_base,
        "file_id": pc.list_element(parts, 0),
        "instant_time": pc.utf8_slice_codeunits(pc.list_element(parts, 2), 0, -len(".parquet")),
        "write_token": pc.list_element(parts, 1),
    }
    for column, values in fields.items():
        listed = listed.append_column(column, values)
    return listed


def _group_starts(keys: pa.Table) -> tuple[np.ndarray, bool]:
    """For rows sorted by file group (``partition_path``, ``file_id``) and ``rank``: whether
    each row starts its group, and whether two rows of a group share a rank."""
    count = keys.num_rows
    same = np.ones(count - 1, dtype=bool)
    for column in ("partition_path", "file_id"):
        values = keys.column(column)
        equal = pc.equal(values.slice(1), values.slice(0, count - 1))
        same &= np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)
    rank = np.asarray(keys.column("rank").to_numpy())
    tied = bool((same & (rank[1:] == rank[:-1])).any())
    return np.concatenate([[True], ~same]), tied


def _newest_in_runs(keys: pa.Table) -> np.ndarray | None:
    """For rows already in file-group order (``partition_path``, ``file_id`` ascending, as the
    ``files`` index lists them), the index of each group's row of the highest ``rank``, found
    without sorting (a sort of a million file ids costs most of a fresh snapshot's listing).
    None when the rows are not in that order, or a group's highest rank is tied: the caller
    sorts."""
    count = keys.num_rows
    if count < 2:
        return np.arange(count)
    if _prefix_in_order(keys) < count:
        return None
    first, _ = _group_starts(keys)
    if first.all():  # one file a group
        return np.arange(count)
    starts = np.flatnonzero(first)
    rank = np.asarray(keys.column("rank").to_numpy())
    best = np.maximum.reduceat(rank, starts)
    newest = rank == np.repeat(best, np.diff(np.append(starts, count)))
    if np.count_nonzero(newest) != len(starts):
        return None  # two files of a group share its newest instant: the rest of _order decides
    return np.flatnonzero(newest)


#: rows after the first one out of file-group order that :func:`_newest_with_tail` places one
#: by one (a binary search each) rather than leave to a sort of every row
_TAIL_MOST = 2048


def _newest_with_tail(keys: pa.Table) -> np.ndarray | None:
    """:func:`_newest_in_runs` for rows in file-group order but for a short tail (the files
    index lists the files of the commits since its base file after the others): the head's
    newest rows, each tail row put in its group's place by a binary search among them (the
    newer file of a group, or a group of its own), in group order, without a sort or a copy of
    the rows. None when the tail is longer than :data:`_TAIL_MOST`, or a group's newest rank is
    tied (the caller sorts)."""
    count = keys.num_rows
    head = _prefix_in_order(keys)
    if count - head > _TAIL_MOST:
        return None
    newest = _newest_in_runs(keys.slice(0, head))
    if newest is None:
        return None
    partitions, file_ids = keys.column("partition_path"), keys.column("file_id")
    rank = np.asarray(keys.column("rank").to_numpy())

    def group(row: int) -> tuple[str, str]:
        return partitions[row].as_py(), file_ids[row].as_py()

    sort = [("partition_path", "ascending"), ("file_id", "ascending"), ("rank", "descending")]
    tail = np.asarray(pc.sort_indices(keys.slice(head), sort).to_numpy(), dtype=np.int64) + head
    newer: dict[int, int] = {}  # place among the head's newest rows -> a tail row newer there
    places, added = [], []  # tail rows of groups the head has none of, and where they go
    last, last_row = None, -1  # the tail's group before, and its newest row
    for row in tail.tolist():
        wanted = group(row)
        if wanted == last:  # an older row of that group
            if rank[row] == rank[last_row]:
                return None
            continue
        last, last_row = wanted, row
        low, high = 0, len(newest)
        while low < high:  # after the head's groups up to this one
            middle = (low + high) // 2
            if wanted < group(int(newest[middle])):
                high = middle
            else:
                low = middle + 1
        if low and group(int(newest[low - 1])) == wanted:
            held = int(newest[low - 1])
            if rank[row] == rank[held]:
                return None
            if rank[row] > rank[held]:
                newer[low - 1] = row
        else:
            places.append(low)
            added.append(row)
    if newer:
        newest = newest.copy()
        newest[list(newer)] = list(newer.values())
    return np.insert(newest, places, added)


#: at most this many runs of consecutive rows are cut out of a table as slices by
#: :func:`_rows_of`, rather than taken. Each commit since the files index's base file breaks a
#: run or two (its new files placed among the others): past 64 runs (about 30 commits), a fresh
#: snapshot of a million files took 1.7 s to prune, against 0.7 s with 543 slices (430 commits)
_RUNS_MOST = 4096


def _rows_of(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)``, but without a copy when ``rows`` are a few runs of consecutive rows
    (a listing's newest files when it lists one file a group, with a commit's new files put in
    their places): a take of a million files' rows cost 0.4 s of a fresh snapshot."""
    if not len(rows):
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) >= _RUNS_MOST:
        return take_rows(table, rows)
    starts = [0, *breaks.tolist()]
    ends = [*breaks.tolist(), len(rows)]
    pieces = [table.slice(int(rows[s]), e - s) for s, e in zip(starts, ends, strict=True)]
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def take_rows(values: _Taken, rows: Sequence[int] | np.ndarray) -> _Taken:
    """``values.take(rows)``, chunk by chunk when ``values`` (a table or a column) has several
    chunks: Arrow's take of a chunked string column first joins its chunks, a copy of the whole
    column (about 90 ms of a million paths, for any number of rows)."""
    at = np.asarray(rows, dtype=np.int64)
    chunks: list[Any] = (
        values.to_batches() if isinstance(values, pa.Table) else getattr(values, "chunks", [])
    )
    if len(chunks) <= 1:
        return values.take(pa.array(at, pa.int64()))
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    ends = np.cumsum(lengths)
    which = np.searchsorted(ends, at, side="right")
    order = np.argsort(which, kind="stable")  # the rows chunk by chunk
    parts = [
        chunks[int(c)].take(pa.array(at[which == c] - (ends[c] - lengths[c]), pa.int64()))
        for c in np.unique(which)
    ]
    taken: Any = (
        pa.Table.from_batches(parts, schema=values.schema)
        if isinstance(values, pa.Table)
        else pa.chunked_array(parts, type=values.type)
    )
    if np.all(order == np.arange(len(at))):
        return cast(_Taken, taken)
    return cast(_Taken, taken.take(pa.array(np.argsort(order), pa.int64())))


def _prefix_in_order(keys: pa.Table) -> int:
    """How many of the first rows are in file-group order (at least one)."""
    count = keys.num_rows
    previous, current = keys.slice(0, count - 1), keys.slice(1)
    same = pc.equal(current.column("partition_path"), previous.column("partition_path"))
    before = pc.or_(
        pc.less(current.column("partition_path"), previous.column("partition_path")),
        pc.and_(same, pc.less(current.column("file_id"), previous.column("file_id"))),
    )
    breaks = np.flatnonzero(np.asarray(before.to_numpy(zero_copy_only=False), dtype=bool))
    return int(breaks[0]) + 1 if len(breaks) else count


def by_partition(table: pa.Table) -> dict[str, pa.Table]:
    """The rows of a base-file table cut into each partition's. Rows in partition order (as
    :attr:`FileSystemView.latest_base_table` and its like give them) are cut as slices in one
    pass over the column; otherwise each partition's are filtered."""
    if not table.num_rows:
        return {}
    encoded = pc.dictionary_encode(table.column("partition_path")).combine_chunks()
    codes = encoded.indices.to_numpy()
    starts = np.concatenate([[0], np.flatnonzero(codes[1:] != codes[:-1]) + 1])
    names = encoded.dictionary.to_pylist()
    if len(starts) != len(names):  # a partition in two runs: not in partition order
        return {n: table.filter(pc.equal(encoded.indices, i)) for i, n in enumerate(names)}
    ends = [*starts[1:].tolist(), table.num_rows]
    return {
        names[codes[a]]: table.slice(a, b - a) for a, b in zip(starts.tolist(), ends, strict=True)
    }


def base_files_of(table: pa.Table) -> list[BaseFile]:
    """BaseFile objects of the rows of a base-file table (:attr:`FileSystemView.latest_base_table`
    and its like)."""
    columns = [table.column(c).to_pylist() for c in _ORDER_COLUMNS]
    partitions, file_ids, instants, tokens, names, sizes = columns
    return [
        BaseFile(p, f, i, t, n, z)
        for p, f, i, t, n, z in zip(
            partitions, file_ids, instants, tokens, names, sizes, strict=True
        )
    ]


def _as_listed(entries: Iterable[FileInfo] | pa.Table) -> pa.Table:
    """A listing as a table of :data:`_LISTED` (and :data:`_BASE_NAME_FIELDS` and
    :data:`PATH_HASHES` when an Arrow listing brings them)."""
    if isinstance(entries, pa.Table):
        parsed = set(_BASE_NAME_FIELDS) <= set(entries.column_names)
        carried = [c for c in PATH_HASHES if c in entries.column_names]
        columns = list(_LISTED) + (list(_BASE_NAME_FIELDS) if parsed else []) + carried
        return entries.select(columns)
    paths, sizes = [], []
    for e in entries:
        paths.append(e.path)
        sizes.append(e.size)
    return _listed_paths(paths, pa.array(sizes, pa.int64()))


def _listed_paths(paths: list[str], sizes: pa.Array) -> pa.Table:
    """A table of :data:`_LISTED` of ``paths`` and their ``sizes`` (no object made per file:
    a million of them cost a second)."""
    partitions, names = [], []
    for path in paths:
        partition, _, name = path.rpartition("/")
        partitions.append(partition)
        names.append(name)
    columns = [pa.array(c, pa.string()) for c in (partitions, names, paths)]
    return pa.table([*columns, sizes], names=_LISTED)


def _bases_of(listed: pa.Table) -> pa.Table:
    """A listing's base files, one row each, in its order: their ``path`` and the fields of
    their names (:func:`with_base_name_fields`)."""
    if _BASE_NAME_FIELDS[0] not in listed.column_names:
        listed = with_base_name_fields(listed)
    if not pc.all(listed.column("is_base")).as_py():  # (a filter copies every column)
        listed = listed.filter(listed.column("is_base"))
    columns = {
        "partition_path": listed.column("partition_path"),
        "file_id": listed.column("file_id"),
        "instant_time": listed.column("instant_time"),
        "write_token": listed.column("write_token"),
        "file_name": listed.column("file_name"),
        "size": listed.column("size"),
        "path": listed.column("path"),
    }
    for carried in PATH_HASHES:
        if carried in listed.column_names:
            columns[carried] = listed.column(carried)
    return pa.table(columns)


@dataclass(frozen=True)
class LogFile:
    """A log file ``.<fileId>_<baseInstant>.log.<version>_<writeToken>`` in a partition."""

    partition_path: str
    file_name: str
    name: LogFileName
    size: int = 0

    @property
    def path(self) -> str:
        return f"{self.partition_path}/{self.file_name}" if self.partition_path else self.file_name

    @classmethod
    def parse(cls, partition_path: str, file_name: str, size: int = 0) -> LogFile | None:
        name = LogFileName.parse(file_name)
        return None if name is None else cls(partition_path, file_name, name, size)


@dataclass(frozen=True)
class FileSlice:
    """A file group's base file (None for a slice of log files alone) and its log files, in the
    order they are read; ``base_instant`` is the instant that keys the slice."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None
    log_files: tuple[LogFile, ...] = ()

    @property
    def paths(self) -> list[str]:
        """The slice's files, base file first."""
        base = [self.base_file.path] if self.base_file is not None else []
        return base + [log.path for log in self.log_files]


def slice_instant(file_name: str) -> str | None:
    """The instant that keys the file slice a data file belongs to: a base file's instant, a
    log file's base instant; None for any other file."""
    base = _BASE_FILE.match(file_name)
    if base is not None:
        return base["ts"]
    log = LogFileName.parse(file_name)
    return None if log is None else log.base_instant


def file_id_of(file_name: str) -> str | None:
    """The file group a data file belongs to (a base or log file's file id), or None."""
    base = _BASE_FILE.match(file_name)
    if base is not None:
        return base["file_id"]
    log = LogFileName.parse(file_name)
    return None if log is None else log.file_id


def base_file_name(file_id: str, write_token: str, instant_time: str) -> str:
    return f"{file_id}_{write_token}_{instant_time}.parquet"


class FileSystemView:
    """The base files of the table at ``storage`` as a given timeline snapshot sees them."""

    def __init__(
        self,
        active: ActiveTimeline,
        timeline: Timeline,
        as_of: str | None = None,
        listing: Callable[[], Iterable[FileInfo] | pa.Table] | None = None,
        partition_listing: Callable[[list[str]], Iterable[FileInfo] | pa.Table] | None = None,
    ) -> None:
        """``listing`` replaces the storage listing of data files (e.g. the metadata table's
        ``files`` partition): FileInfo with paths relative to the base path, or an Arrow table
        of the columns :data:`_LISTED` (no Python object per file). ``partition_listing``
        lists some partitions' files alone, from the same source, for a caller that asks
        about a few partitions before anything needs the whole table (a writer touching one
        partition of a million files); without it, a view of the storage lists those
        partitions' folders, and a view of a ``listing`` filters the whole listing."""
        self.active = active
        self.storage: Storage = active.storage
        self.timeline = timeline
        self.as_of = as_of
        self._listing = listing
        if partition_listing is None and listing is None:
            partition_listing = partial(list_partitions, self.storage)
        self._partition_listing = partition_listing

    @cached_property
    def _committed(self) -> CommittedWrites:
        return CommittedWrites(self.timeline, self.as_of)

    def is_committed(self, instant_time: str) -> bool:
        """Whether a data file written at ``instant_time`` is part of this snapshot (completed,
        or archived by Hudi)."""
        return instant_time in self._committed

    @cached_property
    def _replaced(self) -> set[tuple[str, str]]:
        replaced: set[tuple[str, str]] = set()
        for instant in self.timeline.with_actions(Action.REPLACE_COMMIT).completed():
            if instant.timestamp not in self._committed:
                continue
            metadata = CommitMetadata.from_bytes(
                self.active.read_content(instant), self.active.path(instant)
            )
            for partition, file_ids in metadata.partition_to_replace_file_ids.items():
                replaced.update((partition, f) for f in file_ids)
        return replaced

    @cached_property
    def _listed(self) -> pa.Table:
        """One listing of the data folders: ``partition_path``, ``file_name``, ``path`` and
        ``size`` of every file (and :func:`with_base_name_fields`' when the listing has them)."""
        if self._listing is None:
            return data_file_paths(self.storage, sizes=True)
        return _as_listed(self._listing())

    @cached_property
    def _base_table(self) -> pa.Table:
        """The listing's base files, one row each, in the listing's order: their ``path`` and
        the fields of their names (:func:`with_base_name_fields`)."""
        return _bases_of(self._listed)

    def _base_table_of(self, partitions: Iterable[str]) -> pa.Table:
        """:meth:`_base_table`'s rows of ``partitions``: from a listing of those partitions
        when they are few, unless the whole listing is read already (or there is no partition
        listing)."""
        names = pa.array(sorted(set(partitions)), pa.string())
        if not len(names):
            return _bases_of(_as_listed([]))
        few = len(names) <= _FEW_PARTITIONS
        if "_listed" in self.__dict__ or self._partition_listing is None or not few:
            bases = self._base_table
        else:
            bases = _bases_of(_as_listed(self._partition_listing(names.to_pylist())))
        wanted = pc.is_in(bases.column("partition_path"), names)
        return bases if pc.all(wanted).as_py() else bases.filter(wanted)

    @cached_property
    def _log_files(self) -> list[LogFile]:
        """The listing's log files (objects for them alone)."""
        logs: list[LogFile] = []
        listed = self._listed
        dotted = listed.filter(pc.starts_with(listed.column("file_name"), "."))
        for partition, name, size in zip(
            dotted.column("partition_path").to_pylist(),
            dotted.column("file_name").to_pylist(),
            dotted.column("size").to_pylist(),
            strict=True,
        ):
            log = LogFile.parse(partition, name, size)
            if log is not None:
                logs.append(log)
        return logs

    @cached_property
    def _ordered_bases(self) -> pa.Table:
        """:meth:`_base_table` in :meth:`all_base_files`' order."""
        return self._base_table.sort_by([(c, "ascending") for c in _ORDER_COLUMNS])

    def committed_base_files(self, upto: str | None = None) -> list[tuple[str, str, int, str]]:
        """(partition path, file name, size, instant) of each committed base file (written at
        or before ``upto``, if given), in :meth:`all_base_files`' order: from the listing's
        columns, with no object made per file (what an index build and a rebuild read)."""
        bases = self.committed_base_table(upto)
        return list(zip(*(bases.column(c).to_pylist() for c in bases.column_names), strict=True))

    def committed_base_table(self, upto: str | None = None) -> pa.Table:
        """:meth:`committed_base_files` as a table of those four columns."""
        bases = self._ordered_bases
        encoded = pc.dictionary_encode(bases.column("instant_time")).combine_chunks()
        limit = None if upto is None else normalize_timestamp(upto)
        wanted = [
            t in self._committed and (limit is None or normalize_timestamp(t) <= limit)
            for t in encoded.dictionary.to_pylist()
        ]
        bases = bases.filter(pc.take(pa.array(wanted, pa.bool_()), encoded.indices))
        return bases.select(["partition_path", "file_name", "size", "instant_time"])

    @cached_property
    def all_base_files(self) -> list[BaseFile]:
        """Every base file in storage, committed or not (one listing of the data folders)."""
        return base_files_of(self._ordered_bases)

    @property
    def all_log_files(self) -> list[LogFile]:
        """Every log file in storage, of any slice, committed or not."""
        return self._log_files

    @cached_property
    def pending_compactions(self) -> set[str]:
        """Instants of the compactions scheduled (at or before the snapshot) and not completed."""
        return {
            i.timestamp
            for i in self.timeline.with_actions(Action.COMPACTION).pending()
            if self.as_of is None
            or normalize_timestamp(i.timestamp) <= normalize_timestamp(self.as_of)
        }

    def latest_file_slices(self, partitions: Iterable[str] | None = None) -> list[FileSlice]:
        """The latest file slice of every live file group (optionally of some partitions); a
        slice whose compaction is pending comes merged with the slice before it."""
        if partitions is None:
            return list(self._latest_slices)
        wanted = set(partitions)
        return [s for s in self._latest_slices if s.partition_path in wanted]

    @property
    def committed(self) -> CommittedWrites:
        """Which write instants this snapshot counts as committed."""
        return self._committed

    @cached_property
    def committed_log_files(self) -> list[LogFile]:
        """Log files of file slices keyed by a committed instant or by a compaction (pending or
        completed); which of their blocks count is for the reader to say, by the instant each
        block names (:func:`timeline.log_format.effective_blocks`). ``.cdc`` files are left out."""
        pending = self.pending_compactions
        return [
            log
            for log in self.all_log_files
            if not log.name.cdc
            and (log.name.base_instant in self._committed or log.name.base_instant in pending)
        ]

    def latest_paths(self) -> set[str]:
        """Paths of the files of every latest file slice."""
        return {path for s in self._latest_slices for path in s.paths}

    def latest_file_count(self) -> int:
        """How many files the latest file slices have (``len(latest_paths())``): worked out on
        Arrow arrays when no slice has a log file (then each slice is its base file alone)."""
        if not self.committed_log_files:
            return int(self.latest_base_table.num_rows)
        return len(self.latest_paths())

    @property
    def lists_storage(self) -> bool:
        """Whether this view lists the data folders (not a listing it was given)."""
        return self._listing is None

    @cached_property
    def _latest_slices(self) -> list[FileSlice]:
        pending = self.pending_compactions
        groups: dict[tuple[str, str], dict[str, tuple[BaseFile | None, list[LogFile]]]] = {}

        for base in self.all_base_files:
            # not a pending compaction's either: it is not whole until the compaction completes
            if base.instant_time not in self._committed:
                continue
            slices = groups.setdefault((base.partition_path, base.file_id), {})
            slices.setdefault(base.instant_time, (base, []))  # as latest_base_files: the first
        for log in self.committed_log_files:
            base_instant = log.name.base_instant
            slices = groups.setdefault((log.partition_path, log.name.file_id), {})
            base_file, logs = slices.get(base_instant, (None, []))
            logs.append(log)
            slices[base_instant] = (base_file, logs)
        latest: list[FileSlice] = []
        for (partition, file_id), slices in groups.items():
            if (partition, file_id) in self._replaced:
                continue
            order = sorted(slices, key=normalize_timestamp)
            newest = order[-1]
            base_file, logs = slices[newest]
            logs = sorted(logs, key=lambda log: log.name.order)
            key = newest
            if newest in pending and len(order) > 1:  # read with the slice before it
                key = order[-2]
                base_file, before = slices[key]
                logs = sorted(before, key=lambda log: log.name.order) + logs
            latest.append(FileSlice(partition, file_id, key, base_file, tuple(logs)))
        return sorted(latest, key=lambda s: (s.partition_path, s.file_id))

    def latest_base_files(self, partitions: Iterable[str] | None = None) -> list[BaseFile]:
        """The newest committed base file of every live file group (optionally of some
        partitions: objects made for theirs alone, as a writer touching one partition of a
        large table asks)."""
        if partitions is None:
            return list(self._latest)
        wanted = set(partitions)
        if "_latest" in self.__dict__:
            return [b for b in self._latest if b.partition_path in wanted]
        return base_files_of(self.latest_base_table_of(wanted))

    def latest_base_table_of(self, partitions: Iterable[str]) -> pa.Table:
        """:attr:`latest_base_table`'s rows of ``partitions``, worked out from their listing
        alone unless the whole table's is at hand (:meth:`_base_table_of`)."""
        if "latest_base_table" in self.__dict__:
            latest = self.latest_base_table
            names = pa.array(sorted(set(partitions)), pa.string())
            return latest.filter(pc.is_in(latest.column("partition_path"), names))
        return self._newest_of(self._base_table_of(partitions))

    @cached_property
    def latest_base_table(self) -> pa.Table:
        """:meth:`latest_base_files` as an Arrow table (the columns of :meth:`_base_table`), in
        the same order: worked out on Arrow arrays, no Python object per file."""
        return self._newest_of(self._base_table)

    def _newest_of(self, bases: pa.Table) -> pa.Table:
        """Of base files (rows of :meth:`_base_table`), the newest committed one of each file
        group no completed replacecommit replaced, in :data:`_ORDER_COLUMNS` order."""
        # each file's instant as an index among the few instants: one hashing pass over them
        encoded = pc.dictionary_encode(bases.column("instant_time")).combine_chunks()
        times = encoded.dictionary.to_pylist()
        of_file = encoded.indices
        keep = pc.take(pa.array([t in self._committed for t in times], pa.bool_()), of_file)
        if self._replaced:
            group = pc.binary_join_element_wise(
                bases.column("partition_path"), bases.column("file_id"), "/"
            )
            replaced = pa.array([f"{p}/{f}" for p, f in self._replaced], pa.string())
            keep = pc.and_(keep, pc.invert(pc.is_in(group, value_set=replaced)))
        live = bases
        if not pc.all(keep).as_py():  # (a filter copies every column)
            live, of_file = bases.filter(keep), pc.filter(of_file, keep)
        if not live.num_rows:
            return live
        # Sorted by group, newest instant first (an instant as its rank among the few
        # instants); on a tie, the first in _order. Only the indices are sorted, on the columns
        # needed (sorting the whole table on all six cost twice as much at 100,000 files).
        ranks = sorted({normalize_timestamp(t) for t in times})
        rank_of = pa.array([ranks.index(normalize_timestamp(t)) for t in times], pa.int32())
        rank = pc.take(rank_of, of_file)
        keys = live.select(["partition_path", "file_id"]).append_column("rank", rank)
        # listed in group order already (the files index lists so), perhaps but for the files
        # of the commits since its base file (a few)
        newest = _newest_in_runs(keys)
        if newest is None:
            newest = _newest_with_tail(keys)
        if newest is not None:
            return _rows_of(live, newest)
        sort = [("partition_path", "ascending"), ("file_id", "ascending"), ("rank", "descending")]
        order = pc.sort_indices(keys, sort)
        first, tied = _group_starts(keys.take(order))
        if tied:  # a group's files of one instant: the rest of _order decides
            for column in _ORDER_COLUMNS[3:]:
                keys = keys.append_column(column, live.column(column))
            order = pc.sort_indices(keys, sort + [(c, "ascending") for c in _ORDER_COLUMNS[3:]])
            first, _ = _group_starts(keys.take(order))
        return live.take(order.filter(pa.array(first)))

    @cached_property
    def _latest(self) -> list[BaseFile]:
        """Worked out once per view: the view is of one timeline snapshot and one listing."""
        return base_files_of(self.latest_base_table)

    def partitions(self) -> list[str]:
        """Partitions that hold at least one live file group (of log files alone, too)."""
        if self.all_log_files:
            return sorted({s.partition_path for s in self.latest_file_slices()})
        return sorted({b.partition_path for b in self.latest_base_files()})

    def read_snapshot(self, columns: list[str] | None = None) -> pa.Table:
        """All rows of the snapshot (meta columns included), one Arrow table."""
        tables = [
            read_parquet(self.storage, base.path, columns) for base in self.latest_base_files()
        ]
        tables = [t for t in tables if t.num_rows or len(tables) == 1]
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")  # evolved schemas


#: the columns of the rows :class:`KeptBaseFiles` keeps
_KEPT_COLUMNS = (*_ORDER_COLUMNS, "path")


class KeptBaseFiles:
    """The latest base files of some partitions of a copy-on-write table (rows of
    :meth:`FileSystemView.latest_base_table_of`), kept by a warm writer across its commits and
    brought forward to each new snapshot from the commits completed since, as Apache Hudi's timeline server syncs its file-system view from
    the new instants rather than list again: at a million files, working out one partition's
    latest files from its listing was a fifth of an upsert.

    Brought forward only when the snapshot's completed instants are those of the snapshot the
    rows were kept at, plus commits: each commit's write stats name its new base files, and a
    group's newest is the newer of its kept one and these (:meth:`FileSystemView._newest_of`,
    the same rule as a listing's). Anything else (an instant gone, a replacecommit, clean,
    rollback, compaction, or a stat that names no base file) drops every kept row, and the
    next call works the partitions out afresh. At most :data:`KEPT_ROWS_MOST` rows are kept."""

    def __init__(self) -> None:
        #: the completed instants of the snapshot the rows are of
        self._completed: frozenset[tuple[str, str]] = frozenset()
        self._rows: dict[str, pa.Table] = {}

    def latest_base_table_of(self, view: FileSystemView, partitions: Iterable[str]) -> pa.Table:
        """``view.latest_base_table_of(partitions)`` (its columns :data:`_KEPT_COLUMNS`), from
        the kept rows brought forward to ``view``'s snapshot where they can be."""
        wanted = sorted(set(partitions))
        if view.as_of is not None:
            return _kept(view.latest_base_table_of(wanted))
        completed = {(i.timestamp, i.action.value): i for i in view.timeline.completed()}
        if not self._bring_forward(view, completed):
            self._rows = {}
        self._completed = frozenset(completed)
        missing = [p for p in wanted if p not in self._rows]
        if missing:
            fresh = _kept(view.latest_base_table_of(missing))
            cut = by_partition(fresh)
            for partition in missing:
                self._rows[partition] = cut.get(partition, fresh.slice(0, 0))
        answer = pa.concat_tables([self._rows[p] for p in wanted]) if wanted else _EMPTY_KEPT
        if sum(t.num_rows for t in self._rows.values()) > KEPT_ROWS_MOST:
            self._rows = {p: self._rows[p] for p in wanted}  # the partitions of this write
            if answer.num_rows > KEPT_ROWS_MOST:
                self._rows = {}  # too many to keep at all
        return answer

    def _bring_forward(
        self, view: FileSystemView, completed: dict[tuple[str, str], Instant]
    ) -> bool:
        """Bring the kept rows forward to ``view``'s snapshot (whose ``completed`` instants by
        time and action); False when they cannot be."""
        if not self._rows:
            return True
        if not self._completed <= completed.keys():
            return False
        new = sorted(completed.keys() - self._completed)
        if any(action != Action.COMMIT.value for _, action in new):
            return False
        entries: dict[str, list[FileInfo]] = {}
        for key in new:
            instant = completed[key]
            metadata = CommitMetadata.from_bytes(
                view.active.read_content(instant), view.active.path(instant)
            )
            for stat in metadata.write_stats:
                partition = stat.path.rpartition("/")[0]
                if BaseFile.parse(partition, stat.file_name) is None:
                    return False
                if partition in self._rows:
                    info = FileInfo(stat.path, stat.file_size_in_bytes, False, None)
                    entries.setdefault(partition, []).append(info)
        for partition, infos in entries.items():
            added = _kept(_bases_of(_as_listed(infos)))
            self._rows[partition] = view._newest_of(
                pa.concat_tables([self._rows[partition], added])
            )
        return True


#: rows :class:`KeptBaseFiles` keeps, at most (a few hundred bytes each)
KEPT_ROWS_MOST = 200_000

_EMPTY_KEPT = _bases_of(_as_listed([])).select(_KEPT_COLUMNS)


def _kept(rows: pa.Table) -> pa.Table:
    """Base-file rows as :class:`KeptBaseFiles` keeps them: its columns, of one schema whatever
    the listing they came from."""
    return rows.select(_KEPT_COLUMNS).cast(_EMPTY_KEPT.schema)


def parquet_file_rows(storage: Storage, path: str) -> int:
    """The rows a Parquet file holds, from its footer."""
    return int(footer_metadata(parquet_footer(storage, path), path).num_rows)


#: pyarrow's file reader, opened on a footer alone: three quarters of the time of
#: ``pq.read_metadata`` (75 against 100 us a 2,520-byte footer of 11 columns here), which wraps
#: the same reader in ``pq.ParquetFile`` (its nested column paths worked out in Python).
#: (``FileMetaData``'s unpickling parses the Thrift bytes alone in 45 us, but aborts the
#: process on a malformed footer.) None on a pyarrow without it
_FOOTER_READER: Callable[[], Any] | None = getattr(
    importlib.import_module("pyarrow._parquet"), "ParquetReader", None
)


def footer_metadata(footer: bytes, path: str) -> pq.FileMetaData:
    """The ``FileMetaData`` of a footer as :func:`parquet_footer` returns it (``PAR1``, the
    footer, its length, ``PAR1``); :class:`NotParquetError` names a file whose footer does not
    parse. A build reads every data file's footer: this is the largest part of its cost a
    file."""
    return _read_footer(pa.BufferReader(footer), path)


def parquet_metadata(storage: Storage, path: str) -> pq.FileMetaData:
    """A Parquet file's footer (:class:`NotParquetError` if not one): a local file's read by
    pyarrow's reader from the path, others' in one ranged read of the file's end (two for a
    footer over 64 KB)."""
    if not storage.is_local or _FOOTER_READER is None:
        return footer_metadata(parquet_footer(storage, path), path)
    return _read_footer(storage.uri(path), path)


def _read_footer(source: Any, path: str) -> pq.FileMetaData:
    """The footer of ``source`` (a buffer, or a local file's path) by :data:`_FOOTER_READER`,
    else ``pq.read_metadata``; errors name ``path``."""
    try:
        if _FOOTER_READER is None:
            return pq.read_metadata(source)
        if isinstance(source, str):
            # opened here: pyarrow's open of a path asks Python whether it is a folder first
            # (a stat: 1.5 us of a 45 us footer); the reader owns the descriptor and closes it
            source = pa.OSFile(os.open(source, os.O_RDONLY))
        reader = _FOOTER_READER()
        reader.open(source)
        return reader.metadata
    except FileNotFoundError as e:
        raise StorageFileNotFoundError(path) from e
    except (pa.ArrowException, OSError) as e:
        raise NotParquetError(path, str(e).splitlines()[0]) from e


def read_parquet_schema(storage: Storage, path: str) -> pa.Schema:
    """The schema of a Parquet file, from its footer alone; :class:`NotParquetError` names a file
    that is not one."""
    return read_parquet_schema_bytes(parquet_footer(storage, path), path)


def parquet_footer(storage: Storage, path: str, guess: int = 64 * 1024) -> bytes:
    """The footer of a Parquet file as the smallest Parquet byte string holding it (``PAR1``,
    footer, length, ``PAR1``): enough to read its schema, in one ranged read of the file's end
    (two when the footer is larger than ``guess``)."""
    tail = storage.read_range(path, -guess, None)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise NotParquetError(path, "no Parquet footer at its end")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > len(tail):
        tail = storage.read_range(path, -(length + 8), None)
    return b"PAR1" + tail[-(length + 8) :]


def read_parquet_schema_bytes(data: bytes, path: str) -> pa.Schema:
    """The schema of the Parquet file ``data`` (read from ``path``)."""
    with _parquet_errors(path):
        return pq.read_schema(pa.BufferReader(data))


def read_parquet(storage: Storage, path: str, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file as a table; :class:`NotParquetError` names a file that is not one.

    Read on this thread (``use_threads=False``): with threads, a column reader in Arrow's pool
    can hold the last reference to the buffer over our ``bytes`` and release it after the read
    returned; its destructor then takes the GIL, and if the interpreter is exiting by then the
    thread is unwound through C++ and the process aborts ("terminate called without an active
    exception", exit 134; apache/arrow#33975)."""
    return read_parquet_file(parquet_file(storage, path), path, columns)


def read_parquet_head(storage: Storage, path: str, columns: list[str], rows: int) -> pa.Table:
    """The first ``rows`` rows of some columns of a Parquet file, by ranged reads through
    Arrow's file system (the footer and the first pages of those columns), on this thread."""
    fs, root = storage.arrow_filesystem()
    with _parquet_errors(path), fs.open_input_file(f"{root.rstrip('/')}/{path}") as source:
        file = pq.ParquetFile(source)
        batch = next(file.iter_batches(rows, columns=columns, use_threads=False), None)
    if batch is None:
        return file.schema_arrow.empty_table().select(columns)
    return pa.Table.from_batches([batch])


def read_columns(
    storage: Storage,
    path: str,
    columns: list[str],
    metadata: pq.FileMetaData | None = None,
) -> pa.Table:
    """Some columns of a Parquet file, reading only their column chunks where the storage allows
    ranged reads through Arrow (local files); ``metadata``, the footer the caller already read,
    spares reading it again. Other storage reads the whole file (:func:`read_parquet`)."""
    if not storage.is_local:
        return read_parquet(storage, path, columns)
    with _parquet_errors(path):
        file = pq.ParquetFile(storage.uri(path), metadata=metadata)
        return file.read(columns=columns, use_threads=False)


def parquet_file(
    storage: Storage, path: str, read_dictionary: Sequence[str] = ()
) -> pq.ParquetFile:
    """A Parquet file, its footer parsed (:class:`NotParquetError` if not one); the
    ``read_dictionary`` columns are decoded as dictionary arrays. A local file is opened for
    ranged reads (a lookup in a 27 MB record-index file reads its footer and one row group, not
    the whole file); other storage reads it into memory (see :func:`read_parquet`). One thread
    reads through it at a time (:class:`ParquetReaders` serves several)."""
    return ParquetReaders(storage, path, read_dictionary).file()


class ParquetReaders:
    """One Parquet file read from any number of threads, each through a reader of its own: a
    ``pq.ParquetFile`` is not safe to share, its ranged reads going through one cache (two
    threads decoding row groups through one failed with "ReadRangeCache did not find matching
    cache entry", or crashed the process). The footer is parsed once, by the first reader, and
    the others are given it; a file of other storage than local is read into memory once. The
    ``read_dictionary`` columns are decoded as dictionary arrays."""

    def __init__(self, storage: Storage, path: str, read_dictionary: Sequence[str] = ()) -> None:
        self.path = path
        self._dictionary = list(read_dictionary) or None
        self._own = threading.local()
        with _parquet_errors(path):
            self._source: str | pa.Buffer = (
                storage.uri(path) if storage.is_local else pa.py_buffer(storage.read(path))
            )
            first = self._open(None)
        self.metadata: pq.FileMetaData = first.metadata
        self._own.file = first

    def _open(self, metadata: pq.FileMetaData | None) -> pq.ParquetFile:
        source = self._source if isinstance(self._source, str) else pa.BufferReader(self._source)
        return pq.ParquetFile(source, metadata=metadata, read_dictionary=self._dictionary)

    def file(self) -> pq.ParquetFile:
        """This thread's reader."""
        file: pq.ParquetFile | None = getattr(self._own, "file", None)
        if file is None:
            with _parquet_errors(self.path):
                file = self._own.file = self._open(self.metadata)
        return file

    def read_row_groups(self, row_groups: list[int], columns: list[str] | None = None) -> pa.Table:
        """Some columns (all: None) of some row groups, through this thread's reader."""
        return read_parquet_file(self.file(), self.path, columns, row_groups)


def read_parquet_file(
    file: pq.ParquetFile,
    path: str,
    columns: list[str] | None = None,
    row_groups: list[int] | None = None,
) -> pa.Table:
    """Some columns (all: None) of some row groups (all: None) of ``file``, on this thread (see
    :func:`read_parquet`)."""
    with _parquet_errors(path):
        if row_groups is None:
            return file.read(columns=columns, use_threads=False)
        return file.read_row_groups(row_groups, columns=columns, use_threads=False)


@contextlib.contextmanager
def _parquet_errors(path: str) -> Iterator[None]:
    """Reading ``path`` as Parquet: a missing file raises :class:`StorageFileNotFoundError`, one
    that is not Parquet (truncated, zero bytes, another format) :class:`NotParquetError`."""
    try:
        yield
    except FileNotFoundError as e:
        raise StorageFileNotFoundError(path) from e
    except (pa.ArrowInvalid, OSError) as e:
        raise NotParquetError(path, str(e).splitlines()[0]) from e


def list_partitions(storage: Storage, partitions: list[str]) -> list[FileInfo]:
    """The files in the folders of ``partitions`` ("" is the base path), not in their
    subfolders (another partition's, or ``.hoodie/``); a missing folder holds none."""
    return [e for partition in partitions for e in storage.list(partition) if not e.is_dir]


def data_file_paths(storage: Storage, sizes: bool = False) -> pa.Table:
    """The files :func:`list_data_files` lists, in its order, as a table of :data:`_LISTED`.
    Without ``sizes`` their sizes are not listed (0): a view of it counts the latest file
    slices' files (or names them) without a stat a file."""
    paths: list[str] = []
    lengths: list[int] = []
    for entry in storage.list():
        if entry.is_dir:
            if entry.name == META_FOLDER:
                continue
            if sizes:
                for path, size in storage.file_sizes(entry.path):
                    paths.append(path)
                    lengths.append(size)
            else:
                paths.extend(storage.file_paths(entry.path))
        else:
            paths.append(entry.path)
            if sizes:
                lengths.append(entry.size)
    if sizes:
        return _listed_paths(paths, pa.array(np.array(lengths, np.int64)))
    return _listed_paths(paths, pa.repeat(pa.scalar(0, pa.int64()), len(paths)))


def list_data_files(storage: Storage) -> list[FileInfo]:
    """Files under the base path outside ``.hoodie/`` (data files, partition metadata)."""
    out: list[FileInfo] = []
    for entry in storage.list():
        if entry.is_dir:
            if entry.name != META_FOLDER:
                out.extend(storage.list(entry.path, recursive=True))
        else:
            out.append(entry)
    return out
