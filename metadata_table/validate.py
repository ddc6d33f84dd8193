"""Validation of the index against the data, in the spirit of Hudi's HoodieMetadataTableValidator:
every completed partition, as readers see it, compared record for record with a rebuild from the
data files at the same snapshot. Read-only.

The records are compared on Arrow arrays, aligned by key, column by column (struct columns field
by field, and their own nulls): a Python object is made only for the keys that differ (at
100,000 files, Python dicts of both sides took 7 GB). The partitions of a record per data file
are compared a file group at a time, their rebuild held per file group within a budget, so
memory does not grow with the table."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.group_records import (
    GroupRecords,
    PartitionBuild,
    hold_group_records,
    read_chunks,
)
from metadata_table.index_types import index_type
from metadata_table.layout import file_group_id, key_columns, keyed_by_column
from metadata_table.maintenance import build_records, per_file, rebuilt_files
from metadata_table.reader import MetadataReader
from metadata_table.records import virtual_keys
from metadata_table.table import MetadataTable
from metadata_table.workers import workers_for
from timeline.config import LOCAL_BUILD_MEMORY_MB, LOCAL_BUILD_WORKERS
from timeline.fs_view import BaseFile, FileSystemView
from timeline.instant import normalize_timestamp
from timeline.table import Table

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionReport:
    """How one completed partition differs from its rebuild (keys are the index's keys)."""

    partition: str
    lost: str | None = None  # why its files cannot be read
    unapplied: list[str] = field(default_factory=list)  # completed instants it does not reflect
    missing: list[str] = field(default_factory=list)  # in the rebuild, not in the index
    stale: list[str] = field(default_factory=list)  # in the index, not in the rebuild
    wrong: list[str] = field(default_factory=list)  # in both, with other values

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unapplied or self.missing or self.stale or self.wrong)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "ok": self.ok,
            "lost": self.lost,
            "unapplied": self.unapplied,
            "missing": self.missing,
            "stale": self.stale,
            "wrong": self.wrong,
        }


def validate(
    table: Table, progress: Callable[[int, int], None] | None = None
) -> list[PartitionReport]:
    """One report per completed partition, all at one snapshot of the data timeline;
    ``progress(done, total)`` is called as chunks of data files are read, then as file groups
    and partitions are compared.

    The partitions of one record per data file (``files``, ``column_stats``,
    ``bloom_filters``) are rebuilt from one read of each data file, their records held per file
    group within ``indexer.build.local.memory.mb`` (spilled to local disk beyond, as a build
    without Spark holds them), and compared one file group at a time with that group of the
    index: memory does not grow with the table. The others are rebuilt and compared whole."""
    state = table.reload_index_state()
    timeline = table.timeline.load()
    reader = MetadataTable(table).reader(timeline, cache=False)  # one-off whole reads
    wanted = {
        p: (list(state.column_stats_columns) or None if index_type(p).takes_columns else None)
        for p in state.completed
    }
    others = {p: c for p, c in wanted.items() if not per_file(p)}
    view = FileSystemView(table.timeline, timeline)
    builds = [
        PartitionBuild(
            p,
            max(1, len(reader.slices(p))),  # the index's own file groups
            tuple(columns or ()),
            instant="",
            covers_upto="",
            counted=view.committed,
            keygen=virtual_keys(table),
            layout=state.layout(p),
        )
        for p, columns in wanted.items()
        if p not in others
    ]
    files = rebuilt_files(view) if builds else []
    workers, processes = workers_for(len(files), table.config.get(LOCAL_BUILD_WORKERS))
    chunks = read_chunks(files, workers, builds)
    total = len(chunks) + sum(b.groups for b in builds) + len(others)
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    found: dict[str, tuple[list[str], list[str], list[str]]] = {}
    budget = table.config.get(LOCAL_BUILD_MEMORY_MB) * 2**20
    with GroupRecords(budget) as held:
        if builds:
            hold_group_records(
                table.storage,
                chunks,
                builds,
                held,
                workers,
                processes,
                lambda _: step(),
                doing="rebuilding",
            )
        for number, build in enumerate(builds):
            found[build.partition] = _compare_groups(reader, build, number, held, step)
    for partition, columns in others.items():
        found[partition] = _compare(
            reader, partition, build_records(table, timeline, partition, columns)
        )
        step()
    if progress is not None:
        progress(total, total)
    reports = []
    for partition in state.completed:
        missing, stale, wrong = found[partition]
        lost = reader.lost(partition)
        behind = [] if lost else reader.unapplied(partition)
        reports.append(
            PartitionReport(
                partition,
                lost=lost,
                unapplied=[f"{i.timestamp}.{i.action}" for i in behind],
                missing=missing,
                stale=stale,
                wrong=wrong,
            )
        )
    return reports


def _compare_groups(
    reader: MetadataReader,
    build: PartitionBuild,
    number: int,
    held: GroupRecords,
    step: Callable[[], None],
) -> tuple[list[str], list[str], list[str]]:
    """:func:`differences` of a partition keyed by data file and its rebuild (``build``'s
    records in ``held``), one file group at a time; the records of file groups the layout does
    not name (none, unless the index was tampered with) are all stale."""
    partition = build.partition
    kind = index_type(partition)
    missing: list[str] = []
    stale: list[str] = []
    wrong: list[str] = []
    named = {file_group_id(partition, g) for g in range(build.groups)}
    others = set(reader.slices(partition)) - named
    if others:
        extra = reader.read(partition, columns=[], ordered=False, groups=others)
        stale += extra.column("key").to_pylist()
    for group in range(build.groups):
        parts = held.take((number, group))
        rebuilt = pa.concat_tables(parts) if parts else kind.memory_schema.empty_table()
        ours = reader.read(partition, ordered=False, groups={file_group_id(partition, group)})
        mine = differences(kind.comparable_table(ours), kind.comparable_table(rebuilt))
        missing += mine[0]
        stale += mine[1]
        wrong += mine[2]
        step()
    return sorted(missing), sorted(stale), sorted(wrong)


def _compare(
    reader: MetadataReader, partition: str, rebuilt: pa.Table
) -> tuple[list[str], list[str], list[str]]:
    """:func:`differences` of a partition as the reader merges it and its rebuild (compared by
    key, so neither side is put in file order). A stats partition is compared one column at a
    time: its records of one column read by their key prefix, so only one column's records of
    the index are held at once (at 100,000 files, column_stats' whole merge was 381 MB)."""
    kind = index_type(partition)
    rebuilt = kind.comparable_table(rebuilt)
    if not keyed_by_column(partition):
        ours = kind.comparable_table(reader.read(partition, ordered=False))
        return differences(ours, rebuilt)
    # keys of columns only the index holds, then each column the rebuild holds
    keys = reader.read(partition, columns=[], ordered=False).column("key")
    rebuilt_keys = rebuilt.column("key")
    missing: list[str] = []
    stale = _keys(keys, pc.invert(pc.is_in(keys, value_set=rebuilt_keys)))
    wrong: list[str] = []
    del keys
    columns = key_columns(rebuilt_keys)
    for column in pc.unique(columns).to_pylist():
        prefix = f"{column}|"
        ours = kind.comparable_table(reader.read(partition, prefix=prefix, ordered=False))
        mine = differences(ours, rebuilt.filter(pc.equal(columns, column)))
        missing += mine[0]
        wrong += mine[2]  # its stale keys are among those found above
    return sorted(missing), stale, sorted(wrong)


def differences(ours: pa.Table, rebuilt: pa.Table) -> tuple[list[str], list[str], list[str]]:
    """Keys (sorted) of the records only ``rebuilt`` holds (missing), only ``ours`` holds
    (stale), and both hold with other values (wrong); both tables keyed by a unique ``key``,
    their columns compared by name (dictionary-encoded columns as their values)."""
    ours, rebuilt = _decoded(ours), _decoded(rebuilt)
    mine, theirs = ours.column("key"), rebuilt.column("key")
    missing = _keys(theirs, pc.invert(pc.is_in(theirs, value_set=mine)))
    stale = _keys(mine, pc.invert(pc.is_in(mine, value_set=theirs)))
    at = pc.index_in(theirs, value_set=mine)  # each rebuilt record's row in ours
    both = pc.is_valid(at)
    rows = at.filter(both)
    differ = np.zeros(len(rows), dtype=bool)
    for name in rebuilt.column_names:  # one column aligned at a time: no copy of whole tables
        differ |= ~_same(rebuilt.column(name).filter(both), ours.column(name).take(rows))
    wrong = _keys(theirs.filter(both), pa.array(differ))
    return missing, stale, wrong


def _decoded(table: pa.Table) -> pa.Table:
    columns = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns
    ]
    return pa.table(columns, names=table.column_names)


def _keys(keys: pa.ChunkedArray | pa.Array, where: pa.ChunkedArray | pa.Array) -> list[str]:
    found: list[str] = keys.filter(where).to_pylist()
    return sorted(found)


def _same(a: pa.ChunkedArray | pa.Array, b: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per row, whether ``a`` and ``b`` hold the same value (two nulls are the same; a struct
    is the same when both are null, or neither is and every field is the same)."""
    a_null = np.asarray(pc.is_null(a).to_numpy(zero_copy_only=False), dtype=bool)
    b_null = np.asarray(pc.is_null(b).to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_struct(a.type):
        fields = np.ones(len(a_null), dtype=bool)
        for i in range(a.type.num_fields):
            name = a.type.field(i).name
            fields &= _same(pc.struct_field(a, name), pc.struct_field(b, name))
        same: np.ndarray = (a_null & b_null) | (~a_null & ~b_null & fields)
        return same
    equal = np.asarray(pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False))
    same_rows: np.ndarray = (a_null & b_null) | equal.astype(bool)
    return same_rows


# --- Apache Hudi's own metadata table ---------------------------------------------------------------


def validate_hudi(table: Table) -> list[PartitionReport]:
    """Apache Hudi's metadata table (``.hoodie/metadata``), each published partition compared
    with the data files, as Hudi's ``HoodieMetadataTableValidator`` does; one report per
    partition, named ``hudi:<partition>``, keys naming the file or record that differs:

    * ``files``: every data file on storage, by partition, with its size;
    * ``bloom_filters``: a record per base file, holding the file's footer filter;
    * ``column_stats``: each latest base file's record per column, equal to the one Hudi's
      writer makes from the footer (for the column types :func:`hudi_column_stats` makes);
    * ``record_index`` (copy-on-write tables): every key of the latest base files, located in
      its file group, and no other key.

    None when the table has no metadata table of Hudi's."""
    from metadata_table.hudi_table import HudiMetadataTable, hudi_column_stats
    from timeline.formats import metadata_records as mdt_records
    from timeline.formats.hudi_bloom import FOOTER_KEY
    from timeline.fs_view import parquet_metadata, read_parquet
    from timeline.table_config import TableType

    hudi = HudiMetadataTable(table)
    if not hudi.present:
        return []
    timeline = table.timeline.load()
    view = FileSystemView(table.timeline, timeline)
    storage = table.storage
    reports = [hudi_files_report(table, hudi.file_listing(), "hudi:files")]

    latest = view.latest_base_files()
    footers = {b.path: parquet_metadata(storage, b.path) for b in latest}
    if "bloom_filters" in hudi.partitions:
        expected = {}
        for base in latest:
            footer = footers[base.path].metadata or {}
            if FOOTER_KEY in footer:
                key = mdt_records.bloom_filter_key(base.partition_path, base.file_name)
                expected[key] = (base.path, footer[FOOTER_KEY])
        found = hudi.records("bloom_filters")
        report = PartitionReport("hudi:bloom_filters")
        for key, (path, value) in sorted(expected.items()):
            record = found.get(key)
            if record is None:
                report.missing.append(path)
            elif record["BloomFilterMetadata"]["bloomFilter"] != value:
                report.wrong.append(path)
        reports.append(report)

    if "column_stats" in hudi.partitions:
        # every latest base file's record per column, equal to the one Hudi's writer makes from
        # its footer (records of files cleaned since stay in Hudi's own table, unread)
        found = hudi.records("column_stats")
        report = PartitionReport("hudi:column_stats")
        for base in latest:
            made = hudi_column_stats(footers[base.path], base.partition_path, base.file_name)
            for record in made:
                key, column = record["key"], record["ColumnStatsMetadata"]["columnName"]
                stored = found.get(key)
                if stored is None:
                    report.missing.append(f"{base.path}:{column}")
                elif stored["ColumnStatsMetadata"] != record["ColumnStatsMetadata"]:
                    report.wrong.append(f"{base.path}:{column}")
        reports.append(report)

    if (
        "record_index" in hudi.partitions
        and table.table_config.table_type is TableType.COPY_ON_WRITE
    ):
        expected_at = {}
        for base in latest:
            keys = read_parquet(storage, base.path, ["_hoodie_record_key"])
            for key in keys.column(0).to_pylist():
                expected_at[key] = f"{base.partition_path}/{base.file_id}"
        found_at = {
            key: _location(r["recordIndexMetadata"])
            for key, r in hudi.records("record_index").items()
        }
        missing, stale, wrong = _compare_maps(expected_at, found_at)
        reports.append(
            PartitionReport("hudi:record_index", missing=missing, stale=stale, wrong=wrong)
        )
    return reports


def hudi_files_report(
    table: Table, listed: Mapping[str, Mapping[str, int]], name: str
) -> PartitionReport:
    """Apache Hudi's ``files`` partition (``listed``: the files it lists by partition, with
    their sizes) against the data files on storage (:func:`data_files_by_partition`)."""
    timeline = table.timeline.load()
    on_storage = data_files_by_partition(table, {i.timestamp for i in timeline.completed()})
    missing, stale, wrong = _compare_maps(
        {f"{p}/{n}": s for p, files in on_storage.items() for n, s in files.items()},
        {f"{p}/{n}": s for p, files in listed.items() for n, s in files.items()},
    )
    return PartitionReport(name, missing=missing, stale=stale, wrong=wrong)


def data_files_by_partition(
    table: Table, completed: set[str], upto: str | None = None
) -> dict[str, dict[str, int]]:
    """The data files on storage by partition, as Hudi's ``files`` partition lists them: log
    files, and base files of completed writes (a write in flight has files Hudi's metadata
    table does not list yet); with ``upto``, those a slice at or before it began (Hudi's
    initialization of the partition up to an instant)."""
    from timeline.fs_view import list_data_files
    from timeline.log_format import LogFileName

    limit = None if upto is None else normalize_timestamp(upto)
    out: dict[str, dict[str, int]] = {}
    for entry in list_data_files(table.storage):
        name = entry.name
        log = LogFileName.parse(name)
        if log is not None:
            if limit is not None and normalize_timestamp(log.base_instant) > limit:
                continue
        else:
            base = BaseFile.parse("", name)
            if base is None or base.instant_time not in completed:
                continue
            if limit is not None and normalize_timestamp(base.instant_time) > limit:
                continue
        partition = entry.path.rsplit("/", 1)[0] if "/" in entry.path else ""
        out.setdefault(partition, {})[name] = entry.size
    return out


def _compare_maps(
    expected: dict[str, Any], found: dict[str, Any]
) -> tuple[list[str], list[str], list[str]]:
    missing = sorted(k for k in expected if k not in found)
    stale = sorted(k for k in found if k not in expected)
    wrong = sorted(k for k in expected if k in found and found[k] != expected[k])
    return missing, stale, wrong


def _location(info: dict[str, Any]) -> str:
    from timeline.formats.metadata_records import record_location

    location = record_location(info)
    return f"{location.partition_path}/{location.file_id}"
