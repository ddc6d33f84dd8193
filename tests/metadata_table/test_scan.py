"""Table scans through the index: `load_table(path).scan(...)` returns exactly the rows a full
read of the snapshot filtered row by row returns (SQL's null rules), whatever the index's state;
time travel and incremental reads; every output; the command line."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_table import load_table
from metadata_table.layout import COLUMN_STATS, FILES, PARTITION_STATS, PARTITIONS, RECORD_INDEX
from metadata_table.maintenance import initialize
from metadata_table.read import rows as row_engines
from metadata_table.read import scan as scan_module
from metadata_table.read.filters import And, Compare, Expr, In, IsNull, Or, col, parse_filter
from metadata_table.read.snapshot import IndexedSnapshot
from timeline import Table
from timeline.config import LOCK_URL, READ_CACHE_MAX_MB, Config
from timeline.errors import (
    FilterSyntaxError,
    FilterTypeError,
    InvalidInstantError,
    SnapshotUnavailableError,
    TableConfigError,
    UnknownColumnError,
)
from timeline.fs_view import FileSystemView
from timeline.index_state import INDEX_FOLDER
from timeline.instant import Action
from timeline.table_config import PROPERTIES_FILE, TableConfig
from writer.client import WriteClient

from .test_metadata_table import keys, make_table, rows

CITIES = ["sf", "la", "ny"]


def _order(row: dict[str, Any]) -> tuple[str, str]:
    """Rows sorted by key, then by everything (an upsert that moved a key to another partition
    leaves one row in each, as Hudi's non-global index does)."""
    return row["uuid"], repr(sorted(row.items()))


# --- an oracle, independent of the scan: SQL's three-valued logic, row by row -----------------


def holds(expr: Expr, row: dict[str, Any]) -> bool | None:
    """``expr`` on one row: True, False, or None (unknown, as SQL has it)."""
    if isinstance(expr, And):
        a, b = holds(expr.left, row), holds(expr.right, row)
        return False if a is False or b is False else (None if None in (a, b) else True)
    if isinstance(expr, Or):
        a, b = holds(expr.left, row), holds(expr.right, row)
        return True if a is True or b is True else (None if None in (a, b) else False)
    if isinstance(expr, IsNull):
        return (row[expr.column] is not None) if expr.negated else (row[expr.column] is None)
    value = row[expr.column]
    if value is None:
        return None
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(expr, In):
        found = value in expr.values
        return not found if expr.negated else found
    assert isinstance(expr, Compare)
    other = expr.value
    return {
        "=": value == other,
        "!=": value != other,
        "<": value < other,
        "<=": value <= other,
        ">": value > other,
        ">=": value >= other,
    }[expr.op]


def full_read(table: Table, expr: Expr | None, as_of: str | None = None) -> list[dict[str, Any]]:
    view = FileSystemView(table.timeline, table.timeline.load(), as_of=as_of)
    data = view.read_snapshot().to_pylist() if view.latest_base_files() else []
    return sorted((r for r in data if expr is None or holds(expr, r) is True), key=_order)


def scanned(table: Table, text: str = "", **kwargs: Any) -> list[dict[str, Any]]:
    result = load_table(table.base_uri, config=table.config).scan(text, **kwargs).to_arrow()
    return sorted(result.to_pylist(), key=_order)


# --- random tables, commits and filters -----------------------------------------------------


def _rows(ids: list[int], ts: int, seed: int) -> pa.Table:
    def maybe(i: int, value: Any) -> Any:
        return None if (i * 7 + seed) % 11 == 0 else value

    return pa.table(
        {
            "uuid": [f"k{i:04d}" for i in ids],
            "city": [CITIES[(i + seed) % 3] for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "fare": pa.array([maybe(i, float((i * 13 + seed) % 97)) for i in ids], pa.float64()),
            "rating": pa.array([maybe(i + 1, (i + seed) % 5) for i in ids], pa.int32()),
            "day": pa.array(
                [maybe(i + 2, dt.date(2026, 1, 1) + dt.timedelta(days=i % 9)) for i in ids],
                pa.date32(),
            ),
            # decimals take the file-by-file path of data skipping
            "price": pa.array(
                [maybe(i + 3, decimal.Decimal(f"{(i * 7 + seed) % 50}.25")) for i in ids],
                pa.decimal128(10, 2),
            ),
        }
    )


def _literal(column: str, draw: Any) -> Any:
    if column == "fare":
        return float(draw(st.integers(-5, 100)))
    if column == "rating":
        return draw(st.integers(-1, 6))
    if column == "city":
        return draw(st.sampled_from([*CITIES, "oslo", "a", "zz"]))
    if column == "day":
        return dt.date(2026, 1, 1) + dt.timedelta(days=draw(st.integers(-1, 10)))
    if column == "price":
        return decimal.Decimal(f"{draw(st.integers(-1, 51))}.25")
    return f"k{draw(st.integers(0, 60)):04d}"  # uuid


@st.composite
def filters(draw: Any, depth: int = 2) -> Expr:
    if depth and draw(st.booleans()):
        left, right = draw(filters(depth - 1)), draw(filters(depth - 1))
        combined: Expr = And(left, right) if draw(st.booleans()) else Or(left, right)
        return combined.negate() if draw(st.integers(0, 4)) == 0 else combined
    column = draw(st.sampled_from(["fare", "rating", "city", "day", "price", "uuid"]))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return IsNull(column, draw(st.booleans()))
    if kind == 1:
        values = tuple(_literal(column, draw) for _ in range(draw(st.integers(1, 3))))
        return In(column, values, draw(st.booleans()))
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
    return Compare(column, op, _literal(column, draw))


def _table(tmp: Path, seed: int) -> Table:
    table = make_table(tmp / "t")
    client = WriteClient(table)
    client.insert(_rows(list(range(0, 30)), 1, seed))
    client.insert(_rows(list(range(30, 50)), 1, seed))
    initialize(table, list(PARTITIONS))
    client.upsert(_rows(list(range(seed % 7, 40, 3)), 2, seed + 1))
    client.delete(_rows([seed % 50, (seed * 3) % 50], 3, seed))
    return table


@pytest.fixture(params=[row_engines.DUCKDB, row_engines.PYARROW])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Scans read their kept files with this engine (DuckDB however small the files)."""
    if request.param == row_engines.DUCKDB:
        monkeypatch.setattr(row_engines, "DUCKDB_MIN_BYTES", 0)
    else:
        monkeypatch.setattr(row_engines, "duckdb_reason", lambda read: "pyarrow asked for")
    return str(request.param)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[Table]:
    return [_table(tmp_path_factory.mktemp(f"scan{seed}"), seed) for seed in range(3)]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(which=st.integers(0, 2), expr=filters(), columns=st.booleans())
def test_a_scan_returns_exactly_the_rows_a_filtered_full_read_returns(
    tables: list[Table], engine: str, which: int, expr: Expr, columns: bool
) -> None:
    table = tables[which]
    want = full_read(table, expr)
    fields = ("uuid", "fare", "day") if columns else ("*",)
    scan = load_table(table.base_uri, config=table.config).scan(expr, fields)
    assert row_engines.engine(scan.row_read())[0] == engine
    got = sorted(scan.to_arrow().to_pylist(), key=_order)
    if columns:
        want = sorted(({k: r[k] for k in fields} for r in want), key=_order)
    assert got == want


def test_comparisons_at_every_files_bounds(tables: list[Table], engine: str) -> None:
    """Each comparison, and NOT IN, against every file's own min and max of each column: the
    values where data skipping's rules (vectorized, or file by file for decimals) are tested."""
    from metadata_table.read.snapshot import IndexedSnapshot
    from metadata_table.records import python_value

    table = tables[0]
    trips = load_table(table.base_uri, config=table.config)
    stats = IndexedSnapshot(table).column_stats(["fare", "rating", "city", "day", "price"])
    bounds = {
        (row["column_name"], python_value(row["value_type"], row[side]))
        for row in stats.to_pylist()
        for side in ("min_value", "max_value")
    }
    for column, value in sorted(bounds, key=str):
        if value is None:
            continue
        for expr in [Compare(column, op, value) for op in ("=", "!=", "<", "<=", ">", ">=")] + [
            In(column, (value,), negated=True)
        ]:
            got = sorted(trips.scan(expr).to_arrow().to_pylist(), key=_order)
            assert got == full_read(table, expr), expr


def test_the_text_filter_language_parses_to_the_same_rows(tables: list[Table], engine: str) -> None:
    table = tables[0]
    for text in (
        "fare > 50 AND city IN ('sf', 'la')",
        "NOT (fare > 50) OR rating IS NULL",
        "city <> 'sf' AND day BETWEEN DATE '2026-01-02' AND DATE '2026-01-05'",
        "rating NOT IN (1, 2) AND fare NOT BETWEEN 10 AND 80",
        "_hoodie_record_key = 'k0012'",
        "uuid IN ('k0001', 'k0002', 'k0999')",
    ):
        assert scanned(table, text) == full_read(table, parse_filter(text)), text


# --- what the plan says ---------------------------------------------------------------------


def test_the_plan_says_what_each_index_dropped(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    for batch in range(4):
        client.insert(rows(keys(batch * 30, batch * 30 + 30)))
    initialize(table, list(PARTITIONS))
    trips = load_table(table.base_uri, config=table.config)
    scan = trips.scan("fare >= 90 AND city = 'sf'", ("uuid", "fare"))
    plan = scan.plan()
    assert plan.total == 12 and plan.partitions == 3
    assert plan.partitions_dropped == 2 and plan.dropped[PARTITION_STATS] == 8
    assert plan.dropped[COLUMN_STATS] == 3 and plan.kept == 1
    text = scan.explain()
    assert "1 of 12 read, 11 skipped" in text
    assert "partition_stats: dropped 8 file(s) (2 of 3 partitions whole)" in text
    assert "bloom_filters: not used" in text
    key = trips.scan("_hoodie_record_key = 'k0042'").plan()
    # the key's range in column_stats keeps its batch's three files; record_index the one
    assert key.kept == 1 and key.dropped == {PARTITION_STATS: 0, COLUMN_STATS: 9, RECORD_INDEX: 2}
    assert [
        r["uuid"] for r in trips.scan("_hoodie_record_key = 'k0042'").to_arrow().to_pylist()
    ] == ["k0042"]
    assert trips.scan().plan().unused[COLUMN_STATS] == "no filter"


def test_unapplied_instants_lost_and_inflight_partitions_never_drop_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.indexer.test_foreign_commits import foreign_write

    table = make_table(tmp_path / "t")
    WriteClient(table).insert(rows(keys(0, 60)))
    initialize(table, [FILES, COLUMN_STATS])
    foreign = foreign_write(table, rows(keys(100, 110), city="tokyo"), monkeypatch)
    scan = load_table(table.base_uri, config=table.config).scan("fare >= 100")
    assert scan.plan().unapplied[COLUMN_STATS] == (foreign,)
    assert scanned(table, "fare >= 100") == full_read(table, parse_filter("fare >= 100"))
    assert f"does not reflect {foreign} yet" in scan.explain()
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, COLUMN_STATS))  # lost
    assert "lost" in load_table(table.base_uri, config=table.config).scan("fare > 5").explain()
    assert scanned(table, "fare > 5") == full_read(table, parse_filter("fare > 5"))
    with table.lock("test") as lock:  # a build in progress: not used
        table.update_metadata_partitions(lock, add_inflight=[PARTITION_STATS])
    assert scanned(table, "city = 'tokyo'") == full_read(table, col("city") == "tokyo")


def test_limit_and_the_batch_reader(tables: list[Table]) -> None:
    table = tables[1]
    trips = load_table(table.base_uri, config=table.config)
    reader = trips.scan("fare >= 0", ("uuid",)).to_arrow_batch_reader()
    assert isinstance(reader, pa.RecordBatchReader) and reader.schema.names == ["uuid"]
    assert reader.read_all().num_rows == len(full_read(table, col("fare") >= 0))
    assert trips.scan(limit=5).to_arrow().num_rows == 5
    assert trips.scan(limit=0).to_arrow().num_rows == 0
    assert trips.scan("fare > 1000").to_arrow().num_rows == 0


def test_a_scan_reads_the_files_a_few_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tables: list[Table]
) -> None:
    """An Arrow dataset keeps every file's parsed footer until it goes: one dataset over all the
    kept files made a whole-table scan's memory grow with the table (805 MB at 20,000 files)."""
    import pyarrow.dataset as ds

    monkeypatch.setattr(row_engines, "duckdb_reason", lambda read: "pyarrow asked for")

    table = tables[1]
    trips = load_table(table.base_uri, config=table.config)
    assert len(trips.scan().plan().files) > 3
    sizes: list[int] = []
    made = ds.dataset

    def spy(paths: list[str], **kwargs: Any) -> ds.Dataset:
        sizes.append(len(paths))
        return made(paths, **kwargs)

    monkeypatch.setattr(row_engines, "FILES_PER_DATASET", 2)
    monkeypatch.setattr(ds, "dataset", spy)
    progress: list[tuple[int, int]] = []
    got = list(trips.scan("fare >= 0").batches(lambda *p: progress.append(p)))
    assert sum(b.num_rows for b in got) == len(full_read(table, col("fare") >= 0))
    assert sizes and max(sizes) <= 2 and sum(sizes) == len(trips.scan("fare >= 0").plan().files)
    assert progress[-1] == (sum(sizes), sum(sizes))
    assert [p for p, _ in progress] == sorted(p for p, _ in progress)
    for limit in (1, 7, 30):  # across datasets
        assert trips.scan(limit=limit).to_arrow().num_rows == limit


def test_every_output_holds_the_same_rows(tables: list[Table], tmp_path: Path) -> None:
    table = tables[2]
    scan = load_table(table.base_uri, config=table.config).scan(
        "fare > 20 AND rating IS NOT NULL", ("uuid", "fare", "rating", "day")
    )
    want = sorted(scan.to_arrow().to_pylist(), key=_order)
    assert want
    assert sorted(scan.to_pandas().to_dict("records"), key=_order) == want
    con = scan.to_duckdb("trips")
    assert con.execute("select count(*), sum(fare) from trips").fetchone() == (
        len(want),
        pytest.approx(sum(r["fare"] for r in want)),
    )
    assert sorted(scan.to_polars().to_dicts(), key=_order) == want


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, tables: list[Table]) -> None:
    import builtins

    real = builtins.__import__

    def no_polars(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "polars":
            raise ImportError("No module named 'polars'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_polars)
    monkeypatch.delitem(sys.modules, "polars", raising=False)
    table = tables[0]
    with pytest.raises(ImportError, match=r"pip install 'async-indexer\[polars\]'"):
        load_table(table.base_uri, config=table.config).scan().to_polars()


def test_bad_filters_and_columns_are_named(tables: list[Table]) -> None:
    trips = load_table(tables[0].base_uri, config=tables[0].config)
    with pytest.raises(FilterSyntaxError, match=r"at 14: expected a column name"):
        trips.scan("fare > 1 AND (")
    with pytest.raises(UnknownColumnError, match=r"no column 'fares'.*fare, rating, day"):
        trips.scan("fares > 1").plan()
    with pytest.raises(UnknownColumnError, match=r"no column 'nope'"):
        trips.scan("", ("uuid", "nope")).to_arrow()


def test_a_quoted_iso_date_compared_with_a_date_column_reads_as_a_date(
    tables: list[Table],
) -> None:
    """As Spark, DuckDB and Trino read ``day BETWEEN '2026-01-02' AND '2026-01-04'``: the same
    rows and the same plan as with DATE literals, in scans, prune() and Arrow filters."""
    table = tables[0]
    trips = load_table(table.base_uri, config=table.config)
    quoted = "day BETWEEN '2026-01-02' AND '2026-01-04' AND fare > 10"
    typed = "day BETWEEN DATE '2026-01-02' AND DATE '2026-01-04' AND fare > 10"
    expected = full_read(table, parse_filter(typed))
    assert expected and scanned(table, quoted) == expected
    assert trips.scan(quoted).plan().files == trips.scan(typed).plan().files
    snapshot = IndexedSnapshot(table)
    assert snapshot.prune(quoted).candidates == snapshot.prune(typed).candidates
    before = snapshot.prune("day < '2026-01-01'")  # column_stats compared dates, not strings
    assert before.pruned > 0
    assert before.candidates == snapshot.prune("day < DATE '2026-01-01'").candidates
    assert scanned(table, "day IN ('2026-01-03', '2026-01-05')") == full_read(
        table, parse_filter("day IN (DATE '2026-01-03', DATE '2026-01-05')")
    )


def test_a_literal_a_column_cannot_hold_names_the_syntax_that_works(tables: list[Table]) -> None:
    trips = load_table(tables[0].base_uri, config=tables[0].config)
    for text, syntax in (
        ("day = 'soon'", "DATE '1995-01-31' or '1995-01-31'"),
        ("price > 'cheap'", "a number, unquoted"),
        ("city = 5", "quoted text"),
    ):
        with pytest.raises(FilterTypeError) as raised:
            trips.scan(text).plan()
        assert syntax in str(raised.value), str(raised.value)
        with pytest.raises(FilterTypeError):  # prune() says the same
            IndexedSnapshot(tables[0]).prune(text)


def test_every_command_checks_a_filters_columns_the_same_way(tables: list[Table]) -> None:
    table = tables[0]
    with pytest.raises(UnknownColumnError, match="no column 'fares'"):
        IndexedSnapshot(table).prune("fares > 5")
    for args in (
        ["prune", table.base_uri, "--filter", "fares > 5"],
        ["query", table.base_uri, "fares > 5"],
        ["query", table.base_uri, "fares > 5", "--explain"],
    ):
        done = _cli(table, *args)
        assert done.returncode == 1, args
        assert done.stderr.startswith("error: no column 'fares' in the table"), done.stderr
        assert done.stdout == ""


# --- time travel and incremental reads --------------------------------------------------------


def test_time_travel_reads_each_completed_instant_as_it_was(tmp_path: Path) -> None:
    table = _table(tmp_path, 4)
    trips = load_table(table.base_uri, config=table.config)
    instants = table.timeline.load().write_timeline().completed().timestamps
    assert len(instants) == 4
    for instant in instants:
        expr = parse_filter("fare > 10 OR city = 'sf'")
        got = sorted(trips.scan(expr, as_of=instant).to_arrow().to_pylist(), key=_order)
        assert got == full_read(table, expr, as_of=instant), instant


def test_time_travel_to_cleaned_files_is_refused_by_name(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 10)))
    first = table.timeline.load().write_timeline().completed().last()
    assert first is not None
    client.upsert(rows(keys(0, 10), ts=2))
    initialize(table, list(PARTITIONS))
    # a clean (Hudi's, say) deletes the versions the first commit wrote
    from tests.indexer.test_foreign_commits import _clean_by_another_writer

    clean, _ = _clean_by_another_writer(table)
    with pytest.raises(SnapshotUnavailableError, match=rf"{clean}.clean deleted .*retained"):
        load_table(table.base_uri, config=table.config).scan(as_of=first.timestamp).plan()
    with pytest.raises(SnapshotUnavailableError, match=r"deleted by a clean.*retained"):
        load_table(table.base_uri, config=table.config).changes(
            "20200101000000000", first.timestamp
        ).plan()


def test_changes_return_the_latest_values_of_the_rows_commits_wrote(tmp_path: Path) -> None:
    table = _table(tmp_path, 5)
    trips = load_table(table.base_uri, config=table.config)
    instants = table.timeline.load().write_timeline().completed().timestamps
    truth = full_read(table, None)
    for begin in instants[:-1]:
        for end in [None, instants[-2]]:
            upto = end or instants[-1]
            if upto <= begin:
                continue
            want = [
                r
                for r in full_read(table, None, as_of=upto)
                if begin < r["_hoodie_commit_time"] <= upto
            ]
            got = sorted(trips.changes(begin, end).to_arrow().to_pylist(), key=_order)
            assert got == want, (begin, end)
    assert truth


def test_merge_on_read_tables_are_refused_by_name(tmp_path: Path) -> None:
    from timeline.table_config import TableType

    table = Table.create(
        str(tmp_path / "mor"), "t", ["uuid"], [], table_type=TableType.MERGE_ON_READ
    )
    with pytest.raises(TableConfigError, match="MERGE_ON_READ"):
        load_table(table.base_uri).scan()


# --- the command line -------------------------------------------------------------------------


def _cli(table: Table, *args: str) -> subprocess.CompletedProcess[str]:
    lock = table.config.get(LOCK_URL)
    command = [sys.executable, "-m", "metadata_table", *args, "--conf", f"indexer.lock.url={lock}"]
    return subprocess.run(command, capture_output=True, text=True)


def test_the_query_command_in_every_format(tables: list[Table], tmp_path: Path) -> None:
    table = tables[0]
    expr = parse_filter("fare > 60")
    want = [{"uuid": r["uuid"], "fare": r["fare"]} for r in full_read(table, expr)]
    base = table.base_uri
    lines = _cli(table, "query", base, "fare > 60", "--columns", "uuid,fare", "--format", "json")
    assert lines.returncode == 0, lines.stderr
    got = sorted((json.loads(x) for x in lines.stdout.splitlines()), key=_order)
    assert got == want
    csv = _cli(table, "query", base, "fare > 60", "--columns", "uuid,fare", "--format", "csv")
    assert (
        csv.stdout.splitlines()[0] == '"uuid","fare"'
        and len(csv.stdout.splitlines()) == len(want) + 1
    )
    out = tmp_path / "rows.parquet"
    done = _cli(table, "query", base, "fare > 60", "--format", "parquet", "--output", str(out))
    assert done.returncode == 0 and pq.read_table(out).num_rows == len(want)
    text = _cli(table, "query", base, "fare > 60", "--columns", "uuid,fare")
    assert text.stdout.splitlines()[0].split() == ["uuid", "fare"]
    assert f"({min(len(want), 20)} rows)" in text.stdout
    plan = _cli(table, "query", base, "fare > 60", "--explain", "--json")
    assert json.loads(plan.stdout)["files_kept"] <= json.loads(plan.stdout)["files_total"]
    bad = _cli(table, "query", base, "fare >")
    assert bad.returncode == 1 and "error: filter 'fare >', at 6: expected a value" in bad.stderr
    unknown = _cli(table, "query", base, "nope = 1")
    assert unknown.returncode == 1 and "its columns: _hoodie_commit_time" in unknown.stderr
    first = table.timeline.load().write_timeline().completed().timestamps[0]
    changes = _cli(table, "changes", base, "--begin", first, "--format", "json", "--limit", "3")
    assert changes.returncode == 0 and len(changes.stdout.splitlines()) == 3


def test_to_spark_reads_the_kept_files_with_the_filter_and_projection(
    tables: list[Table], spark: Any
) -> None:
    table = tables[1]
    trips = load_table(table.base_uri, config=table.config)
    for text, fields, limit in [
        ("fare > 20 AND NOT city = 'sf' OR rating IS NULL", ("uuid", "fare", "rating"), None),
        ("price >= 10.25 AND day < DATE '2026-01-06'", ("uuid", "price", "day"), None),
        ("fare > 1000", ("uuid",), None),
        ("", ("uuid", "city"), 4),
    ]:
        scan = trips.scan(text, fields, limit)
        frame = scan.to_spark(spark)
        assert frame.columns == list(fields)
        got = sorted((r.asDict() for r in frame.collect()), key=_order)
        if limit is None:
            assert got == sorted(scan.to_arrow().to_pylist(), key=_order), text
        else:
            assert len(got) == limit
    begin = table.timeline.load().write_timeline().completed().timestamps[1]
    changes = trips.changes(begin, selected_fields=("uuid", "_hoodie_commit_time"))
    got = sorted(r.asDict()["uuid"] for r in changes.to_spark(spark).collect())
    assert got == sorted(r["uuid"] for r in changes.to_arrow().to_pylist())


def test_reads_before_the_first_commit_or_after_the_newest_say_so(tables: list[Table]) -> None:
    table = tables[0]
    commits = [i.timestamp for i in table.timeline.load().write_timeline().completed()]
    early = "20000101000000000"
    trips = load_table(table.base_uri, config=table.config)
    before = trips.scan(as_of=early)
    assert before.to_arrow().num_rows == 0
    assert (
        before.plan().note
        == f"no commit had completed by {early}: the table's first is {commits[0]}"
    )
    assert "note: no commit had completed" in before.explain()
    assert trips.scan(as_of=commits[0]).plan().note is None
    after = trips.changes(begin=commits[-1])
    assert after.to_arrow().num_rows == 0
    assert (
        after.plan().note == f"no commit completed after {commits[-1]}: the newest is {commits[-1]}"
    )
    assert trips.changes(begin=commits[-2]).plan().note is None
    with pytest.raises(InvalidInstantError, match="before their begin"):
        trips.changes(begin=commits[-1], end=commits[0]).plan()
    done = _cli(table, "changes", table.base_uri, "--begin", "29991231000000000")
    assert (
        done.returncode == 0 and "note: no commit completed after 29991231000000000" in done.stderr
    )
    done = _cli(table, "query", table.base_uri, "--as-of", early)
    assert done.returncode == 0 and "note: no commit had completed by" in done.stderr


def test_a_warm_table_keeps_its_snapshot_until_the_table_or_its_index_changes(
    tmp_path: Path,
) -> None:
    """One IndexedTable plans each scan on the index as decoded for the table's state, kept
    while the timeline, the index's state file and the index's own timeline are unchanged:
    never on a snapshot older than the table."""
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    client.insert(rows(keys(30, 60)))
    trips = load_table(table.base_uri, config=table.config)
    first = trips.scan("fare >= 10")
    assert first.plan().kept and trips.scan("fare < 3").snapshot is first.snapshot
    initialize(table, [FILES, COLUMN_STATS])  # the index's state and timeline change
    indexed = trips.scan("fare >= 50")
    assert indexed.snapshot is not first.snapshot and indexed.plan().dropped[COLUMN_STATS] > 0
    assert scanned(table, "fare >= 50") == full_read(table, parse_filter("fare >= 50"))
    client.insert(rows(keys(60, 70)))  # a commit: its rows are read at once
    after = trips.scan("fare >= 65")
    assert after.snapshot is not indexed.snapshot
    assert sorted(after.to_arrow().to_pylist(), key=_order) == full_read(
        table, parse_filter("fare >= 65")
    )
    # the index's files deleted by hand, the timeline unchanged: planned again on what is there
    assert trips.scan("fare >= 20").snapshot is after.snapshot
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, COLUMN_STATS))
    for expr in (col("fare") >= 20, col("when") >= dt.datetime(2026, 1, 2, 10)):
        got = trips.scan(expr).to_arrow()  # the stats of "when" were never read: not found
        assert sorted(got.to_pylist(), key=_order) == full_read(table, expr)
    assert "lost" in trips.scan("fare > 1").explain()


def test_a_new_table_object_of_an_unchanged_table_plans_on_the_kept_snapshot(
    tmp_path: Path,
) -> None:
    """A query service opening the table per request: a new IndexedTable of the same table and
    configuration plans on the snapshot the one before kept while the table is unchanged, and
    on a new one after any change (a commit, hoodie.properties, a pending clean) but a write's
    start; another configuration, or the read cache off, keeps its own."""
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, [FILES, COLUMN_STATS])
    first = load_table(table.base_uri, config=table.config).scan("fare >= 10")
    again = load_table(table.base_uri, config=table.config).scan("fare < 3")
    assert again.snapshot is first.snapshot
    other = Config.resolve(explicit={LOCK_URL.key: table.config.get(LOCK_URL), "hoodie.x": "1"})
    assert load_table(table.base_uri, config=other).scan("fare < 3").snapshot is not first.snapshot
    off = Config.resolve(
        explicit={LOCK_URL.key: table.config.get(LOCK_URL), READ_CACHE_MAX_MB.key: 0}
    )
    own = load_table(table.base_uri, config=off)
    assert own.scan("fare < 3").snapshot is not first.snapshot
    assert own.scan("fare < 3").snapshot is own.scan("fare < 4").snapshot  # its own, kept
    changed = TableConfig(table.table_config.props | {"hoodie.table.x": "1"})
    table.storage.overwrite(PROPERTIES_FILE, changed.to_bytes())  # hoodie.properties moved on
    renewed = load_table(table.base_uri, config=table.config).scan("fare < 3")
    assert renewed.snapshot is not first.snapshot
    assert (
        load_table(table.base_uri, config=table.config).scan("fare > 1").snapshot
        is renewed.snapshot
    )
    # a write that has started and not completed: no reader sees its files yet
    started = table.timeline.transition_to_inflight(table.timeline.create_requested(Action.COMMIT))
    kept = load_table(table.base_uri, config=table.config).scan("fare < 3").snapshot
    assert kept is renewed.snapshot
    table.timeline.create_requested(Action.CLEAN)  # a pending clean is deleting files
    cleaning = load_table(table.base_uri, config=table.config).scan("fare < 3").snapshot
    assert cleaning is not kept
    table.timeline.complete(started)
    done = load_table(table.base_uri, config=table.config).scan("fare < 3").snapshot
    assert done is not cleaning
    client.insert(rows(keys(30, 40)))
    after = load_table(table.base_uri, config=table.config).scan("fare >= 35")
    assert after.snapshot is not first.snapshot
    assert sorted(after.to_arrow().to_pylist(), key=_order) == full_read(
        table, parse_filter("fare >= 35")
    )


def test_kept_snapshots_are_let_go_past_a_count_of_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process keeps snapshots of several tables while their listings hold at most
    KEPT_FILES files in all, the least recently used let go first (the newest always kept)."""
    tables = [make_table(tmp_path / name) for name in ("a", "b")]
    for table in tables:
        WriteClient(table).insert(rows(keys(0, 30)))

    def planned(table: Table) -> IndexedSnapshot:
        scan = load_table(table.base_uri, config=table.config).scan("fare >= 10")
        scan.plan()
        return scan.snapshot

    first = planned(tables[0])
    planned(tables[1])
    assert planned(tables[0]) is first  # both kept
    held = first.files_held
    assert held > 0
    monkeypatch.setattr(scan_module, "KEPT_FILES", held)
    planned(tables[1])  # the two listings now hold more than KEPT_FILES: a's let go
    assert planned(tables[0]) is not first
