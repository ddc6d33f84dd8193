"""`make bench-scale`: a table of many small files written in many commits with random keys, each
command a user would run in a new process, start-up included.

For each size (default 100,000 files; ``--sizes 100000,1000000``), on a table that
scripts/bench/synthetic.py makes (20 rows a file, 100 partitions, 50 commits, random keys):

- the footer-read bound: every data file's footer read once, in this process (what any build
  must at least do), just before the build (after the copy for Hudi, below, and its deletion,
  and the table's writes flushed to disk), the best of three passes (two past 100,000 files):
  warm, as the build then reads;
- ``indexer run --index-types files,column_stats,bloom_filters`` in a new process with its
  defaults: seconds, ratio to the bound, peak resident memory of everything it starts;
- prune() on an equality one file holds, and a one-key lookup, in a new process on the
  project's Arrow memory pool (timeline/memory_pool.py; milliseconds inside it, interpreter
  start-up not included): the first call of each (cold: every index file decoded, the
  process's lazy imports included); on a new snapshot with nothing written since (its
  listing worked out again, the decoded index files kept by the process); on a new snapshot
  after a commit of 1,000 rows into one partition (that commit's time reported too; its log
  files decoded); on a kept snapshot. The new-snapshot calls are also timed in a process on
  pyarrow's default pool. Then 60 upserts of 1,000 new rows into one partition, on one warm
  client: their p95 (the 57th of the 60: of 20, the 19th was the worst after the client's
  first, so one stall of the shared machine was the figure), and its ratio to the smallest
  table's;
- up to 100,000 files, scans in a new process: a point lookup on a key and a 1% range on
  ``ts``, on a new table object (the process's first: every index file decoded) and warm (best
  of 5), against DuckDB's ``read_parquet`` over every data file with the same filter (best of 2);
- ``indexer validate`` in a new process: seconds, ratio to the bound, peak memory (unless
  ``--no-validate``);
- with ``--cluster``, the same build on a Spark standalone cluster (a master and two workers of
  one core each, on loopback) from a copy of the table with its index dropped, made right after
  the local build (before the reads' commits), and ``indexer validate`` of that copy: its
  rebuild is the local build's own reading code, so "ok" for every partition is the equality
  of the cluster's build with the local one (validate's figures are then that copy's);
- with ``--hudi``, Apache Hudi 0.15's HoodieIndexer (column_stats and bloom_filters; it builds
  its ``files`` partition first, as ours builds ``files`` too) on a copy of the same table, made
  before our build, through the test harness's peer in a JVM of its own: its seconds, JVM start
  included, and Hudi / ours.

Ratios are measured in one run (the machine is shared and noisy); the markdown table is printed
and, with ``--out``, written to a file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench.run_all import _tree_rss_mb, lower_bound  # noqa: E402
from scripts.bench.synthetic import _key, hudi_index_seconds, make_table  # noqa: E402
from timeline import Table  # noqa: E402
from timeline.config import Config  # noqa: E402

ROWS, PARTITIONS, COMMITS = 20, 100, 50
INDEXES = "files,column_stats,bloom_filters"

#: run in a new process: prune() and lookup cold, on a new snapshot, after a commit, and on a kept
#: snapshot, timed inside it
_READS = """
import json, os, sys, time
from metadata_table.read.snapshot import IndexedSnapshot
from scripts.bench.synthetic import _rows
from timeline import Table
from timeline.config import Config
from timeline.memory_pool import use_project_pool
from writer.client import WriteClient
base, lock, expr, key, first = sys.argv[1:6]
UPSERTS = 60
if os.environ.get("AIX_BENCH_POOL") != "default":
    use_project_pool()  # as docs/operations.md tells a process that reads through the index
table = Table.open(base, Config.resolve(explicit={"indexer.lock.url": lock}))
def ms(call):
    started = time.perf_counter()
    out = call()
    return (time.perf_counter() - started) * 1000, out
prune_cold, kept = ms(lambda: IndexedSnapshot(table).prune(expr).candidates)
lookup_cold, holders = ms(lambda: IndexedSnapshot(table).lookup_keys([key])[key])
prune_fresh = ms(lambda: IndexedSnapshot(table).prune(expr))[0]
lookup_fresh = ms(lambda: IndexedSnapshot(table).lookup_keys([key]))[0]
with WriteClient(table) as client:  # 1,000 new rows into one partition
    commit = ms(lambda: client.insert(_rows(int(first), 1000, "p0000", random_keys=True)))[0]
prune_commit = ms(lambda: IndexedSnapshot(table).prune(expr))[0]
lookup_commit = ms(lambda: IndexedSnapshot(table).lookup_keys([key]))[0]
snapshot = IndexedSnapshot(table)
snapshot.prune(expr), snapshot.lookup_keys([key])
prune_kept = min(ms(lambda: snapshot.prune(expr))[0] for _ in range(5))
lookup_kept = min(ms(lambda: snapshot.lookup_keys([key]))[0] for _ in range(5))
upserts = []
with WriteClient(table) as client:  # upserts of 1,000 rows into one partition, warm
    for n in range(UPSERTS):
        rows = _rows(int(first) + 1000 * (n + 1), 1000, "p0001", random_keys=True)
        upserts.append(ms(lambda: client.upsert(rows))[0])
upsert_p95 = sorted(upserts)[-(-UPSERTS * 95 // 100) - 1]
print(json.dumps({"prune_cold": prune_cold, "lookup_cold": lookup_cold,
                  "prune_fresh": prune_fresh, "prune_kept": prune_kept,
                  "lookup_fresh": lookup_fresh, "lookup_kept": lookup_kept,
                  "prune_commit": prune_commit, "lookup_commit": lookup_commit,
                  "commit": commit, "upsert_p95": upsert_p95,
                  "kept": len(kept), "holders": len(holders)}))
"""


#: run in a new process: a point lookup and a 1% range through scan(), on a new table object
#: (the first call in the process: every index file decoded) and warm (best of 5), against
#: DuckDB's read_parquet over every data file with the same filter (best of 2, warm)
_SCANS = """
import glob, json, sys, time
import duckdb
from metadata_table import load_table
from timeline.config import Config
from timeline.memory_pool import use_project_pool
base, lock, point, lo, hi = sys.argv[1:6]
use_project_pool()
config = Config.resolve(explicit={"indexer.lock.url": lock})
queries = {"point": f"key = '{point}'", "range": f"ts >= {lo} AND ts < {hi}"}
files = [f for f in glob.glob(base + "/*/*.parquet")]
listed = "[" + ",".join(f"'{f}'" for f in files) + "]"
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
out = {}
def seconds(call):
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result
warm = load_table(base, config=config)
for name, where in queries.items():
    fresh, rows = seconds(lambda: load_table(base, config=config).scan(where).to_arrow())
    kept = min(seconds(lambda: warm.scan(where).to_arrow())[0] for _ in range(5))
    duck, theirs = min(
        seconds(lambda: con.sql(f"SELECT * FROM read_parquet({listed}) WHERE {where}").fetchall())
        for _ in range(2)
    )
    assert rows.num_rows == len(theirs), (name, rows.num_rows, len(theirs))
    out[name] = {"fresh": fresh * 1000, "warm": kept * 1000, "duckdb": duck * 1000,
                 "rows": rows.num_rows, "kept": warm.scan(where).plan().kept}
print(json.dumps(out))
"""
#: scans against DuckDB up to this many files (DuckDB reads every footer: minutes at 1,000,000)
SCAN_MOST_FILES = 100_000


def _run(
    command: list[str], env: dict[str, str] | None = None, check: bool = True
) -> tuple[float, float, str]:
    """Seconds and peak resident MB of ``command`` (with ``env`` added to the environment) and
    everything it starts; its stdout (with ``check``, an exit code but 0 raises)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    peak = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.05):
            peak = max(peak, _tree_rss_mb(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if check and process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} failed:\n{err[-3000:]}")
    return seconds, peak, out


def on_cluster(root: Path, base: Path, files: int, cluster: Any) -> dict[str, float]:
    """The same build on the Spark standalone cluster, on a copy of the table with its index
    dropped; then ``indexer validate`` of that copy, whose rebuild is the local build's reading
    code in this machine's processes: equal when every partition is ok."""
    copy = root / f"t{files}-cluster"
    shutil.copytree(base, copy)
    conf = ["--conf", f"indexer.lock.url=sqlite:///{root / f'locks-{files}-cluster.sqlite'}"]
    cli = [sys.executable, "-m", "indexer"]
    try:
        _run([*cli, "drop", str(copy), "--index-types", INDEXES, *conf])
        spark = ["--spark-master", cluster.url]
        for setting in ("driver.host=127.0.0.1", "driver.bindAddress=127.0.0.1"):
            spark += ["--spark-conf", f"spark.{setting}"]
        build, peak, _ = _run([*cli, "run", str(copy), "--index-types", INDEXES, *spark, *conf])
        print(f"  cluster build {build:.1f} s", file=sys.stderr, flush=True)
        seconds, validate_peak, out = _run(
            [*cli, "validate", str(copy), "--json", *conf], check=False
        )
        equal = float(json.loads(out)["ok"])
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return {
        "cluster_build": build,
        "cluster_peak": peak,
        "cluster_equal": equal,
        "validate": seconds,
        "validate_peak": validate_peak,
    }


def measure(
    root: Path,
    files: int,
    peer: Any = None,
    validate: bool = True,
    keep: bool = False,
    cluster: Any = None,
) -> dict[str, float]:
    base = root / f"t{files}"
    lock = f"sqlite:///{root / f'locks-{files}.sqlite'}"
    config = Config.resolve(explicit={"indexer.lock.url": lock})
    began = time.perf_counter()
    if (base / ".hoodie" / "hoodie.properties").exists():  # made beforehand, as below
        table = Table.open(str(base), config)
        made = float("nan")
        print(f"  {files:,} files: using {base}", file=sys.stderr, flush=True)
    else:
        table = make_table(
            base, files, ROWS, PARTITIONS, config=config, commits=COMMITS, random_keys=True
        )
        made = time.perf_counter() - began
        print(f"  {files:,} files made in {made:.0f} s", file=sys.stderr, flush=True)
    hudi = None
    if peer is not None:
        copy = root / f"t{files}-hudi"
        shutil.copytree(base, copy)
        hudi = hudi_index_seconds(peer, copy, ["column_stats", "bloom_filters"])
        shutil.rmtree(copy, ignore_errors=True)
        print(f"  HoodieIndexer {hudi:.1f} s", file=sys.stderr, flush=True)
    # just before the build, as the machine is then (not before the copy for Hudi and its
    # deletion, whose writes the build would pay for alone); warm, as the build reads: the
    # best of three passes (of two past 100,000 files)
    bound = lower_bound(table, 3 if files <= 100_000 else 2)
    cli = [sys.executable, "-m", "indexer"]
    conf = ["--conf", f"indexer.lock.url={lock}"]
    build, build_peak, _ = _run([*cli, "run", str(base), "--index-types", INDEXES, *conf])
    print(f"  build {build:.1f} s (bound {bound:.1f} s)", file=sys.stderr, flush=True)
    checked: dict[str, float] = {}
    if cluster is not None:  # before the reads' commits: both builds of one snapshot
        checked = on_cluster(root, base, files, cluster)
    row = files // 2 * ROWS + 7  # ts = row id; that row's key
    reads = [str(base), lock, f"ts = {row}", _key(row, True)]
    # pyarrow's default pool first (its commit's rows start after the table's), then ours
    default = json.loads(
        _run(
            [sys.executable, "-c", _READS, *reads, str(files * ROWS)], {"AIX_BENCH_POOL": "default"}
        )[2]
    )
    reads = json.loads(_run([sys.executable, "-c", _READS, *reads, str(files * ROWS + 10**6)])[2])
    reads["prune_default"], reads["lookup_default"] = (
        default["prune_fresh"],
        default["lookup_fresh"],
    )
    if files <= SCAN_MOST_FILES:
        total = files * ROWS
        lookup = [_key(total // 3 + 11, True), str(total // 2), str(total // 2 + total // 100)]
        scans = json.loads(_run([sys.executable, "-c", _SCANS, str(base), lock, *lookup])[2])
        reads["scans"] = scans
    if validate and cluster is None:
        seconds, peak, _ = _run([*cli, "validate", str(base), *conf])
        checked = {"validate": seconds, "validate_peak": peak}
    if not keep:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "files": files,
        "made": made,
        "bound": bound,
        "build": build,
        "build_peak": build_peak,
        **checked,
        **reads,
        **({"hudi": hudi} if hudi is not None else {}),
    }


def with_upsert_ratios(results: list[dict[str, float]]) -> None:
    """Each result's ``upsert_ratio``: its upserts' p95 over the smallest table's of the run."""
    smallest = min(results, key=lambda r: r["files"])["upsert_p95"] if results else 1.0
    for r in results:
        r["upsert_ratio"] = r["upsert_p95"] / smallest


def plot(results: list[dict[str, float]], path: Path) -> None:
    """The results against the table's size, as a PNG: the build's and validate's time over the
    footer-read bound, the fresh reads' milliseconds, and the upserts' p95 over the smallest
    table's of the same run (:func:`with_upsert_ratios`; needs matplotlib: the project's
    ``bench`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(results, key=lambda r: r["files"])
    files = [r["files"] for r in rows]
    fig, (ratios, reads) = plt.subplots(1, 2, figsize=(10, 3.8))
    ratios.plot(files, [r["build"] / r["bound"] for r in rows], marker="o", label="build / bound")
    checked = [r for r in rows if "validate" in r]
    ratios.plot(
        [r["files"] for r in checked],
        [r["validate"] / r["bound"] for r in checked],
        marker="o",
        label="validate / bound",
    )
    ratios.plot(
        files,
        [r["upsert_ratio"] for r in rows],
        marker="o",
        label="upsert p95 / smallest table's",
    )
    ratios.axhline(1.5, color="#999", linestyle="--", linewidth=0.8)
    ratios.set_title("Ratios (a new process each)")
    for name, label in (
        ("prune_fresh", "prune(), new snapshot"),
        ("lookup_fresh", "lookup, new snapshot"),
        ("prune_kept", "prune(), kept snapshot"),
        ("lookup_kept", "lookup, kept snapshot"),
    ):
        reads.plot(files, [r[name] for r in rows], marker="o", label=label)
    reads.set_yscale("log")
    reads.set_ylabel("ms")
    reads.set_title("Reads")
    for ax in (ratios, reads):
        ax.set_xscale("log")
        ax.set_xlabel("data files")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def table(results: list[dict[str, float]]) -> str:
    lines = [
        "| data files | bound s | build s | build / bound | build peak MB | validate s "
        "| validate / bound | validate peak MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        checked = (
            f"{r['validate']:.1f} | **{r['validate'] / r['bound']:.2f}x** | "
            f"{r['validate_peak']:.0f}"
            if "validate" in r
            else "not run | | "
        )
        lines.append(
            f"| {r['files']:,} | {r['bound']:.1f} | {r['build']:.1f} | "
            f"**{r['build'] / r['bound']:.2f}x** | {r['build_peak']:.0f} | {checked} |"
        )
    lines += [
        "",
        "| data files | prune() ms: cold / new snapshot / after a commit / kept | lookup ms: cold "
        "/ new snapshot / after a commit / kept | new snapshot on pyarrow's default pool: prune "
        "/ lookup ms | first commit (1,000 rows) ms | upserts of 1,000 rows into one "
        "partition: p95 ms (against the smallest table) | files kept by prune / lookup |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['files']:,} | {r['prune_cold']:.0f} / {r['prune_fresh']:.0f} / "
            f"{r['prune_commit']:.0f} / {r['prune_kept']:.1f} | {r['lookup_cold']:.0f} / "
            f"{r['lookup_fresh']:.0f} / {r['lookup_commit']:.0f} / {r['lookup_kept']:.1f} | "
            f"{r['prune_default']:.0f} / {r['lookup_default']:.0f} | {r['commit']:.0f} | "
            f"{r['upsert_p95']:.0f} (**{r['upsert_ratio']:.2f}x**) | "
            f"{r['kept']} / {r['holders']} |"
        )
    scanned = [r for r in results if "scans" in r]
    if scanned:
        lines += [
            "",
            "| data files | scan: point lookup ms, new table object / warm | DuckDB, every file "
            "| DuckDB / ours (new object) | 1% range on ts ms, new / warm (files kept) | DuckDB, "
            "every file | DuckDB / ours (new object) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in scanned:
            point, span = r["scans"]["point"], r["scans"]["range"]  # type: ignore[index]
            lines.append(
                f"| {r['files']:,} | {point['fresh']:.0f} / {point['warm']:.1f} | "
                f"{point['duckdb']:.0f} | **{point['duckdb'] / point['fresh']:.1f}x** | "
                f"{span['fresh']:.0f} / {span['warm']:.0f} ({span['kept']}) | "
                f"{span['duckdb']:.0f} | **{span['duckdb'] / span['fresh']:.1f}x** |"
            )
    peer = [r for r in results if "hudi" in r]
    if peer:
        lines += [
            "",
            "| data files | ours: `indexer run` s | Hudi 0.15 HoodieIndexer s | Hudi / ours |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['files']:,} | {r['build']:.1f} | {r['hudi']:.1f} | "
            f"**{r['hudi'] / r['build']:.2f}x** |"
            for r in peer
        ]
    clustered = [r for r in results if "cluster_build" in r]
    if clustered:
        lines += [
            "",
            "| data files | local build s | 2-worker cluster build s | cluster / local | "
            "cluster driver peak MB | equal to the local rebuild (`indexer validate`) |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['files']:,} | {r['build']:.1f} | {r['cluster_build']:.1f} | "
            f"{r['cluster_build'] / r['build']:.2f}x | {r['cluster_peak']:.0f} | "
            f"{'yes' if r['cluster_equal'] else '**no**'} |"
            for r in clustered
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="100000", help="comma-separated file counts (default 100000)"
    )
    parser.add_argument(
        "--root",
        help="a folder for the tables (default: a temporary one); a table already at "
        "ROOT/t<files> is used instead of making one (make it with scripts/bench/synthetic.py "
        "--rows 20 --partitions 100 --commits 50 --random-keys; it is deleted afterwards unless "
        "--keep)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the tables, indexed, for later by-hand runs"
    )
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument(
        "--plot", help="also draw the results to this PNG file (needs the bench extra)"
    )
    parser.add_argument(
        "--results",
        help="also write the results as JSON to this file",
    )
    parser.add_argument(
        "--hudi",
        action="store_true",
        help="also run Apache Hudi 0.15's HoodieIndexer on a copy of each table (needs the "
        "peer environment: make hudi-peer)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="also build each table on a Spark standalone cluster (a master and two workers of "
        "one core each on loopback, started here) from a copy with its index dropped, and "
        "validate that copy: the equality with the local build; validate's time is then "
        "that copy's",
    )
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="leave out indexer validate (it reads every data file again: at 1,000,000 files, "
        "about as long as the build)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(args.root or tempfile.mkdtemp(prefix="bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    peer = cluster = None
    results = []
    with contextlib.ExitStack() as started:  # what started is stopped, whatever fails after
        if args.cluster:
            from tests.spark.conftest import SparkCluster

            (root / "spark-cluster").mkdir(exist_ok=True)
            cluster = SparkCluster(root / "spark-cluster").start()
            started.callback(cluster.stop)
        if args.hudi:
            from tests.hudi_peer.peer import start_peer

            scratch = root / "peer-scratch"
            scratch.mkdir(exist_ok=True)
            peer = start_peer(scratch)
            started.callback(peer.close)
        for files in sizes:
            results.append(measure(root, files, peer, not args.no_validate, args.keep, cluster))
            print(f"  {results[-1]}", file=sys.stderr, flush=True)
    with_upsert_ratios(results)
    text = (
        f"Tables of {ROWS} rows a file, {PARTITIONS} partitions, {COMMITS} commits, random "
        f"keys (scripts/bench/synthetic.py); indexes {INDEXES}; each command in a new "
        "process.\n\n" + table(results)
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.results:
        Path(args.results).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
