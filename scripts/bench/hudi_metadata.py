"""What keeping Apache Hudi's own metadata table costs our writers: commit latency on a table Hudi
0.15 wrote with its metadata table (files, column_stats, bloom_filters, record_index), kept by our
writer (``indexer.write.hudi_metadata_table=maintain``, the default: each commit's deltacommit,
each clean's, the metadata table's compaction every 10 deltacommits), against a copy of the same
table whose metadata table our first commit took down (``drop``; that commit is not timed).

One warm writer per copy, commits alternating between the two so both see the same machine;
each commit upserts ``--batch`` rows (40 updates, 10 inserts by default) with default services.
Prints p50 and p95 of each and the ratios (maintain / drop), measured in one run.

    python -m scripts.bench.hudi_metadata [--commits 200] [--rows 20000] [--batch 50]
                                          [--files-only]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from timeline import Table
from timeline.config import Config
from writer.client import WriteClient

INDEXES = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
}


def _hudi_table(folder: Path, rows: int, files_only: bool = False) -> Path:
    """The table as Hudi writes it, metadata table and all (one insert); ``files_only``: its
    metadata table with Hudi's default partitions (``files`` alone)."""
    from tests.hudi_peer.peer import HudiTable, start_peer
    from tests.hudi_peer.rows import make_rows

    scratch = folder / "peer"
    scratch.mkdir(parents=True)
    peer = start_peer(scratch)
    try:
        table = HudiTable(str(folder / "source"), extra={} if files_only else INDEXES)
        peer.write(table, "bulk_insert", make_rows(range(rows), ts=1, parts=8))
    finally:
        peer.close()
    return folder / "source"


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200, help="timed commits per copy")
    parser.add_argument("--rows", type=int, default=20_000, help="rows Hudi writes first")
    parser.add_argument("--batch", type=int, default=50, help="rows per commit (80%% updates)")
    parser.add_argument(
        "--files-only",
        action="store_true",
        help="Hudi's default metadata table (files alone) instead of every partition",
    )
    args = parser.parse_args(argv)
    from tests.hudi_peer.rows import make_rows

    with tempfile.TemporaryDirectory(prefix="bench-hudi-mdt-") as tmp:
        root = Path(tmp)
        started = time.monotonic()
        source = _hudi_table(root, args.rows, args.files_only)
        print(
            f"Hudi wrote {args.rows:,} rows with its metadata table in "
            f"{time.monotonic() - started:.0f} s",
            file=sys.stderr,
        )
        clients = {}
        for mode in ("maintain", "drop"):
            shutil.copytree(source, root / mode)
            config = Config.resolve(
                explicit={
                    "indexer.lock.url": f"sqlite:///{root / mode}.locks.db",
                    "indexer.write.hudi_metadata_table": mode,
                }
            )
            clients[mode] = WriteClient(Table.open(str(root / mode), config))
        rng = random.Random(1)
        updates = args.batch * 4 // 5
        next_key = args.rows
        timed: dict[str, list[float]] = {"maintain": [], "drop": []}
        compactions = 0
        for n in range(args.commits + 1):
            keys = rng.sample(range(args.rows), updates) + list(
                range(next_key, next_key + args.batch - updates)
            )
            next_key += args.batch - updates
            batch = make_rows(keys, ts=2 + n, parts=8)
            for mode, client in clients.items():
                began = time.perf_counter()
                client.upsert(batch)
                if n:  # the first commit of `drop` takes the metadata table down: not timed
                    timed[mode].append(time.perf_counter() - began)
                compactions += bool(client.last_hudi_upkeep.compaction)
            if n % 50 == 0:
                print(f"{n} commits", file=sys.stderr)
        for client in clients.values():
            client.close()
    p50 = {m: statistics.median(v) * 1000 for m, v in timed.items()}
    p95 = {m: _percentile(v, 95) * 1000 for m, v in timed.items()}
    kept = "files" if args.files_only else "files, column_stats, bloom_filters, record_index"
    print(f"commits per copy: {args.commits} of {args.batch} rows on {args.rows:,} rows; {kept}")
    print("| Hudi's metadata table | commit p50 | commit p95 |")
    print("|---|---|---|")
    print(
        f"| kept (maintain, {compactions} compactions) | {p50['maintain']:.0f} ms "
        f"| {p95['maintain']:.0f} ms |"
    )
    print(f"| taken down (drop) | {p50['drop']:.0f} ms | {p95['drop']:.0f} ms |")
    print(
        f"| ratio | {p50['maintain'] / p50['drop']:.2f}x | {p95['maintain'] / p95['drop']:.2f}x |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
