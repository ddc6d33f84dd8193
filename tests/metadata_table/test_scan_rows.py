"""The two engines a scan reads its kept files with (metadata_table/read/rows.py): DuckDB's
Parquet reader gives exactly pyarrow's rows, types and order for every filter and column type it
is chosen for (NaN, float32 literals, zoned and millisecond timestamps, decimals, quotes, nested
columns, files of an older schema), and pyarrow reads what DuckDB cannot say exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from metadata_table.read import rows
from metadata_table.read.filters import And, Compare, Expr, In, IsNull, Or, col, parse_filter
from metadata_table.read.rows import DUCKDB, PYARROW, RowRead, duckdb_reason, engine, read_rows

UTC = dt.UTC
NY = dt.timezone(dt.timedelta(hours=-5))

SCHEMA = pa.schema(
    [
        ("_hoodie_commit_time", pa.string()),
        ("i8", pa.int8()),
        ("u32", pa.uint32()),
        ("n", pa.int64()),  # int32 in the oldest file: widened
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("flag", pa.bool_()),
        ("s", pa.string()),
        ("dec", pa.decimal128(12, 3)),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("us", tz="UTC")),
        ("ms", pa.timestamp("ms")),
        ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("li", pa.list_(pa.int64())),
        ("bin", pa.binary()),
        ("added", pa.string()),  # only in the newer files
    ]
)


def _column(name: str, kind: pa.DataType, n: int, seed: int) -> pa.Array:
    def pick(i: int, value: Any) -> Any:
        return None if (i + seed + len(name)) % 7 == 0 else value

    base = dt.datetime(2026, 1, 1)
    made: dict[str, Any] = {
        "_hoodie_commit_time": lambda i: f"2026010100000{seed}",
        "i8": lambda i: (i * 37 + seed) % 200 - 100,
        "u32": lambda i: (i * 71_000_019 + seed) % 4_000_000_000,
        "n": lambda i: i - 20 + seed * 3,
        "f32": lambda i: [0.1, float("nan"), -0.0, 2.5, 1e30, -3.25][(i + seed) % 6],
        "f64": lambda i: [0.1, float("nan"), -0.0, 0.0, float("inf"), 7.5][(i + seed) % 6],
        "flag": lambda i: (i + seed) % 3 == 0,
        "s": lambda i: ["O'Brien", "é", "a", "", 'b"q', "zz"][(i + seed) % 6],
        "dec": lambda i: decimal.Decimal(i * 125 - 3000 + seed) / 1000,
        "d": lambda i: dt.date(2026, 1, 1) + dt.timedelta(days=(i + seed) % 40),
        "ts": lambda i: base + dt.timedelta(hours=i, microseconds=seed),
        "tz": lambda i: (base + dt.timedelta(hours=i)).replace(tzinfo=UTC),
        "ms": lambda i: base + dt.timedelta(milliseconds=i * 1500 + seed),
        "st": lambda i: {"a": i, "b": f"x{i}"},
        "li": lambda i: [i, i + seed],
        "bin": lambda i: bytes([i % 256, seed]),
        "added": lambda i: f"v{i % 5}",
    }
    return pa.array([pick(i, made[name](i)) for i in range(n)], kind)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Three files: the oldest without ``added`` and with ``n`` an int32."""
    root = tmp_path_factory.mktemp("rows")
    paths = []
    for seed in range(3):
        schema = SCHEMA
        if seed == 0:
            schema = pa.schema([f for f in SCHEMA if f.name != "added"])
            schema = schema.set(schema.get_field_index("n"), pa.field("n", pa.int32()))
        table = pa.table({f.name: _column(f.name, f.type, 60, seed) for f in schema}, schema)
        path = str(root / f"f{seed}.parquet")
        pq.write_table(table, path, row_group_size=25)
        paths.append(path)
    return paths


def _read(paths: list[str], expr: Expr | None, **kwargs: Any) -> RowRead:
    bound = None if expr is None else expr.bind(SCHEMA)
    output = kwargs.pop("output", SCHEMA)
    return RowRead(pafs.LocalFileSystem(), paths, [1] * len(paths), SCHEMA, output, bound, **kwargs)


def _both(read: RowRead) -> tuple[pa.Table, pa.Table]:
    got = [
        pa.Table.from_batches(list(read_rows(read, using=e)), read.output)
        for e in (DUCKDB, PYARROW)
    ]
    return got[0], got[1]


FILTERS = [
    "i8 > 10",
    "i8 <= -50 OR i8 = 3",
    "u32 >= 3000000000",
    "n < 0",
    "n > 1.5 AND n < 2.5",  # an integer column compared as doubles
    "n != 2",
    "f64 > 1",  # NaN: DuckDB's rows are a superset, filtered again
    "f64 = 0",  # -0.0 and 0.0
    "f64 != 7.5",
    "f32 = 0.1",  # the literal as a float32, as Arrow compares it
    "f32 >= 2.5",
    "flag = TRUE",
    "s = 'O''Brien'",
    "s > 'a' AND s < 'zz'",
    "s IN ('é', '', 'b\"q')",
    "s NOT IN ('a', 'zz')",
    "dec > 0.5",
    "dec BETWEEN -1.25 AND 1.375",
    "d = '2026-01-05'",
    "d >= DATE '2026-02-01'",
    "ts > '2026-01-02 03:00:00'",
    "ts <= TIMESTAMP '2026-01-01 05:00:00'",
    "tz >= '2026-01-02T00:00:00'",
    "ms < '2026-01-01 00:00:30.001'",
    "added = 'v1'",  # a column the oldest file lacks: nulls there
    "added IS NULL",
    "s IS NOT NULL AND (i8 > 0 OR dec < 0) AND NOT d = '2026-01-03'",
]


@pytest.mark.parametrize("text", FILTERS)
def test_duckdb_reads_exactly_pyarrows_rows_types_and_order(files: list[str], text: str) -> None:
    read = _read(files, parse_filter(text))
    assert engine(read)[0] == DUCKDB or "duckdb" not in sys.modules
    duck, arrow = _both(read)
    assert duck.schema.equals(arrow.schema)
    assert arrow.num_rows > 0, f"{text}: should match some rows"
    assert duck.to_pylist() == arrow.to_pylist() or _nan_equal(duck, arrow), text


def _nan_equal(a: pa.Table, b: pa.Table) -> bool:
    """Equal, NaN equal to NaN (lists of dicts compare NaN unequal to itself)."""
    return repr(a.to_pylist()) == repr(b.to_pylist())


def test_zoned_literals_and_code_built_filters(files: list[str]) -> None:
    noon_ny = dt.datetime(2026, 1, 2, 7, 0, tzinfo=NY)  # 12:00 UTC
    for expr in (
        col("tz") > noon_ny,
        col("ts") >= dt.datetime(2026, 1, 2, 12, tzinfo=UTC),
        col("ms").isin([dt.datetime(2026, 1, 1, 0, 0, 1, 500000)]),
        Or(IsNull("f32"), And(Compare("f32", "<", 1.0), In("i8", (1, 2, 3), negated=True))),
    ):
        duck, arrow = _both(_read(files, expr))
        assert arrow.num_rows > 0, expr
        assert _nan_equal(duck, arrow), expr


def test_projection_limit_and_incremental_window(files: list[str]) -> None:
    output = pa.schema([SCHEMA.field("s"), SCHEMA.field("st")])
    for kwargs in (
        {"output": output},
        {"output": output, "limit": 7},
        {"output": output, "window": ("20260101000000", "20260101000001")},
    ):
        for expr in (parse_filter("f64 > 0"), parse_filter("i8 > 0"), None):
            duck, arrow = _both(_read(files, expr, **dict(kwargs)))
            assert duck.schema.equals(output)
            assert _nan_equal(duck, arrow), (expr, kwargs)
            if "limit" in kwargs:
                assert duck.num_rows == 7
            if "window" in kwargs:
                assert set(_read_column(files, expr, kwargs)) <= {"20260101000001"}


def _read_column(files: list[str], expr: Expr | None, kwargs: dict[str, Any]) -> list[str]:
    output = pa.schema([SCHEMA.field("_hoodie_commit_time")])
    read = _read(files, expr, output=output, window=kwargs["window"])
    table = pa.Table.from_batches(list(read_rows(read, using=DUCKDB)), output)
    return [str(v) for v in table.column(0).to_pylist()]


def test_a_column_no_file_of_a_group_has_yet_is_read_by_pyarrow(files: list[str]) -> None:
    """The oldest file alone, a filter on the column added since: DuckDB cannot bind the name,
    pyarrow reads the group (nulls)."""
    for text, count in (("added IS NULL", 60), ("added = 'v1'", 0)):
        read = _read(files[:1], parse_filter(text))
        assert engine(read)[0] == DUCKDB
        duck, arrow = _both(read)
        assert duck.num_rows == arrow.num_rows == count


def test_progress_and_limits_over_groups_of_files(
    files: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows, "FILES_PER_DATASET", 2)
    for using in (DUCKDB, PYARROW):
        told: list[tuple[int, int]] = []

        def tell(done: int, total: int, told: list[tuple[int, int]] = told) -> None:
            told.append((done, total))

        got = list(read_rows(_read(files, parse_filter("i8 > 0")), tell, using))
        assert sum(b.num_rows for b in got) > 0
        assert told[-1] == (3, 3) and [d for d, _ in told] == sorted(d for d, _ in told)
        for limit in (1, 61, 150):  # within a file, across files, across groups
            read = _read(files, None, limit=limit)
            assert sum(b.num_rows for b in read_rows(read, using=using)) == min(limit, 180)


def test_what_duckdb_cannot_say_exactly_is_read_by_pyarrow(
    files: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = _read(files, parse_filter("i8 > 0"))
    assert duckdb_reason(read) is None
    not_local = RowRead(
        pafs.PyFileSystem(pafs.FSSpecHandler(__import__("fsspec").filesystem("file"))),
        files,
        [1] * 3,
        SCHEMA,
        SCHEMA,
        read.row_filter,
    )
    assert duckdb_reason(not_local) == "the files are not on the local file system"
    nanos = pa.schema([*SCHEMA, ("ns", pa.timestamp("ns"))])
    assert duckdb_reason(RowRead(read.filesystem, files, [1] * 3, nanos, nanos, None)) == (
        "column ns is timestamp[ns]"
    )
    cased = pa.schema([("a", pa.int32()), ("A", pa.int32())])
    assert "case" in (duckdb_reason(RowRead(read.filesystem, files, [1], cased, cased, None)) or "")
    with pytest.raises(ValueError, match="not on the local file system"):
        list(read_rows(not_local, using=DUCKDB))
    # small reads in a process that has not loaded DuckDB stay with pyarrow; large ones load it
    monkeypatch.delitem(sys.modules, "duckdb", raising=False)
    assert engine(read) == (PYARROW, f"less than {rows.DUCKDB_MIN_BYTES >> 20} MB to read")
    big = RowRead(read.filesystem, files, [rows.DUCKDB_MIN_BYTES] * 3, SCHEMA, SCHEMA, None)
    assert engine(big)[0] == DUCKDB


def test_nanosecond_timestamps_keep_their_nanoseconds(tmp_path: Path) -> None:
    """A type DuckDB would read at microseconds is read by pyarrow, nanoseconds intact."""
    kind = pa.timestamp("ns")
    path = str(tmp_path / "ns.parquet")
    pq.write_table(pa.table({"t": pa.array([1_000_000_001, 2_000_000_003], kind)}), path)
    schema = pa.schema([("t", kind)])
    read = RowRead(pafs.LocalFileSystem(), [path], [1 << 40], schema, schema, None)
    assert engine(read)[0] == PYARROW
    got = pa.Table.from_batches(list(read_rows(read)), schema)
    assert got.column(0).cast(pa.int64()).to_pylist() == [1_000_000_001, 2_000_000_003]


def test_paths_duckdb_would_read_as_patterns_are_read_by_pyarrow(tmp_path: Path) -> None:
    """A partition named ``a[1]`` (or holding ``*``, ``?``, ``{``): DuckDB's read_parquet expands
    such a path as a glob and finds no file."""
    schema = pa.schema([("x", pa.int64())])
    paths = []
    for name in ("a[1]", "b*c", "d{e}"):
        folder = tmp_path / name
        folder.mkdir()
        paths.append(str(folder / "f.parquet"))
        pq.write_table(pa.table({"x": [1, 2, 3]}, schema), paths[-1])
    read = RowRead(
        pafs.LocalFileSystem(), paths, [1 << 30] * 3, schema, schema, parse_filter("x > 1")
    )
    assert "pattern" in (duckdb_reason(read) or "")
    assert sum(b.num_rows for b in read_rows(read)) == 6


def test_a_forked_process_makes_its_own_duckdb_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cursor = rows._cursor()
    cursor.close()
    assert rows._connection is not None
    parent = rows._connection[1]
    real = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real + 1)  # as in a child after fork()
    child = rows._cursor()
    assert child.execute("SELECT 42").fetchone() == (42,)
    child.close()
    assert rows._connection[1] is not parent


@pytest.mark.parametrize("bad_at", [0, 3])
def test_strings_that_are_not_utf8_are_read_as_pyarrow_reads_them(
    tmp_path: Path, bad_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB refuses a file whose string column holds bytes that are not UTF-8 (another
    writer's); the query's files are read by pyarrow instead, the rows DuckDB handed out
    already not handed out again, whether DuckDB met the file first or after other files' rows
    (the read failed, in a process that had loaded DuckDB)."""
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    paths = []
    for n in range(4):
        size = 3 if n == bad_at else 100_000
        texts = pa.array([b"\xff\xfe" if n == bad_at else b"ok"] * size, pa.binary())
        keys = range(n * 100_000, n * 100_000 + size)
        table = pa.table({"k": keys, "s": texts.view(pa.string())})
        paths.append(str(tmp_path / f"f{n}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=20_000)
    skipped: list[int] = []
    real = rows._skipped

    def skipping(batches: Any, count: int) -> Any:
        skipped.append(count)
        return real(batches, count)

    monkeypatch.setattr(rows, "_skipped", skipping)
    whole, some = parse_filter("k < 50000 OR k >= 150000"), 250_000
    for expr, limit in ((None, None), (whole, None), (None, some)):
        read = RowRead(pafs.LocalFileSystem(), paths, [1] * 4, schema, schema, expr, limit=limit)
        got, expected = _both(read)
        assert got.equals(expected)
        assert got.num_rows == (limit or expected.num_rows)
    assert skipped  # (how many rows DuckDB handed out first is up to its threads)
