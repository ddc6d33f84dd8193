"""Two concurrent writer processes doing random inserts, upserts, deletes and rollbacks; after
them every completed metadata partition equals the from-scratch build, record for record."""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path

import pytest

from metadata_table.index_types import index_type
from metadata_table.layout import PARTITIONS
from metadata_table.maintenance import build_records, initialize
from metadata_table.table import MetadataTable
from timeline import Table
from timeline.config import Config
from timeline.errors import WriteConflictError
from timeline.rollback import clean_failed_writes
from writer.client import Operation, WriteClient

from .test_metadata_table import keys, rows


def _config(lock: str) -> Config:
    return Config.resolve(
        explicit={"indexer.lock.url": lock, "hoodie.client.heartbeat.interval_in_ms": "300"}
    )


def _writer(base: str, lock: str, seed: int, steps: int, start_at: float) -> tuple[int, int, int]:
    rng = random.Random(seed)
    table = Table.open(base, _config(lock))
    client = WriteClient(table)
    while time.time() < start_at:
        time.sleep(0.005)
    committed = conflicts = aborted = 0
    for step in range(steps):
        op = rng.choice(["insert", "upsert", "upsert", "delete", "abort"])
        start = rng.randrange(0, 120)
        data = rows(keys(start, start + rng.randrange(1, 25)), ts=seed * 100 + step)
        try:
            if op == "abort":
                txn = client.start(Operation.UPSERT)
                txn.write(data)
                txn.abort()
                aborted += 1
            else:
                getattr(client, op)(data)
                committed += 1
        except WriteConflictError:
            conflicts += 1
    return committed, conflicts, aborted


@pytest.mark.parametrize("seed", [1, 2])
def test_two_writers_random_operations(tmp_path: Path, seed: int) -> None:
    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    table = Table.create(
        str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=_config(lock)
    )
    WriteClient(table).insert(rows(keys(0, 60)))
    initialize(table, list(PARTITIONS))
    # a writer that dies after writing (its heartbeat stops): rolled back by the cleaner below
    dead = WriteClient(table).start(Operation.UPSERT)
    dead.write(rows(keys(0, 5), ts=999))
    dead.heartbeat.pause()
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 4.0
    with ctx.Pool(2) as pool:
        results = pool.starmap(
            _writer, [(table.base_uri, lock, seed * 10 + w, 10, start_at) for w in range(2)]
        )
    assert sum(r[0] for r in results) > 5
    time.sleep(0.7)
    assert dead.instant_time in [i.timestamp for i in clean_failed_writes(table)]
    timeline = table.timeline.load()
    reader = MetadataTable(table).reader(timeline)
    for partition in PARTITIONS:
        kind = index_type(partition)
        ours = kind.comparable(reader.read(partition))
        oracle = kind.comparable(build_records(table, timeline, partition))
        assert len(ours) > 0
        assert ours == oracle, f"{partition}: {len(ours)} records vs {len(oracle)} from scratch"
