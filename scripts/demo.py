"""`make demo`: the main job on embedded defaults (local table, SQLite lock).

Today (kernel and writer milestones): two writer processes upsert overlapping keys into one
table at the same time; optimistic concurrency control lets disjoint commits through and turns
overlapping ones into conflicts, which the writers retry. Then the timeline is shown and the
snapshot is cross-checked with hudi-rs. The indexer joins this demo in a later milestone.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import time

import pyarrow as pa

from timeline import Table
from timeline.config import Config
from timeline.errors import WriteConflictError
from timeline.fs_view import FileSystemView
from writer.client import WriteClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "demo-output")
BASE = os.path.join(OUT, "trips")
LOCK_URL = f"sqlite:///{os.path.join(OUT, 'locks.sqlite')}"
CITIES = ["amsterdam", "berlin", "lisbon", "oslo"]
COMMITS_PER_WRITER = 6


def _batch(rng: random.Random, writer: int, round_: int) -> pa.Table:
    keys = rng.sample(range(5_000), 1_000)
    return pa.table(
        {
            "trip_id": [f"trip-{k:05d}" for k in keys],
            "city": [CITIES[k % len(CITIES)] for k in keys],
            "ts": pa.array([round_ * 10 + writer] * len(keys), pa.int64()),
            "fare": [round(rng.uniform(5, 80), 2) for _ in keys],
            "driver": [f"driver-{rng.randrange(200)}" for _ in keys],
        }
    )


def ingest(writer: int) -> tuple[int, int]:
    """One writer process: upsert batches, retrying a batch after a write conflict."""
    rng = random.Random(writer)
    table = Table.open(BASE, Config.resolve(explicit={"indexer.lock.url": LOCK_URL}))
    client = WriteClient(table)
    committed = conflicts = 0
    for round_ in range(COMMITS_PER_WRITER):
        data = _batch(rng, writer, round_)
        while True:
            try:
                instant = client.upsert(data)
            except WriteConflictError as e:
                conflicts += 1
                print(f"  writer {writer}: conflict with {e.other_instant}, retrying", flush=True)
                continue
            committed += 1
            print(
                f"  writer {writer}: committed {instant.timestamp} ({data.num_rows} records)",
                flush=True,
            )
            break
    return committed, conflicts


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    config = Config.resolve(explicit={"indexer.lock.url": LOCK_URL})
    Table.create(BASE, "trips", ["trip_id"], ["city"], precombine_field="ts", config=config)
    print(f"created table trips at {BASE} (locks: {LOCK_URL})")
    print("two writers upsert overlapping keys concurrently:")
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(ingest, [1, 2])
    seconds = time.monotonic() - started
    committed = sum(r[0] for r in results)
    conflicts = sum(r[1] for r in results)
    print(f"{committed} commits, {conflicts} conflicts retried, in {seconds:.1f}s")

    table = Table.open(BASE, config)
    snapshot = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    print(
        f"\nsnapshot: {snapshot.num_rows} records in {len(set(snapshot.column('_hoodie_file_name').to_pylist()))} files"
    )
    import hudi

    external = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(BASE).build().read())
    same = sorted(external.column("_hoodie_record_key").to_pylist()) == sorted(
        snapshot.column("_hoodie_record_key").to_pylist()
    )
    print(
        f"hudi-rs reads {external.num_rows} records: {'the same keys' if same else 'DIFFERENT keys'}"
    )
    print()
    shown = subprocess.run(
        [sys.executable, "-m", "timeline", "show", BASE], capture_output=True, text=True
    )
    lines = shown.stdout.splitlines()
    print("\n".join(lines[:5] + (["  ..."] if len(lines) > 9 else []) + lines[-4:]))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
