"""Data skipping on Arrow arrays answers exactly as the file-by-file rule: for random stats
(missing records, missing min/max, only-null columns, every value kind) and random predicates,
``Expr.mask`` equals ``might_match`` per file, or declines (None) so the caller uses it."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_table.layout import VALUE_TYPE
from metadata_table.read.filters import (
    And,
    ColumnArrays,
    ColumnStats,
    Compare,
    Expr,
    In,
    IsNull,
    Or,
)

KINDS = {
    "int": st.integers(-5, 5),
    "float": st.floats(-5, 5, allow_nan=False) | st.just(float("nan")),
    "string": st.text("abc", max_size=2),
    "bool": st.booleans(),
    "date": st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 9)),
    "timestamp": st.datetimes(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)),
}
LITERALS = st.one_of(
    st.integers(-6, 6),
    st.floats(-6, 6, allow_nan=False),
    st.text("abc", max_size=2),
    st.booleans(),
    st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 9)),
    st.datetimes(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)),
    st.none(),
)


@st.composite
def files_and_stats(draw: Any) -> tuple[dict[str, str], list[dict[str, ColumnStats]]]:
    kinds = {c: draw(st.sampled_from(sorted(KINDS))) for c in ("a", "b")}
    files = []
    for _ in range(draw(st.integers(0, 8))):
        stats = {}
        for column, kind in kinds.items():
            if draw(st.booleans()) and draw(st.booleans()):
                continue  # no record for this column
            values = KINDS[kind]
            lo, hi = draw(st.none() | values), draw(st.none() | values)
            if lo is not None and hi is not None and not (lo != lo or hi != hi) and lo > hi:
                lo, hi = hi, lo
            count = draw(st.none() | st.integers(0, 3))
            nulls = draw(st.none() | st.integers(0, 3))
            stats[column] = ColumnStats(lo, hi, nulls, count)
        files.append(stats)
    return kinds, files


def exprs() -> st.SearchStrategy[Expr]:
    leaf = st.one_of(
        st.builds(
            Compare, st.sampled_from("ab"), st.sampled_from(["=", "<", "<=", ">", ">="]), LITERALS
        ),
        st.builds(In, st.sampled_from("ab"), st.lists(LITERALS, max_size=3).map(tuple)),
        st.builds(IsNull, st.sampled_from("ab"), st.booleans()),
    )
    return st.recursive(
        leaf, lambda inner: st.builds(And, inner, inner) | st.builds(Or, inner, inner), max_leaves=5
    )


def arrays(kinds: dict[str, str], files: list[dict[str, ColumnStats]]) -> dict[str, ColumnArrays]:
    out = {}
    for column, kind in kinds.items():
        t = VALUE_TYPE.field(kind).type
        rows = [f.get(column) for f in files]
        out[column] = ColumnArrays(
            kind,
            pa.array([r is not None for r in rows], pa.bool_()),
            pa.array([r.minimum if r else None for r in rows], t),
            pa.array([r.maximum if r else None for r in rows], t),
            pa.array([r.null_count if r else None for r in rows], pa.int64()),
            pa.array([r.value_count if r else None for r in rows], pa.int64()),
        )
    return out


@settings(max_examples=600, deadline=None)
@given(files_and_stats(), exprs())
def test_masks_answer_as_might_match(case: Any, expr: Expr) -> None:
    kinds, files = case
    mask = expr.mask(arrays(kinds, files), len(files))
    if mask is None:
        return
    expected = []
    for stats in files:
        try:
            expected.append(expr.might_match(stats))
        except TypeError:  # Python cannot order the two (datetime vs date): no answer to match
            return
    assert mask.to_pylist() == expected
