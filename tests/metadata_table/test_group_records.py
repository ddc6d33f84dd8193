"""A local build's records per file group: held up to a budget, spilled to local disk beyond it,
given back whole and in the order they came, and nothing left on disk."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_table.group_records import GroupRecords

SCHEMA = pa.schema([("key", pa.string()), ("value", pa.int64())])


def part(n: int, start: int) -> pa.Table:
    return pa.table(
        {"key": [f"k{i}" for i in range(start, start + n)], "value": list(range(start, start + n))},
        schema=SCHEMA,
    )


@settings(max_examples=40, deadline=None)
@given(
    adds=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), max_size=30),
    budget=st.sampled_from([0, 200, 2_000, 10**9]),
)
def test_each_group_gets_its_parts_back_in_order_within_the_budget(
    adds: list[tuple[int, int]], budget: int
) -> None:
    folder = tempfile.mkdtemp(prefix="aix-test-")
    before = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        expected: dict[tuple[int, int], list[pa.Table]] = {}
        with GroupRecords(budget) as held:
            for n, (group, rows) in enumerate(adds):
                table = part(rows, n * 100)
                expected.setdefault((0, group), []).append(table)
                held.add((0, group), table)
                assert held.held <= budget
            if budget == 10**9:
                assert held.spilled == 0
            for key, tables in expected.items():
                back = pa.concat_tables(held.take(key))
                assert back.equals(pa.concat_tables(tables))
            assert held.take((0, 99)) == []
        assert os.listdir(folder) == []  # the spill folder is gone
    finally:
        tempfile.tempdir = before
        os.rmdir(folder)


def test_leaving_early_deletes_what_was_spilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that fails before writing its file groups leaves no spilled records behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError), GroupRecords(0) as held:
        held.add((0, 0), part(10, 0))
        assert held.spilled > 0 and len(os.listdir(tmp_path)) == 1
        raise RuntimeError("a worker failed")
    assert os.listdir(tmp_path) == []
