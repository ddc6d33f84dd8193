"""`make demo`: the main job on embedded defaults (local table, SQLite, Spark local[2]).

Two writer processes upsert overlapping keys into a table while the indexer daemon
(`indexer serve`, column_stats, bloom_filters and partition_stats desired) builds those partitions with PySpark;
its progress is polled from the daemon's HTTP API. The demo ends with the index status and a
data-skipping query: how many files a filter must scan with and without the index, and that both
give the same answer.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeline import Table
from timeline.config import Config
from timeline.errors import WriteConflictError
from timeline.fs_view import FileSystemView, read_parquet
from writer.client import WriteClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where the demo's table, locks and daemon config go (tests/test_docs.py runs it elsewhere)
OUT = os.path.abspath(os.environ.get("AIX_DEMO_OUTPUT", os.path.join(ROOT, "demo-output")))
BASE = os.path.join(OUT, "trips")
LOCK_URL = f"sqlite:///{os.path.join(OUT, 'locks.sqlite')}"
CITIES = ["amsterdam", "berlin", "lisbon", "oslo"]
SERVICE_TOML = """
[service]
request_store = "sqlite:///{out}/service.sqlite"
http_port = 0
reconcile_interval_seconds = 1

[spark]
master = "local[2]"

[[tables]]
base = "{base}"
index_types = ["column_stats", "bloom_filters", "partition_stats"]
lock_url = "{lock}"
"""
FARE, FILTER_CITIES = 36.0, ["berlin", "oslo"]
FILTER = f"fare >= {FARE} AND city IN ('berlin', 'oslo')"


def _batch(rng: random.Random, writer: int, round_: int) -> pa.Table:
    # fares rise with every round, so files differ in range and a filter can skip most of them
    keys = rng.sample(range(20_000), 500)
    return pa.table(
        {
            "trip_id": [f"trip-{k:05d}" for k in keys],
            "city": [CITIES[k % len(CITIES)] for k in keys],
            "ts": pa.array([round_ * 10 + writer] * len(keys), pa.int64()),
            "fare": [round(round_ * 4 + rng.uniform(0, 4), 2) for _ in keys],
        }
    )


def ingest(writer: int, rounds: int) -> tuple[int, int]:
    """One writer process: upsert batches, retrying a batch after a write conflict."""
    rng = random.Random(writer)
    table = Table.open(BASE, Config.resolve(explicit={"indexer.lock.url": LOCK_URL}))
    client = WriteClient(table)
    committed = conflicts = 0
    for round_ in range(rounds):
        data = _batch(rng, writer, round_)
        while True:
            try:
                instant = client.upsert(data)
            except WriteConflictError:
                conflicts += 1
                continue
            committed += 1
            print(f"  writer {writer}: committed {instant.timestamp}", flush=True)
            break
    return committed, conflicts


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "indexer", *args, "--lock-url", LOCK_URL],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"indexer {args[0]} failed:\n{done.stderr}")
    return done.stdout


def _query(table: Table, paths: list[str]) -> tuple[int, float]:
    """Rows matching FILTER in the given files, and their total fare."""
    parts = [read_parquet(table.storage, p, ["city", "fare"]) for p in paths]
    empty = pa.table({"city": pa.array([], pa.string()), "fare": pa.array([], pa.float64())})
    data = pa.concat_tables(parts) if parts else empty
    wanted = pc.is_in(data["city"], value_set=pa.array(FILTER_CITIES))
    hits = data.filter(pc.and_(pc.greater_equal(data["fare"], FARE), wanted))
    return hits.num_rows, round(pc.sum(hits["fare"]).as_py() or 0.0, 2)


def _progress(status: dict[str, Any]) -> str:
    """The daemon's /status of the table in words: its partitions' states and the build's
    phase and tasks."""
    partitions = status["partitions"] or {}
    states: dict[str, list[str]] = {}
    for name, state in sorted(partitions.items()):
        states.setdefault(state, []).append(name)
    said = "; ".join(f"{', '.join(names)} {state}" for state, names in states.items())
    running = status["running"]
    if not running:
        return said or "waiting for its first tick"
    phase = running.get("phase") or "working"
    done, total = running.get("tasks_done", 0), running.get("tasks_total", 0)
    doing = f"{phase}, {done} of {total} tasks" if total else phase
    return f"{doing}; {said}" if said else doing


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    config = Config.resolve(explicit={"indexer.lock.url": LOCK_URL})
    table = Table.create(BASE, "trips", ["trip_id"], ["city"], precombine_field="ts", config=config)
    print(f"created table trips at {BASE}\n")
    print("first writes (no index yet):")
    ingest(0, 6)
    config_path = os.path.join(OUT, "service.toml")
    with open(config_path, "w") as f:
        f.write(SERVICE_TOML.format(out=OUT, base=BASE, lock=LOCK_URL))
    print(
        f"\nstarting the daemon ({config_path}): column_stats, bloom_filters, partition_stats desired"
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "indexer", "serve", "--config", config_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert daemon.stdout is not None
    url = re.search(r"API at (http://\S+)", daemon.stdout.readline())
    if url is None:
        raise SystemExit("the daemon did not start")
    print("writers keep upserting while the daemon builds:")
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        writers = pool.starmap_async(ingest, [(1, 10), (2, 10)])
        last = ""
        while True:
            status = json.load(urllib.request.urlopen(f"{url.group(1)}/status"))["tables"][BASE]
            line = f"  daemon: {_progress(status)}"
            if line != last:
                print(line, flush=True)
                last = line
            if all(
                status["partitions"].get(p) == "completed"
                for p in ("column_stats", "bloom_filters", "partition_stats")
            ):
                break
            time.sleep(0.5)
        results = writers.get()
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)
    print(
        f"  {sum(r[0] for r in results)} commits, {sum(r[1] for r in results)} conflicts retried, "
        f"in {time.monotonic() - started:.0f}s; daemon stopped\n"
    )

    shown = os.path.relpath(BASE)
    print(f"$ indexer status {shown}")
    print(_cli("status", BASE))
    lag = json.loads(_cli("status", BASE, "--json"))["lag"]
    behind = [p for p, row in lag.items() if row["unapplied_instants"]]

    from metadata_table import load_table

    scan = load_table(BASE, config=config).scan(FILTER, ("city", "fare"))
    print(f'$ indexer-metadata query {shown} "{FILTER}" --explain')
    print(scan.explain() + "\n")
    every_file = [
        f.path for f in FileSystemView(table.timeline, table.timeline.load()).latest_base_files()
    ]
    without = _query(table, every_file)
    rows = scan.to_arrow()
    through = (rows.num_rows, round(pc.sum(rows["fare"]).as_py() or 0.0, 2))
    same = through == without
    plan = scan.plan()
    print(
        f"through the index: {through[0]} rows, fares totalling {through[1]}, from {plan.kept} "
        f"of {plan.total} files; every file read: {without[0]} rows, {without[1]} "
        f"({'the same answer' if same else 'A DIFFERENT ANSWER'})\n"
    )
    print("Try it yourself: the commands are installed in .venv/bin")
    print("  source .venv/bin/activate")
    print(f"  indexer status {shown}")
    print(f"  indexer-metadata query {shown} \"city = 'oslo' AND fare > 30\" --limit 5")
    print(f"  indexer-metadata query {shown} \"trip_id = 'trip-00042'\" --explain")
    return 0 if same and not behind else 1


if __name__ == "__main__":
    sys.exit(main())
