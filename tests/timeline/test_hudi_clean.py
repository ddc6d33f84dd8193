"""Our cleaner beside Apache Hudi 0.15's, on one table: Hudi writes it, our writers upsert and
clean after each commit (Hudi's formats), then Hudi's reader reads exactly the expected rows,
Hudi's writer with its own cleaner on commits on top and cleans over our clean instants
(incremental planning reads our clean metadata), and ours cleans after Hudi's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timeline import Action, Table
from timeline.clean import CleanPlanner, clean
from timeline.config import Config
from timeline.removals import read_avro_records
from writer.client import WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from ..writer.test_failed_writes import hudi_rs

pytestmark = pytest.mark.hudi

#: Hudi's own services as its writers run them, with a short retention to see them act
HUDI_SERVICES = {
    "hoodie.clean.automatic": "true",
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.metadata.enable": "false",
}


def _open(hudi_table: HudiTable, tmp_path: Path, **values: str) -> Table:
    """The table as our writers open it: a short retention, no grace period."""
    config = Config.resolve(
        explicit={
            "indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}",
            "hoodie.cleaner.commits.retained": "2",
            "indexer.clean.grace.seconds": "0",
            **values,
        }
    )
    return Table.open(hudi_table.path, config)


def _versions(base: Path) -> dict[str, int]:
    """Base files per partition."""
    return {
        p.name: len(list(p.glob("*.parquet")))
        for p in base.iterdir()
        if p.is_dir() and not p.name.startswith(".")
    }


def _reads(hudi: HudiPeer, hudi_table: HudiTable, table: Table) -> list[dict[str, Any]]:
    """Hudi's Spark reader, hudi-rs and ours read the same rows; returns Hudi's."""
    hudis = hudi.read(hudi_table, metadata=False, columns=["id", "part", "ts", "fare"])
    rows = sorted(hudis.to_pylist(), key=lambda r: r["id"])
    rs = sorted(
        ({k: r[k] for k in ("id", "part", "ts", "fare")} for r in hudi_rs(hudi_table.path, {})),
        key=lambda r: r["id"],
    )
    assert rows == rs
    from timeline.fs_view import FileSystemView

    ours = FileSystemView(table.timeline, table.timeline.load()).read_snapshot(
        ["id", "part", "ts", "fare"]
    )
    assert sorted(ours.to_pylist(), key=lambda r: r["id"]) == rows
    return rows


def test_our_cleans_and_hudis_cleans_follow_each_other(hudi: HudiPeer, tmp_path: Path) -> None:
    hudi_table = HudiTable(str(tmp_path / "t"), metadata=False)
    first = make_rows(range(20), parts=2)
    hudi.write(hudi_table, "insert", first, options={"hoodie.clean.automatic": "false"})
    table = _open(hudi_table, tmp_path)
    expected = by_key(first)
    with WriteClient(table) as client:
        for ts in range(2, 7):
            batch = make_rows(range(0, 20, 3), ts=ts, parts=2, fare_offset=100.0 * ts)
            client.upsert(batch)
            expected |= by_key(batch)
    ours = table.timeline.load().with_actions(Action.CLEAN).completed()
    assert len(ours) >= 2
    # each file group keeps the versions a query over the last 2 commits reads: at most 3
    assert max(_versions(Path(hudi_table.path)).values()) <= 3 * 2
    rows = _reads(hudi, hudi_table, table)
    assert {r["id"]: r["fare"] for r in rows} == {k: v["fare"] for k, v in expected.items()}

    # Hudi's writer, its cleaner on, upserts on top: its incremental clean planning starts from
    # our last clean's metadata, and its cleans pass over ours
    for ts in range(7, 10):
        batch = make_rows(range(1, 20, 4), ts=ts, parts=2, fare_offset=100.0 * ts)
        added = hudi.write(hudi_table, "upsert", batch, options=HUDI_SERVICES)["instants"]
        expected |= by_key(batch)
    actions = {i["action"] for i in added}
    assert "commit" in actions
    hudis = [
        i
        for i in table.timeline.load().with_actions(Action.CLEAN).completed()
        if i.timestamp not in {o.timestamp for o in ours}
    ]
    assert hudis, "Hudi's cleaner cleaned after our cleans"
    for instant in hudis:  # Hudi's metadata, which our reader of removals reads
        (record,) = read_avro_records(table.timeline.read_content(instant))
        assert record["totalFilesDeleted"] > 0
    rows = _reads(hudi, hudi_table, table)
    assert {r["id"]: r["fare"] for r in rows} == {k: v["fare"] for k, v in expected.items()}

    # and ours after Hudi's: its planner reads Hudi's last clean, our writer commits and cleans
    with WriteClient(table) as client:
        for ts in range(10, 13):
            batch = make_rows(range(2, 20, 5), ts=ts, parts=2, fare_offset=100.0 * ts)
            client.upsert(batch)
            expected |= by_key(batch)
    assert not clean(table, planner=CleanPlanner(table))  # nothing left to clean
    rows = _reads(hudi, hudi_table, table)
    assert {r["id"]: r["fare"] for r in rows} == {k: v["fare"] for k, v in expected.items()}
    # Hudi's explicit clean finds nothing ours left behind that its rules would delete
    hudi.service(hudi_table, "clean", options=HUDI_SERVICES)
    assert _reads(hudi, hudi_table, table) == rows


def test_hudi_reads_our_archive_and_archives_after_it(hudi: HudiPeer, tmp_path: Path) -> None:
    from timeline.archived import read_archived

    hudi_table = HudiTable(str(tmp_path / "t"), metadata=False)
    first = make_rows(range(12), parts=2)
    hudi.write(hudi_table, "insert", first, options={"hoodie.archive.automatic": "false"})
    bounds = {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5"}
    table = _open(hudi_table, tmp_path, **bounds)
    expected = by_key(first)
    with WriteClient(table) as client:
        times = []
        for ts in range(2, 12):
            batch = make_rows([ts % 12, (ts + 5) % 12], ts=ts, parts=2, fare_offset=10.0 * ts)
            times.append(client.upsert(batch).timestamp)
            expected |= by_key(batch)
    archived = [a.instant.timestamp for a in read_archived(table.storage, ".hoodie/archived")]
    assert times[0] in archived
    active = [i["timestamp"] for i in hudi.instants(hudi_table) if i["action"] == "commit"]
    assert times[0] not in active and len(active) <= 5  # Hudi loads our shortened timeline
    rows = _reads(hudi, hudi_table, table)
    assert {r["id"]: r["fare"] for r in rows} == {k: v["fare"] for k, v in expected.items()}
    # an incremental query from an archived commit: the rows written after it (Hudi reads
    # commits older than its active timeline by a full scan when told to; without, it would
    # answer from the active commits alone, whoever archived)
    begin = times[1]
    incremental = hudi.read(
        hudi_table,
        metadata=False,
        query_type="incremental",
        columns=["id", "_hoodie_commit_time"],
        options={
            "hoodie.datasource.read.begin.instanttime": begin,
            "hoodie.datasource.read.incr.fallback.fulltablescan.enable": "true",
        },
    ).to_pylist()
    want = sorted(
        r["id"]
        for r in hudi.read(
            hudi_table, metadata=False, columns=["id", "_hoodie_commit_time"]
        ).to_pylist()
        if r["_hoodie_commit_time"] > begin
    )
    assert sorted(r["id"] for r in incremental) == want and want

    # Hudi's writer, its archiver on, archives after ours; both archives read as one
    hudi_services = {**HUDI_SERVICES, "hoodie.archive.automatic": "true", **bounds}
    for ts in range(12, 18):
        batch = make_rows([ts % 12], ts=ts, parts=2, fare_offset=10.0 * ts)
        hudi.write(hudi_table, "upsert", batch, options=hudi_services)
        expected |= by_key(batch)
    everything = [a.instant.timestamp for a in read_archived(table.storage, ".hoodie/archived")]
    assert set(times[:4]) <= set(everything)
    hudis = [i["timestamp"] for i in hudi.instants(hudi_table) if i["action"] == "commit"]
    assert len(hudis) <= 5 and set(times).isdisjoint(hudis)  # Hudi archived ours too
    rows = _reads(hudi, hudi_table, table)
    assert {r["id"]: r["fare"] for r in rows} == {k: v["fare"] for k, v in expected.items()}
    # and ours again after Hudi's
    with WriteClient(table) as client:
        for ts in range(18, 26):
            batch = make_rows([ts % 12], ts=ts, parts=2, fare_offset=10.0 * ts)
            client.upsert(batch)
            expected |= by_key(batch)
    assert len(table.timeline.load().write_timeline().completed()) <= 5
    rows = _reads(hudi, hudi_table, table)
    assert {r["id"]: r["fare"] for r in rows} == {k: v["fare"] for k, v in expected.items()}
