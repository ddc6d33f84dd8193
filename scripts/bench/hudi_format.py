"""``indexer run --format hudi`` against Apache Hudi 0.15's own build of the same partitions
(HoodieIndexer's calls: the write client's scheduleIndexing and index, in a JVM of its own) and
against our ``--format native`` build, on copies of one table, every run in a new process with
its start (and Hudi's JVM start) included, each on a new copy of the table. Ratios measured in
one run: our two builds the best of ``--repeat`` alternated runs each (this machine is shared),
Hudi's build one run (it takes a minute to minutes).

The table is made by scripts/bench/synthetic.py (``--files`` files of ``--rows`` rows in 20
partitions), then given Hudi's metadata table with its ``files`` partition by one Hudi write with
the metadata table on (a delete of a key that is not there: no data file changes), which both
builds need (``--format hudi`` requires it; Hudi's indexer would build it first).

    python -m scripts.bench.hudi_format [--files 2000] [--rows 20]
        [--record-index-files 1000 --record-index-rows 10000] [--repeat 3]

Two sections: column_stats + bloom_filters over ``--files`` files; record_index over
``--record-index-files`` files of ``--record-index-rows`` keys each (10M keys: 1000 x 10000).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _table(peer: Any, base: Path, files: int, rows: int) -> Any:
    """The synthetic table with Hudi's metadata table (``files``) made by Hudi's writer."""
    import pyarrow as pa

    from scripts.bench.synthetic import hudi_table, make_table
    from timeline.config import Config

    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{base}-locks.sqlite"})
    make_table(base, files, rows, partitions=20, config=config)
    table = hudi_table(base)
    absent = pa.table(
        {
            "key": ["no-such-key"],
            "part": ["p0000"],
            "ts": pa.array([0], pa.int64()),
            "value": [0.0],
            "category": ["a"],
            "n": pa.array([0], pa.int32()),
        }
    )
    peer.write(table, "delete", absent)
    return table


def _ours(base: Path, types: str, form: str) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "indexer", "run", str(base), "--index-types", types]
    command += ["--format", form, "--lock-url", f"sqlite:///{base}-locks.sqlite"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"indexer run --format {form} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def _section(
    peer: Any, root: Path, name: str, files: int, rows: int, types: list[str], repeat: int
) -> dict[str, float]:
    """The builds' times on copies of one table: ours (``--format hudi``) and our native build
    ``repeat`` times each, alternated, the best of each kept; Hudi's once (a minute or more).
    Every build gets a new copy made just before it, its pages written out first (else the
    build runs beside the kernel's writeback of 300,000 new files at 100,000), so each reads
    from the page cache alike."""
    source = root / name
    table = _table(peer, source, files, rows)
    print(f"{name}: {files:,} files x {rows:,} rows, {','.join(types)}", flush=True)

    def timed(kind: str) -> float:
        copy = root / f"{name}-{kind}"
        shutil.copytree(source, copy)
        os.sync()
        try:
            if kind == "hudi":
                seconds = peer.index(replace(table, path=str(copy)), types)["wall_seconds"]
            else:  # ours: --format hudi, or native
                seconds = _ours(copy, ",".join(types), "hudi" if kind == "ours" else kind)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
            Path(f"{copy}-locks.sqlite").unlink(missing_ok=True)
        print(f"  {kind}: {seconds:.2f} s", flush=True)
        return float(seconds)

    found: dict[str, list[float]] = {"ours": [], "native": []}
    for _ in range(repeat):
        for kind, times in found.items():
            times.append(timed(kind))
    best = {kind: min(times) for kind, times in found.items()}
    best["hudi"] = timed("hudi")
    shutil.rmtree(source, ignore_errors=True)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--record-index-files", type=int, default=1000)
    parser.add_argument("--record-index-rows", type=int, default=10000)
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each of our builds (the best is kept)"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.hudi_peer.peer import start_peer

    root = Path(tempfile.mkdtemp(prefix="bench-hudi-format-"))
    (root / "peer").mkdir()
    peer = start_peer(root / "peer")
    try:
        stats = _section(
            peer,
            root,
            "stats",
            args.files,
            args.rows,
            ["column_stats", "bloom_filters"],
            args.repeat,
        )
        keys = _section(
            peer,
            root,
            "keys",
            args.record_index_files,
            args.record_index_rows,
            ["record_index"],
            args.repeat,
        )
    finally:
        peer.close()
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| build | ours --format hudi (s) | Hudi 0.15 HoodieIndexer (s) | Hudi / ours | ours --format native (s) | hudi / native |"
    )
    print("|---|---|---|---|---|---|")
    for label, found in (
        (f"column_stats + bloom_filters, {args.files:,} files", stats),
        (f"record_index, {args.record_index_files * args.record_index_rows:,} keys", keys),
    ):
        print(
            f"| {label} | {found['ours']:.1f} | {found['hudi']:.1f} | "
            f"**{found['hudi'] / found['ours']:.2f}x** | {found['native']:.1f} | "
            f"{found['ours'] / found['native']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
