"""A table's long life: one warm writer upserting for thousands of commits with default settings
(its inline clean and archival on), every index built first; at checkpoints, the storage (data
and `.hoodie/`, files and bytes), the instant files on the active timeline, commit p50/p95 over
the commits since the last checkpoint, and a fresh read in a new process (open the table, look
one key up through the index). Prints each checkpoint and, at the end, the ratios of the last
checkpoint to the first one whose commits all came after the first --baseline commits (the
warm-up: the readers' grace period, `indexer.clean.grace.seconds`, holds back every clean for
its first minute); targets: flat within 1.3x; data within 1.5x of what the cleaner retains.

With ``--daemon`` the writer's inline services are off and ``indexer serve`` runs them beside
it (clean, archival and the index's upkeep every 10 seconds). ``--out FILE`` writes the
checkpoints as JSON, which ``python -m scripts.bench.plot_longrun`` draws.

    python -m scripts.bench.longrun --commits 10000 [--every 500] [--daemon] [--out run.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

_FRESH_READ = """
import sys, time
started = time.perf_counter()
from metadata_table import load_table
from metadata_table.read.filters import col
table = load_table(sys.argv[1])
rows = table.scan(col("uuid") == sys.argv[2]).to_arrow()
assert rows.num_rows == 1, rows.num_rows
print(time.perf_counter() - started)
"""


def _rows(keys: list[int], partitions: int, ts: int) -> pa.Table:
    return pa.table(
        {
            "uuid": [f"k{k:08d}" for k in keys],
            "city": [f"c{k % partitions}" for k in keys],
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "fare": [float(k % 1000) + ts for k in keys],
        }
    )


def _storage(base: Path) -> dict[str, int]:
    data_files = data_bytes = meta_files = meta_bytes = 0
    for root, _, names in os.walk(base):
        meta = "/.hoodie" in root + "/"
        for name in names:
            size = os.path.getsize(os.path.join(root, name))
            if meta:
                meta_files, meta_bytes = meta_files + 1, meta_bytes + size
            elif name.endswith(".parquet"):
                data_files, data_bytes = data_files + 1, data_bytes + size
    instants = sum(1 for n in os.listdir(base / ".hoodie") if n[:1].isdigit())
    return {
        "data_files": data_files,
        "data_mb": round(data_bytes / 1e6, 1),
        "hoodie_files": meta_files,
        "hoodie_mb": round(meta_bytes / 1e6, 1),
        "instant_files": instants,
    }


def _due_for_cleaning(table: Any) -> int:
    """Data files a full clean now would delete (the retention rules and the readers' grace
    period honoured): the storage beyond what the rules keep."""
    from dataclasses import replace

    from timeline.clean import CleanPlanner, CleanPolicy

    policy = replace(CleanPolicy.from_config(table.config), incremental=False)
    return len(CleanPlanner(table, policy).plan().paths)


def _fresh_read(base: Path, key: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_READ, str(base), key],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES, RECORD_INDEX
    from metadata_table.maintenance import initialize
    from timeline import Table
    from timeline.config import Config
    from writer.client import WriteClient

    folder = Path(tempfile.mkdtemp(prefix="longrun-"))
    base = folder / "t"
    lock = f"sqlite:///{folder / 'locks.sqlite'}" if args.daemon else "inprocess"
    values = {"indexer.lock.url": lock, **dict(args.conf)}
    if args.daemon:  # the daemon runs the services; the writer commits only
        values.update(dict.fromkeys(_SERVICES, "false"))
    config = Config.resolve(explicit=values)
    table = Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config)
    with WriteClient(table) as client:
        client.insert(_rows(list(range(args.rows)), args.partitions, 0))
    initialize(table, [FILES, COLUMN_STATS, BLOOM_FILTERS, RECORD_INDEX])
    daemon = _start_daemon(folder, base, lock, dict(args.conf)) if args.daemon else None
    try:
        return _commit(args, table, base)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=120)


_SERVICES = (
    "hoodie.clean.automatic",
    "hoodie.archive.automatic",
    "indexer.metadata.upkeep.automatic",
)


def _start_daemon(
    folder: Path, base: Path, lock: str, conf: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``indexer serve`` for the table, its services on, every 10 seconds."""
    pairs = ", ".join(f'"{k}" = "{v}"' for k, v in conf.items())
    service = folder / "service.toml"
    service.write_text(f"""
[service]
request_store = "sqlite:///{folder / "service.sqlite"}"
http_port = 0
reconcile_interval_seconds = 10
clean_interval_seconds = 10
compaction_interval_seconds = 10

[[tables]]
base = "{base}"
index_types = ["files", "column_stats", "bloom_filters", "record_index"]
lock_url = "{lock}"
conf = {{ {pairs} }}
""")
    log = open(folder / "daemon.log", "wb")  # noqa: SIM115 (the daemon's whole life)
    return subprocess.Popen(
        [sys.executable, "-m", "indexer", "serve", "--config", str(service)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _commit(args: argparse.Namespace, table: Any, base: Path) -> list[dict[str, Any]]:
    from writer.client import WriteClient

    points: list[dict[str, Any]] = []
    latencies: list[float] = []
    step = max(1, args.rows // args.per_commit)
    with WriteClient(table) as client:
        for n in range(1, args.commits + 1):
            start = (n * 7919) % step * args.per_commit
            keys = list(range(start, start + args.per_commit))
            began = time.perf_counter()
            client.upsert(_rows(keys, args.partitions, n))
            latencies.append(time.perf_counter() - began)
            if n % args.every == 0 or n == args.commits:
                quantiles = statistics.quantiles(latencies, n=20)
                storage = _storage(base)
                due = _due_for_cleaning(table)
                point = {
                    "commits": n,
                    **storage,
                    "data_files_kept_by_rules": storage["data_files"] - due,
                    "commit_p50_ms": round(statistics.median(latencies) * 1000),
                    "commit_p95_ms": round(quantiles[-1] * 1000),
                    "fresh_read_s": round(_fresh_read(base, f"k{start:08d}"), 2),
                }
                points.append(point)
                latencies = []
                print(json.dumps(point), flush=True)
    return points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=500, help="checkpoint every N commits")
    parser.add_argument(
        "--baseline",
        type=int,
        default=500,
        help="the warm-up: compare with the first checkpoint whose commits all came after it",
    )
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--per-commit", type=int, default=50)
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        type=lambda s: tuple(s.split("=", 1)),
        help="key=value for the writer (e.g. hoodie.clean.automatic=false)",
    )
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="run the table services in `indexer serve` beside the writer, not inline",
    )
    parser.add_argument("--out", help="write the checkpoints to this JSON file")
    args = parser.parse_args(argv)
    points = run(args)
    if args.out:
        label = "writer and indexer serve" if args.daemon else "writer alone (inline services)"
        Path(args.out).write_text(json.dumps({"label": label, "points": points}, indent=1))
    first = next((p for p in points if p["commits"] - args.every >= args.baseline), points[0])
    last = points[-1]
    worst = max(p["data_files"] / max(1, p["data_files_kept_by_rules"]) for p in points)
    print(f"\ndata files / what the retention rules keep: at most {worst:.2f}x (target 1.5x)")
    print(f"from {first['commits']} to {last['commits']} commits (last / first):")
    for name in (
        "data_files",
        "hoodie_files",
        "instant_files",
        "commit_p50_ms",
        "commit_p95_ms",
        "fresh_read_s",
    ):
        ratio = last[name] / first[name] if first[name] else float("nan")
        print(f"  {name:<15} {first[name]:>10} -> {last[name]:>10}  {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
