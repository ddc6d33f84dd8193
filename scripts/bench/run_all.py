"""`make bench`: where we stand, measured side by side in one run; writes docs/benchmarks.md and
PNG plots (docs/bench-*.png).

1. index build (`column_stats,bloom_filters`) against (a) the lower bound: one process reading
   every file's Parquet footer and bloom filter bytes with pyarrow, no Spark; (b) the naive way:
   a Spark SQL full scan computing per-file min / max / null counts grouped by input_file_name();
2. scaling: build time and peak memory at several file counts;
3. data skipping: a 1%-selective range query and a point lookup through Spark, on all files vs the
   files prune() / the bloom lookup keep; prune() and bloom lookup latency;
4. writers under indexing: p50/p95 commit latency of a writer committing every second, without
   and with an index build running;
5. listing: a storage listing vs the files partition, on local files and on S3 (moto).

    python scripts/bench/run_all.py [--files 2000] [--rows 10000] [--scaling 500,2000,8000]
                                    [--scaling-rows 1000] [--listing-files 10000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from indexer.indexer import AsyncIndexer  # noqa: E402
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES  # noqa: E402
from metadata_table.maintenance import initialize  # noqa: E402
from metadata_table.reads import IndexedSnapshot  # noqa: E402
from metadata_table.records import info_from_storage  # noqa: E402
from timeline import Table  # noqa: E402
from timeline.config import Config  # noqa: E402
from timeline.fs_view import FileSystemView  # noqa: E402
from timeline.spark import spark_session  # noqa: E402
from writer.client import WriteClient, WriteOptions  # noqa: E402

CATEGORIES = ["red", "green", "blue", "amber", "violet"]


@dataclass
class Report:
    sections: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, text: str) -> None:
        print(text, flush=True)
        self.sections.append(text)


def _config(root: Path) -> Config:
    return Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{root / 'locks.sqlite'}"})


def _generating(files: int) -> Any:
    """A progress bar for a data generator, on a terminal only (nothing in a log file)."""
    return tqdm(
        total=files,
        desc=f"generating {files} files",
        unit="file",
        disable=not sys.stderr.isatty(),
        leave=False,
    )


def generate(base: Path, files: int, rows: int, commit_files: int = 50) -> Table:
    """N data files of R rows: a string key, an int64 ts clustered by file, a double, a
    low-cardinality string and an int; written through our writer."""
    table = Table.create(str(base), "bench", ["key"], [], config=_config(base.parent))
    client = WriteClient(table, WriteOptions(max_records_per_file=rows))
    # a bar on a terminal (make bench run by hand); nothing in a log file
    bar = _generating(files)
    for start in range(0, files, commit_files):
        count = min(commit_files, files - start)
        n = count * rows
        first = start * rows
        ids = range(first, first + n)
        client.insert(
            pa.table(
                {
                    "key": [
                        f"k-{i:010d}-{uuid.UUID(int=i * 2654435761 % (1 << 128)).hex[:8]}"
                        for i in ids
                    ],
                    "ts": pa.array(ids, pa.int64()),
                    "value": pa.array([(i % 997) * 0.5 for i in ids], pa.float64()),
                    "category": [CATEGORIES[i % len(CATEGORIES)] for i in ids],
                    "n": pa.array([i % 1000 for i in ids], pa.int32()),
                }
            )
        )
        bar.update(count)
    bar.close()
    return table


def _data_files(table: Table) -> list[Any]:
    return FileSystemView(table.timeline, table.timeline.load()).latest_base_files()


def lower_bound(table: Table) -> float:
    started = time.perf_counter()
    for f in _data_files(table):
        info_from_storage(table.storage, f.partition_path, f.file_name, f.size, f.instant_time)
    return time.perf_counter() - started


def naive_scan(table: Table, spark: Any) -> float:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    df = spark.read.parquet(table.storage.uri())
    cols = ["key", "ts", "value", "category", "n"]
    aggs = []
    for c in cols:
        aggs += [F.min(c), F.max(c), F.sum(F.col(c).isNull().cast("long"))]
    df.groupBy(F.input_file_name()).agg(*aggs).collect()
    return time.perf_counter() - started


def _tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants (the Spark JVM, its Python
    workers), from /proc."""
    total = 0.0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


class PeakRss:
    """The peak of :func:`_tree_rss_mb` while the block runs, sampled every 50 ms."""

    def __enter__(self) -> PeakRss:
        self.peak = _tree_rss_mb(os.getpid())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _tree_rss_mb(os.getpid()))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def build(table: Table, spark: Any) -> tuple[float, int]:
    """Seconds for `indexer run --index-types column_stats,bloom_filters` with a running Spark,
    and the peak resident memory (MB) of this process tree (driver, JVM, Python workers) during it."""
    AsyncIndexer(table, spark=spark).drop([COLUMN_STATS, BLOOM_FILTERS])
    with PeakRss() as memory:
        started = time.perf_counter()
        AsyncIndexer(table, spark=spark).run([COLUMN_STATS, BLOOM_FILTERS])
        seconds = time.perf_counter() - started
    return seconds, int(memory.peak)


def spark_startup_seconds() -> float:
    code = (
        f"import time, sys; t=time.perf_counter(); sys.path.insert(0, {str(ROOT)!r}); "
        "from timeline.spark import spark_session; s=spark_session('local[2]'); "
        "print(time.perf_counter()-t); s.stop()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def section_build(report: Report, table: Table, spark: Any, files: int, rows: int) -> None:
    startup = spark_startup_seconds()
    bound = lower_bound(table)
    naive = naive_scan(table, spark)
    ours, _ = build(table, spark)
    report.figures["build"] = {
        "lower_bound": bound,
        "naive": naive,
        "ours": ours,
        "startup": startup,
    }
    report.add(
        f"## Index build: {files} files x {rows} rows\n\n"
        "| method | seconds |\n|---|---|\n"
        f"| lower bound: footers + bloom filter bytes, one process, pyarrow | {bound:.2f} |\n"
        f"| naive: Spark SQL full scan, min/max/nulls by input_file_name() | {naive:.2f} |\n"
        f"| indexer run column_stats,bloom_filters (Spark running) | {ours:.2f} |\n"
        f"| Spark start-up (local[2]) | {startup:.2f} |\n\n"
        f"- ours / lower bound, start-up excluded: **{ours / bound:.2f}x** (target <= 2x: "
        f"{'met' if ours / bound <= 2 else 'not met'})\n"
        f"- ours / lower bound, start-up included: {(ours + startup) / bound:.2f}x\n"
        f"- naive / ours: **{naive / ours:.1f}x** (target >= 20x: {'met' if naive / ours >= 20 else 'not met'}); "
        f"start-up included on both sides: {(naive + startup) / (ours + startup):.1f}x\n"
    )


def section_scaling(report: Report, root: Path, spark: Any, counts: list[int], rows: int) -> None:
    results = []
    for count in counts:
        table = generate(root / f"scale-{count}", count, rows, commit_files=max(50, count // 20))
        seconds, peak = build(table, spark)
        results.append((count, seconds, peak))
        print(f"  scaling: {count} files -> {seconds:.2f}s, peak {peak} MB", flush=True)
    report.figures["scaling"] = results
    per_file = [s / c * 1000 for c, s, _ in results]
    lines = "\n".join(f"| {c} | {s:.2f} | {s / c * 1000:.2f} | {p} |" for c, s, p in results)
    report.add(
        f"## Scaling ({rows} rows per file)\n\n"
        "| data files | build seconds | ms per file | peak RSS MB (driver + JVM + workers) |\n|---|---|---|---|\n"
        f"{lines}\n\nms per file from the smallest to the largest run: "
        f"{per_file[0]:.2f} -> {per_file[-1]:.2f} (linear cost keeps it flat or falling)\n"
    )


def section_skipping(
    report: Report, table: Table, spark: Any, files: int, rows: int, label: str
) -> None:
    from pyspark.sql import functions as F

    initialize(table, [FILES])  # listings from the index too
    snapshot = IndexedSnapshot(table)
    total_rows = files * rows
    lo, hi = total_rows // 2, total_rows // 2 + total_rows // 100  # 1% of ts, clustered by file
    expr = f"ts >= {lo} AND ts < {hi}"
    started = time.perf_counter()
    repeats = 20
    for _ in range(repeats):
        pruned = snapshot.prune(expr)
    prune_ms = (time.perf_counter() - started) / repeats * 1000
    all_paths = [table.storage.uri(f.path) for f in _data_files(table)]
    kept = [table.storage.uri(f.path) for f in pruned.candidates]

    def query(paths: list[str]) -> tuple[float, int]:
        began = time.perf_counter()
        count = spark.read.parquet(*paths).where((F.col("ts") >= lo) & (F.col("ts") < hi)).count()
        return time.perf_counter() - began, count

    full_s, full_n = query(all_paths)
    skip_s, skip_n = query(kept)
    key = f"k-{lo + 7:010d}-"
    sample = spark.read.parquet(kept[0]).select("key").where(F.col("key").startswith(key)).first()
    point_key = sample["key"] if sample else key
    started = time.perf_counter()
    for _ in range(repeats):
        candidates = snapshot.lookup_keys([point_key])[point_key]
    bloom_ms = (time.perf_counter() - started) / repeats * 1000
    t0 = time.perf_counter()
    point_n = spark.read.parquet(*all_paths).where(F.col("key") == point_key).count()
    point_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    point_skip_n = (
        spark.read.parquet(*[table.storage.uri(p) for p in candidates])
        .where(F.col("key") == point_key)
        .count()
    )
    point_skip = time.perf_counter() - t0
    assert (full_n, point_n) == (skip_n, point_skip_n), "data skipping changed a result"
    report.figures.setdefault("skipping", []).append((files, prune_ms, bloom_ms, full_s, skip_s))
    report.add(
        f"## Data skipping at {files} files ({label})\n\n"
        "| query | all files | after skipping | speed-up |\n|---|---|---|---|\n"
        f"| 1% range on ts ({len(all_paths)} -> {len(kept)} files) | {full_s:.2f}s | {skip_s:.2f}s | **{full_s / skip_s:.1f}x** |\n"
        f"| point lookup on key ({len(all_paths)} -> {len(candidates)} files) | {point_full:.2f}s | {point_skip:.2f}s | **{point_full / point_skip:.1f}x** |\n\n"
        f"- prune() latency: **{prune_ms:.1f} ms** (target < 100 ms: {'met' if prune_ms < 100 else 'not met'}); "
        f"bloom lookup of one key: {bloom_ms:.1f} ms; same results with and without skipping\n"
    )


def section_writers(report: Report, root: Path, spark: Any) -> None:
    table = generate(root / "writers", 400, 2000)
    latencies: dict[str, list[float]] = {"without": [], "with": []}
    client = WriteClient(table)
    phase = {"name": "without"}
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            keys = [f"w-{n:06d}-{i}" for i in range(100)]
            client.insert(
                pa.table(
                    {
                        "key": keys,
                        "ts": pa.array([n] * 100, pa.int64()),
                        "value": [0.5] * 100,
                        "category": ["red"] * 100,
                        "n": pa.array([1] * 100, pa.int32()),
                    }
                )
            )
            latencies[phase["name"]].append(time.perf_counter() - started)
            n += 1
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(20)
    phase["name"] = "with"
    # keep a build running for as long as the baseline lasted (rebuilding if it finishes early)
    began = time.perf_counter()
    builds = 0
    while time.perf_counter() - began < 20 or builds == 0:
        AsyncIndexer(table, spark=spark).drop([COLUMN_STATS, BLOOM_FILTERS])
        AsyncIndexer(table, spark=spark).run([COLUMN_STATS, BLOOM_FILTERS])
        builds += 1
    stop.set()
    thread.join()
    without, with_ = latencies["without"], latencies["with"]
    p95_ratio = _percentile(with_, 0.95) / _percentile(without, 0.95)
    report.figures["writers"] = (without, with_)
    report.add(
        "## A writer committing every second, without and with an index build\n\n"
        "| | commits | p50 ms | p95 ms |\n|---|---|---|---|\n"
        f"| without | {len(without)} | {statistics.median(without) * 1000:.0f} | {_percentile(without, 0.95) * 1000:.0f} |\n"
        f"| with the build running | {len(with_)} | {statistics.median(with_) * 1000:.0f} | {_percentile(with_, 0.95) * 1000:.0f} |\n\n"
        f"- p95 ratio: **{p95_ratio:.2f}** (target <= 1.2: {'met' if p95_ratio <= 1.2 else 'not met'}); "
        f"{builds} builds ran back to back during the second phase\n"
    )


def section_listing(report: Report, root: Path, files: int) -> None:
    rows = []
    for backend in ("local", "s3"):
        moto = None
        if backend == "local":
            base, options = root / "listing", {}
        else:
            from scripts.bench.markers import _moto  # type: ignore[import-not-found]

            moto, endpoint = _moto()
            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
            base = f"s3://bench/{uuid.uuid4().hex}"
        try:
            explicit = {
                "indexer.lock.url": f"sqlite:///{root / ('listing-' + backend + '.sqlite')}",
                **{f"indexer.storage.{k}": v for k, v in options.items()},
            }
            table = Table.create(
                str(base), "bench", ["key"], ["category"], config=Config.resolve(explicit=explicit)
            )
            client = WriteClient(table, WriteOptions(max_records_per_file=1))
            bar = _generating(files)
            for start in range(0, files, 500):
                keys = [f"k{i:07d}" for i in range(start, min(files, start + 500))]
                client.insert(
                    pa.table(
                        {"key": keys, "category": [CATEGORIES[i % 5] for i in range(len(keys))]}
                    )
                )
                bar.update(len(keys))
            bar.close()
            initialize(table, [FILES])
            timeline = table.timeline.load()
            started = time.perf_counter()
            listed = len(FileSystemView(table.timeline, timeline).all_base_files)
            storage_s = time.perf_counter() - started
            started = time.perf_counter()
            indexed = len(IndexedSnapshot(table, timeline).indexed_files())
            index_s = time.perf_counter() - started
            assert listed == indexed == files
            rows.append((backend, files, storage_s, index_s))
        finally:
            if moto is not None:
                moto.kill()
    report.figures["listing"] = rows
    lines = "\n".join(
        f"| {b} | {n} | {s * 1000:.0f} | {i * 1000:.0f} | {s / i:.1f}x |" for b, n, s, i in rows
    )
    report.add(
        "## Listing every data file: storage listing vs the files partition\n\n"
        "| storage | files | storage listing ms | files partition ms | ratio |\n|---|---|---|---|---|\n"
        f"{lines}\n"
    )


def _indexer_run_seconds(base: Path) -> float:
    """``indexer run column_stats,bloom_filters`` as a user runs it: a new process, its JVM
    start included."""
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "run",
            str(base),
            "--index-types",
            "column_stats,bloom_filters",
            "--lock-url",
            f"sqlite:///{base.parent / (base.name + '-locks.sqlite')}",
            "--spark-master",
            "local[2]",
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def section_peer(report: Report, root: Path, counts: list[int]) -> None:
    """Apache Hudi's own HoodieIndexer (through the test harness's peer, in a JVM of its own)
    and ours on copies of one table, both timed with their JVM start."""
    from scripts.bench.synthetic import make_table
    from tests.hudi_peer.peer import HudiTable, start_peer

    scratch = root / "peer-scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    peer = start_peer(scratch)
    rows = []
    try:
        for files in counts:
            print(f"peer comparison at {files} files ...", flush=True)
            source = root / f"peer-{files}"
            make_table(source, files, 20, partitions=20, config=_config(root))
            ours_copy, hudi_copy = root / f"peer-{files}-ours", root / f"peer-{files}-hudi"
            shutil.copytree(source, ours_copy)
            shutil.copytree(source, hudi_copy)
            ours = _indexer_run_seconds(ours_copy)
            hudi_table = HudiTable(
                str(hudi_copy),
                name="synthetic",
                record_key=("key",),
                partition_fields=("part",),
                precombine=None,
            )
            theirs = peer.index(hudi_table, ["column_stats", "bloom_filters"])["wall_seconds"]
            rows.append((files, ours, theirs))
            for folder in (source, ours_copy, hudi_copy):
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        peer.close()
    report.figures["peer"] = rows
    lines = [
        "## Against Apache Hudi's HoodieIndexer (column_stats + bloom_filters, 20 rows per file)",
        "",
        "| files | ours: `indexer run` (s) | Hudi 0.15 HoodieIndexer (s) | Hudi / ours |",
        "|---|---|---|---|",
    ]
    for files, ours, theirs in rows:
        lines.append(f"| {files:,} | {ours:.1f} | {theirs:.1f} | {theirs / ours:.2f}x |")
    lines += [
        "",
        "Both on copies of one table made by scripts/bench/synthetic.py, each in a new process "
        "with its own JVM start (target: Hudi / ours >= 2x). Hudi's run first builds its own "
        "metadata table's `files` partition, which its indexer needs; ours needs none.",
    ]
    report.add("\n".join(lines))


def plots(report: Report, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    if "build" in report.figures:
        b = report.figures["build"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = ["lower bound", "indexer", "naive Spark scan"]
        ax.bar(names, [b["lower_bound"], b["ours"], b["naive"]], color=["#999", "#2a7", "#c44"])
        ax.set_ylabel("seconds")
        ax.set_title("Index build (column_stats + bloom_filters)")
        fig.tight_layout()
        fig.savefig(out / "bench-build.png")
        made.append("bench-build.png")
    if "scaling" in report.figures:
        data = report.figures["scaling"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([c for c, _, _ in data], [s for _, s, _ in data], marker="o")
        ax.set_xlabel("data files")
        ax.set_ylabel("build seconds")
        ax.set_title("Build time by table size")
        fig.tight_layout()
        fig.savefig(out / "bench-scaling.png")
        made.append("bench-scaling.png")
    if "writers" in report.figures:
        without, with_ = report.figures["writers"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.boxplot(
            [[x * 1000 for x in without], [x * 1000 for x in with_]],
            tick_labels=["without", "with build"],
        )
        ax.set_ylabel("commit latency ms")
        ax.set_title("Writer commit latency")
        fig.tight_layout()
        fig.savefig(out / "bench-writers.png")
        made.append("bench-writers.png")
    if "peer" in report.figures:
        rows = report.figures["peer"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1] for r in rows], 0.4, label="ours: indexer run")
        ax.bar([i + 0.2 for i in x], [r[2] for r in rows], 0.4, label="Hudi HoodieIndexer")
        ax.set_xticks(list(x), [f"{r[0]:,} files" for r in rows])
        ax.set_ylabel("seconds, JVM start included")
        ax.set_title("column_stats + bloom_filters")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "bench-peer.png")
        made.append("bench-peer.png")
    plt.close("all")
    return made


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--scaling", default="500,2000,8000")
    parser.add_argument("--scaling-rows", type=int, default=1000)
    parser.add_argument("--listing-files", type=int, default=10_000)
    parser.add_argument("--peer-files", default="2000,20000")
    parser.add_argument("--sections", default="build,skipping,scaling,writers,listing,peer")
    parser.add_argument("--out", default=str(ROOT / "docs"))
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-"))
    report = Report()
    report.add(
        f"# Benchmarks\n\n{dt.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Spark local[2]; measured side by side in one run on a shared "
        "machine, so read the ratios rather than the absolute numbers.\n"
    )
    spark = spark_session("local[2]")
    try:
        if sections & {"build", "skipping"}:
            print(f"generating {args.files} files x {args.rows} rows ...", flush=True)
            table = generate(root / "main", args.files, args.rows)
            if "build" in sections:
                section_build(report, table, spark, args.files, args.rows)
            if "skipping" in sections:
                section_skipping(
                    report, table, spark, args.files, args.rows, f"{args.rows} rows per file"
                )
        if "scaling" in sections:
            counts = [int(c) for c in args.scaling.split(",")]
            section_scaling(report, root, spark, counts, args.scaling_rows)
            if "skipping" in sections:
                largest = root / f"scale-{counts[-1]}"
                big = Table.open(str(largest), _config(largest.parent))
                section_skipping(
                    report,
                    big,
                    spark,
                    counts[-1],
                    args.scaling_rows,
                    f"{args.scaling_rows} rows per file",
                )
        if "writers" in sections:
            section_writers(report, root, spark)
        if "listing" in sections:
            section_listing(report, root, args.listing_files)
        if "peer" in sections:
            section_peer(report, root, [int(c) for c in args.peer_files.split(",")])
        images = plots(report, out)
        body = "\n".join(report.sections) + "\n" + "\n".join(f"![{i}]({i})" for i in images) + "\n"
        (out / "benchmarks.md").write_text(body)
        print(f"\nwrote {out / 'benchmarks.md'} and {', '.join(images)}")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
