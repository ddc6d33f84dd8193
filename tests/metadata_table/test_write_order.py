"""A metadata file keeps its records in key order, in row groups cut where a stats partition's
column changes and every ROW_GROUP_ROWS rows. A build's workers send sorted runs over data files
taken in key order: those are laid end to end without a sort and give the file a sort gives;
runs that overlap, and records in no order, are sorted one row group at a time."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_table import layout
from metadata_table.group_records import in_key_order
from metadata_table.layout import COLUMN_STATS, FILES, column_stats_key, file_key, write_records
from timeline.storage import Storage

COLUMNS = ["a", "b|c", "z"]
SCHEMA = pa.schema([("key", pa.string()), ("n", pa.int64())])


def _records(partition: str, files: list[tuple[str, str]]) -> pa.Table:
    """Records of ``files`` (partition, name) in the order a build's worker makes them: per
    file, and per column of a stats partition."""
    if partition == COLUMN_STATS:
        keys = [column_stats_key(c, p, n) for p, n in files for c in COLUMNS]
    else:
        keys = [file_key(p, n) for p, n in files]
    return pa.table({"key": keys, "n": list(range(len(keys)))}, schema=SCHEMA)


def _written(tmp_path: Path, partition: str, records: pa.Table, name: str) -> pq.ParquetFile:
    storage = Storage(str(tmp_path))
    write_records(storage, f"{partition}/{name}.parquet", records, "1")
    return pq.ParquetFile(tmp_path / partition / f"{name}.parquet")


def _row_groups(file: pq.ParquetFile) -> list[int]:
    return [file.metadata.row_group(g).num_rows for g in range(file.metadata.num_row_groups)]


names = st.lists(
    st.tuples(st.sampled_from(["p1", "p1/x", "p|2", "p%3"]), st.text("abc_1", min_size=1)),
    unique=True,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(files=names, chunk=st.integers(1, 9), rows=st.sampled_from([2, 3, 16_384]))
def test_runs_over_files_in_key_order_are_laid_end_to_end_as_a_sort_orders_them(
    tmp_path_factory: pytest.TempPathFactory, files: list[tuple[str, str]], chunk: int, rows: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("order")
    ordered = in_key_order([(p, n, 1, "1") for p, n in files])
    assert ordered == sorted(ordered, key=lambda f: file_key(f[0], f[1]))
    old = layout.ROW_GROUP_ROWS, layout._MOST_PIECES
    layout.ROW_GROUP_ROWS, layout._MOST_PIECES = rows, 1  # runs of one file each, too
    try:
        for partition in (FILES, COLUMN_STATS):
            runs = [
                layout.in_file_order(
                    partition,
                    _records(partition, [(p, n) for p, n, _, _ in ordered[i : i + chunk]]),
                )
                for i in range(0, len(ordered), chunk)
            ]
            records = pa.concat_tables(runs) if runs else _records(partition, [])
            if records.num_rows > 1:  # the runs are laid end to end: no sort
                merged = layout._merged_runs(partition, records)
                assert merged is not None and layout.file_order(partition, merged) is None
            expected = records.sort_by("key")
            mine = _written(tmp_path, partition, records, "runs")
            sorted_ = _written(tmp_path, partition, expected, "sorted")
            assert mine.read().equals(sorted_.read())
            assert _row_groups(mine) == _row_groups(sorted_)
    finally:
        layout.ROW_GROUP_ROWS, layout._MOST_PIECES = old


@settings(max_examples=40, deadline=None)
@given(files=names, seed=st.integers(0, 2**16))
def test_overlapping_runs_and_records_in_no_order_are_sorted(
    tmp_path_factory: pytest.TempPathFactory, files: list[tuple[str, str]], seed: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("order")
    for partition in (FILES, COLUMN_STATS):
        records = _records(partition, files)
        order = random.Random(seed).sample(range(records.num_rows), records.num_rows)
        shuffled = records.take(pa.array(order, pa.int64()))
        written = _written(tmp_path, partition, shuffled, "any").read()
        assert written.column("key").to_pylist() == sorted(records.column("key").to_pylist())


def test_two_runs_over_the_same_files_are_not_laid_end_to_end() -> None:
    """Runs whose key ranges overlap (files not taken in key order) need the sort."""
    first = _records(COLUMN_STATS, [("p1", "a"), ("p1", "c")])
    second = _records(COLUMN_STATS, [("p1", "b")])
    records = pa.concat_tables([layout.in_file_order(COLUMN_STATS, t) for t in (first, second)])
    assert layout._merged_runs(COLUMN_STATS, records) is None
    assert layout.file_order(COLUMN_STATS, records) is not None


def test_the_runs_of_a_large_build_are_laid_end_to_end() -> None:
    """At 1,000,000 files a column_stats file group gets a run from each of 2,000 chunks, each
    cut by column: more pieces than a sixty-fourth of its records (the sort they then took cost
    most of a 66 s write step)."""
    runs = [
        layout.in_file_order(COLUMN_STATS, _records(COLUMN_STATS, [("p1", f"{i:06d}")]))
        for i in range(400)
    ]
    records = pa.concat_tables(runs)  # 1,200 records in 1,200 pieces of one
    assert layout._merged_runs(COLUMN_STATS, records) is None  # one record a piece: sorted
    runs = [
        layout.in_file_order(
            COLUMN_STATS, _records(COLUMN_STATS, [("p1", f"{i:06d}-{j}") for j in range(10)])
        )
        for i in range(400)
    ]
    records = pa.concat_tables(runs)  # 12,000 records in 1,200 pieces of ten
    merged = layout._merged_runs(COLUMN_STATS, records)
    assert merged is not None
    assert merged.column("key").to_pylist() == sorted(records.column("key").to_pylist())


@pytest.mark.parametrize("tombstone", [False, True])
def test_a_stats_file_cuts_its_row_groups_by_the_records_column_names_or_by_their_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tombstone: bool
) -> None:
    """Each column's records in row groups of their own: told by the records' ``column_name``
    without splitting a key, or, when a record has none (a tombstone names its file alone), by
    the column every key starts with."""
    files = [("p1", "f"), ("p|2", "g"), ("p1", "h")]
    records = sorted(
        ((column_stats_key(c, p, n), c) for c in COLUMNS for p, n in files), key=lambda r: r[0]
    )
    names: list[str | None] = [c for _, c in records]
    if tombstone:
        names[3] = None
    else:

        def unsplit(keys: pa.Array) -> pa.Array:
            raise AssertionError("a key split where every record names its column")

        monkeypatch.setattr(layout, "key_columns", unsplit)
    table = pa.table(
        {"key": [k for k, _ in records], "column_name": names},
        schema=pa.schema([("key", pa.string()), ("column_name", pa.string())]),
    )
    written = _written(tmp_path, COLUMN_STATS, table, "named")
    assert _row_groups(written) == [len(files)] * len(COLUMNS)


def test_a_stats_file_writes_its_distinct_columns_plain_and_the_others_as_dictionaries(
    tmp_path: Path,
) -> None:
    """Keys, file names and bounds (about one value a record) are written plain: a dictionary of
    them saves nothing and costs the write its time; names, counts and instants take one."""
    rows = [
        {
            "key": column_stats_key("a", "p1", f"f{i}"),
            "column_name": "a",
            "partition": "p1",
            "file_name": f"f{i}",
            "value_type": "int",
            "min_value": {"int": i},
            "max_value": {"int": i + 1},
            "value_count": 10,
            "is_deleted": False,
            "instant": "1",
        }
        for i in range(100)
    ]
    table = pa.Table.from_pylist(rows, schema=layout.schema_of(COLUMN_STATS))
    chunks = _written(tmp_path, COLUMN_STATS, table, "encodings").metadata.row_group(0)
    encodings = {
        chunks.column(c).path_in_schema: chunks.column(c).encodings
        for c in range(chunks.num_columns)
    }
    dictionary = {path for path, used in encodings.items() if "RLE_DICTIONARY" in used}
    assert {"column_name", "partition", "value_count", "instant"} <= dictionary
    assert not dictionary & {"key", "file_name", "min_value.int", "max_value.int"}
