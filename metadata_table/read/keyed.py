"""Lookups in the partitions keyed by record key: ``record_index`` (record key -> data partition
and file group) and ``secondary_index_<column>`` (a value -> the records holding it).

A value (a record key, or a secondary value as text) is found through its hash
(:func:`metadata_table.layout.key_hashes`): the hash names the file group, and the top 32 bits
(``key_hash``, by which each base file is sorted) name the row groups whose ``key_hash`` range
holds it, so a lookup of one key decodes one row group of one file. The log files applied on top
of a base file hold one commit's changes each; they are read whole. Of several records of one key
the newest wins (:func:`metadata_table.reader.newest_records`), and a tombstone means the key is
gone.

:class:`KeyedLookup` keeps what it decoded (row groups, log files), so the lookups of a snapshot
held open read each part of the index once; it is picklable (without what it kept), for Spark
tasks that look keys up themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.layout import (
    REPEATED,
    hash_groups,
    key_hashes,
    routing_column,
    schema_of,
)
from metadata_table.reader import GroupFiles, newest_records
from metadata_table.workers import DEFAULT_WORKERS, in_parallel
from timeline.fs_view import ParquetReaders, parquet_file, read_parquet_file
from timeline.storage import Storage


class KeyedLookup:
    """Lookups in one partition keyed by record key, over the files of one snapshot."""

    def __init__(self, storage: Storage, partition: str, groups: Sequence[GroupFiles]) -> None:
        self.storage = storage
        self.partition = partition
        self.groups = list(groups)
        self.column = routing_column(partition)
        self.schema = schema_of(partition)
        self._init_caches()

    def _init_caches(self) -> None:
        #: per base file: its row groups' key_hash bounds (sorted), and its readers
        self._bounds: dict[str, tuple[np.ndarray, np.ndarray, ParquetReaders]] = {}
        self._row_groups: dict[tuple[str, int], tuple[np.ndarray, pa.Table]] = {}
        self._logs: dict[str, pa.Table] = {}
        #: row groups and log files decoded (what a lookup cost)
        self.decoded = 0
        self._counting = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("storage", "partition", "groups", "column", "schema")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_caches()

    def find(self, values: Iterable[str] | pa.Array) -> pa.Table:
        """The live records whose routing column (the record key; a secondary index's value
        text) is one of ``values``."""
        wanted = pc.unique(
            pa.array(values, pa.string())
            if not isinstance(values, pa.Array)
            else values.cast(pa.string())
        )
        wanted = wanted.filter(pc.is_valid(wanted))
        if not len(wanted) or not self.groups:
            return self.schema.empty_table()
        hashes = key_hashes(wanted)
        tops = (hashes >> np.uint64(32)).astype(np.int64)
        of_group = hash_groups(tops, len(self.groups))
        parts = []
        for index in np.unique(of_group).tolist():
            mine = of_group == index
            asked = wanted.filter(pa.array(mine))
            parts.append(self._find_in(self.groups[index], asked, tops[mine]))
        found = pa.concat_tables(parts)
        return found.filter(pc.invert(found.column("is_deleted")))

    def _find_in(self, group: GroupFiles, asked: pa.Array, tops: np.ndarray) -> pa.Table:
        base = self.schema.empty_table()
        if group.base is not None:
            base = self._base_rows(group.base, asked, tops)
        logs = []
        for path in group.logs:
            log = self._log(path)
            logs.append(log.filter(pc.is_in(log.column(self.column), value_set=asked)))
        return newest_records(base, logs) if any(log.num_rows for log in logs) else base

    def _base_rows(self, path: str, asked: pa.Array, tops: np.ndarray) -> pa.Table:
        """Records of base file ``path`` whose routing column is in ``asked``: the row groups
        whose key_hash range holds one of ``tops`` are decoded (once), and in each the rows of
        those hashes found by a binary search."""
        lows, highs, readers = self._file(path)
        first = np.searchsorted(highs, tops, side="left")
        last = np.searchsorted(lows, tops, side="right")
        spans = last - first
        one = spans == 1
        pieces = [(first[one], tops[one])]
        for a, b, top in zip(first[~one], last[~one], tops[~one], strict=True):
            for rg in range(a, b):  # a hash on a row group boundary: both groups
                pieces.append((np.array([rg]), np.array([top])))
        groups = np.concatenate([g for g, _ in pieces])
        wanted_tops = np.concatenate([t for _, t in pieces])
        if not len(groups):  # no row group's hash range holds an asked key
            return self.schema.empty_table()
        # the asked hashes by row group (one sort, not a pass over every hash per row group)
        by_group = np.argsort(groups, kind="stable")
        groups, wanted_tops = groups[by_group], wanted_tops[by_group]
        row_groups, starts_at = np.unique(groups, return_index=True)
        ends_at = np.append(starts_at[1:], len(groups))
        self._decode(path, readers, row_groups.tolist())
        found = []
        for rg, begin, end in zip(row_groups.tolist(), starts_at, ends_at, strict=True):
            hashes, table = self._row_group(path, readers, rg)
            mine = np.unique(wanted_tops[begin:end])  # keys may share a top: once each
            left = np.searchsorted(hashes, mine, side="left")
            right = np.searchsorted(hashes, mine, side="right")
            counts = right - left
            if not counts.any():
                continue
            starts = np.repeat(left, counts)
            offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            found.append(table.take(pa.array(starts + offsets, pa.int64())).cast(self.schema))
        if not found:
            return self.schema.empty_table()
        near = pa.concat_tables(found)
        return near.filter(_asked(near.column(self.column), near.column("key_hash"), asked, tops))

    def _file(self, path: str) -> tuple[np.ndarray, np.ndarray, ParquetReaders]:
        if path not in self._bounds:
            repeated = [f.name for f in self.schema if f.name in REPEATED]
            readers = ParquetReaders(self.storage, path, read_dictionary=repeated)
            metadata = readers.metadata
            names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
            at = names.index("key_hash")
            lows, highs = [], []
            for rg in range(metadata.num_row_groups):
                stats = metadata.row_group(rg).column(at).statistics
                if stats is None or not stats.has_min_max:  # unknown: always read
                    lows.append(np.iinfo(np.int64).min)
                    highs.append(np.iinfo(np.int64).max)
                else:
                    lows.append(stats.min)
                    highs.append(stats.max)
            bounds = (np.array(lows, np.int64), np.array(highs, np.int64), readers)
            self._bounds.setdefault(path, bounds)  # (a thread beside this one may have too)
        return self._bounds[path]

    def _decode(self, path: str, readers: ParquetReaders, row_groups: list[int]) -> None:
        """The ``row_groups`` of base file ``path`` not decoded yet, decoded on the process's
        decoding threads, each reading its share through a reader of its own: a lookup of
        100,000 keys among 10M touches most of the index's 600 row groups."""
        missing = [rg for rg in row_groups if (path, rg) not in self._row_groups]
        shares = min(DEFAULT_WORKERS, len(missing))
        if shares < 2:
            return  # (one row group: decoded as it is looked in)

        def decode(share: list[int]) -> None:
            for rg in share:
                self._row_group(path, readers, rg)

        in_parallel(decode, [missing[n::shares] for n in range(shares)])

    def _row_group(
        self, path: str, readers: ParquetReaders, rg: int
    ) -> tuple[np.ndarray, pa.Table]:
        """A row group of a base file, decoded once: its key_hash column as numpy (sorted) and
        its records, the columns repeated over many rows (partition, file id, instant) as
        dictionaries: a lookup that touches every row group of a 10M-key index keeps about a
        tenth of the memory it would as strings, and decodes it twice as fast."""
        key = (path, rg)
        if key not in self._row_groups:
            table = readers.read_row_groups([rg]).replace_schema_metadata(None)
            self._row_groups.setdefault(key, (table.column("key_hash").to_numpy(), table))
            with self._counting:
                self.decoded += 1
        return self._row_groups[key]

    def _log(self, path: str) -> pa.Table:
        if path not in self._logs:
            table = read_parquet_file(parquet_file(self.storage, path), path)
            self._logs[path] = table.replace_schema_metadata(None).cast(self.schema)
            with self._counting:
                self.decoded += 1
        return self._logs[path]


def _asked(
    values: pa.ChunkedArray, hashes: pa.ChunkedArray, asked: pa.Array, tops: np.ndarray
) -> pa.Array:
    """Whether each of ``values`` (rows found by their ``hashes``, each one of ``tops``) is one
    of ``asked`` (whose hashes are ``tops``): compared with the value asked under its hash,
    where one was; by a set of the values asked under one hash, where several were (about a
    hundred pairs among 1M keys). A set of all the values asked took 89 ms at 333,000 rows,
    the comparison 1."""
    order = np.argsort(tops, kind="stable")
    ordered = tops[order]
    found = hashes.to_numpy()
    at = np.searchsorted(ordered, found)
    shared = np.zeros(len(ordered), dtype=bool)  # hashes asked with several values
    shared[1:] = ordered[1:] == ordered[:-1]
    shared[:-1] |= shared[1:]
    if not shared.any():
        return pc.equal(values, asked.take(pa.array(order[at], pa.int64())))
    alone = ~shared[at]
    same = np.zeros(len(found), dtype=bool)
    lone = np.flatnonzero(alone)
    expected = asked.take(pa.array(order[at[lone]], pa.int64()))
    same[lone] = pc.equal(values.take(pa.array(lone, pa.int64())), expected).to_numpy(
        zero_copy_only=False
    )
    several = np.flatnonzero(~alone)
    among = asked.take(pa.array(order[np.flatnonzero(shared)], pa.int64()))
    inside = pc.is_in(values.take(pa.array(several, pa.int64())), value_set=among)
    same[several] = inside.to_numpy(zero_copy_only=False)
    return pa.array(same)


__all__ = ["KeyedLookup"]
