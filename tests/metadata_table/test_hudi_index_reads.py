"""Reads through Apache Hudi's own metadata table (#48): on a table Hudi 0.15 writes with its
``column_stats``, ``bloom_filters`` and ``record_index`` partitions and no index of ours, scans
prune with Hudi's column stats, key lookups are answered by its record index, and key filters
drop files by its bloom filters; the rows equal Hudi's own reads. A metadata table that lags the
data timeline is not used. One table per module, copied where a test changes it."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, RECORD_INDEX
from metadata_table.read.scan import load_table
from timeline import Table
from timeline.config import Config
from writer.client import WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import make_rows

INDEXES = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
}


def _written(hudi: HudiPeer, path: Path, extra: dict[str, str]) -> HudiTable:
    """Four batches of 30 keys (bulk inserts: new files each, key ranges apart), 3 partitions."""
    table = HudiTable(str(path), extra=extra)
    for batch in range(4):
        rows = make_rows(range(batch * 30, batch * 30 + 30), ts=1, parts=3)
        hudi.write(table, "bulk_insert", rows)
    return table


@pytest.fixture(scope="module")
def indexed(hudi: HudiPeer, tmp_path_factory: pytest.TempPathFactory) -> HudiTable:
    return _written(hudi, tmp_path_factory.mktemp("hudi-index") / "t", INDEXES)


def _ids(rows: Any) -> list[int]:
    return sorted(r["id"] for r in rows.to_pylist())


def _hudi_ids(hudi: HudiPeer, table: HudiTable, where: str) -> list[int]:
    return _ids(hudi.read(table, columns=["id"], filter=where))


def test_scans_prune_with_hudis_column_stats_and_equal_hudis_reads(
    hudi: HudiPeer, indexed: HudiTable
) -> None:
    trips = load_table(indexed.path)
    for where in ("id >= 95", "fare < 10.0", "name = 'n7'", "id >= 30 AND id < 40"):
        scan = trips.scan(where)
        plan = scan.plan()
        assert plan.dropped.get(COLUMN_STATS, 0) > 0, (where, plan.dropped, plan.unused)
        assert _ids(scan.to_arrow()) == _hudi_ids(hudi, indexed, where), where
    text = trips.scan("id >= 95").explain()
    assert "indexes from: Apache Hudi's metadata table" in text
    assert "column_stats: dropped" in text
    # switched off: storage listed, nothing pruned, the same rows
    off = Config.resolve(explicit={"indexer.read.hudi_metadata_table": "false"})
    scan = load_table(indexed.path, config=off).scan("id >= 95")
    assert scan.plan().kept == scan.plan().total
    assert "indexes from" not in scan.explain() and "listed by: storage" in scan.explain()
    assert _ids(scan.to_arrow()) == _hudi_ids(hudi, indexed, "id >= 95")


def test_key_lookups_come_from_hudis_record_index(hudi: HudiPeer, indexed: HudiTable) -> None:
    where_hudi_put = {
        r["id"]: r["_hoodie_file_name"]
        for r in hudi.read(indexed, columns=["id", "_hoodie_file_name"]).to_pylist()
    }
    trips = load_table(indexed.path)
    plan = trips.scan("id = 42").plan()
    assert plan.dropped.get(RECORD_INDEX, 0) > 0, plan
    assert [f.file_name for f in plan.files] == [where_hudi_put[42]]
    snapshot = trips.snapshot_at(Table.open(indexed.path).timeline.load())
    assert snapshot.key_indexes() == [RECORD_INDEX]
    found = snapshot.lookup_keys(["42", "7", "no-such-key"])
    assert [p.rsplit("/", 1)[-1] for p in found["42"]] == [where_hudi_put[42]]
    assert [p.rsplit("/", 1)[-1] for p in found["7"]] == [where_hudi_put[7]]
    assert found["no-such-key"] == []
    assert _ids(trips.scan("id = 42").to_arrow()) == [42]


def test_key_filters_drop_files_by_hudis_bloom_filters(hudi: HudiPeer, tmp_path: Path) -> None:
    blooms_only = {"hoodie.metadata.index.bloom.filter.enable": "true"}
    table = _written(hudi, tmp_path / "blooms", blooms_only)
    trips = load_table(table.path)
    snapshot = trips.snapshot_at(Table.open(table.path).timeline.load())
    assert snapshot.from_hudi(BLOOM_FILTERS) and not snapshot.uses(COLUMN_STATS)
    plan = trips.scan("_hoodie_record_key = '42'").plan()
    total = plan.total
    assert plan.dropped.get(BLOOM_FILTERS, 0) >= total // 2, plan  # a filter's false positives
    assert _ids(trips.scan("_hoodie_record_key = '42'").to_arrow()) == [42]
    # key lookups (our writers' tagging): each key's file among the few its filters keep
    where_hudi_put = {
        str(r["id"]): r["_hoodie_file_name"]
        for r in hudi.read(table, columns=["id", "_hoodie_file_name"]).to_pylist()
    }
    asked = [str(k) for k in range(0, 120, 7)]
    found = snapshot.lookup_keys(asked)
    for key in asked:
        names = [p.rsplit("/", 1)[-1] for p in found[key]]
        assert where_hudi_put[key] in names and len(names) <= total // 2, (key, names)


def test_a_lagging_metadata_table_is_not_used(
    hudi: HudiPeer, indexed: HudiTable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = tmp_path / "lagging"
    shutil.copytree(indexed.path, copy)
    mdt = copy / ".hoodie/metadata/.hoodie"
    newest = max(p.name.split(".")[0] for p in mdt.glob("*.deltacommit"))
    (mdt / f"{newest}.deltacommit").unlink()  # as if its writer had died before completing it
    trips = load_table(str(copy))
    with caplog.at_level(logging.WARNING):
        scan = trips.scan("id >= 95")
        plan = scan.plan()
    assert "does not reflect" in caplog.text
    assert COLUMN_STATS not in plan.dropped and plan.kept == plan.total
    assert "indexes from" not in scan.explain()
    assert _ids(scan.to_arrow()) == list(range(95, 120))


def test_our_writers_files_are_pruned_by_the_stats_they_wrote_there(
    hudi: HudiPeer, indexed: HudiTable, tmp_path: Path
) -> None:
    copy = tmp_path / "ours"
    shutil.copytree(indexed.path, copy)
    table = Table.open(str(copy), Config.resolve(explicit={}))
    with WriteClient(table) as client:  # keeps Hudi's metadata table (the default)
        client.insert(make_rows(range(500, 510), ts=2, parts=3))
        client.upsert(make_rows([5, 6], ts=3, parts=3))
    trips = load_table(str(copy))
    scan = trips.scan("id >= 500")
    plan = scan.plan()
    assert plan.kept == 3, plan  # our three new files, one per partition
    assert _ids(scan.to_arrow()) == list(range(500, 510))
    rows = {r["id"]: r["ts"] for r in trips.scan("id < 10").to_arrow().to_pylist()}
    assert rows == {i: 3 if i in (5, 6) else 1 for i in range(10)}
    assert trips.scan("id = 505").plan().dropped.get(RECORD_INDEX, 0) > 0
