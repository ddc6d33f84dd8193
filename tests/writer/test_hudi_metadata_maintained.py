"""Our writer keeping Apache Hudi's own metadata table current
(``indexer.write.hudi_metadata_table=maintain``), against Hudi 0.15: a table Hudi writes with its
files, column_stats, bloom_filters and record_index partitions; our upserts, inserts and deletes
go into it as Hudi's writer's would; then Hudi reads with its metadata table and data skipping,
tags upserts with its record index and its bloom index reading the metadata table, and compacts
the metadata table over our deltacommits. `indexer validate` finds it equal to the data
throughout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metadata_table.hudi_table import HudiMetadataTable
from metadata_table.validate import validate_hudi
from timeline import Table
from timeline.config import Config
from timeline.locks.hudi_filesystem import HUDI_PROVIDER_CLASS
from timeline.table_config import METADATA_PARTITIONS
from writer.client import WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows

PARTITIONS = {"files", "column_stats", "bloom_filters", "record_index"}
INDEXES = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
    "hoodie.write.lock.provider": HUDI_PROVIDER_CLASS,
}

#: our writer keeping Hudi's metadata table, under Hudi's lock
MAINTAIN = Config.resolve(
    explicit={
        "indexer.write.hudi_metadata_table": "maintain",
        "hoodie.write.lock.provider": HUDI_PROVIDER_CLASS,
    }
)


def _valid(table: Table) -> None:
    reports = validate_hudi(table)
    assert {r.partition for r in reports} == {f"hudi:{p}" for p in PARTITIONS}
    bad = [r.to_json() for r in reports if not r.ok]
    assert not bad, json.dumps(bad)


def _read(hudi: HudiPeer, hudi_table: HudiTable, **options: Any) -> dict[Any, Any]:
    rows = hudi.read(hudi_table, metadata=True, options=options).to_pylist()
    keys = [r["_hoodie_record_key"] for r in rows]
    assert len(keys) == len(set(keys)), "a record key appears twice"
    return {k: v["ts"] for k, v in by_key(rows).items()}


def test_our_commits_keep_hudis_metadata_table_current(hudi: HudiPeer, tmp_path: Path) -> None:
    hudi_table = HudiTable(str(tmp_path / "t"), extra=INDEXES)
    hudi.write(hudi_table, "insert", make_rows(range(30), ts=1, parts=3))
    table = Table.open(hudi_table.path, MAINTAIN)
    assert HudiMetadataTable(table).present
    expected = {i: 1 for i in range(30)}
    with WriteClient(table) as client:
        client.upsert(make_rows(range(20, 40), ts=2, parts=3))  # 10 updates, 10 inserts
        expected |= {i: 2 for i in range(20, 40)}
        client.delete(make_rows([0, 25], ts=2, parts=3))
        del expected[0], expected[25]
    props = table.reload_table_config().props
    assert set(props[METADATA_PARTITIONS].split(",")) == PARTITIONS  # kept, not taken down
    _valid(table)

    # Hudi's reader, its metadata table listing our files, data skipping on its column stats
    assert _read(hudi, hudi_table) == expected
    skipping = {"hoodie.enable.data.skipping": "true"}
    assert _read(hudi, hudi_table, **skipping) == expected

    # Hudi's record index tags a key we inserted (no second copy) and one it wrote
    hudi.write(
        hudi_table,
        "upsert",
        make_rows([35, 5], ts=3, parts=3),
        options={"hoodie.index.type": "RECORD_INDEX"},
    )
    expected |= {35: 3, 5: 3}
    assert _read(hudi, hudi_table) == expected
    _valid(table)

    # Hudi's bloom index reading filters from its metadata table finds our files' keys; its
    # metadata compaction runs over our deltacommits
    hudi.write(
        hudi_table,
        "upsert",
        make_rows([36, 6], ts=4, parts=3),
        options={
            "hoodie.index.type": "BLOOM",
            "hoodie.bloom.index.use.metadata": "true",
            "hoodie.metadata.compact.max.delta.commits": "1",
        },
    )
    expected |= {36: 4, 6: 4}
    assert _read(hudi, hudi_table) == expected
    compactions = list((Path(hudi_table.path) / ".hoodie/metadata/.hoodie").glob("*001.commit"))
    assert compactions
    _valid(table)

    # and our writer goes on after Hudi's
    with WriteClient(table) as client:
        client.upsert(make_rows([37, 7, 50], ts=5, parts=3))
    expected |= {37: 5, 7: 5, 50: 5}
    _valid(table)
    assert _read(hudi, hudi_table, **skipping) == expected


def test_our_writer_and_hudis_share_one_lock_and_lose_no_update(
    hudi: HudiPeer, tmp_path: Path
) -> None:
    """For a minute our writer (in a thread) and Hudi's (optimistic concurrency) upsert
    overlapping keys, both under Hudi's FileSystemBasedLockProvider: Hudi's side sees our
    commits as conflicts, ours sees Hudi's, every key ends with the value of the last commit
    that completed with it, and Hudi's metadata table equals the data afterwards."""
    import random
    import threading
    import time

    from timeline.errors import WriteConflictError

    from ..hudi_peer.peer import HudiPeerError

    occ = {
        **INDEXES,
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        "hoodie.cleaner.policy.failed.writes": "LAZY",
    }
    hudi_table = HudiTable(str(tmp_path / "t"), extra=occ)
    hudi.write(hudi_table, "insert", make_rows(range(12), ts=0, parts=2))
    table = Table.open(hudi_table.path, MAINTAIN)
    written: list[tuple[str, int, list[int]]] = []  # (instant, ts, keys) of acknowledged writes
    theirs: list[tuple[list[str], int, list[int]]] = []  # (commits completed meanwhile, ts, keys)
    conflicts = {"ours": 0, "hudi": 0}
    stop = time.monotonic() + 60
    errors: list[BaseException] = []

    def ours() -> None:
        rng, n = random.Random(1), 0
        try:
            with WriteClient(table) as client:
                while time.monotonic() < stop:
                    n += 1
                    keys = rng.sample(range(12), 4)
                    try:
                        done = client.upsert(make_rows(keys, ts=1_000_000 + n, parts=2))
                    except WriteConflictError:
                        conflicts["ours"] += 1
                        continue
                    written.append((done.timestamp, 1_000_000 + n, keys))
        except BaseException as e:  # failed the test below
            errors.append(e)

    thread = threading.Thread(target=ours)
    thread.start()
    rng, m = random.Random(2), 0
    while time.monotonic() < stop:
        m += 1
        keys = rng.sample(range(12), 4)
        try:
            result = hudi.write(hudi_table, "upsert", make_rows(keys, ts=2_000_000 + m, parts=2))
        except HudiPeerError as e:
            if "HoodieWriteConflictException" not in str(e):
                raise
            conflicts["hudi"] += 1
            continue
        # the commits completed during Hudi's write: its own, and any of ours that landed then
        landed = [
            i["timestamp"]
            for i in result["instants"]
            if i["action"] == "commit" and i["state"] == "COMPLETED"
        ]
        theirs.append((landed, 2_000_000 + m, keys))
    thread.join()
    assert not errors, errors
    ours_done = {instant for instant, _, _ in written}
    for landed, ts, keys in theirs:
        (instant,) = [t for t in landed if t not in ours_done]
        written.append((instant, ts, keys))
    assert conflicts["hudi"] > 0, conflicts  # our commits landed inside Hudi's writes

    # and a commit of Hudi's landing inside one of ours is a conflict on our side (ours are
    # short: in the minute they rarely overlap one of Hudi's)
    with WriteClient(table) as client:
        txn = client.start("upsert")
        txn.write(make_rows(range(12), ts=3_000_000, parts=2))
        result = hudi.write(hudi_table, "upsert", make_rows(range(12), ts=3_000_001, parts=2))
        with pytest.raises(WriteConflictError):
            txn.commit()
        txn.abort()
    (instant,) = [
        i["timestamp"]
        for i in result["instants"]
        if i["action"] == "commit" and i["state"] == "COMPLETED"
    ]
    written.append((instant, 3_000_001, list(range(12))))

    # the last completed commit that wrote a key holds its value (completion order: the
    # completed instant files' times on the data timeline)
    hoodie = Path(hudi_table.path) / ".hoodie"
    completed_at = {p.name.split(".")[0]: p.stat().st_mtime_ns for p in hoodie.glob("*.commit")}
    expected: dict[int, int] = {i: 0 for i in range(12)}
    for _, ts, keys in sorted(written, key=lambda w: completed_at[w[0]]):
        expected |= dict.fromkeys(keys, ts)
    assert _read(hudi, hudi_table) == expected
    _valid(table)


#: our writer alone on a Hudi table, its services eager: a clean after every commit that leaves
#: an older file version, Hudi's metadata table compacted every 3 deltacommits, archival past 3,
#: archive files merged two at a time
SERVICES = Config.resolve(
    explicit={
        "hoodie.write.lock.provider": HUDI_PROVIDER_CLASS,
        "hoodie.cleaner.commits.retained": "1",
        "indexer.clean.grace.seconds": "0",
        "hoodie.metadata.compact.max.delta.commits": "3",
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.archive.merge.files.batch.size": "2",  # archive files merged as Hudi merges
    }
)


def test_our_writer_alone_cleans_compacts_and_archives_with_hudis_metadata_table(
    hudi: HudiPeer, tmp_path: Path
) -> None:
    """With default settings (maintain) and only our writer writing, the table stays small as
    under Hudi's writer: our cleans go into Hudi's metadata table (files deleted, their bloom
    filters and column stats as Hudi's tombstones), we compact that table as Hudi does
    (``<t>001``) and clean its old file slices (``<t>002``), and archive the data timeline up to
    its newest compaction, and that table's own timeline as Hudi archives it. Hudi then reads
    the table through its metadata table, tags with its record index, and compacts over ours."""
    hudi_table = HudiTable(str(tmp_path / "t"), extra=INDEXES)
    hudi.write(hudi_table, "insert", make_rows(range(30), ts=1, parts=3))
    table = Table.open(hudi_table.path, SERVICES)
    expected = {i: 1 for i in range(30)}
    mdt = Path(hudi_table.path) / ".hoodie/metadata/.hoodie"
    with WriteClient(table) as client:
        assert client.maintains_hudi_metadata_table()  # the default
        compactions, metadata_cleans, archives, cleaned = [], [], [], 0
        for n in range(10):
            keys = [(n * 7 + j) % 30 for j in range(5)]
            client.upsert(make_rows(keys, ts=10 + n, parts=3))
            expected |= {k: 10 + n for k in keys}
            cleaned += sum(c.files_deleted for c in client.last_cleans)
            if client.last_hudi_upkeep.compaction:
                compactions.append(client.last_hudi_upkeep.compaction)
            if client.last_hudi_upkeep.clean:
                metadata_cleans.append(client.last_hudi_upkeep.clean)
            if client.last_hudi_upkeep.archive:
                archives.append(client.last_hudi_upkeep.archive)
        client.delete(make_rows([3, 4], ts=99, parts=3))
        del expected[3], expected[4]
    assert cleaned > 0 and len(compactions) >= 2, (cleaned, compactions)
    # (older ones may be archived by now: the newest never is)
    assert all(c.endswith("001") for c in compactions)
    assert (mdt / f"{compactions[-1]}.commit").exists()
    # its clean (<t>002) leaves each file group its newest two file slices
    assert metadata_cleans and (mdt / f"{metadata_cleans[-1]}.clean").exists()
    for folder in (mdt.parent / p for p in PARTITIONS):
        bases: dict[str, set[str]] = {}
        for f in folder.glob("*.hfile"):
            bases.setdefault(f.name.split("_")[0], set()).add(f.name.rsplit("_", 1)[1])
        assert bases and all(len(b) <= 2 for b in bases.values()), bases
    archived = [a.instant.timestamp for a in table.archive().instants()]
    assert archived and max(archived) < compactions[-1]  # never past the newest compaction
    # and the metadata table's own timeline, archived as Hudi archives it: read by Hudi's
    # archived timeline, never past that table's newest compaction nor the data's first write
    assert len(archives) >= 3, archives
    # (two small archive files are merged into one: never more than two there)
    assert 1 <= len(list((mdt / "archived").glob(".commits_.archive.*"))) <= 2
    assert 1 <= len(list((mdt.parent.parent / "archived").glob(".commits_.archive.*"))) <= 2
    metadata_table = HudiTable(str(mdt.parent), extra={})
    gone = {i["timestamp"] for i in hudi.instants(metadata_table, archived=True)}
    active = {i["timestamp"] for i in hudi.instants(metadata_table)}
    assert gone and not gone & active, (gone, active)
    first_data = min(i["timestamp"] for i in hudi.instants(hudi_table))
    assert max(gone) < min(compactions[-1], first_data)
    _valid(table)
    listing = HudiMetadataTable(table).file_listing()
    on_disk = {p: {f.name for f in (Path(hudi_table.path) / p).glob("*.parquet")} for p in listing}
    assert {p: set(files) for p, files in listing.items()} == on_disk  # cleaned files gone
    _reads_list_from_hudis_metadata_table(table, expected)

    skipping = {"hoodie.enable.data.skipping": "true"}
    assert _read(hudi, hudi_table) == expected
    assert _read(hudi, hudi_table, **skipping) == expected
    hudi.write(
        hudi_table,
        "upsert",
        make_rows([5, 6, 40], ts=100, parts=3),
        options={
            "hoodie.index.type": "RECORD_INDEX",
            "hoodie.metadata.compact.max.delta.commits": "1",
        },
    )
    expected |= {5: 100, 6: 100, 40: 100}
    assert _read(hudi, hudi_table, **skipping) == expected
    _valid(table)


def test_a_commit_that_fails_after_its_metadata_deltacommit_is_undone_there(
    hudi: HudiPeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit of ours that fails after writing its deltacommit into Hudi's metadata table and
    before its data instant completes is rolled back with that deltacommit: its completed file,
    its log files and its pending files go, so neither Hudi's compaction nor its readers (once
    the instant has left the active timeline) ever count its records."""
    from timeline.errors import InjectedFailure
    from timeline.instant import Action
    from timeline.log_format import read_blocks
    from timeline.removals import parse_removal

    hudi_table = HudiTable(str(tmp_path / "t"), extra=INDEXES)
    hudi.write(hudi_table, "insert", make_rows(range(10), ts=1, parts=2))
    table = Table.open(hudi_table.path, MAINTAIN)
    mdt = Path(hudi_table.path) / ".hoodie/metadata"
    before = {p.name.split(".")[0] for p in (mdt / ".hoodie").glob("*.deltacommit*")}
    monkeypatch.setenv("AIX_FAILPOINT", "writer.commit.hudi_metadata:once")
    with WriteClient(table) as client, pytest.raises(InjectedFailure):
        client.upsert(make_rows([1, 2, 50], ts=2, parts=2))
    monkeypatch.delenv("AIX_FAILPOINT")
    (rolled,) = table.timeline.load().with_actions(Action.ROLLBACK).completed()
    (failed,) = parse_removal(rolled, table.timeline.read_content(rolled), "").rolled_back
    after = {p.name.split(".")[0] for p in (mdt / ".hoodie").glob("*.deltacommit*")}
    assert after - before == {rolled.timestamp}  # the rollback's own (its deleted files)
    logs = [p for p in mdt.rglob(".*.log.*") if not p.name.endswith(".crc")]
    assert all(b.instant_time != failed for p in logs for b in read_blocks(p.read_bytes()))
    _valid(table)
    with WriteClient(table) as client:
        client.upsert(make_rows([1, 2, 50], ts=3, parts=2))
    _valid(table)
    assert _read(hudi, hudi_table) == {i: 1 for i in range(10)} | {1: 3, 2: 3, 50: 3}


def _reads_list_from_hudis_metadata_table(table: Table, expected: dict[Any, Any]) -> None:
    """With no index of ours, reads list files from Hudi's metadata table (and say so), and
    read exactly the rows; `indexer status` shows it current and kept. Once a completed instant
    is missing from it (a deltacommit taken away here, as a writer that does not keep it leaves
    it), reads list storage instead, and status says why."""
    import shutil

    from indexer.cli import main as indexer_main
    from indexer.indexer import AsyncIndexer
    from metadata_table.read.scan import IndexedTable
    from metadata_table.read.snapshot import IndexedSnapshot

    snapshot = IndexedSnapshot(table)
    storage = IndexedSnapshot(table)
    storage.completed = {"files"}  # (as if ours were there, lost: the storage listing)
    storage.__dict__["_hudi_files"] = lambda: None
    assert snapshot.view.latest_base_files() == storage.view.latest_base_files()
    assert snapshot.listed_by == "Apache Hudi's metadata table (files)"
    scan = IndexedTable(table).scan("id >= 0")
    assert "listed by: Apache Hudi's metadata table (files)" in scan.explain()
    rows = scan.to_arrow().to_pylist()
    assert {r["id"]: r["ts"] for r in rows} == expected
    status = AsyncIndexer(table).status()["hudi_metadata_table"]
    assert status["unapplied"] == [] and status["kept_by_our_writers"]
    assert set(status["partitions"]) == PARTITIONS

    stale = Path(str(table.base_uri).removeprefix("file://") + "-stale")
    shutil.copytree(table.base_uri.removeprefix("file://"), stale)
    mdt = stale / ".hoodie/metadata/.hoodie"
    newest = max(p for p in mdt.glob("*.deltacommit"))
    newest.unlink()
    copy = Table.open(str(stale), SERVICES)
    snapshot = IndexedSnapshot(copy)
    snapshot.view  # noqa: B018 (built for its listing)
    assert snapshot.listed_by == "storage"
    assert AsyncIndexer(copy).status()["hudi_metadata_table"]["unapplied"] == [
        newest.name.split(".")[0]
    ]
    assert indexer_main(["status", str(stale)]) == 0
