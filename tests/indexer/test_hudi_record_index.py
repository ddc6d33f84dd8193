"""The record index and a secondary index on a table Apache Hudi 0.15 writes.

Hudi writes a copy-on-write table (five partitions, 20,000 rows, its own metadata table on, its
own record index off). Our ``indexer run --index-types record_index,secondary_index`` builds both
while three writer processes of ours upsert; then for every live row Hudi's snapshot read returns,
our record index gives exactly the file Hudi reads it from (``_hoodie_file_name``), and a
secondary-index query on ``ts`` keeps exactly the files holding each value. Hudi then upserts
(updates and new keys), deletes, clusters and cleans; ``indexer sync`` makes all of it true again
and ``indexer validate`` exits 0. Hudi reads the same rows after our runs."""

from __future__ import annotations

import multiprocessing
import time
from collections import defaultdict
from pathlib import Path

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import RECORD_INDEX, secondary_index_partition
from metadata_table.read.snapshot import IndexedSnapshot
from timeline import Table
from timeline.config import LOCK_URL, Config
from timeline.errors import WriteConflictError
from timeline.fs_view import FileSystemView
from writer.client import WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from .test_foreign_commits import indexer_cli
from .test_hudi_interop import _open

pytestmark = pytest.mark.hudi

ROWS = 20_000
PARTS = 5
TS_INDEX = secondary_index_partition("ts")


def _writer(base: str, lock: str, seed: int, commits: int) -> int:
    """One of our writers: each commit upserts a few existing keys and a new one, retried on a
    conflict as a writer does; returns the commits made."""
    table = Table.open(base, Config.resolve(explicit={"indexer.lock.url": lock}))
    client = WriteClient(table)
    done = 0
    for n in range(commits):
        ids = sorted({(seed * 997 + n * 131 + i * 7919) % ROWS for i in range(5)})
        batch = make_rows([*ids, ROWS + seed * 1000 + n], ts=100 + seed * 10 + n, parts=PARTS)
        for _ in range(10):
            try:
                client.upsert(batch)
                done += 1
                break
            except WriteConflictError:  # retried: it then sees what the other committed
                time.sleep(0.05)
    return done


def assert_exact_beside_hudi(hudi: HudiPeer, hudi_table: HudiTable, table: Table) -> None:
    meta = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "ts"]
    rows = hudi.read(hudi_table, columns=meta, metadata=False).to_pylist()
    snapshot = IndexedSnapshot(table)
    assert snapshot.key_indexes() == [RECORD_INDEX]
    where = snapshot.record_locations([r["_hoodie_record_key"] for r in rows])
    assert len(where) == len(rows)
    holders: dict[int, set[str]] = defaultdict(set)
    for row in rows:
        holder = f"{row['_hoodie_partition_path']}/{row['_hoodie_file_name']}"
        assert where[row["_hoodie_record_key"]].paths == (holder,), row
        holders[row["ts"]].add(holder)
    for value, files in holders.items():
        kept = snapshot.prune(f"ts = {value}")
        assert TS_INDEX in kept.dropped
        assert {s.base_file.path for s in kept.slices if s.base_file} == files, value


def test_record_and_secondary_index_beside_hudi(hudi: HudiPeer, tmp_path: Path) -> None:
    hudi_table = HudiTable(str(tmp_path / "trips"), extra={"hoodie.parquet.small.file.limit": "0"})
    for start in range(0, ROWS, 5_000):
        rows = make_rows(range(start, start + 5_000), ts=start // 5_000, parts=PARTS)
        hudi.write(hudi_table, "bulk_insert" if start == 0 else "insert", rows)
    table = _open(hudi_table, tmp_path)
    lock = table.config.get(LOCK_URL)

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        writers = pool.starmap_async(_writer, [(table.base_uri, lock, w, 6) for w in range(3)])
        time.sleep(1.0)
        built = indexer_cli(
            table,
            "run",
            "--index-types",
            "record_index,secondary_index",
            "--columns",
            "ts",
            "--engine",
            "local",
        )
        committed = writers.get(timeout=600)
    assert built.returncode == 0, built.stderr
    assert committed == [6, 6, 6], committed
    validated = indexer_cli(table, "validate")
    assert validated.returncode == 0, validated.stdout
    assert_exact_beside_hudi(hudi, hudi_table, table)

    hudi.write(
        hudi_table, "upsert", make_rows([*range(0, 400, 7), 30_000, 30_001], ts=50, parts=PARTS)
    )
    hudi.write(hudi_table, "delete", make_rows([3, 10, 17, 30_000], ts=51, parts=PARTS))
    hudi.service(hudi_table, "cluster")
    hudi.write(hudi_table, "upsert", make_rows(range(1000, 1020), ts=52, parts=PARTS))
    hudi.service(hudi_table, "clean")
    assert indexer_cli(table, "validate").returncode == 1  # lagging: named, never stale
    synced = indexer_cli(table, "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert '"resynced": {}' in synced.stdout, synced.stdout  # applied commit by commit
    validated = indexer_cli(table, "validate")
    assert validated.returncode == 0, validated.stdout
    assert_exact_beside_hudi(hudi, hudi_table, table)
    expected = by_key(hudi.read(hudi_table, metadata=False))
    assert by_key(hudi.read(hudi_table, metadata=True)) == expected
    # our writers keep it exact too, tagging through it: no file is read to find the keys
    client = WriteClient(table)
    client.upsert(make_rows([5, 30_001, 40_000], ts=60, parts=PARTS))
    assert client.last_tagged_by == [RECORD_INDEX]
    assert indexer_cli(table, "validate").returncode == 0
    assert_exact_beside_hudi(hudi, hudi_table, table)
    AsyncIndexer(table, IndexerOptions(engine="local")).compact()
    assert indexer_cli(table, "validate").returncode == 0


def test_a_table_without_meta_fields_hudi_writes(hudi: HudiPeer, tmp_path: Path) -> None:
    """hoodie.populate.meta.fields=false (virtual keys): our record index and bloom filters
    are built from keys made of the key fields, our writer tags and merges by them (both
    checked by where every row lives), and Hudi reads what we wrote, and writes on top."""
    hudi_table = HudiTable(
        str(tmp_path / "virtual"), metadata=False, extra={"hoodie.populate.meta.fields": "false"}
    )
    hudi.write(hudi_table, "insert", make_rows(range(300), parts=PARTS))
    hudi.write(hudi_table, "upsert", make_rows(range(0, 300, 7), ts=2, parts=PARTS))
    table = _open(hudi_table, tmp_path)
    assert not table.table_config.populate_meta_fields
    built = indexer_cli(table, "run", "--index-types", "record_index,bloom_filters")
    assert built.returncode == 0, built.stderr
    assert_located(table)

    client = WriteClient(table)
    client.upsert(make_rows([*range(0, 40), 900, 901], ts=3, fare_offset=5.0, parts=PARTS))
    client.delete(make_rows([1, 2, 3], ts=4, parts=PARTS))
    assert client.last_tagged_by == [RECORD_INDEX]
    expected = by_key(make_rows([*range(300), 900, 901], parts=PARTS))
    read = by_key(hudi.read(hudi_table, metadata=False))
    assert sorted(read) == sorted(k for k in expected if k not in (1, 2, 3))
    assert read[5]["fare"] == 5 * 1.5 + 5.0 and read[900]["ts"] == 3
    assert_located(table)

    hudi.write(hudi_table, "upsert", make_rows([5, 6, 1000], ts=6, parts=PARTS))
    synced = indexer_cli(table, "sync")
    assert synced.returncode == 0, synced.stderr
    assert indexer_cli(table, "validate").returncode == 0
    assert_located(table)
    assert len(by_key(hudi.read(hudi_table, metadata=False))) == 300 - 3 + 3


def assert_located(table: Table) -> None:
    """Every live key is where the record index says: the file whose key fields make it."""
    from metadata_table.records import read_record_keys, virtual_keys

    view = FileSystemView(table.timeline, table.timeline.load())
    keygen = virtual_keys(table)
    truth = {}
    for base in view.latest_base_files():
        keys = read_record_keys(table.storage, base.path, keygen).column(0).to_pylist()
        truth.update(dict.fromkeys(keys, base.path))
    where = IndexedSnapshot(table).record_locations(list(truth))
    assert {k: w.paths for k, w in where.items()} == {k: (p,) for k, p in truth.items()}
