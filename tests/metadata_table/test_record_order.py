"""How a build puts records keyed by record key in hash order, for less: the sort that breaks
ties by position is numpy's stable sort, the gather of fixed-width keys is Arrow's take, a
chunk sorted once is cut into its file groups as a sort per group would cut it, and the chunks of
a build that reads rows hold about ROWS_CHUNK_BYTES of data files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_table import layout
from metadata_table.group_records import (
    RECORDS_CHUNK,
    ROWS_CHUNK_BYTES,
    PartitionBuild,
    read_chunks,
)
from metadata_table.layout import (
    RECORD_INDEX,
    Gather,
    gather,
    in_file_order,
    key_hashes,
    stored_hashes,
)
from metadata_table.table import split_by_group
from metadata_table.workers import chunked
from timeline import hashing
from timeline.hashing import key_hash64, key_hash64_of
from timeline.index_state import LAYOUT


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 3), max_size=300),
    st.integers(0, 3),
)
def test_the_sort_of_hashes_is_numpys_stable_sort(values: list[int], runs: int) -> None:
    top = np.array(values, np.int64)
    if runs:  # a few sorted runs, as merged task outputs come
        top = np.concatenate([np.sort(part) for part in np.array_split(top, runs)])
    assert layout._stable_argsort32(top).tolist() == np.argsort(top, kind="stable").tolist()


def test_many_rows_in_no_order_take_the_packed_sort() -> None:
    top = np.random.default_rng(3).integers(0, 2**32, 200_000, dtype=np.int64)
    top[::7] = 12345  # ties, in position order after the sort
    assert np.array_equal(layout._stable_argsort32(top), np.argsort(top, kind="stable"))


texts = st.text(st.characters(codec="utf-8"), max_size=5)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(texts, min_size=2, max_size=40),
    st.booleans(),
    st.integers(0, 5),
    st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]),
    st.data(),
)
def test_gather_is_arrows_take(
    values: list[str],
    one_width: bool,
    cut: int,
    kind: pa.DataType,
    data: st.DataObject,
) -> None:
    if one_width:  # every value of one length: moved as fixed-width rows
        values = [(v + "xyz")[:3] for v in values]
    keys = pa.array(values, pa.string()).cast(kind)
    cut = min(cut, len(values))
    column = pa.chunked_array([keys.slice(0, cut), keys.slice(cut)], kind)
    records = pa.table({"key": column, "n": pa.array(range(len(values)), pa.int64())})
    records = records.slice(1)  # offsets that do not start at zero
    rows = st.integers(0, records.num_rows - 1)
    order = np.array(data.draw(st.lists(rows, max_size=60)), dtype=np.int64)
    assert gather(records, order).equals(records.take(pa.array(order, pa.int64())))
    if one_width and all(v.isascii() for v in values):
        assert layout._fixed_width_rows(records.column("key").combine_chunks()) is not None
    # taken in pieces from one Gather (a writer's row groups), the same rows
    pieces = Gather(records)
    taken = [pieces.take(order[at : at + 7]) for at in range(0, len(order), 7)]
    assert pa.concat_tables([records.slice(0, 0), *taken]).equals(gather(records, order))


def test_gather_leaves_columns_of_nulls_and_of_several_widths_to_arrow() -> None:
    records = pa.table(
        {
            "fixed": ["ab", "cd", "ef"],
            "nulls": ["ab", None, "ef"],
            "widths": ["a", "bcd", ""],
            "codes": pa.array(["x", "y", "x"]).dictionary_encode(),
        }
    )
    order = np.array([2, 0, 1, 2])
    assert gather(records, order).equals(records.take(pa.array(order)))


def _records(count: int) -> pa.Table:
    keys = pa.array([f"key-{i * 7919 % count:06d}" for i in range(count)], pa.string())
    return pa.table(
        {"key": keys, "key_hash": stored_hashes(key_hashes(keys)), "n": pa.array(range(count))}
    )


@pytest.mark.parametrize("groups", [1, 3, 8])
def test_a_chunk_sorted_once_is_cut_into_groups_as_each_group_sorted_alone(groups: int) -> None:
    records = _records(5_000)
    apart = {
        g: in_file_order(RECORD_INDEX, t)
        for g, t in split_by_group(records, groups, RECORD_INDEX, LAYOUT).items()
    }
    sorted_once = in_file_order(RECORD_INDEX, records)
    cut = split_by_group(sorted_once, groups, RECORD_INDEX, LAYOUT)
    assert sorted(cut) == sorted(apart)
    for group, table in cut.items():
        assert table.equals(apart[group])
        assert in_file_order(RECORD_INDEX, table) is table  # in file order already: not sorted


def test_the_hash_of_many_keys_is_the_definition_across_its_blocks() -> None:
    count = 2 * hashing._BLOCK + 11
    values = [None if i % 997 == 0 else "k" * (i % 13) + str(i) for i in range(count)]
    got = key_hash64(pa.array(values, pa.string()).slice(3))
    assert got.tolist() == [key_hash64_of(v or "") for v in values[3:]]


def _build(partition: str) -> PartitionBuild:
    return PartitionBuild(partition, 2, (), "2", "1")


def test_a_build_reading_rows_reads_chunks_of_about_rows_chunk_bytes() -> None:
    size = 4 * 2**20
    files = [("p", f"f{i}.parquet", size, "1") for i in range(100)]
    rows = read_chunks(files, 2, [_build(RECORD_INDEX)])
    assert max(len(c) for c in rows) <= ROWS_CHUNK_BYTES // size
    assert len(rows) % 2 == 0 and max(len(c) for c in rows) - min(len(c) for c in rows) <= 1
    assert [f for c in rows for f in c] == files
    footers = read_chunks(files, 2, [_build(layout.COLUMN_STATS)])
    assert [len(c) for c in footers] == [50, 50]  # one per worker: at most RECORDS_CHUNK
    many = [("p", f"f{i}.parquet", 100, "1") for i in range(2 * RECORDS_CHUNK + 1)]
    assert max(len(c) for c in read_chunks(many, 2, [_build(RECORD_INDEX)])) <= RECORDS_CHUNK
    huge = [("p", "big.parquet", 10 * ROWS_CHUNK_BYTES, "1")] * 3
    assert [len(c) for c in read_chunks(huge, 1, [_build(RECORD_INDEX)])] == [1, 1, 1]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3_000), st.integers(1, 4), st.integers(1, 600))
def test_chunks_are_at_most_most_and_as_many_for_each_worker(
    count: int, workers: int, most: int
) -> None:
    items = list(range(count))
    chunks = chunked(items, workers, most)
    assert [i for c in chunks for i in c] == items
    assert all(0 < len(c) <= most for c in chunks)
    assert max(map(len, chunks), default=0) - min(map(len, chunks), default=0) <= 1
    if count >= workers:
        assert len(chunks) >= workers
    if count >= 2 * most * workers and most > 1:  # enough: each worker as many chunks
        assert len(chunks) % workers == 0
