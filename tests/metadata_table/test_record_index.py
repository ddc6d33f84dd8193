"""The record index and secondary indexes: built by the indexer (both engines), kept exact by
every commit of ours (inserts, updates, deletes, keys moved to another partition), by sync after
commits that did not update them (new groups, deletes, a rollback of what their base files
hold), global (one location per key: an insert of a key the table has updates it, two writers
placing one new key conflict), and answering lookups exactly, decoding only the row groups that
may hold the keys asked for."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table import layout
from metadata_table.layout import (
    BLOOM_FILTERS,
    FILES,
    RECORD_INDEX,
    ROW_GROUP_ROWS,
    SECONDARY_INDEX,
    hash_order,
    secondary_index_partition,
)
from metadata_table.maintenance import build_records, compact, initialize
from metadata_table.partition_writer import PartitionWriter
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.records import RECORD_KEY, value_texts, with_record_keys
from metadata_table.table import MetadataTable
from metadata_table.validate import validate
from timeline import Table
from timeline.commit_metadata import CommitMetadata
from timeline.config import LOCK_URL, Config
from timeline.errors import (
    ConfigError,
    DuplicateRecordKeyError,
    RecordKeyConflictError,
    TableConfigError,
)
from timeline.fs_view import FileSystemView
from timeline.hashing import key_hash64
from timeline.hudi_avro import avro_file
from timeline.instant import Action, Instant, State
from timeline.keys import KeyGenerator
from writer.client import Operation, WriteClient, WriteTransaction

from ..indexer.test_foreign_commits import _clean_by_another_writer, foreign_write
from .test_metadata_table import keys, make_table, rows

FARE = secondary_index_partition("fare")
CITY = secondary_index_partition("city")
KEYED = (RECORD_INDEX, FARE, CITY)


def live_rows(table: Table) -> list[dict[str, Any]]:
    view = FileSystemView(table.timeline, table.timeline.load())
    meta = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "fare", "city"]
    return view.read_snapshot(meta).to_pylist()


def assert_exact(table: Table, partitions: tuple[str, ...] = KEYED) -> None:
    """Each keyed partition equals a rebuild, and for every live row the record index gives
    exactly its file, and each secondary index exactly the keys holding its value."""
    reports = {r.partition: r for r in validate(table)}
    for partition in partitions:
        assert reports[partition].ok, reports[partition].to_json()
    snapshot = IndexedSnapshot(table)
    rows_ = live_rows(table)
    where = snapshot.record_locations([r["_hoodie_record_key"] for r in rows_])
    assert len(where) == len(rows_), "one location per live key"
    for row in rows_:
        located = where[row["_hoodie_record_key"]]
        assert located.partition_path == row["_hoodie_partition_path"], row
        holder = "/".join(filter(None, (row["_hoodie_partition_path"], row["_hoodie_file_name"])))
        assert located.paths == (holder,), (row, located)
    for partition, column in ((FARE, "fare"), (CITY, "city")):
        if partition not in partitions:
            continue
        texts = value_texts(pa.array([r[column] for r in rows_])).to_pylist()
        found = snapshot.keyed_lookup(partition).find(texts)
        expected = set(zip(texts, [r["_hoodie_record_key"] for r in rows_], strict=True))
        got = zip(
            found.column("value").to_pylist(), found.column("record_key").to_pylist(), strict=True
        )
        assert set(got) == expected, partition


@pytest.fixture
def table(tmp_path: Path) -> Table:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 60)))
    client.upsert(rows(keys(50, 80), ts=2))
    client.delete(rows(keys(0, 5)))
    return table


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_built_by_the_indexer_and_kept_by_every_commit(
    table: Table, engine: str, spark: Any
) -> None:
    indexer = AsyncIndexer(
        table, IndexerOptions(engine=engine), spark if engine == "spark" else None
    )
    indexer.run(list(KEYED))
    assert_exact(table)
    client = WriteClient(table)
    client.upsert(rows(keys(70, 90), ts=3))  # updates and inserts
    assert_exact(table)
    client.delete(rows(keys(10, 20)))
    assert_exact(table)
    changed = rows(keys(30, 35), ts=4)
    changed = changed.set_column(3, "fare", pa.array([1000.0 + i for i in range(5)]))
    client.upsert(changed)  # values change: old ones leave the secondary index
    assert_exact(table)
    snapshot = IndexedSnapshot(table)
    assert snapshot.keyed_lookup(FARE).find(["30"]).num_rows == 0
    assert snapshot.keyed_lookup(FARE).find(value_texts(pa.array([1000.0]))).num_rows == 1


def test_keys_are_global_once_a_record_index_exists(table: Table) -> None:
    initialize(table, list(KEYED))
    client = WriteClient(table)
    # k0040 lives in "la" (40 % 3 == 1): upserted into "tokyo", its old copy is deleted
    moved = rows(["k0040"], ts=5, city="tokyo")
    client.upsert(moved)
    found = [r for r in live_rows(table) if r["_hoodie_record_key"] == "k0040"]
    assert [r["_hoodie_partition_path"] for r in found] == ["tokyo"]
    assert_exact(table)
    # an older copy does not move it (the stored precombine value is larger)
    client.upsert(rows(["k0040"], ts=1, city="sf"))
    found = [r for r in live_rows(table) if r["_hoodie_record_key"] == "k0040"]
    assert [r["_hoodie_partition_path"] for r in found] == ["tokyo"]
    # an insert of a key the table has updates it: no second copy
    client.insert(rows(["k0041", "k0042"], ts=9, city="ny"))
    found = [r["_hoodie_record_key"] for r in live_rows(table)]
    assert sorted(found) == sorted(set(found))
    # a delete finds the key wherever it lives, whatever partition the row names
    client.delete(rows(["k0040"], city="sf"))
    assert "k0040" not in {r["_hoodie_record_key"] for r in live_rows(table)}
    assert_exact(table)
    assert "record_index" in WriteClient(table).start(Operation.UPSERT).index.key_indexes()


def test_a_table_without_partitions_takes_new_and_known_keys(tmp_path: Path) -> None:
    """The partition path of every key is "": a key the index does not hold is an insert, not
    taken for one held in that partition."""
    config = Config.resolve(explicit={"indexer.lock.url": "inprocess"})
    table = Table.create(str(tmp_path / "t"), "trips", ["uuid"], [], "ts", config=config)
    client = WriteClient(table)
    client.insert(rows(keys(0, 10)))
    initialize(table, [RECORD_INDEX])
    client.insert(rows(keys(10, 14)))
    client.upsert(rows(keys(5, 12), ts=2))
    live = sorted(r["_hoodie_record_key"] for r in live_rows(table))
    assert live == keys(0, 14)
    assert_exact(table, (RECORD_INDEX,))


def test_two_writers_placing_one_new_key_conflict(table: Table) -> None:
    initialize(table, list(KEYED))
    first = WriteClient(table).start(Operation.UPSERT)
    second = WriteClient(table).start(Operation.UPSERT)
    first.write(rows(["k0500"], city="sf"))
    second.write(rows(["k0500", "k0501"], city="la"))
    first.commit()
    with pytest.raises(RecordKeyConflictError) as raised:
        second.commit()
    assert raised.value.keys == ["k0500"] and raised.value.other_instant == first.instant
    assert_exact(table)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_delete_of_a_key_found_nowhere_conflicts_with_a_write_that_placed_it(
    table: Table, engine: str, request: pytest.FixtureRequest
) -> None:
    """The delete read k0600 as absent and wrote nothing for it; committed after the write that
    inserted k0600 it would have left the key alive (the concurrency suite found it so). It
    conflicts instead, and its retry deletes the key."""
    initialize(table, list(KEYED))
    doomed = rows(["k0600", "k0010"])
    if engine == "spark":
        from writer.spark import SparkWriteClient, _SparkWrite

        spark = request.getfixturevalue("spark")
        client = SparkWriteClient(table, spark)
        delete = client.start(Operation.DELETE)
        _SparkWrite(client, delete, spark.createDataFrame(doomed.to_pandas())).run()
    else:
        delete = WriteClient(table).start(Operation.DELETE)
        delete.write(doomed)
    insert = WriteClient(table).start(Operation.UPSERT)
    insert.write(rows(["k0600"], city="la"))
    insert.commit()
    with pytest.raises(RecordKeyConflictError, match=r"deleted \(found nowhere\)") as raised:
        delete.commit()
    assert raised.value.keys == ["k0600"] and raised.value.other_instant == insert.instant
    WriteClient(table).delete(rows(["k0600", "k0010"]))
    assert not IndexedSnapshot(table).record_locations(["k0600", "k0010"])
    assert_exact(table)


def test_a_lookup_of_a_key_beyond_every_row_groups_hashes_finds_nothing(table: Table) -> None:
    """A key whose stored hash lies outside every row group's key_hash range decodes nothing
    (it raised ValueError: no row group to pair with the bounds)."""
    initialize(table, [RECORD_INDEX])
    stored = (key_hash64(pa.array(keys(0, 80))) >> np.uint64(32)).max()
    absent = next(
        k
        for k in (f"absent-{i}" for i in range(10_000))
        if key_hash64(pa.array([k]))[0] >> np.uint64(32) > stored
    )
    assert IndexedSnapshot(table).record_locations([absent]) == {}


def test_a_write_started_before_the_record_index_looks_for_the_keys_it_places(
    table: Table,
) -> None:
    """A write that started before the record index was scheduled did not look for its keys in
    other partitions: at commit it does, and conflicts only where a key it places is somewhere
    already (a second copy the record index could not hold)."""
    updates = WriteClient(table).start(Operation.UPSERT)
    updates.write(rows(keys(50, 55), ts=7))  # updates in place only
    inserts = WriteClient(table).start(Operation.UPSERT)
    inserts.write(rows(keys(600, 605)))  # new keys
    moved = WriteClient(table).start(Operation.UPSERT)
    moved.write(rows(["k0040"], ts=9, city="tokyo"))  # k0040 is in la: a second copy
    initialize(table, [RECORD_INDEX])
    updates.commit()
    inserts.commit()
    with pytest.raises(RecordKeyConflictError, match="before the record index was scheduled"):
        moved.commit()
    WriteClient(table).upsert(rows(["k0040"], ts=9, city="tokyo"))  # the retry moves it
    assert_exact(table, (RECORD_INDEX,))


def test_sync_applies_commits_that_did_not_update_it(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    initialize(table, list(KEYED))
    foreign_write(table, rows(keys(100, 110), city="tokyo"), monkeypatch)  # a new partition
    foreign_write(table, rows(keys(20, 25), ts=8), monkeypatch)  # updates in place
    snapshot = IndexedSnapshot(table)
    assert snapshot.record_index_touched() == {"tokyo", "sf", "la", "ny"}
    # lagging, never stale: the touched partitions' files answer for their keys
    for key in ("k0100", "k0021"):
        assert snapshot.lookup_keys([key])[key], key
    assert snapshot.key_indexes() == [RECORD_INDEX]  # and every file where it lags
    result = AsyncIndexer(table, IndexerOptions(engine="local")).sync()
    assert not result.resynced and len(result.applied) == 2
    assert_exact(table)
    # a delete by a writer without the index: its keys become tombstones on sync
    with monkeypatch.context() as patch:
        patch.setattr(WriteTransaction, "_update_metadata_table", lambda self, lock: None)
        WriteClient(table).delete(rows(keys(100, 103), city="tokyo"))
    AsyncIndexer(table, IndexerOptions(engine="local")).sync()
    assert_exact(table)


def test_a_commit_whose_file_was_cleaned_since_is_applied_from_what_followed(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hudi's cleaner may delete the file version a lagging commit wrote before the index sees
    it: the group is then taken as it is now (the later version's keys), never missing the
    keys that commit deleted."""
    initialize(table, list(KEYED))
    with monkeypatch.context() as patch:
        patch.setattr(WriteTransaction, "_update_metadata_table", lambda self, lock: None)
        WriteClient(table).delete(rows(keys(30, 33)))  # rewrites their groups without them
        WriteClient(table).upsert(rows(keys(30, 36), ts=9))  # k0030-32 back, the rest updated
        WriteClient(table).delete(rows(["k0034"]))
    _clean_by_another_writer(table)  # the first two versions of those groups are gone
    result = AsyncIndexer(table, IndexerOptions(engine="local")).sync()
    assert not result.resynced
    assert_exact(table)


def test_a_clean_our_writer_made_before_the_build_is_reflected(tmp_path: Path) -> None:
    """A clean completed between the build's t (the last write) and its scheduling, by a writer
    of ours with another partition completed: its deltacommit named that partition only. The
    build's catch-up has nothing to write for it in the new partitions (no key moves; their base
    files never listed what it deleted), and still they reflect it: never shown as lagging,
    compacted as due (before, they lagged on it for good: nothing written left no trace, sync
    applied it again and again, and compaction waited on it forever)."""
    table = make_table(
        tmp_path / "t",
        **{"hoodie.cleaner.commits.retained": "1", "indexer.clean.grace.seconds": "0"},
    )
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, [BLOOM_FILTERS])
    client.upsert(rows(keys(0, 30), ts=2))
    client.upsert(rows(keys(0, 30), ts=3))  # a third version: the first is cleaned
    timeline = table.timeline.load()
    assert timeline.last().action is Action.CLEAN  # after the last write: between t and the build
    AsyncIndexer(table, IndexerOptions(engine="local")).run(list(KEYED))
    assert not PartitionWriter(table).unapplied(list(KEYED))
    assert not IndexedSnapshot(table).unapplied(RECORD_INDEX)
    assert not AsyncIndexer(table, IndexerOptions(engine="local")).sync().applied
    assert_exact(table)
    client.upsert(rows(keys(0, 5), ts=4))
    assert compact(table, RECORD_INDEX) is not None, "compaction does not wait on the clean"
    assert_exact(table)


def rollback_completed(table: Table, instant: Instant) -> None:
    """A rollback of a completed commit, as Apache Hudi's writer makes one (this kernel rolls
    back only writes that never completed): its files and instant files deleted, and a
    completed rollback instant in Hudi's Avro naming them."""
    metadata = CommitMetadata.from_bytes(table.timeline.read_content(instant))
    deleted: dict[str, list[str]] = {}
    for stat in metadata.write_stats:
        table.storage.delete(stat.path)
        deleted.setdefault(stat.partition_path, []).append(table.storage.uri(stat.path))
    for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
        table.storage.delete(table.timeline.path(instant.with_state(state)))
    requested = table.timeline.create_requested(Action.ROLLBACK)
    inflight = table.timeline.transition_to_inflight(requested)
    partitions = {
        p: {"partitionPath": p, "successDeleteFiles": files, "failedDeleteFiles": []}
        for p, files in deleted.items()
    }
    record = {
        "startRollbackTime": inflight.timestamp,
        "timeTakenInMillis": 1,
        "totalFilesDeleted": sum(map(len, deleted.values())),
        "commitsRollback": [instant.timestamp],
        "partitionMetadata": partitions,
        "instantsRollback": [{"commitTime": instant.timestamp, "action": "commit"}],
    }
    table.timeline.complete(inflight, avro_file("metadata", record))


def test_a_rollback_of_what_the_base_files_hold_rebuilds_them(table: Table) -> None:
    client = WriteClient(table)
    last = client.upsert(rows(keys(200, 210), ts=3))
    initialize(table, list(KEYED))
    rollback_completed(table, last)
    snapshot = IndexedSnapshot(table)
    assert snapshot.unapplied(RECORD_INDEX), "lagging until sync"
    result = AsyncIndexer(table, IndexerOptions(engine="local")).sync()
    assert set(result.resynced) >= set(KEYED), "it cannot be undone record by record"
    assert_exact(table)
    # a rollback of a commit applied in a log file needs nothing: the log no longer applies
    later = client.upsert(rows(keys(300, 305)))
    rollback_completed(table, later)
    result = AsyncIndexer(table, IndexerOptions(engine="local")).sync()
    assert not result.resynced
    assert_exact(table)


def test_record_index_is_dropped_only_with_the_secondary_indexes_that_need_it(
    table: Table,
) -> None:
    indexer = AsyncIndexer(table, IndexerOptions(engine="local"))
    indexer.run([RECORD_INDEX, SECONDARY_INDEX], ["fare"])
    with pytest.raises(ConfigError, match="secondary_index_fare find records through"):
        indexer.drop([RECORD_INDEX])
    assert table.reload_index_state().completed == (FILES, RECORD_INDEX, FARE)  # files came too
    assert indexer.drop([RECORD_INDEX, SECONDARY_INDEX]) == [RECORD_INDEX, FARE]
    assert table.reload_index_state().partitions == (FILES,)


def test_keys_in_two_file_groups_are_refused_once_naming_how_to_resolve_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Upserts that move keys to another partition before the record index exists keep both
    copies (tagging is per partition, as Hudi's bloom index): the build fails once, in one
    line, with how many keys and the commands that keep the newest copy of each; after them
    it builds, and every key has the copy an upsert would have kept."""
    import subprocess
    import sys

    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 10)))
    client.upsert(rows(["k0003", "k0004"], ts=2, city="tokyo"))  # moved: the old copies stay
    client.upsert(rows(["k0004"], ts=0, city="oslo"))  # a third copy, older by its ts
    indexer = AsyncIndexer(table, IndexerOptions(engine="local", retries=2))
    with pytest.raises(DuplicateRecordKeyError) as raised:
        indexer.run([RECORD_INDEX])
    message = str(raised.value)
    assert "\n" not in message and message.startswith("2 record key(s) are in more than one")
    assert f"indexer-metadata duplicates {table.base_uri} --output stale.parquet" in message
    assert "Apache Hudi" not in message
    assert not [r for r in caplog.records if r.levelname == "WARNING"], "said once, not twice"
    assert RECORD_INDEX not in table.reload_index_state().partitions  # aborted cleanly
    with pytest.raises(DuplicateRecordKeyError):
        build_records(table, table.timeline.load(), RECORD_INDEX)

    lock = ["--conf", f"indexer.lock.url={table.config.get(LOCK_URL)}"]
    stale = tmp_path / "stale.parquet"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *args, *lock], capture_output=True, text=True, timeout=120
        )

    listed = cli("metadata_table", "duplicates", table.base_uri, "--output", str(stale), "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert (found["count"], found["stale_rows"]) == (2, 3)
    kept = {k: [c["partition_path"] for c in v if c["newest"]] for k, v in found["keys"].items()}
    assert kept == {"k0003": ["tokyo"], "k0004": ["tokyo"]}  # k0004's oslo copy has ts 0
    deleted = cli("writer", table.base_uri, "--input", str(stale), "--operation", "delete")
    assert deleted.returncode == 0, deleted.stderr
    assert cli("metadata_table", "duplicates", table.base_uri).stdout == ""
    indexer.run([RECORD_INDEX])
    where = IndexedSnapshot(table).record_locations(keys(0, 10))
    assert {k: w.partition_path for k, w in where.items() if k in ("k0003", "k0004")} == {
        "k0003": "tokyo",
        "k0004": "tokyo",
    }
    assert len(where) == 10


def test_file_groups_scale_with_the_table(table: Table) -> None:
    """One file group per indexer.record.index.keys.per.file.group records of the table (its
    latest files' bytes times the newest file's rows per byte), unless a count is configured."""
    table = Table.open(table.base_uri, _config(**{"indexer.record.index.keys.per.file.group": 20}))
    records = PartitionWriter(table).table_size().records or 0
    assert 60 <= records <= 150  # 75 live rows, estimated from bytes (small files: overhead)
    indexer = AsyncIndexer(table, IndexerOptions(engine="local"))
    indexer.run([RECORD_INDEX])
    groups = MetadataTable(table).file_groups(RECORD_INDEX)
    assert len(groups) == -(-records // 20) >= 3
    assert_exact(table, (RECORD_INDEX,))
    table = Table.open(
        table.base_uri, _config(**{"hoodie.metadata.record.index.file.group.count": 2})
    )
    assert PartitionWriter(table).configured_groups(FARE) == 2


def _config(**values: object) -> Config:
    return Config.resolve(explicit={"indexer.lock.url": "inprocess", **values})


def test_rows_sharing_a_hash_are_ordered_by_key() -> None:
    top = np.array([5, 3, 5, 1, 3, 5, 9], np.int64)
    keys = pa.array(["c", "z", "a", "q", "b", "b", "a"])
    order = hash_order(top, keys)
    got = [(int(top[i]), keys[int(i)].as_py()) for i in order]
    assert got == sorted(zip(top.tolist(), keys.to_pylist(), strict=True))


@pytest.mark.parametrize("shape", ["random", "ties", "sorted runs", "one value"])
def test_hash_order_is_a_stable_sort_of_the_hashes_whatever_their_shape(shape: str) -> None:
    """Rows in no order are sorted by radix, rows in a few sorted runs by merging them: both
    are numpy's stable sort of the 32-bit hashes, and ties stay ordered by key."""
    rng = np.random.default_rng(7)
    count = 50_000
    if shape == "random":
        top = rng.integers(0, 2**32, count, dtype=np.int64)
    elif shape == "ties":
        top = rng.integers(0, 300, count, dtype=np.int64) * 16_777_259
    elif shape == "sorted runs":
        top = np.concatenate([np.sort(rng.integers(0, 2**32, count // 2)) for _ in range(2)])
    else:
        top = np.full(count, 2**32 - 1, np.int64)
    keys = pa.array([f"k{i % 977:04d}-{i}" for i in range(count)])
    order = hash_order(top, keys)
    got = list(zip(top[order].tolist(), keys.take(pa.array(order)).to_pylist(), strict=True))
    assert got == sorted(zip(top.tolist(), keys.to_pylist(), strict=True))


@pytest.fixture(scope="module")
def three_row_groups(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """A table of 3 x ROW_GROUP_ROWS keys with its record index (one file of 3 row groups)."""
    table = make_table(tmp_path_factory.mktemp("three") / "t")
    WriteClient(table).insert(rows(keys(0, 3 * ROW_GROUP_ROWS)))
    AsyncIndexer(table, IndexerOptions(engine="local")).run([RECORD_INDEX])
    return table


def test_files_are_sorted_by_hash_and_a_lookup_decodes_one_row_group(
    three_row_groups: Table,
) -> None:
    table = three_row_groups
    count = 3 * ROW_GROUP_ROWS
    mdt = MetadataTable(table)
    base = max(e.path for e in mdt.storage.list(RECORD_INDEX) if e.name.endswith(".parquet"))
    stored = pq.read_table(mdt.storage.uri(base))
    assert stored.num_rows == count
    hashes = (key_hash64(stored.column("key")) >> 32).astype("int64")
    assert stored.column("key_hash").to_pylist() == hashes.tolist()  # the top 32 bits
    order = list(zip(hashes.tolist(), stored.column("key").to_pylist(), strict=True))
    assert order == sorted(order), "ordered by key_hash, then by key"
    assert pq.ParquetFile(mdt.storage.uri(base)).metadata.num_row_groups == 3
    snapshot = IndexedSnapshot(table)
    located = snapshot.record_locations(["k0007"])
    assert located["k0007"].partition_path == "la" and snapshot.record_lookup.decoded == 1
    assert snapshot.record_locations(["nope"]) == {}
    assert snapshot.lookup_keys(["nope"]) == {"nope": []}


def test_one_snapshot_answers_lookups_from_several_threads_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot a query service keeps answers lookups from several threads at once, as one
    thread would: each reads the index's row groups through a reader of its own (through one
    shared reader, lookups failed with "ReadRangeCache did not find matching cache entry", or
    crashed the process). A lookup that touches several row groups decodes them at once."""
    table = make_table(tmp_path / "t")
    WriteClient(table).insert(rows(keys(0, 20_000)))
    monkeypatch.setattr(layout, "ROW_GROUP_ROWS", 200)  # an index file of 100 row groups
    initialize(table, [RECORD_INDEX])
    asked = keys(0, 20_000)[::7]
    alone = IndexedSnapshot(table)
    expected = alone.locate_keys(asked).sort_by("record_key")
    assert expected.column("record_key").to_pylist() == sorted(asked)
    assert alone.record_lookup.decoded == 100
    with ThreadPoolExecutor(8) as threads:
        for _ in range(20):
            snapshot = IndexedSnapshot(table)
            found = list(threads.map(snapshot.locate_keys, [asked[n::8] for n in range(8)]))
            assert pa.concat_tables(found).sort_by("record_key").equals(expected)


def test_keys_whose_stored_hashes_collide_are_each_found_once(tmp_path: Path) -> None:
    """Two keys may share the 32 bits of hash a file is sorted by (a 1M-key lookup meets about a
    hundred such pairs): asked together, each is found once; asked alone, the other is not."""
    candidates = keys(0, 300_000)
    tops = (key_hash64(pa.array(candidates)) >> 32).astype("int64")
    _, first, counts = np.unique(tops, return_index=True, return_counts=True)
    top = tops[first[np.flatnonzero(counts > 1)[0]]]
    pair = [candidates[i] for i in np.flatnonzero(tops == top)[:2]]
    table = make_table(tmp_path / "t")
    WriteClient(table).insert(rows(keys(0, 20) + pair))
    initialize(table, [RECORD_INDEX])
    found = IndexedSnapshot(table).locate_keys([*pair, "k0003"])
    assert sorted(found.column("record_key").to_pylist()) == sorted([*pair, "k0003"])
    for one in pair:  # the other's record, under the same hash, is not the one asked
        found = IndexedSnapshot(table).locate_keys([one, "k0003"])
        assert sorted(found.column("record_key").to_pylist()) == sorted([one, "k0003"])


def test_a_file_without_the_key_field_of_a_table_without_meta_fields_is_named() -> None:
    keygen = KeyGenerator("simple", ("rider",))
    with pytest.raises(TableConfigError, match=r"sf/a\.parquet.*'rider'"):
        with_record_keys(pa.table({"uuid": ["k1"]}), keygen, "sf/a.parquet")
    keys = with_record_keys(pa.table({"rider": ["r1"]}), keygen, "sf/a.parquet")
    assert keys.column(RECORD_KEY).to_pylist() == ["r1"]
