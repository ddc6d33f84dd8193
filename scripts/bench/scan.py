"""Scans through the index against reading everything: `load_table(...).scan(...).to_arrow()` on
a 2,000-file table (10,000 rows a file, ts clustered by file, keys sorted), for a 1% range query
and a point lookup, beside pyarrow's dataset and DuckDB's read_parquet over all files with the
same filter, hudi-rs's read with the filter, and the faster of DuckDB and pyarrow reading only
the files the scan keeps (the bound: what is left when planning costs nothing). Then the peak
memory of a whole-table scan through `to_arrow_batch_reader()`, in a new process, at 2,000 and
20,000 files, beside `to_arrow()`. Before those, TPC-H lineitem against DuckDB and pyarrow
(scripts/bench/tpch.py; `--tpch-scale 0` leaves it out).

    python scripts/bench/scan.py [--files 2000] [--rows 10000] [--memory-files 2000,20000]
                                 [--tpch-scale 1]

Run by `make bench` (sections of docs/benchmarks.md) and by `make bench-scan` alone (it prints
the sections). Every time is the best of several passes with every reader warm; the machine is
shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from indexer.indexer import AsyncIndexer, IndexerOptions  # noqa: E402
from metadata_table import load_table  # noqa: E402
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES  # noqa: E402
from scripts.bench.synthetic import make_table  # noqa: E402
from scripts.bench.timing import best_seconds  # noqa: E402
from timeline import Table  # noqa: E402
from timeline.config import Config  # noqa: E402
from timeline.fs_view import FileSystemView  # noqa: E402

TARGET_FASTER = 20.0  # at least this much faster than each full-scan peer
TARGET_BOUND = 1.2  # at most this much slower than reading only the kept files


def _table(root: Path, name: str, files: int, rows: int) -> Table:
    base = root / name
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{root / (name + '.db')}"})
    table = make_table(base, files, rows, config=config)
    AsyncIndexer(table, IndexerOptions(engine="local")).run([FILES, COLUMN_STATS, BLOOM_FILTERS])
    return table


def _hudi_rs(base: str, filters: list[tuple[str, str, str]], expr: Any) -> int:
    import hudi

    table = hudi.HudiTableBuilder.from_base_uri(base).build()
    batches = table.read(hudi.HudiReadOptions(filters=filters))
    result = pa.Table.from_batches(batches) if batches else pa.table({})
    return result.filter(expr).num_rows  # its filters prune files; rows are filtered here


def queries(table: Table, files: int, rows: int) -> list[dict[str, Any]]:
    """The 1% range query and the point lookup, on every reader."""
    total = files * rows
    lo, hi = total // 2, total // 2 + total // 100
    key = f"k-{lo + 7:010d}"
    cases = [
        (
            "1% range on ts",
            f"ts >= {lo} AND ts < {hi}",
            (ds.field("ts") >= lo) & (ds.field("ts") < hi),
            f"ts >= {lo} AND ts < {hi}",
            [("ts", ">=", str(lo)), ("ts", "<", str(hi))],
        ),
        (
            "point lookup on the key",
            f"key = '{key}'",
            ds.field("key") == key,
            f"key = '{key}'",
            [("key", "=", key)],
        ),
    ]
    every = [
        table.storage.uri(f.path)
        for f in FileSystemView(table.timeline, table.timeline.load()).latest_base_files()
    ]
    trips = load_table(table.base_uri, config=table.config)
    return [_query(trips, every, *case) for case in cases]


def _query(
    trips: Any,
    every: list[str],
    name: str,
    text: str,
    expr: Any,
    sql: str,
    hudi_filters: list[tuple[str, str, str]],
) -> dict[str, Any]:
    import duckdb

    table = trips.table
    kept = [table.storage.uri(f.path) for f in trips.scan(text).plan().files]
    con = duckdb.connect()

    def duck(paths: list[str]) -> pa.Table:
        files = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
        result: pa.Table = con.sql(
            f"SELECT * FROM read_parquet({files}) WHERE {sql}"
        ).to_arrow_table()
        return result

    def new_object() -> pa.Table:  # a new table object: the snapshot the process kept
        return load_table(table.base_uri, config=table.config).scan(text).to_arrow()

    def new_snapshot() -> pa.Table:  # a snapshot made anew, as after any change of the table
        scan = trips.scan(text)
        trips.snapshot_at(scan.timeline, fresh=True)
        result: pa.Table = scan.to_arrow()
        return result

    # best of 5, every reader warm (each runs once before: the page cache holds the files)
    warm_s, ours = best_seconds(lambda: trips.scan(text).to_arrow(), 5)
    object_s, _ = best_seconds(new_object, 5)
    fresh_s, _ = best_seconds(new_snapshot, 5)
    kept_duck_s, _ = best_seconds(lambda: duck(kept), 5)
    kept_arrow_s, bound = best_seconds(
        lambda: ds.dataset(kept, format="parquet").to_table(filter=expr), 5
    )
    full_s, full = best_seconds(
        lambda: ds.dataset(every, format="parquet").to_table(filter=expr), 3
    )
    duck_s, duck_rows = best_seconds(lambda: duck(every), 3)
    hudi_s, hudi_rows = best_seconds(lambda: _hudi_rs(table.base_uri, hudi_filters, expr), 1)
    counts = {ours.num_rows, bound.num_rows, full.num_rows, duck_rows.num_rows, hudi_rows}
    assert len(counts) == 1, f"{name}: readers disagree on the rows: {counts}"
    return {
        "query": name,
        "rows": ours.num_rows,
        "files": f"{len(every)} -> {len(kept)}",
        "ours": warm_s,
        "ours_object": object_s,
        "ours_fresh": fresh_s,
        "kept_only": min(kept_duck_s, kept_arrow_s),
        "kept_engine": "DuckDB" if kept_duck_s <= kept_arrow_s else "pyarrow",
        "pyarrow_all": full_s,
        "duckdb_all": duck_s,
        "hudi_rs": hudi_s,
    }


# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the parent across fork and
# exec, so a child started by a big parent would report the parent's peak.
_MEMORY = """
import json, sys
from metadata_table import load_table
from timeline.config import Config
table = load_table(sys.argv[1], config=Config.resolve(explicit={"indexer.lock.url": sys.argv[2]}))
scan = table.scan()
def peak_mb():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
scan.plan()
before = peak_mb()
rows = 0
if sys.argv[3] == "reader":
    for batch in scan.to_arrow_batch_reader():
        rows += batch.num_rows
else:
    rows = scan.to_arrow().num_rows
peak = peak_mb()
print(json.dumps({"rows": rows, "before_mb": before, "peak_mb": peak}))
"""


def memory(table: Table, how: str) -> dict[str, float]:
    """Peak RSS of a whole-table scan in a new process (``how``: reader or to_arrow)."""
    lock = f"sqlite:///{Path(table.base_uri).parent / 'memory.db'}"
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY, table.base_uri, lock, how],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def section(
    root: Path, files: int, rows: int, memory_files: list[int]
) -> tuple[str, dict[str, Any]]:
    """The report section (markdown) and its figures."""
    root.mkdir(parents=True, exist_ok=True)
    main = _table(root, "scan", files, rows)
    results = queries(main, files, rows)
    lines = [
        f"## Scans through the index ({files} files x {rows} rows)\n",
        "`load_table(...).scan(filter).to_arrow()`: on one table object (a plan per call on the "
        "snapshot of the index kept while the table is unchanged); on a new table object per "
        "call (the timeline and the index's state listed to see that the table is unchanged, "
        "then the snapshot the process kept); and on a snapshot made anew per call, as after "
        "any change of the table (the index's files listed, the listing, column_stats and "
        "bloom_filters worked out again from the files the process has decoded). Against "
        "readers of every file with the same filter, and against the faster of DuckDB and "
        "pyarrow reading only the files the scan keeps (planning free). Best of 5 (of 3 for "
        "the full scans, hudi-rs once), every reader warm.\n",
        "| query | files | ours | new table object | new snapshot | kept files only "
        "| pyarrow, all files | DuckDB, all files | hudi-rs | vs pyarrow / DuckDB / hudi-rs "
        "| ours / kept-only: one object / new object / new snapshot |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        vs = [r["pyarrow_all"] / r["ours"], r["duckdb_all"] / r["ours"], r["hudi_rs"] / r["ours"]]
        bound = [r[k] / r["kept_only"] for k in ("ours", "ours_object", "ours_fresh")]
        lines.append(
            f"| {r['query']} ({r['rows']} rows) | {r['files']} | {r['ours'] * 1000:.1f} ms | "
            f"{r['ours_object'] * 1000:.1f} ms | {r['ours_fresh'] * 1000:.1f} ms | "
            f"{r['kept_only'] * 1000:.1f} ms ({r['kept_engine']}) | "
            f"{r['pyarrow_all'] * 1000:.0f} ms | {r['duckdb_all'] * 1000:.0f} ms | "
            f"{r['hudi_rs'] * 1000:.0f} ms | {' / '.join(f'{v:.1f}x' for v in vs)} | "
            f"{' / '.join(f'{v:.2f}x' for v in bound)} |"
        )
    ok_fast = all(
        min(r["pyarrow_all"], r["duckdb_all"], r["hudi_rs"]) / r["ours"] >= TARGET_FASTER
        for r in results
    )

    def within(key: str) -> str:
        ok = all(r[key] / r["kept_only"] <= TARGET_BOUND for r in results)
        return "met" if ok else "not met"

    lines.append(
        f"\n- >= {TARGET_FASTER:.0f}x faster than each full-scan peer: "
        f"{'met' if ok_fast else 'not met'}; within {TARGET_BOUND}x of reading the kept files "
        f"only: {within('ours')} on one table object, {within('ours_object')} on a new table "
        f"object each call, {within('ours_fresh')} on a new snapshot each call\n"
    )
    figures: dict[str, Any] = {"queries": results, "memory": []}
    if not memory_files:
        return "\n".join(lines) + "\n", figures
    lines += [
        "Peak memory of a scan of the whole table, in a new process: through "
        "`to_arrow_batch_reader()` (batches dropped as they come) and through `to_arrow()`:\n",
        "| table | rows | Parquet MB | RSS after planning | peak, batch reader | peak, to_arrow() |",
        "|---|---|---|---|---|---|",
    ]
    for count in memory_files:
        per_file = max(1, files * rows // count)
        table = main if count == files else _table(root, f"memory{count}", count, per_file)
        size = sum(p.stat().st_size for p in Path(table.base_uri).rglob("*.parquet"))
        reader, whole = memory(table, "reader"), memory(table, "arrow")
        figures["memory"].append((count, reader["peak_mb"], whole["peak_mb"]))
        lines.append(
            f"| {count} files x {per_file} rows | {int(reader['rows'])} | {size / 2**20:.0f} | "
            f"{reader['before_mb']:.0f} MB | **{reader['peak_mb']:.0f} MB** | "
            f"{whole['peak_mb']:.0f} MB |"
        )
    return "\n".join(lines) + "\n", figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument(
        "--memory-files",
        default="2000,20000",
        help="file counts of the whole-table memory rows, comma-separated; '' for none",
    )
    parser.add_argument("--tpch-scale", default="1", help="TPC-H scale factor; 0: no TPC-H")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-scan-"))
    try:
        if args.tpch_scale != "0":
            from scripts.bench.tpch import section as tpch_section

            print(tpch_section(root / "tpch", args.tpch_scale)[0])
        text, _ = section(
            root, args.files, args.rows, [int(c) for c in args.memory_files.split(",") if c.strip()]
        )
        print(text)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
