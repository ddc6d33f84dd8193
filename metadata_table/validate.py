"""Validation of the index against the data, in the spirit of Hudi's HoodieMetadataTableValidator:
every completed partition, as readers see it, compared record for record with a rebuild from the
data files at the same snapshot. Read-only.

The records are compared on Arrow arrays, aligned by key, column by column (struct columns field
by field, and their own nulls): a Python object is made only for the keys that differ, so memory
stays near the two tables' Arrow size (at 100,000 files, Python dicts of both sides took 7 GB)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.index_types import index_type
from metadata_table.layout import key_columns, keyed_by_column
from metadata_table.maintenance import build_records_each
from metadata_table.reader import MetadataReader
from metadata_table.table import MetadataTable
from timeline.table import Table


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
    ``progress(done, total)`` is called as partitions are compared."""
    state = table.reload_index_state()
    timeline = table.timeline.load()
    reader = MetadataTable(table).reader(timeline, cache=False)  # one-off whole reads
    reports: list[PartitionReport] = []
    wanted = {
        p: (list(state.column_stats_columns) or None if index_type(p).takes_columns else None)
        for p in state.completed
    }
    for partition, records in build_records_each(table, timeline, wanted):
        if progress is not None:
            progress(len(reports), len(state.completed))
        missing, stale, wrong = _compare(reader, partition, records)
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
    if progress is not None:
        progress(len(reports), len(state.completed))
    order = {p: n for n, p in enumerate(state.completed)}
    return sorted(reports, key=lambda r: order[r.partition])


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
