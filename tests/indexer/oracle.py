"""Oracles for an index built on a table someone else wrote: per-file column stats computed with
pyarrow, and the rule that pruning on any value a file holds keeps that file (on a merge-on-read
table, that pruning on any value a row holds keeps the row's file slice)."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata_table.layout import data_partition
from metadata_table.read.filters import col
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.records import python_value, value_kind
from timeline.log_format import LogFileName

Stats = tuple[Any, Any, int]


def pyarrow_stats(path: Path) -> dict[str, Stats]:
    """min, max and null count of every top-level primitive column of a data file."""
    data = pq.read_table(path)
    out = {}
    for field in data.schema:
        if value_kind(field.type) is None:
            continue  # nested: not indexed
        column = data.column(field.name)
        bounds = pc.min_max(column)
        low, high = (_naive_utc(bounds[b].as_py()) for b in ("min", "max"))
        out[field.name] = (low, high, column.null_count)
    return out


def _naive_utc(value: Any) -> Any:
    """Our stats hold timestamps as naive UTC (as Parquet stores them)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def assert_stats_match_pyarrow(snapshot: IndexedSnapshot, base: Path, live: set[str]) -> None:
    ours: dict[tuple[str, str], Stats] = {}
    for record in snapshot.column_stats(files=live).to_pylist():
        partition = data_partition(record["partition"])
        path = f"{partition}/{record['file_name']}" if partition else record["file_name"]
        kind = record["value_type"]
        ours[(path, record["column_name"])] = (
            python_value(kind, record["min_value"]),
            python_value(kind, record["max_value"]),
            record["null_count"],
        )
    oracle = {
        (path, column): stats
        for path in live
        for column, stats in pyarrow_stats(base / path).items()
    }
    assert ours == oracle


def _filterable(value: Any) -> bool:
    return value is not None and isinstance(
        value, (bool, int, float, str, bytes, decimal.Decimal, dt.date, dt.datetime)
    )


def assert_every_value_keeps_its_file(
    snapshot: IndexedSnapshot, base: Path, live: Iterable[str]
) -> int:
    """For every row of every live file and every indexed column, ``prune(col == value)`` keeps
    the file. Returns the number of checks made."""
    checks = 0
    for path in sorted(live):
        data = pq.read_table(base / path)
        columns = [f.name for f in data.schema if value_kind(f.type) is not None]
        for row in data.select(columns).to_pylist():
            for column, value in row.items():
                if not _filterable(value):
                    continue
                kept = {f.path for f in snapshot.prune(col(column) == value).candidates}
                assert path in kept, (path, column, value)
                checks += 1
    return checks


def slice_of_row(row: dict[str, Any]) -> tuple[str, str]:
    """(partition, file id) of a row a Hudi snapshot read returned: ``_hoodie_file_name`` names
    the base file, or, for a row merged from a log file, the file id alone."""
    name = row["_hoodie_file_name"]
    log = LogFileName.parse(name)
    file_id = log.file_id if log is not None else name.split("_")[0]
    return row["_hoodie_partition_path"] or "", file_id


def assert_every_row_keeps_its_slice(
    snapshot: IndexedSnapshot, rows: Iterable[dict[str, Any]]
) -> int:
    """For every row a merge-on-read snapshot read returns (meta columns included) and every
    indexed column, ``prune(col == value)`` keeps the row's file slice, and the key lookup keeps
    a file of it. Returns the number of checks made."""
    checks = 0
    indexed = {
        row["column_name"]
        for row in snapshot.column_stats().to_pylist()
        if row["value_type"] is not None
    }
    for row in rows:
        where = slice_of_row(row)
        for column, value in row.items():
            if column not in indexed or not _filterable(value):
                continue
            kept = {
                (s.partition_path, s.file_id) for s in snapshot.prune(col(column) == value).slices
            }
            assert where in kept, (where, column, value)
            checks += 1
        key = row["_hoodie_record_key"]
        holders = snapshot.lookup_keys([key])[key]
        assert any(where[1] in path for path in holders), (where, key, holders)
        checks += 1
    return checks
