"""The index keeps itself small: compaction by count after writers' commits, the files a
compaction replaced deleted once the readers' grace period has passed (never while a reader may
still need them, never while a compaction of the partition is running), and the index's own
timeline trimmed; reads stay exact throughout."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest import MonkeyPatch

from metadata_table.layout import PARTITIONS, RECORD_INDEX, MetadataFile
from metadata_table.maintenance import clean_index, compact, initialize, upkeep
from metadata_table.table import MetadataTable
from metadata_table.validate import validate
from timeline import Action, Table
from writer.client import WriteClient

from .test_metadata_table import assert_exact, keys, make_table, rows

GROUPS = dict.fromkeys(PARTITIONS, 1)


def indexed(base: Path, **config: str) -> Table:
    table = make_table(base, **{"hoodie.clean.automatic": "false", **config})
    WriteClient(table).insert(rows(keys(0, 60)))
    initialize(table, PARTITIONS, groups=GROUPS)
    return table


def index_files(table: Table) -> dict[str, list[MetadataFile]]:
    mdt = MetadataTable(table)
    out = {}
    for partition in PARTITIONS:
        names = [MetadataFile.parse(partition, e.name) for e in mdt.storage.list(partition)]
        out[partition] = [f for f in names if f is not None]
    return out


def index_instants(table: Table) -> int:
    return len(list(MetadataTable(table).timeline.load()))


def upsert(table: Table, commits: int, start: int = 2) -> None:
    with WriteClient(table) as client:
        for ts in range(start, start + commits):
            client.upsert(rows(keys(ts % 50, ts % 50 + 5), ts=ts))


def test_writers_compact_by_count_and_delete_what_compaction_replaced(tmp_path: Path) -> None:
    """40 commits with compaction every 4 deltacommits and no grace period: each partition holds
    one base file and fewer than 4 logs, and the index's timeline stays short; without the
    upkeep it would hold 40 logs per partition and 40 more instants."""
    table = indexed(
        tmp_path,
        **{
            "hoodie.metadata.compact.max.delta.commits": "4",
            "indexer.clean.grace.seconds": "0",
        },
    )
    upsert(table, 40)
    for partition, files in index_files(table).items():
        bases = [f for f in files if not f.is_log]
        logs = [f for f in files if f.is_log]
        assert len(bases) == 1, (partition, bases)
        assert len(logs) < 4, (partition, logs)
    # the newest compaction of each partition, and the deltacommits after it
    assert index_instants(table) <= len(PARTITIONS) + 4, index_instants(table)
    assert_exact(table)
    assert all(r.ok for r in validate(table))


def test_two_upkeeps_that_race_compact_once(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    """A writer's upkeep and the daemon's count the deltas at once; one compacts (and a commit
    lands) before the other starts: the other finds one delta, not the threshold, and leaves the
    partition alone (CI saw a second base file 32 ms after the first, past the bound a long
    life keeps)."""
    from metadata_table import maintenance

    table = indexed(
        tmp_path,
        **{
            "hoodie.metadata.compact.max.delta.commits": "3",
            "indexer.metadata.upkeep.automatic": "false",
        },
    )
    upsert(table, 3)
    real = maintenance.compact
    raced: list[str] = []

    def after_the_other(table: Table, partition: str, **kwargs: Any) -> Any:
        if not raced:
            raced.append(partition)
            assert real(table, partition) is not None  # the other process's upkeep
            upsert(table, 1, start=10)
        return real(table, partition, **kwargs)

    monkeypatch.setattr(maintenance, "compact", after_the_other)
    done = upkeep(table)
    assert raced[0] not in done.compacted
    bases = [f for f in index_files(table)[raced[0]] if not f.is_log]
    assert len(bases) == 2, bases  # the first build's and one compaction's
    assert_exact(table)


def test_off_the_index_grows_with_every_commit(tmp_path: Path) -> None:
    table = indexed(tmp_path, **{"indexer.metadata.upkeep.automatic": "false"})
    upsert(table, 12)
    for partition, files in index_files(table).items():
        if partition != RECORD_INDEX:  # in-place updates write nothing there
            assert len([f for f in files if f.is_log]) == 12, partition  # one per commit
    assert index_instants(table) >= 12  # a deltacommit per commit


def test_replaced_files_stay_through_the_grace_period(tmp_path: Path) -> None:
    """A reader that listed the index before a compaction reads the files the compaction
    replaced: they stay until the grace period has passed, then go."""
    table = indexed(tmp_path, **{"indexer.metadata.upkeep.automatic": "false"})
    upsert(table, 3)
    mdt = MetadataTable(table)
    before = mdt.reader(table.timeline.load(), cache=False)
    before.slices(PARTITIONS[0])  # lists the files (base + 3 logs) it will read
    assert compact(table, PARTITIONS[0]) is not None
    assert not clean_index(table)  # within the 60 s grace period: nothing goes
    rows_before = before.read(PARTITIONS[0])
    assert rows_before.num_rows > 0
    done = clean_index(table, now=time.time() + 61)
    assert done.removed_files == 4 and done.removed_bytes > 0
    files = index_files(table)[PARTITIONS[0]]
    assert [f.is_log for f in files] == [False]
    assert_exact(table)


def test_a_running_compaction_keeps_its_partition_whole(tmp_path: Path) -> None:
    table = indexed(tmp_path, **{"indexer.metadata.upkeep.automatic": "false"})
    upsert(table, 2)
    compact(table, PARTITIONS[0])
    mdt = MetadataTable(table)
    running = mdt.begin_base_files(PARTITIONS[0], "0", table.timeline.generator.next(), 1)
    try:
        assert clean_index(table, now=time.time() + 600).removed_files == 0
    finally:
        mdt.discard_pending_base_files([PARTITIONS[0]], instants=[running.timestamp])
    assert clean_index(table, now=time.time() + 600).removed_files == 3  # old base + 2 logs


def test_a_dropped_partitions_compactions_leave_the_timeline(tmp_path: Path) -> None:
    from metadata_table.partition_writer import PartitionWriter

    table = indexed(tmp_path, **{"indexer.metadata.upkeep.automatic": "false"})
    upsert(table, 2)
    with table.lock("test") as lock:
        table.update_metadata_partitions(lock, remove=[PARTITIONS[1]])
        PartitionWriter(table).drop([PARTITIONS[1]])
    done = clean_index(table, now=time.time() + 600)
    mdt = MetadataTable(table)
    left = mdt.timeline.load().with_actions(Action.COMPACTION).completed()
    partitions = {mdt.planned_partition(i) for i in left}
    assert PARTITIONS[1] not in partitions and done.trimmed_instants >= 1


def test_a_compaction_during_which_its_partition_is_dropped_leaves_nothing(
    tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    """A compaction writes outside the table lock: when a drop of its partition comes in while
    it writes, it completes nothing and its files go (it completed a dropped partition's base
    files, which stayed, and with a writer's file landing in the folder meanwhile the drop
    itself failed)."""
    from metadata_table import table as mdt_module
    from metadata_table.partition_writer import PartitionWriter

    table = indexed(tmp_path, **{"indexer.metadata.upkeep.automatic": "false"})
    upsert(table, 2)
    partition = PARTITIONS[1]
    real = mdt_module.write_base_file
    dropped: list[str] = []

    def write_then_drop(*args: Any, **kwargs: Any) -> int:
        size = real(*args, **kwargs)
        if not dropped:
            dropped.append(partition)
            with table.lock("drop") as lock:
                table.update_metadata_partitions(lock, remove=[partition])
                PartitionWriter(table).drop([partition])
        return size

    mdt = MetadataTable(table)
    before = list(mdt.timeline.load().with_actions(Action.COMPACTION))
    monkeypatch.setattr(mdt_module, "write_base_file", write_then_drop)
    assert compact(table, partition) is None
    assert dropped and mdt.storage.list(partition) == []
    assert list(mdt.timeline.load().with_actions(Action.COMPACTION)) == before
    assert_exact(table, [p for p in PARTITIONS if p != partition])


def test_upkeep_compacts_only_what_is_due(tmp_path: Path) -> None:
    table = indexed(
        tmp_path,
        **{
            "indexer.metadata.upkeep.automatic": "false",
            "hoodie.metadata.compact.max.delta.commits": "3",
        },
    )
    upsert(table, 2)
    assert not upkeep(table).compacted
    upsert(table, 1, start=9)
    assert set(upkeep(table).compacted) == set(PARTITIONS)
    assert set(upkeep(table, force=True).compacted) == set()  # no logs left to merge
    assert_exact(table)


def test_indexer_compact_reports_what_it_deleted(tmp_path: Path) -> None:
    table = indexed(
        tmp_path,
        **{"indexer.metadata.upkeep.automatic": "false", "indexer.clean.grace.seconds": "0"},
    )
    upsert(table, 2)
    compact(table, PARTITIONS[0])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "compact",
            table.base_uri,
            "--json",
            "--conf=indexer.lock.url=inprocess",
            "--conf=indexer.clean.grace.seconds=0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out["compacted"]) == set(PARTITIONS) - {PARTITIONS[0]}
    # every partition's replaced base and 2 logs (the first partition's were replaced earlier;
    # the record index's in-place updates wrote no logs)
    assert out["removed_files"] == 3 * (len(PARTITIONS) - 1) + 1
    assert out["trimmed_instants"] > 0
    assert_exact(table)


def test_a_scan_made_before_an_index_clean_answers_after_it(tmp_path: Path) -> None:
    """A scan whose snapshot listed the index before a clean deleted files (the grace period
    set to 0) plans again on a fresh snapshot and answers the same rows."""
    from metadata_table.read.scan import load_table

    table = indexed(
        tmp_path,
        **{"indexer.metadata.upkeep.automatic": "false", "indexer.clean.grace.seconds": "0"},
    )
    upsert(table, 2)
    scan = load_table(table.base_uri, config=table.config).scan("uuid = 'k0003'")
    for partition in PARTITIONS:
        scan.snapshot.reader.slices(partition)  # listed now, read later
    for partition in PARTITIONS:
        compact(table, partition)
    assert clean_index(table).removed_files > 0
    assert scan.to_arrow().column("uuid").to_pylist() == ["k0003"]
