"""Apache Hudi 0.15's own metadata table (``.hoodie/metadata``): read as Hudi's readers read it
(each partition's latest file slices, their base HFile and the log blocks that count, merged per
key), and kept as Hudi's writer keeps it (a deltacommit per commit, clean and rollback of ours,
its compaction ``<t>001`` and clean ``<t>002``). The codecs are the kernel's
(:mod:`timeline.formats`); this module is the protocol.

What counts, as Hudi 0.15 decides it:

* a partition is readable when the data table's ``hoodie.properties`` lists it in
  ``hoodie.table.metadata.partitions`` (``files`` first: without it nothing is);
* a file group's latest slice is its newest base file whose instant (a compaction, ``<t>001``,
  or a partition's initialization) completed on the metadata table's timeline (or is older than
  its active timeline: archived), with the log files written on it (or, before any compaction,
  the log files alone);
* a log block counts when its instant completed on the metadata table (as above) and is
  either a completed data instant (a data commit's mirror, same time) or one of the metadata
  table's own suffixed instants (``<t>0NN``: compaction, indexing, initialization...), or the
  initial ``00000000000000`` ones; a rollback command block removes its target's earlier blocks.

Records then merge per key, newest last: a partition's file list adds and removes files (a file
listed twice keeps its larger size, as an appended log file grows), column stats and bloom
filters are replaced by newer records (a deleted one stays as a tombstone), and a record-index
entry is replaced or removed by a delete block.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, partial
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timeline.archiver import (
    ArchivalPolicy,
    MergePolicy,
    archive_entry,
    merge_archive_files,
    write_archive_file,
)
from timeline.clean import CleanPlan, metadata_bytes
from timeline.commit_metadata import CommitMetadata, WriteStat
from timeline.config import HUDI_METADATA_COMPACT_EVERY
from timeline.errors import RebuildRequiredError, StorageFileNotFoundError
from timeline.formats import metadata_records as records
from timeline.formats.hfile import HFileReader
from timeline.formats.hudi_bloom import FOOTER_KEY, TYPE_CODE_KEY
from timeline.fs_view import file_id_of, parquet_metadata
from timeline.hudi_avro import avro_file
from timeline.hudi_metadata import HUDI_METADATA_FOLDER, keeps_hudi_metadata_table
from timeline.instant import Action, State, format_instant_time
from timeline.keys import META_COLUMNS
from timeline.locks import LockHandle
from timeline.log_format import BlockType, LogFileName, effective_blocks, read_blocks
from timeline.removals import Removal, read_avro_records
from timeline.storage import FileInfo
from timeline.table import Table
from timeline.table_config import METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

FOLDER = HUDI_METADATA_FOLDER
_INSTANT = re.compile(
    r"^(?P<time>\d{14,23})\.(?P<action>[a-z_]+)(?P<state>\.requested|\.inflight)?$"
)
_COMPLETED_ACTIONS = ("deltacommit", "commit")
_SOLO = "00000000000000"
_STATE_RANK = {"requested": 0, "inflight": 1, "": 2}
#: the data actions whose completion Hudi's writer mirrors in its metadata table
_CHANGES_FILES = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.CLEAN,
        Action.ROLLBACK,
        Action.RESTORE,
    }
)


@dataclass(frozen=True)
class FileSlice:
    """A file group's latest slice: its base HFile (or None) and log files, oldest first."""

    file_group: int
    base: str | None
    logs: tuple[str, ...]


@dataclass(frozen=True)
class KeySeek:
    """The keys (``keys``), or the keys that start with one of ``prefixes``, a read of a
    metadata partition asks for."""

    keys: frozenset[bytes] = frozenset()
    prefixes: tuple[bytes, ...] = ()

    def wants(self, row: bytes) -> bool:
        return row in self.keys or row.startswith(self.prefixes)

    def cells(self, reader: HFileReader) -> Iterator[tuple[bytes, bytes]]:
        """The cells of one HFile this seek asks for, in key order."""
        yield from reader.get_many(self.keys)
        for prefix in sorted(set(self.prefixes)):
            yield from reader.with_prefix(prefix)


class HudiMetadataTable:
    """One snapshot of Hudi's metadata table of ``table`` (listed on first use)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.storage = table.storage

    @cached_property
    def _props(self) -> Mapping[str, str]:
        return self.table.reload_table_config().props

    @cached_property
    def partitions(self) -> tuple[str, ...]:
        """The partitions Hudi's readers may use (``hoodie.table.metadata.partitions``)."""
        return tuple(p for p in self._props.get(METADATA_PARTITIONS, "").split(",") if p)

    @cached_property
    def inflight(self) -> tuple[str, ...]:
        """The partitions being built (``hoodie.table.metadata.partitions.inflight``)."""
        value = self._props.get(METADATA_PARTITIONS_INFLIGHT, "")
        return tuple(p for p in value.split(",") if p)

    @property
    def present(self) -> bool:
        return "files" in self.partitions

    @property
    def pending(self) -> bool:
        """Whether an instant of the metadata table is requested or inflight."""
        return any(state for _, _, state in self.instants)

    @property
    def last_compaction(self) -> str | None:
        """The instant of its newest completed compaction (a ``<t>001.commit``), or None."""
        return max((t for t, a, s in self.instants if a == "commit" and not s), default=None)

    @cached_property
    def instants(self) -> tuple[tuple[str, str, str], ...]:
        """The metadata table's instants, one per time in time order: (time, action, state),
        the state "" when completed (the action then the completed one's: a compaction completes
        as ``commit``), else "inflight" or "requested", the furthest it reached."""
        try:
            entries = self.storage.list(f"{FOLDER}/.hoodie")
        except StorageFileNotFoundError:
            return ()
        furthest: dict[str, tuple[int, str, str]] = {}
        for entry in entries:
            match = _INSTANT.match(entry.name)
            if match:
                state = (match["state"] or "")[1:]
                rank = _STATE_RANK[state]
                if match["time"] not in furthest or furthest[match["time"]][0] < rank:
                    furthest[match["time"]] = (rank, match["action"], state)
        return tuple((t, a, s) for t, (_, a, s) in sorted(furthest.items()))

    @cached_property
    def _completed(self) -> frozenset[str]:
        """Instant times of the metadata table's completed deltacommits and compactions."""
        return frozenset(t for t, a, s in self.instants if not s and a in _COMPLETED_ACTIONS)

    @cached_property
    def _first_write(self) -> str | None:
        """The first completed deltacommit or compaction of its active timeline (cleans and
        rollbacks are archived apart: one of them may be older, with writes archived since)."""
        return min(self._completed, default=None)

    def committed(self, instant: str) -> bool:
        """Whether ``instant`` completed on the metadata table: it is a completed deltacommit
        or compaction of its active timeline, or older than the first of those (archived;
        Hudi's ``containsOrBeforeTimelineStarts`` on its commits timeline, which keeps a base
        file visible once the compaction that wrote it has been archived)."""
        if instant in self._completed:
            return True
        return self._first_write is not None and instant < self._first_write

    @cached_property
    def _data_completed(self) -> frozenset[str]:
        return frozenset(i.timestamp for i in self.table.timeline.load().completed())

    def counts(self, instant: str) -> bool:
        """Whether a log block written at ``instant`` counts (see the module docstring)."""
        if not self.committed(instant):
            return False
        suffixed = len(instant) > 17
        return suffixed or instant in self._data_completed or instant.startswith(_SOLO)

    def slices(self, partition: str) -> list[FileSlice]:
        """The latest slice of each file group of ``partition``, by file group."""
        prefix = records.FILE_GROUP_PREFIXES[partition]
        bases: dict[int, tuple[str, str]] = {}
        logs: dict[int, list[tuple[LogFileName, str]]] = defaultdict(list)
        for entry in self.storage.list(f"{FOLDER}/{partition}"):
            name = entry.name
            parsed = LogFileName.parse(name)
            if parsed is not None and parsed.file_id.startswith(prefix):
                logs[_group(parsed.file_id, prefix)].append((parsed, name))
            elif name.startswith(prefix) and name.endswith(".hfile"):
                instant = _hfile_instant(name)
                group = _group(name.split("_", 1)[0], prefix)
                if self.committed(instant) and (group not in bases or bases[group][0] < instant):
                    bases[group] = (instant, name)
        out = []
        for group in sorted(set(bases) | set(logs)):
            since = bases[group][0] if group in bases else ""
            kept = sorted((p.order, n) for p, n in logs.get(group, []) if p.base_instant >= since)
            base = bases[group][1] if group in bases else None
            out.append(FileSlice(group, base, tuple(n for _, n in kept)))
        return out

    def records(self, partition: str) -> dict[str, dict[str, Any]]:
        """Every live record of ``partition`` by key, merged as Hudi merges them."""
        merged: dict[str, dict[str, Any]] = {}
        for piece in self.slices(partition):
            merged |= self.slice_records(partition, piece)
        return merged

    def slice_records(self, partition: str, piece: FileSlice) -> dict[str, dict[str, Any]]:
        """The live records of one file slice by key: its base file's, then its log blocks'
        that count, merged in order (a key lives in one file group)."""
        merged: dict[str, dict[str, Any]] = {}
        for key, record in self._cells(partition, piece):
            if record is None:
                merged.pop(key, None)
            else:
                merged[key] = _merge(merged.get(key), record)
        return merged

    def _cells(
        self, partition: str, piece: FileSlice
    ) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """(key, record) of a slice in merge order; a None record deletes the key."""
        for row, value in self._raw_cells(partition, piece):
            key = row.decode()
            yield key, None if value is None else records.decode(key, value)

    def _raw_cells(
        self, partition: str, piece: FileSlice, seek: KeySeek | None = None
    ) -> Iterator[tuple[bytes, bytes | None]]:
        """(key, encoded record) of a slice in merge order; a None record deletes the key. With
        ``seek``, only the cells of its keys or key prefixes (found through each HFile's block
        index: the other blocks are not inflated)."""
        folder = f"{FOLDER}/{partition}"
        chosen = (lambda reader: iter(reader)) if seek is None else seek.cells
        if piece.base is not None:
            path = f"{folder}/{piece.base}"
            yield from chosen(HFileReader(self.storage.read(path), self.storage.uri(path)))
        files = [read_blocks(self.storage.read(f"{folder}/{name}")) for name in piece.logs]
        for block in effective_blocks(files, self.counts):
            if block.block_type == BlockType.HFILE_DATA:
                yield from chosen(HFileReader(block.content, f"{folder} ({block.instant_time})"))
            elif block.block_type == BlockType.DELETE:
                for deleted in block.deletes():
                    row = str(deleted.record_key).encode()
                    if seek is None or seek.wants(row):
                        yield row, None

    def slice_cells(self, partition: str, piece: FileSlice) -> list[tuple[bytes, bytes]]:
        """The live records of one file slice as encoded cells in key order, merged as
        :meth:`slice_records` merges them; a newer record replaces an older one whole in every
        partition but ``files``, so only those are decoded (a compaction's whole cost else)."""
        if partition == "files":
            merged = self.slice_records(partition, piece)
            return sorted((k.encode(), records.encode(r)) for k, r in merged.items())
        return sorted(self._live_cells(partition, piece).items())

    def _live_cells(
        self, partition: str, piece: FileSlice, seek: KeySeek | None = None
    ) -> dict[bytes, bytes]:
        """The live encoded records of one slice of a partition other than ``files`` (a newer
        record replaces an older one whole, a delete removes it), of the keys ``seek`` asks for
        (all by default)."""
        cells: dict[bytes, bytes] = {}
        for row, value in self._raw_cells(partition, piece, seek):
            if value is None:
                cells.pop(row, None)
            else:
                cells[row] = value
        return cells

    def select(
        self,
        partition: str,
        seek: KeySeek,
        groups: Iterable[int] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """The live records of ``partition`` (not ``files``) of the keys or key prefixes
        ``seek`` asks for, by key, decoding only those; of the file groups ``groups`` alone
        when given (the groups :func:`~timeline.formats.metadata_records.file_group_index`
        puts the keys in)."""
        chosen = None if groups is None else set(groups)
        out: dict[str, dict[str, Any]] = {}
        for piece in self.slices(partition):
            if chosen is not None and piece.file_group not in chosen:
                continue
            for row, value in self._live_cells(partition, piece, seek).items():
                key = row.decode()
                out[key] = records.decode(key, value)
        return out

    def unapplied(self, timeline: Timeline | None = None) -> list[str]:
        """The completed data instants of ``timeline`` (the table's, loaded, by default) that
        changed files and that the metadata table does not reflect: those after its first
        active deltacommit or compaction (what it was initialized or compacted from; an older
        clean of its own may still be active) with no completed instant
        of its own at their time (Hudi's writer writes one for each, before the data instant
        completes). A writer that does not keep it leaves it so; reads then list storage."""
        since = (self._first_write or "")[:17]  # (none: nothing vouched)
        data = timeline if timeline is not None else self.table.timeline.load()
        return [
            i.timestamp
            for i in data.completed()
            if i.action in _CHANGES_FILES
            and i.timestamp > since
            and i.timestamp not in self._completed
        ]

    def listing(self) -> list[FileInfo]:
        """Every data file the ``files`` partition lists, its path relative to the base path
        (a listing :class:`~timeline.fs_view.FileSystemView` takes)."""
        return [
            FileInfo(f"{partition}/{name}" if partition else name, size, False, None)
            for partition, files in self.file_listing().items()
            for name, size in files.items()
        ]

    def file_listing(self) -> dict[str, dict[str, int]]:
        """Data partition path -> its files (name -> size), as the ``files`` partition lists
        them ("" for a table without partitions)."""
        merged = self.records("files")
        listed = merged.get(records.ALL_PARTITIONS_KEY, {}).get("filesystemMetadata") or {}
        out: dict[str, dict[str, int]] = {}
        for identifier in listed:
            files = merged.get(identifier, {}).get("filesystemMetadata") or {}
            path = "" if identifier == records.NON_PARTITIONED else identifier
            out[path] = {name: int(info["size"]) for name, info in files.items()}
        return out


def hudi_status(table: Table) -> dict[str, Any] | None:
    """What ``indexer status`` shows of Apache Hudi's own metadata table (None: the table has
    none): its partitions and their state, the completed data instants it does not reflect,
    its newest compaction and the deltacommits since, and whether this process keeps it."""
    hudi = HudiMetadataTable(table)
    if not hudi.partitions and not hudi.inflight:
        return None
    compacted = hudi.last_compaction
    since = [
        t for t, a, s in hudi.instants if a == "deltacommit" and not s and t > (compacted or "")
    ]
    return {
        "partitions": {p: "completed" for p in hudi.partitions}
        | {p: "inflight" for p in hudi.inflight},
        "unapplied": hudi.unapplied(),
        "last_compaction": compacted,
        "deltacommits_since_compaction": len(since),
        "kept_by_our_writers": keeps_hudi_metadata_table(table),
    }


def _group(file_id: str, prefix: str) -> int:
    return int(file_id[len(prefix) :].split("-", 1)[0])


def _merge(older: dict[str, Any] | None, newer: dict[str, Any]) -> dict[str, Any]:
    if older is None:
        return _live_files(newer)
    listing = newer.get("filesystemMetadata")
    if listing is not None and older.get("filesystemMetadata") is not None:
        combined: dict[str, Mapping[str, Any]] = dict(older["filesystemMetadata"])
        for name, info in listing.items():
            if info["isDeleted"]:
                combined.pop(name, None)
            elif name not in combined or combined[name]["size"] < info["size"]:
                combined[name] = info
        return {**newer, "filesystemMetadata": combined}
    return newer


def _live_files(record: dict[str, Any]) -> dict[str, Any]:
    listing = record.get("filesystemMetadata")
    if listing is None:
        return record
    return {
        **record,
        "filesystemMetadata": {n: i for n, i in listing.items() if not i["isDeleted"]},
    }


# --- what a commit adds to Hudi's metadata table ------------------------------------------------------


def commit_records(
    table: Table, instant: str, metadata: CommitMetadata, partitions: Iterable[str]
) -> dict[str, list[dict[str, Any]]]:
    """The records Hudi 0.15's writer puts in its metadata table's ``partitions`` for a commit
    at ``instant`` that wrote ``metadata``'s files, by metadata partition: ``files`` (the
    partitions written, then each one's new files and sizes), ``bloom_filters`` (each new base
    file's footer filter) and ``column_stats`` (each new base file's top-level columns of the
    types Hudi's column stats take, from its footer). ``record_index`` needs the writer's own
    record locations and is not made here."""
    wanted = set(partitions)
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in wanted}
    written: dict[str, dict[str, int]] = defaultdict(dict)
    for stat in metadata.write_stats:
        written[stat.partition_path][stat.path.rsplit("/", 1)[-1]] = stat.file_size_in_bytes
    if "files" in wanted:
        out["files"].append(records.partition_list_record(sorted(written)))
        out["files"].extend(records.file_list_record(p, f) for p, f in sorted(written.items()))
    for partition_path, files in sorted(written.items()):
        for name in sorted(files):
            if not name.endswith(".parquet"):
                continue  # a log file: its stats come from the writer, not a footer
            path = f"{partition_path}/{name}" if partition_path else name
            footer = parquet_metadata(table.storage, path)
            if "bloom_filters" in wanted:
                bloom = bloom_record(footer, partition_path, name, instant)
                if bloom is not None:
                    out["bloom_filters"].append(bloom)
            if "column_stats" in wanted:
                out["column_stats"].extend(hudi_column_stats(footer, partition_path, name))
    return out


def bloom_record(footer: Any, partition_path: str, name: str, stamp: str) -> dict[str, Any] | None:
    """A base file's ``bloom_filters`` record: its footer's filter as Hudi writes it, stamped
    ``stamp``; None when the footer has none."""
    kv = footer.metadata or {}
    if FOOTER_KEY not in kv:
        return None
    return {
        "key": records.bloom_filter_key(partition_path, name),
        "type": records.RecordType.BLOOM_FILTER,
        "BloomFilterMetadata": {
            "type": kv.get(TYPE_CODE_KEY, b"DYNAMIC_V0").decode(),
            "timestamp": stamp,
            "bloomFilter": kv[FOOTER_KEY],
            "isDeleted": False,
        },
    }


def hudi_column_stats(footer: Any, partition_path: str, name: str) -> Iterator[dict[str, Any]]:
    """A file's column-stats records, as Hudi 0.15's ParquetUtils makes them from the footer:
    its top-level primitive columns, row groups aggregated, each bound in the wrapper Hudi puts
    its Java value in (:func:`_hudi_bounds`). A column whose bounds Hudi would hold in a form
    not made here (unsigned or INT96 values, fixed-length binary, other logical types), or
    whose statistics a writer left out, has no record: Hudi's reader keeps the file for every
    filter on it. A column of nulls only has null bounds and its null count, as Hudi writes."""
    file_id = records.file_id(name)
    for column, values, nulls, low, high, size, uncompressed in _raw_stats(footer):
        wrapper = column.wrapper
        if low is not None:
            bounds = _hudi_bounds(wrapper, low, high)
            if bounds is None:
                continue
            low, high = bounds
        yield {
            "key": records.column_stats_prefix(column.path, partition_path) + file_id,
            "type": records.RecordType.COLUMN_STATS,
            "ColumnStatsMetadata": {
                "fileName": name,
                "columnName": column.path,
                "minValue": None if low is None else records.wrap(wrapper, low),
                "maxValue": None if high is None else records.wrap(wrapper, high),
                "valueCount": values,
                "nullCount": nulls,
                "totalSize": size,
                "totalUncompressedSize": uncompressed,
                "isDeleted": False,
            },
        }


class HudiColumnStatsCells:
    """The cells (keys, encoded values) of :func:`hudi_column_stats`'s records of many data
    files, made without the records: each footer's statistics gathered as they are
    (:func:`_raw_stats`), then each column's bounds, counts and keys encoded for all the files
    at once with Arrow and numpy. A build makes a record for every column of every data file:
    one at a time, making them cost more than parsing the footers."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._file_keys: list[str] = []  # each file's part of its keys
        #: each column's statistics: (file, values, nulls, min, max, size, uncompressed size)
        self._found: defaultdict[_Indexed, list[tuple[Any, ...]]] = defaultdict(list)

    def add(self, footer: Any, partition_path: str, name: str) -> None:
        """Gathers the statistics of the data file ``name`` of ``partition_path``."""
        at = len(self._names)
        self._names.append(name)
        self._file_keys.append(records.file_key(partition_path, name))
        found = self._found
        for column, values, nulls, low, high, size, uncompressed in _raw_stats(footer):
            found[column].append((at, values, nulls, low, high, size, uncompressed))

    def cells(self) -> tuple[pa.Array, pa.Array]:
        """The keys (strings) and encoded values (binary) of the files' records."""
        by_wrapper: defaultdict[str, list[tuple[str, list[tuple[Any, ...]]]]] = defaultdict(list)
        for column, rows in self._found.items():
            by_wrapper[column.wrapper].append((column.path, rows))
        parts = []
        for wrapper, columns in by_wrapper.items():  # a wrapper's bounds encoded at once
            rows = [row for _, of_column in columns for row in of_column]
            at, counts, nulls, lows, highs, sizes, unzipped = zip(*rows, strict=True)
            low, high, kept = _bounds_arrays(wrapper, lows, highs)
            paths = [path for path, of_column in columns for _ in of_column]
            numbers = [pa.array(n, pa.int64()) for n in (at, counts, nulls, sizes, unzipped)]
            part = pa.Table.from_arrays([pa.array(paths), low, high, *numbers], _CELL_PARTS)
            parts.append(part if kept is None else part.filter(kept))
        found = pa.concat_tables(parts).combine_chunks() if parts else None
        if found is None or found.num_rows == 0:
            return pa.array([], pa.string()), pa.array([], pa.binary())
        cells = found.to_batches()[0]  # (one batch: its chunks combined)
        at, column = cells.column("at"), cells.column("column")
        named = column.dictionary_encode()
        prefixes = pa.array(map(records.column_stats_prefix, named.dictionary.to_pylist()))
        file_keys = pa.array(self._file_keys, pa.string()).take(at)
        keys = pc.binary_join_element_wise(prefixes.take(named.indices), file_keys, "")
        values = records.column_stats_array(
            pa.array(self._names, pa.string()).take(at),
            column,
            cells.column("low"),
            cells.column("high"),
            *(cells.column(name).to_numpy() for name in _COUNTS),
        )
        return keys, values


#: what :meth:`HudiColumnStatsCells.cells` makes a file's column's cell of
_CELL_PARTS = ["column", "low", "high", "at", "values", "nulls", "size", "uncompressed"]
_COUNTS = _CELL_PARTS[4:]  # in a record's order


class _Indexed(NamedTuple):
    """A footer column Hudi's column stats take."""

    at: int  # its index in the footer's schema
    path: str
    wrapper: str


def _raw_stats(footer: Any) -> Iterator[tuple[_Indexed, int, int, Any, Any, int, int]]:
    """(column, values, nulls, min, max, size, uncompressed size) of the columns
    :func:`hudi_column_stats` takes whose statistics are known, as the footer holds them: raw
    bounds (a decimal's as pyarrow's Decimal; both None for a column of nulls), aggregated over
    the row groups. A column whose statistics a writer left out (no null count, or values
    without bounds) is not given."""
    columns = _indexed_columns(footer.schema)
    row_groups = [footer.row_group(i) for i in range(footer.num_row_groups)]
    if not row_groups:
        return iter(())
    if len(row_groups) == 1:  # most files: each chunk's statistics are the column's
        return _one_group_stats(row_groups[0], columns)
    return _aggregated_stats(row_groups, columns)


def _aggregated_stats(
    row_groups: list[Any], columns: list[_Indexed]
) -> Iterator[tuple[_Indexed, int, int, Any, Any, int, int]]:
    """:func:`_raw_stats` aggregated over the row groups' chunks of each column."""
    for column in columns:
        at, wrapper = column.at, column.wrapper
        values = nulls = size = uncompressed = 0
        low: Any = None
        high: Any = None
        for row_group in row_groups:  # one pass a column (most files have one row group)
            chunk = row_group.column(at)
            found = chunk.statistics
            if found is None or not found.has_null_count:
                break  # a chunk without a null count: unknown
            count, none = chunk.num_values, found.null_count
            values += count
            nulls += none
            size += chunk.total_compressed_size
            uncompressed += chunk.total_uncompressed_size
            if found.has_min_max:
                # a decimal's raw statistic is its unscaled bytes: pyarrow's Decimal instead
                if wrapper == "DecimalWrapper":
                    first, last = found.min, found.max
                else:
                    first, last = found.min_raw, found.max_raw
                # min() and max() of the chunks' bounds, as they would take them
                low = first if low is None or first < low else low
                high = last if high is None or last > high else high
            elif none != count:
                break  # a chunk with values and no bounds: unknown
        else:
            yield column, values, nulls, low, high, size, uncompressed


def _one_group_stats(
    row_group: Any, columns: list[_Indexed]
) -> Iterator[tuple[_Indexed, int, int, Any, Any, int, int]]:
    """:func:`_raw_stats` of a footer of one row group, without the aggregation over chunks (a
    build reads every data file's)."""
    for column in columns:
        chunk = row_group.column(column.at)
        found = chunk.statistics
        if found is None or not found.has_null_count:
            continue  # no null count: unknown
        values, nulls = chunk.num_values, found.null_count
        if found.has_min_max:
            # a decimal's raw statistic is its unscaled bytes: pyarrow's Decimal instead
            if column.wrapper == "DecimalWrapper":
                low, high = found.min, found.max
            else:
                low, high = found.min_raw, found.max_raw
        elif nulls != values:
            continue  # values and no bounds: unknown
        else:
            low = high = None
        size, uncompressed = chunk.total_compressed_size, chunk.total_uncompressed_size
        yield column, values, nulls, low, high, size, uncompressed


def _bounds_arrays(
    wrapper: str, lows: Sequence[Any], highs: Sequence[Any]
) -> tuple[pa.Array, pa.Array, np.ndarray | None]:
    """Raw bounds of one column (:func:`_raw_stats`; None: a column of nulls) as Hudi's values
    in ``wrapper``, encoded (:func:`~timeline.formats.metadata_records.bounds_array`), and
    which to keep (None: all): a bound without an exact value here has no record, as in
    :func:`_hudi_bounds`, which does for one file what this does for many."""
    if wrapper in _ENCODED_AS_INTEGERS:
        low, high = pa.array(lows, pa.int64()), pa.array(highs, pa.int64())
        kept = None
    elif wrapper in ("DoubleWrapper", "FloatWrapper"):
        low, high = pa.array(lows, pa.float64()), pa.array(highs, pa.float64())
        nan = pc.or_(pc.is_nan(low), pc.is_nan(high)).fill_null(False).to_numpy(False)
        kept = ~nan if nan.any() else None
        # a zero bound is -0.0 as a minimum and +0.0 as a maximum (:func:`_hudi_bounds`)
        low = pc.if_else(pc.equal(low, 0.0), pa.scalar(-0.0), low)
        high = pc.if_else(pc.equal(high, 0.0), pa.scalar(0.0), high)
    elif wrapper in ("StringWrapper", "BytesWrapper"):
        low, high = pa.array(lows, pa.binary()), pa.array(highs, pa.binary())
        kept = None
        if wrapper == "StringWrapper" and not (_utf8(low) and _utf8(high)):
            # bytes that are not UTF-8: no exact value (:func:`_hudi_bounds`)
            kept = np.array(
                [
                    a is None or _hudi_bounds(wrapper, a, b) is not None
                    for a, b in zip(lows, highs, strict=True)
                ]
            )
    else:  # decimals and booleans (few): one value at a time
        encode, null = records.bound_encoder(wrapper), records.NULL_BOUND
        made = [
            (None, None) if a is None else _hudi_bounds(wrapper, a, b)
            for a, b in zip(lows, highs, strict=True)
        ]
        kept = np.array([bounds is not None for bounds in made])
        encoded = [
            (encode(b[0]), encode(b[1])) if b is not None and b[0] is not None else (null, null)
            for b in made
        ]
        return (
            pa.array([e[0] for e in encoded], pa.binary()),
            pa.array([e[1] for e in encoded], pa.binary()),
            None if kept.all() else kept,
        )
    return records.bounds_array(wrapper, low), records.bounds_array(wrapper, high), kept


#: the wrappers of integers (the raw statistic is Hudi's value)
_ENCODED_AS_INTEGERS = ("IntWrapper", "LongWrapper", "DateWrapper")


def _utf8(values: pa.Array) -> bool:
    """Whether every one of binary ``values`` is UTF-8."""
    try:
        values.cast(pa.string())
    except pa.ArrowInvalid:
        return False
    return True


#: the last footer schema's columns Hudi indexes (files of a table share one schema)
_LAST_COLUMNS: list[tuple[Any, list[_Indexed]]] = []


def _indexed_columns(schema: Any) -> list[_Indexed]:
    """The columns of a footer schema Hudi's column stats take: top-level (Hudi leaves nested
    ones out), of a type whose bounds are made exactly here (:func:`_wrapper_of`). The last
    schema's answer is kept."""
    last = _LAST_COLUMNS[:1]
    if last and last[0][0].equals(schema):
        return last[0][1]
    found = []
    for at in range(len(schema)):
        column = schema.column(at)
        wrapper = _wrapper_of(column)
        if "." not in column.path and wrapper is not None:
            found.append(_Indexed(at, column.path, wrapper))
    _LAST_COLUMNS[:] = [(schema, found)]
    return found


#: (Parquet physical type, logical type) -> Hudi's wrapper of the footer's raw statistic (a
#: timestamp stays the raw long of its unit, a date the int of its days: Hudi's Java value)
_HUDI_TYPES = {
    ("INT32", "None"): "IntWrapper",
    ("INT32", "Int(bitWidth=8, isSigned=true)"): "IntWrapper",
    ("INT32", "Int(bitWidth=16, isSigned=true)"): "IntWrapper",
    ("INT32", "Int(bitWidth=32, isSigned=true)"): "IntWrapper",
    ("INT32", "Date"): "DateWrapper",
    ("INT64", "None"): "LongWrapper",
    ("INT64", "Int(bitWidth=64, isSigned=true)"): "LongWrapper",
    ("DOUBLE", "None"): "DoubleWrapper",
    ("FLOAT", "None"): "FloatWrapper",
    ("BOOLEAN", "None"): "BooleanWrapper",
    ("BYTE_ARRAY", "String"): "StringWrapper",
    ("BYTE_ARRAY", "None"): "BytesWrapper",
}
_TIMESTAMP_UNITS = ("timeUnit=milliseconds", "timeUnit=microseconds", "timeUnit=nanoseconds")


def _decimal_scale(column: Any) -> int | None:
    logical = str(column.logical_type)
    if not logical.startswith("Decimal("):
        return None
    return int(logical.rsplit("scale=", 1)[1].rstrip(")"))


def _wrapper_of(column: Any) -> str | None:
    """The wrapper Hudi puts a column's bounds in, for the columns whose values are made
    exactly here."""
    physical, logical = column.physical_type, str(column.logical_type)
    scale = _decimal_scale(column)
    if scale is not None:
        # Hudi: a BigDecimal of the column's scale, upcast to the wrapper's scale 15
        return "DecimalWrapper" if scale <= records.DECIMAL_SCALE else None
    if physical == "INT64" and logical.startswith("Timestamp("):
        # Hudi's Java value is the raw long of the column's unit
        return "LongWrapper" if any(u in logical for u in _TIMESTAMP_UNITS) else None
    return _HUDI_TYPES.get((physical, logical))


def _hudi_bounds(wrapper: str, low: Any, high: Any) -> tuple[Any, Any] | None:
    """A column's (min, max) over its chunks (raw statistics; a decimal's as pyarrow's
    Decimal) as the values Hudi puts in ``wrapper``, or None when Hudi's value is not made
    exactly here."""
    if wrapper == "DecimalWrapper":
        # Hudi sets the scale to 15 and refuses more than 30 digits (its build then fails; the
        # column is left out here)
        quantum = decimal.Decimal(1).scaleb(-records.DECIMAL_SCALE)
        with decimal.localcontext(prec=2 * records.DECIMAL_PRECISION):
            low, high = low.quantize(quantum), high.quantize(quantum)
        if max(len(low.as_tuple().digits), len(high.as_tuple().digits)) > records.DECIMAL_PRECISION:
            return None
    elif wrapper in ("DoubleWrapper", "FloatWrapper"):
        if math.isnan(low) or math.isnan(high):
            return None
        # a zero bound is -0.0 as a minimum and +0.0 as a maximum, as Parquet's writers store
        # it (the footer reader gives 0.0 either way)
        low = -0.0 if low == 0 else low
        high = 0.0 if high == 0 else high
    elif wrapper == "StringWrapper":
        try:
            low, high = _text(low), _text(high)
        except UnicodeDecodeError:
            # bytes a writer put in a string column that are not UTF-8: Hudi's reader would
            # compare them as its decoding mends them, so no record (the file is kept)
            return None
    return low, high


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# --- our commits, kept in Hudi's metadata table -------------------------------------------------------

#: the partition whose records are high-entropy bytes (compressed by Huffman coding alone)
DENSE = "bloom_filters"

#: the write token of the files we write (Hudi's pattern: task-stage-attempt)
LOG_WRITE_TOKEN = "0-0-0"


def _targets(hudi: HudiMetadataTable) -> list[str]:
    """The partitions a write goes into: the completed ones and those being built."""
    return [p for p in (*hudi.partitions, *hudi.inflight) if p in records.FILE_GROUP_PREFIXES]


def apply_commit(
    table: Table,
    instant: str,
    metadata: CommitMetadata,
    placed: Mapping[str, tuple[str, str]],
    deleted: Iterable[str],
    lock: LockHandle,
) -> list[str]:
    """Write, in a commit's critical section (under the table lock Hudi's writers share, before
    data instant ``instant`` completes), the metadata deltacommit Hudi's writer would: the
    commit's records for every completed and inflight partition of Hudi's metadata table, one
    log file per file group they route to (an HFile data block, and a delete block of the record
    index's deleted keys), then ``<instant>.deltacommit`` on the metadata table's timeline.
    ``placed`` maps the keys the commit put somewhere new to their (partition, file name).
    Hudi's readers use the blocks once the data instant completes (a rolled-back one never
    does). Returns the log files written."""
    hudi = HudiMetadataTable(table)
    targets = _targets(hudi)
    made = commit_records(table, instant, metadata, targets)
    removed: dict[str, list[str]] = {}
    if "record_index" in targets:
        millis = records.instant_millis(instant)
        made["record_index"] = [
            {
                "key": key,
                "type": records.RecordType.RECORD_INDEX,
                "recordIndexMetadata": records.record_index_value(
                    records.RecordLocation(partition, file_id_of(name) or name, millis)
                ),
            }
            for key, (partition, name) in sorted(placed.items())
        ]
        removed["record_index"] = sorted(deleted)
    return write_deltacommit(table, hudi, instant, targets, made, removed, lock)


def write_deltacommit(
    table: Table,
    hudi: HudiMetadataTable,
    instant: str,
    targets: Iterable[str],
    made: Mapping[str, list[dict[str, Any]]],
    removed: Mapping[str, list[str]],
    lock: LockHandle,
) -> list[str]:
    """Records (``made``) and deleted keys (``removed``) by metadata partition, written as one
    deltacommit of the metadata table at ``instant``: a new log file per file group they route
    to, then the instant (each of its three files written unless there: a retried clean writes
    its records again, which merge to the same). A compaction an interrupted writer left pending
    is finished first, as Hudi's writer does: log files written beside it would go on the slice
    it replaces, and be lost to readers once it completes. Returns the log files written."""
    if any(a == "compaction" and s for _, a, s in hudi.instants):
        compact(table, lock, table.config.get(HUDI_METADATA_COMPACT_EVERY))
        hudi = HudiMetadataTable(table)
    stats: list[WriteStat] = []
    written: list[str] = []
    for partition in targets:
        slices = hudi.slices(partition)
        count = len(slices)
        if count == 0:
            raise RebuildRequiredError(
                f"hudi:{partition}", f"{FOLDER}/{partition} has no file group to write to"
            )
        cells: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for record in made.get(partition, []):
            cells[records.file_group_index(str(record["key"]), count)].append(record)
        gone: dict[int, list[str]] = defaultdict(list)
        for key in removed.get(partition, []):
            gone[records.file_group_index(key, count)].append(key)
        for group in sorted(set(cells) | set(gone)):
            piece = slices[group]
            content = b""
            if cells.get(group):
                content += records.log_block(cells[group], instant, dense=partition == DENSE)
            if gone.get(group):
                content += records.delete_block(gone[group], partition, instant)
            path = _next_log_file(hudi, partition, piece)
            lock.ensure_valid()
            table.storage.create(path, content)
            written.append(path)
            stats.append(
                WriteStat(
                    file_id=records.file_group_id(partition, group),
                    path=path.removeprefix(f"{FOLDER}/"),
                    partition_path=partition,
                    prev_commit=_base_instant(piece),
                    num_writes=len(cells.get(group, [])),
                    num_deletes=len(gone.get(group, [])),
                    total_write_bytes=len(content),
                    file_size_in_bytes=len(content),
                )
            )
    committed = CommitMetadata.of(stats, "UPSERT_PREPPED", {"schema": records.SCHEMA_JSON})
    timeline = f"{FOLDER}/.hoodie/{instant}.deltacommit"
    lock.ensure_valid()
    for path, content in (
        (f"{timeline}.requested", b""),
        (f"{timeline}.inflight", b""),
        (timeline, json.dumps(committed.to_json(), indent=2).encode()),
    ):
        if not table.storage.exists(path):
            table.storage.create(path, content)
    return written


def _hfile_instant(name: str) -> str:
    """The instant of a base HFile ``<fileId>_<token>_<instant>.hfile``."""
    return name.removesuffix(".hfile").rsplit("_", 1)[1]


def _base_instant(piece: FileSlice) -> str:
    if piece.base is not None:
        return _hfile_instant(piece.base)
    parsed = LogFileName.parse(piece.logs[0]) if piece.logs else None
    if parsed is None:
        raise RebuildRequiredError("hudi", f"file group {piece.file_group} has no file slice")
    return parsed.base_instant


def _next_log_file(hudi: HudiMetadataTable, partition: str, piece: FileSlice) -> str:
    """The next log file of a file group's latest slice (its version after the newest)."""
    base = _base_instant(piece)
    versions = [
        parsed.version
        for name in piece.logs
        if (parsed := LogFileName.parse(name)) is not None and parsed.base_instant == base
    ]
    file_id = records.file_group_id(partition, piece.file_group)
    version = max(versions, default=0) + 1
    return f"{FOLDER}/{partition}/.{file_id}_{base}.log.{version}_{LOG_WRITE_TOKEN}"


# --- our cleans and rollbacks, kept in Hudi's metadata table ------------------------------------------


def removal_records(
    table: Table, removal: Removal, partitions: Iterable[str]
) -> dict[str, list[dict[str, Any]]]:
    """The records Hudi 0.15's writer puts in its metadata table for a clean or rollback that
    deleted ``removal``'s data files: each partition's deleted files (``files``), and for each
    deleted base file a deleted bloom filter and a deleted column-stats record of every column
    of the table's schema, its meta columns first (Hudi's tombstones, values -1 and null)."""
    wanted = set(partitions)
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in wanted}
    deleted = {p: sorted(names) for p, names in removal.deleted.items() if names}
    if "files" in wanted:
        out["files"].extend(records.file_list_record(p, {}, tuple(n)) for p, n in deleted.items())
    if not wanted & {"bloom_filters", "column_stats"}:
        return out
    columns = table_columns(table) if "column_stats" in wanted else ()
    stamp = removal.instant.timestamp
    for partition_path, names in sorted(deleted.items()):
        for name in (n for n in names if n.endswith(".parquet")):
            if "bloom_filters" in wanted:
                out["bloom_filters"].append(
                    {
                        "key": records.bloom_filter_key(partition_path, name),
                        "type": records.RecordType.BLOOM_FILTER,
                        "BloomFilterMetadata": {
                            "type": "",
                            "timestamp": stamp,
                            "bloomFilter": b"",
                            "isDeleted": True,
                        },
                    }
                )
            out.setdefault("column_stats", []).extend(
                {
                    "key": records.column_stats_key(column, partition_path, name),
                    "type": records.RecordType.COLUMN_STATS,
                    "ColumnStatsMetadata": {
                        "fileName": name,
                        "columnName": column,
                        "minValue": None,
                        "maxValue": None,
                        "valueCount": -1,
                        "nullCount": -1,
                        "totalSize": -1,
                        "totalUncompressedSize": -1,
                        "isDeleted": True,
                    },
                }
                for column in columns
            )
    return out


def table_columns(table: Table) -> tuple[str, ...]:
    """The table's top-level columns as Hudi's writer indexes them when no column list is set:
    its meta columns, then the fields of the schema the newest write named."""
    timeline = table.timeline.load()
    writes = timeline.completed().with_actions(
        Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT
    )
    for instant in reversed(list(writes)):
        schema = CommitMetadata.from_bytes(table.timeline.read_content(instant)).extra_metadata
        if schema.get("schema"):
            fields = [str(f["name"]) for f in json.loads(schema["schema"]).get("fields", [])]
            return (*META_COLUMNS, *(f for f in fields if f not in META_COLUMNS))
    return META_COLUMNS


def apply_removal(table: Table, lock: LockHandle, removal: Removal) -> list[str]:
    """A clean's or rollback's update of Hudi's metadata table, under the table lock before it
    completes, as Hudi's writer makes it: a rollback first undoes the metadata deltacommit of
    each write it rolled back (our writes complete theirs before the data instant, so a failed
    one may have left one); then the files it deleted go in as one deltacommit at its instant
    (written when it deleted nothing too: every completed data instant has its deltacommit,
    which is how a reader tells the metadata table is current). Returns the log files written."""
    hudi = HudiMetadataTable(table)
    if not hudi.present:
        return []
    for undone in sorted(removal.rolled_back):
        undo_deltacommit(table, undone, lock)
    hudi = HudiMetadataTable(table)  # listed again: the undo may have deleted log files
    targets = _targets(hudi)
    made = removal_records(table, removal, targets)
    return write_deltacommit(table, hudi, removal.instant.timestamp, targets, made, {}, lock)


def undo_deltacommit(
    table: Table, instant: str, lock: LockHandle, partitions: Iterable[str] | None = None
) -> bool:
    """Take out of Hudi's metadata table the deltacommit a failed write at ``instant`` wrote or
    began (Hudi's writer rolls it back with the data instant): its completed file first (from
    then on no reader counts its blocks), then every log file of a latest slice whose blocks
    are all at ``instant`` (our writes put each in a new log file) in ``partitions`` (default:
    the completed and inflight ones), then its pending files. Returns whether there was
    anything to undo."""
    hudi = HudiMetadataTable(table)
    mine = [(t, a, s) for t, a, s in hudi.instants if t == instant and a == "deltacommit"]
    if not mine:
        return False
    timeline = f"{FOLDER}/.hoodie/{instant}.deltacommit"
    lock.ensure_valid()
    table.storage.delete(timeline)
    for partition in _targets(hudi) if partitions is None else partitions:
        for piece in hudi.slices(partition):
            for name in piece.logs:
                path = f"{FOLDER}/{partition}/{name}"
                blocks = read_blocks(table.storage.read(path))
                if blocks and all(b.instant_time == instant for b in blocks):
                    lock.ensure_valid()
                    table.storage.delete(path)
    for suffix in (".inflight", ".requested"):
        table.storage.delete(timeline + suffix)
    logger.info("metadata deltacommit %s of %s undone", instant, table.base_uri)
    return True


# --- the metadata table's compaction, as Hudi's writer runs it ----------------------------------------

#: the suffix of a compaction's instant on the metadata table (Hudi's OperationSuffix.COMPACTION)
COMPACTION_SUFFIX = "001"


def compaction_due(hudi: HudiMetadataTable, every: int) -> str | None:
    """The instant of the compaction Hudi's writer would run on the metadata table now, or None:
    ``every`` deltacommits completed since the last compaction, nothing pending on the metadata
    table, and no data instant pending at or before its newest deltacommit (whose blocks a
    compaction would otherwise fold in or leave out wrongly). The instant is that deltacommit's
    time with ``001``."""
    if not hudi.present or hudi.pending:
        return None
    last = hudi.last_compaction or ""
    deltas = [t for t, a, _ in hudi.instants if a == "deltacommit" and t > last]
    if len(deltas) < every:
        return None
    newest = deltas[-1]
    if any(i.timestamp <= newest for i in hudi.table.timeline.load().pending()):
        return None
    return newest + COMPACTION_SUFFIX


def compact(table: Table, lock: LockHandle, every: int) -> str | None:
    """Compact Hudi's metadata table when :func:`compaction_due` says so, or finish a compaction
    an earlier one left pending, under the table lock: its plan (``<t>001.compaction.requested``,
    Hudi's Avro ``HoodieCompactionPlan``: every file slice with log files), a base HFile per
    slice with its merged records, then ``<t>001.commit``. Returns the instant completed."""
    hudi = HudiMetadataTable(table)
    pending = [t for t, a, s in hudi.instants if a == "compaction" and s]
    instant = pending[0] if pending else compaction_due(hudi, every)
    if instant is None:
        return None
    folder = f"{FOLDER}/.hoodie/{instant}.compaction"
    if pending:
        data = table.storage.read(f"{folder}.requested")
        plan = read_avro_records(data)[0]
    else:
        plan = {
            "operations": [
                _operation(table, partition, piece)
                for partition in _targets(hudi)
                for piece in hudi.slices(partition)
                if piece.logs
            ],
            "extraMetadata": None,
            "version": COMPACTION_PLAN_VERSION,
            "strategy": None,
            "preserveHoodieMetadata": False,
        }
        lock.ensure_valid()
        table.storage.create(f"{folder}.requested", avro_file("compaction_plan", plan))
    if not table.storage.exists(f"{folder}.inflight"):
        table.storage.create(f"{folder}.inflight", b"")
    stats = [_compact_slice(table, hudi, op, instant, lock) for op in plan["operations"] or []]
    committed = replace(
        CommitMetadata.of(stats, "COMPACT", {"schema": records.SCHEMA_JSON}), compacted=True
    )
    lock.ensure_valid()
    table.storage.create(
        f"{FOLDER}/.hoodie/{instant}.commit", json.dumps(committed.to_json(), indent=2).encode()
    )
    logger.info(
        "metadata table of %s compacted at %s: %d file slices", table.base_uri, instant, len(stats)
    )
    return instant


@dataclass(frozen=True)
class HudiUpkeep:
    """What one upkeep of Hudi's metadata table did: the compaction and the clean completed,
    and the archive file written."""

    compaction: str | None = None
    clean: str | None = None
    archive: str | None = None


def hudi_metadata_upkeep(table: Table) -> HudiUpkeep:
    """Hudi's metadata table's own services, as Hudi's writer runs them after a commit: its
    compaction (:func:`compact`), its clean (:func:`clean`) and the archival of its timeline
    (:func:`archive`), under the table lock, when one is due or pending (looked at first
    without the lock, which a commit after which none is due does not take)."""
    every = table.config.get(HUDI_METADATA_COMPACT_EVERY)
    hudi = HudiMetadataTable(table)
    pending = hudi.pending
    due = archival_due(hudi, ArchivalPolicy.from_config(table.config))
    if not pending and not due and compaction_due(hudi, every) is None:
        return HudiUpkeep()
    with table.lock("upkeep of Apache Hudi's metadata table") as lock:
        compacted = compact(table, lock, every)
        cleaned = clean(table, lock) if compacted or pending else None
        return HudiUpkeep(compacted, cleaned, archive(table, lock))


# --- the metadata table's archival ------------------------------------------------------------------

#: the archived timeline of the metadata table
ARCHIVE_FOLDER = f"{FOLDER}/.hoodie/archived"
#: the data actions whose instants (any state) the metadata table's archival never passes
_DATA_WRITES = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})


def _archive_bound(hudi: HudiMetadataTable, data: Timeline) -> str | None:
    """The oldest time nothing of the metadata table's timeline at or after is archived, as
    Hudi's archiver bounds it on a metadata table: its first pending instant, its newest
    compaction (the log blocks written since name instants its readers look for), and on the
    data timeline the first commit, deltacommit or replacecommit in any state and the first
    pending instant of any action (Hudi's ``getEarliestInstantForMetadataArchival``: a rollback
    of a data instant still active looks for its deltacommit here). None: no instant yet."""
    candidates = [t for t, _, state in hudi.instants if state][:1]
    if hudi.last_compaction is not None:
        candidates.append(hudi.last_compaction)
    first_write = data.filter(lambda i: i.action in _DATA_WRITES).first()
    first_pending = data.pending().first()
    candidates += [i.timestamp for i in (first_write, first_pending) if i is not None]
    return min(candidates, default=None)


def archival_due(hudi: HudiMetadataTable, policy: ArchivalPolicy) -> bool:
    """Whether more than ``hoodie.keep.max.commits`` writes (deltacommits and compactions),
    cleans or rollbacks are completed on the metadata table's active timeline (counted from a
    listing the caller has: no read)."""
    done = [a for _, a, state in hudi.instants if not state]
    counts = [
        sum(a in _COMPLETED_ACTIONS for a in done),
        done.count("clean"),
        done.count("rollback"),
    ]
    return max(counts) > policy.max_commits


def _to_archive(
    hudi: HudiMetadataTable, policy: ArchivalPolicy, bound: str
) -> list[tuple[str, str]]:
    """The completed instants (time, action) an archival of the metadata table moves now,
    oldest first: per kind (writes, cleans, rollbacks) the oldest beyond
    ``hoodie.keep.min.commits`` once more than ``hoodie.keep.max.commits`` are there, all
    before ``bound``; none until a batch of ``max - min`` is due (as the data timeline's)."""
    done = [(t, a) for t, a, state in hudi.instants if not state]
    chosen: list[tuple[str, str]] = []
    for kind in (_COMPLETED_ACTIONS, ("clean",), ("rollback",)):
        of_kind = [(t, a) for t, a in done if a in kind]
        if len(of_kind) <= policy.max_commits:
            continue
        for t, a in of_kind[: len(of_kind) - policy.min_commits]:
            if t >= bound:
                break
            chosen.append((t, a))
    if len(chosen) < policy.max_commits - policy.min_commits:
        return []
    return sorted(chosen)


def _instant_files(at: str, action: str) -> list[tuple[State, str, str]]:
    """(state, file name, the action an archive entry names) of each file an instant of the
    metadata table may have; a compaction's pending files are ``compaction`` ones."""
    pending = "compaction" if action == "commit" else action
    return [
        (State.REQUESTED, f"{at}.{pending}.requested", pending),
        (State.INFLIGHT, f"{at}.{pending}.inflight", pending),
        (State.COMPLETED, f"{at}.{action}", action),
    ]


def archive(table: Table, lock: LockHandle) -> str | None:
    """Archive the metadata table's own timeline as Hudi's archiver does on a metadata table,
    under the table lock: the instants :func:`_to_archive` chooses (bounded by
    :func:`_archive_bound`) go, one entry per instant file, into the next file of its archived
    timeline (``.hoodie/metadata/.hoodie/archived/.commits_.archive.<N>_1-0-1``, Hudi's
    ``HoodieArchivedMetaEntry`` records), then their files are deleted, pending states first.
    Its readers keep seeing what those instants wrote: a base file or log block of an instant
    older than the active timeline counts as committed (Hudi's rule too). Small archive files
    are then merged as the data timeline's are (``hoodie.archive.merge.*``). Returns the archive
    file written, None when nothing is due."""
    policy = ArchivalPolicy.from_config(table.config)
    hudi = HudiMetadataTable(table)
    if not archival_due(hudi, policy):
        return None
    bound = _archive_bound(hudi, table.timeline.load())
    chosen = _to_archive(hudi, policy, bound) if bound is not None else []
    if not chosen:
        return None
    storage = table.storage
    folder = f"{FOLDER}/.hoodie"
    present = set(storage.file_names(folder))
    entries = [
        archive_entry(
            at,
            entry_action,
            state,
            partial(storage.read, f"{folder}/{name}"),
            format_instant_time(
                dt.datetime.fromtimestamp(storage.mtime(f"{folder}/{name}"), dt.UTC)
            )
            if state is State.COMPLETED
            else None,
        )
        for at, action in chosen
        for state, name, entry_action in _instant_files(at, action)
        if name in present
    ]
    lock.ensure_valid()
    path = write_archive_file(storage, ARCHIVE_FOLDER, entries)
    for at, action in chosen:
        for _, name, _ in _instant_files(at, action):  # pending states first
            if name in present:
                storage.delete(f"{folder}/{name}")
    merge_archive_files(storage, ARCHIVE_FOLDER, MergePolicy.from_config(table.config), lock)
    logger.info(
        "metadata table of %s: archived %d instants (%s .. %s) into %s",
        table.base_uri,
        len(chosen),
        chosen[0][0],
        chosen[-1][0],
        path,
    )
    return path


# --- the metadata table's cleaning ------------------------------------------------------------------

#: the suffix of a clean's instant on the metadata table (Hudi's OperationSuffix.METADATA_CLEAN)
CLEAN_SUFFIX = "002"
#: file slices kept per file group of the metadata table by its clean: the latest, and the one
#: before it (a reader that listed the metadata table before the newest compaction reads it)
SLICES_KEPT = 2


def _clean_instant(hudi: HudiMetadataTable) -> str | None:
    """The instant a clean of the metadata table takes now: its newest deltacommit with
    ``002`` (None when something is pending there)."""
    if hudi.pending:
        return None
    newest = max((t for t, a, _ in hudi.instants if a == "deltacommit"), default=None)
    return None if newest is None else newest + CLEAN_SUFFIX


def _old_slices(hudi: HudiMetadataTable) -> dict[str, tuple[str, ...]]:
    """The files of every file slice older than the :data:`SLICES_KEPT` newest of its group,
    by metadata partition (paths relative to the metadata table): committed slices only (a
    base file of a pending or failed compaction is not a slice)."""
    out: dict[str, tuple[str, ...]] = {}
    for partition in records.FILE_GROUP_PREFIXES:
        folder = f"{FOLDER}/{partition}"
        try:
            names = [e.name for e in hudi.storage.list(folder)]
        except StorageFileNotFoundError:
            continue
        prefix = records.FILE_GROUP_PREFIXES[partition]
        by_group: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for name in names:
            parsed = LogFileName.parse(name)
            if parsed is not None and parsed.file_id.startswith(prefix):
                by_group[_group(parsed.file_id, prefix)][parsed.base_instant].append(name)
            elif name.startswith(prefix) and name.endswith(".hfile"):
                group = _group(name.split("_", 1)[0], prefix)
                by_group[group][_hfile_instant(name)].append(name)
        old: list[str] = []
        for slices in by_group.values():
            committed = sorted(b for b in slices if hudi.committed(b))
            for base in committed[: max(0, len(committed) - SLICES_KEPT)]:
                old.extend(f"{partition}/{n}" for n in slices[base])
        if old:
            out[partition] = tuple(sorted(old))
    return out


def clean(table: Table, lock: LockHandle) -> str | None:
    """Clean Hudi's metadata table (after a compaction, as Hudi's writer does), or finish a
    clean left pending, under the table lock: the file slices of each file group older than
    its :data:`SLICES_KEPT` newest go, as Hudi's cleaner of that table does, recorded as Hudi's
    clean action (``<t>002.clean.requested`` with Hudi's Avro ``HoodieCleanerPlan``, then
    ``<t>002.clean`` with its ``HoodieCleanMetadata``); nothing is written when no slice is
    that old. Returns the instant completed."""
    hudi = HudiMetadataTable(table)
    pending = [t for t, a, s in hudi.instants if a == "clean" and s]
    instant = pending[0] if pending else _clean_instant(hudi)
    if instant is None:
        return None
    started = time.monotonic()
    storage = table.storage.child(FOLDER)
    folder = f"{FOLDER}/.hoodie/{instant}.clean"
    if pending:
        plan = CleanPlan.from_bytes(
            table.storage.read(f"{folder}.requested"), f"{folder}.requested", storage
        )
    else:
        newest = instant.removesuffix(CLEAN_SUFFIX)
        plan = CleanPlan("KEEP_LATEST_FILE_VERSIONS", None, newest, _old_slices(hudi))
        if not plan:
            return None
        lock.ensure_valid()
        table.storage.create(f"{folder}.requested", plan.to_bytes(storage))
    if not table.storage.exists(f"{folder}.inflight"):
        table.storage.create(f"{folder}.inflight", plan.to_bytes(storage))
    for path in plan.paths:
        partition, _, name = path.rpartition("/")
        lock.ensure_valid()
        table.storage.delete(f"{FOLDER}/{path}")
        checksum = f"{FOLDER}/{partition}/.{name}.crc"  # Hadoop's, beside Hudi's files
        if table.storage.exists(checksum):
            table.storage.delete(checksum)
    lock.ensure_valid()
    table.storage.create(folder, metadata_bytes(plan, instant, started))
    logger.info(
        "metadata table of %s cleaned at %s: %d files", table.base_uri, instant, len(plan.paths)
    )
    return instant


#: the plan version Hudi 0.15 writes (file names, not paths, in its operations)
COMPACTION_PLAN_VERSION = 2


def _operation(table: Table, partition: str, piece: FileSlice) -> dict[str, Any]:
    folder = f"{FOLDER}/{partition}"
    log_bytes = sum(table.storage.info(f"{folder}/{name}").size for name in piece.logs)
    return {
        "baseInstantTime": _base_instant(piece),
        "deltaFilePaths": list(piece.logs),
        "dataFilePath": piece.base,
        "fileId": records.file_group_id(partition, piece.file_group),
        "partitionPath": partition,
        "metrics": {
            "TOTAL_LOG_FILES": float(len(piece.logs)),
            "TOTAL_IO_MB": 0.0,
            "TOTAL_IO_READ_MB": 0.0,
            "TOTAL_LOG_FILES_SIZE": float(log_bytes),
            "TOTAL_IO_WRITE_MB": 0.0,
        },
        "bootstrapFilePath": None,
    }


def _compact_slice(
    table: Table, hudi: HudiMetadataTable, op: Mapping[str, Any], instant: str, lock: LockHandle
) -> WriteStat:
    """One operation of a compaction plan: the slice's merged records as a base HFile at
    ``instant`` (a file an interrupted attempt left is written again)."""
    partition, file_id = str(op["partitionPath"]), str(op["fileId"])
    prefix = records.FILE_GROUP_PREFIXES[partition]
    piece = FileSlice(_group(file_id, prefix), op["dataFilePath"], tuple(op["deltaFilePaths"]))
    cells = hudi.slice_cells(partition, piece)
    name = f"{file_id}_{LOG_WRITE_TOKEN}_{instant}.hfile"
    path = f"{FOLDER}/{partition}/{name}"
    content = records.base_file_of_cells(cells, dense=partition == DENSE)
    lock.ensure_valid()
    if table.storage.exists(path):  # an interrupted attempt's
        table.storage.delete(path)
    table.storage.create(path, content)
    return WriteStat(
        file_id=file_id,
        path=f"{partition}/{name}",
        partition_path=partition,
        prev_commit=str(op["baseInstantTime"]),
        num_writes=len(cells),
        total_write_bytes=len(content),
        file_size_in_bytes=len(content),
    )
