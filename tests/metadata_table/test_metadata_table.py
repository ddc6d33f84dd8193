"""The metadata table kept exact by every commit: visibility, rollback, inflight partitions,
compaction, reads, data skipping and bloom lookups."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import metadata_table.maintenance as maintenance
import timeline.index_state as index_state
import writer.client as writer_client
from metadata_table.index_types import index_type
from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    PARTITION_STATS,
    PARTITIONS,
    MetadataFile,
)
from metadata_table.maintenance import build_records, compact, initialize
from metadata_table.partition_writer import PartitionWriter
from metadata_table.read.filters import col
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.table import MetadataTable
from metadata_table.validate import validate
from timeline import Action, Table
from timeline.config import Config
from timeline.errors import CommitStateUnknownError, UnknownColumnError, WriteConflictError
from timeline.index_state import LAYOUT, STATE_FILE
from timeline.rollback import clean_failed_writes
from writer.client import Operation, WriteClient


def make_table(base: Path, heartbeat_ms: int = 60_000, **config_values: str) -> Table:
    config = Config.resolve(
        explicit={
            "indexer.lock.url": "inprocess",
            "hoodie.client.heartbeat.interval_in_ms": str(heartbeat_ms),
            **config_values,
        }
    )
    return Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config)


def rows(keys: list[str], ts: int = 1, city: str | None = None) -> pa.Table:
    cities = ["sf", "la", "ny"]
    return pa.table(
        {
            "uuid": keys,
            "city": [city or cities[int(k[1:]) % 3] for k in keys],
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "fare": [float(int(k[1:])) for k in keys],
            "when": pa.array(
                [dt.datetime(2026, 1, 1) + dt.timedelta(hours=int(k[1:])) for k in keys],
                pa.timestamp("us"),
            ),
        }
    )


def keys(lo: int, hi: int) -> list[str]:
    return [f"k{i:04d}" for i in range(lo, hi)]


def assert_exact(table: Table, partitions: tuple[str, ...] = PARTITIONS) -> None:
    """Every completed partition equals the from-scratch build over the same snapshot."""
    timeline = table.timeline.load()
    reader = MetadataTable(table).reader(timeline)
    for partition in partitions:
        assert partition in table.reload_index_state().completed
        kind = index_type(partition)
        ours = kind.comparable(reader.read(partition))
        oracle = kind.comparable(build_records(table, timeline, partition))
        assert ours == oracle, f"{partition} differs from the from-scratch build"


def test_writers_keep_completed_partitions_exact(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 60)))
    assert initialize(table, list(PARTITIONS)) == list(PARTITIONS)
    assert_exact(table)
    upsert = client.upsert(rows(keys(50, 80), ts=2))  # 10 updates, 20 inserts
    delete = client.delete(rows(keys(0, 10)))
    assert_exact(table)
    # one log file per (deltacommit, file group) it touched, named by the data instant
    mdt = MetadataTable(table)
    for partition in PARTITIONS:
        logs = [MetadataFile.parse(partition, e.name) for e in mdt.storage.list(partition)]
        by_instant = [f.instant for f in logs if f is not None and f.is_log]
        assert set(by_instant) == {upsert.timestamp, delete.timestamp}
        per_instant = [
            f.file_group for f in logs if f and f.is_log and f.instant == upsert.timestamp
        ]
        assert len(per_instant) == len(set(per_instant))
    deltacommits = mdt.timeline.load().with_actions(Action.DELTA_COMMIT)
    assert [i.timestamp for i in deltacommits.completed()] == [upsert.timestamp, delete.timestamp]


def test_entries_of_uncommitted_instants_are_invisible_and_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path, heartbeat_ms=300)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, list(PARTITIONS))
    txn = client.start(Operation.UPSERT)
    txn.write(rows(keys(0, 5), ts=9))
    # the metadata deltacommit is written, then the data commit fails while completing
    real_complete = table.timeline.complete

    def fail_data_commit(instant: Any, content: Any = None) -> Any:
        if instant.timestamp == txn.instant_time:
            raise OSError("disk full")
        return real_complete(instant, content)

    monkeypatch.setattr(table.timeline, "complete", fail_data_commit)
    with pytest.raises(CommitStateUnknownError):
        txn.commit()
    monkeypatch.undo()
    mdt = MetadataTable(table)
    written = [
        e.name for p in PARTITIONS for e in mdt.storage.list(p) if txn.instant_time in e.name
    ]
    assert written, "the deltacommit was written inside the critical section"
    assert_exact(table)  # ... and readers do not see it: its data instant is not completed
    time.sleep(1.0)  # the failed writer's heartbeat expires
    assert [i.timestamp for i in clean_failed_writes(table)] == [txn.instant_time]
    assert not [
        e.name for p in PARTITIONS for e in mdt.storage.list(p) if txn.instant_time in e.name
    ]
    assert mdt.timeline.load().get(txn.instant_time) is None, "no trace in the metadata timeline"
    assert_exact(table)


def _compacted_past_the_loser(table: Table) -> None:
    """Metadata compaction covers the winner, which is newer than the rolled-back loser: the
    loser's instant is older than what the base files cover (the case `make demo` hit)."""
    for partition in PARTITIONS:
        compact(table, partition)


def test_a_conflict_and_retry_of_our_writers_leaves_nothing_unapplied(tmp_path: Path) -> None:
    """The loser of a write conflict rolls back its files inside the rollback's critical
    section, index update included: no partition counts the rollback as unapplied, before or
    after compaction covers the loser's instant time."""
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, list(PARTITIONS))
    loser = client.start(Operation.UPSERT)
    loser.write(rows(keys(0, 5), ts=2))
    client.upsert(rows(keys(0, 5), ts=3))
    with pytest.raises(WriteConflictError):
        loser.commit()
    loser.abort()
    client.upsert(rows(keys(0, 5), ts=4))  # the retry
    (rollback,) = table.timeline.load().with_actions(Action.ROLLBACK)
    assert PartitionWriter(table).logged_partitions(rollback.timestamp) == set(PARTITIONS)
    for check in (lambda: None, lambda: _compacted_past_the_loser(table)):
        check()
        reader = MetadataTable(table).reader(table.timeline.load())
        assert {p: reader.unapplied(p) for p in PARTITIONS} == {p: [] for p in PARTITIONS}
    assert_exact(table)


def test_the_cleaners_rollbacks_leave_nothing_unapplied(tmp_path: Path) -> None:
    """A dead writer's instant rolled back by the indexer's cleaner (the daemon's) is applied to
    the index in the rollback's critical section; one rolled back by the kernel's own cleaner
    (`indexer-table clean`, which has no index to write) is of a write that was pending, so
    nothing the index covers: neither is ever unapplied."""
    from indexer.indexer import AsyncIndexer

    table = make_table(tmp_path, heartbeat_ms=200)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, list(PARTITIONS))
    indexer = AsyncIndexer(table)
    for clean in (indexer.clean_failed_writes, lambda: clean_failed_writes(table)):
        dead = client.start(Operation.UPSERT)
        dead.write(rows(keys(0, 5), ts=2))
        dead.heartbeat.pause()
        client.upsert(rows(keys(10, 12), ts=3))
        _compacted_past_the_loser(table)
        time.sleep(0.6)
        assert [i.timestamp for i in clean()] == [dead.instant_time]
        assert indexer.unapplied() == {}
        assert_exact(table)
    applied, not_applied = table.timeline.load().with_actions(Action.ROLLBACK)
    assert indexer.writer.logged_partitions(applied.timestamp) == set(PARTITIONS)
    assert not indexer.writer.logged_partitions(not_applied.timestamp)


def test_inflight_partitions_are_updated_but_not_read(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    mdt = MetadataTable(table)
    timeline = table.timeline.load()
    last = timeline.last_settled_write()
    assert last is not None
    mdt.write_base_files(
        COLUMN_STATS,
        build_records(table, timeline, COLUMN_STATS),
        last.timestamp,
        table.timeline.generator.next(),
        groups=2,
        layout=LAYOUT,  # what add_inflight gives it below
    )
    with table.lock("test") as lock:
        table.update_metadata_partitions(lock, add_inflight=[COLUMN_STATS])
    client.upsert(rows(keys(0, 40), ts=2))
    snapshot = IndexedSnapshot(table)
    assert not snapshot.uses(COLUMN_STATS)
    result = snapshot.prune(col("fare") > 1000)
    assert not result.used_index and result.pruned == 0
    # the writer kept it up to date all the same
    latest = table.timeline.load()
    assert (
        mdt.reader(latest).read(COLUMN_STATS).to_pylist()
        == build_records(table, latest, COLUMN_STATS).to_pylist()
    )


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "upsert", "delete"]), st.integers(0, 40), st.integers(1, 15)
        ),
        min_size=1,
        max_size=5,
    )
)
@example(ops=[("delete", 20, 1)])  # deletes a key that is not there: no log to compact
@pytest.mark.slow
def test_compaction_keeps_reads_identical(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    table = make_table(tmp_path_factory.mktemp("compaction"))
    client = WriteClient(table)
    client.insert(rows(keys(0, 20)))
    initialize(table, list(PARTITIONS))
    for n, (op, start, length) in enumerate(ops):
        getattr(client, op)(rows(keys(start, start + length), ts=n + 2))
    timeline = table.timeline.load()
    before = {p: MetadataTable(table).reader(timeline).read(p).to_pylist() for p in PARTITIONS}
    mdt = MetadataTable(table)
    # a commit that wrote nothing to a partition (a delete of keys not there) was applied too
    deltas = bool(mdt.timeline.load().with_actions(Action.DELTA_COMMIT).completed())
    for partition in PARTITIONS:
        has_logs = any(
            (parsed := MetadataFile.parse(partition, e.name)) is not None and parsed.is_log
            for e in mdt.storage.list(partition)
        )
        done = compact(table, partition)
        assert (done is not None) == (has_logs or deltas), "compacts when it applied anything"
        assert compact(table, partition) is None, "nothing left to merge"
    after = {
        p: MetadataTable(table).reader(table.timeline.load()).read(p).to_pylist()
        for p in PARTITIONS
    }
    assert after == before
    client.upsert(rows(keys(0, 3), ts=99))  # logs on top of the compacted base
    assert_exact(table)


def test_a_writer_touching_one_partition_reads_that_partitions_listing_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upsert into one partition lists that partition's files from the ``files`` records of
    its key prefix (never the whole table's listing, which at a million files cost more than
    the rest of the upsert), and the answer is the whole listing's, for a partition whose
    name begins another's too."""
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30), city="s"))
    client.insert(rows(keys(100, 130), city="sf"))
    client.insert(rows(keys(200, 230), city="la"))
    initialize(table, [FILES, BLOOM_FILTERS])
    client.insert(rows(keys(300, 310), city="sf"))  # a second group of sf, through a log file
    whole = IndexedSnapshot(table).view.latest_base_files()
    for partition in ("s", "sf", "la", "ny"):
        scoped = IndexedSnapshot(table).view.latest_base_files([partition])
        assert scoped == [b for b in whole if b.partition_path == partition]

    def whole_listing(self: IndexedSnapshot) -> pa.Table:
        raise AssertionError("the whole table's listing was read")

    monkeypatch.setattr(IndexedSnapshot, "indexed_files", whole_listing)
    done = client.upsert(rows(keys(100, 105) + keys(305, 306) + keys(900, 903), ts=2, city="sf"))
    monkeypatch.undo()
    sf = IndexedSnapshot(table).view.latest_base_files(["sf"])
    # the held keys were tagged with their groups (merged there), the new keys went to one new
    assert len(sf) == 3 and {b.instant_time for b in sf} == {done.timestamp}
    assert_exact(table, (FILES, BLOOM_FILTERS))


def test_tagging_reads_the_files_the_filters_cannot_answer_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tagging keeps a file whose filter may hold a key, and one whose filter it cannot use (no
    filter, or written by an instant ``bloom_filters`` does not reflect); both write engines'
    rule (candidate_files for the in-process writer, key_filters for Spark's)."""
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 10), city="sf"))
    second = client.insert(rows(keys(10, 20), city="sf")).timestamp
    initialize(table, [FILES, BLOOM_FILTERS])
    snapshot = IndexedSnapshot(table)
    files = snapshot.view.latest_base_table_of(["sf"])
    absent = [f"zz{i}" for i in range(50)]
    assert snapshot.candidate_files("sf", absent, files).num_rows == 0
    held = snapshot.candidate_files("sf", ["k0003", "k0004"], files)
    assert held.column("instant_time").to_pylist() == [
        min(files.column("instant_time").to_pylist())
    ]
    monkeypatch.setattr(IndexedSnapshot, "_unapplied_times", lambda self, p: {second})
    assert snapshot.candidate_files("sf", absent, files).column("instant_time").to_pylist() == [
        second
    ]
    filters = snapshot.key_filters("sf", snapshot.view.latest_base_files(["sf"]))
    assert filters is not None
    assert {name.endswith(f"_{second}.parquet") for name, f in filters.items() if f is None} == {
        True
    }
    assert sum(f is None for f in filters.values()) == 1


def test_reads_listing_pruning_and_bloom_lookup(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 300), city="sf"))  # fare 0..299
    client.insert(rows(keys(1000, 1100), city="la"))  # fare 1000..1099
    initialize(table, list(PARTITIONS))
    client.insert(rows(keys(2000, 2010), city="ny"))  # after initialisation: via a log file
    snapshot = IndexedSnapshot(table)
    assert snapshot.list_partitions() == ["la", "ny", "sf"]
    storage_listed = sorted(f.path for f in snapshot.view.latest_base_files())
    assert sorted(snapshot.indexed_files().column("path").to_pylist()) == storage_listed
    by_city = {f.partition_path: f.path for f in snapshot.view.latest_base_files()}

    def prune(expr: Any) -> list[str]:
        return sorted(f.path for f in snapshot.prune(expr).candidates)

    assert prune(col("fare") == 1050.0) == [by_city["la"]]
    assert prune(col("fare") < 10) == [by_city["sf"]]
    assert prune(col("fare") <= 0) == [by_city["sf"]]
    assert prune(col("fare") > 2005) == [by_city["ny"]]
    assert prune(col("fare") >= 1099) == sorted([by_city["la"], by_city["ny"]])
    assert prune(col("fare").between(250, 1000)) == sorted([by_city["sf"], by_city["la"]])
    assert prune(col("city").isin(["la", "zz"])) == [by_city["la"]]
    assert prune(col("fare").is_null()) == []
    assert prune(col("fare").is_not_null()) == sorted(by_city.values())
    assert prune((col("fare") < 5) | (col("fare") > 2008)) == sorted([by_city["sf"], by_city["ny"]])
    assert prune((col("fare") < 5) & (col("city") == "la")) == []
    # sf's times end on Jan 13, la's on Feb 15, ny's are in March
    late = prune("when >= TIMESTAMP '2026-02-14 00:00:00'")
    assert late == sorted([by_city["la"], by_city["ny"]])
    assert prune("when >= '2026-02-14 00:00:00'") == prune("when >= '2026-02-14T00:00'") == late
    with pytest.raises(UnknownColumnError, match="unknown_column"):  # as a scan says
        prune(col("unknown_column") > 1)
    kept = snapshot.prune(col("fare") > 2005)
    assert (kept.total, kept.pruned, [s.paths for s in kept.slices]) == (3, 2, [[by_city["ny"]]])
    listed = snapshot.view.latest_base_files()
    assert snapshot.prune_files(col("fare") > 2005, listed).pruned == 2
    snapshot.completed.discard(COLUMN_STATS)  # without column_stats nothing is pruned
    assert snapshot.prune_files(col("fare") > 2005, listed).pruned == 0
    snapshot.completed.add(COLUMN_STATS)
    paths = snapshot.spark_paths("fare > 2005")
    assert paths == [table.storage.uri(by_city["ny"])]
    stats = snapshot.column_stats(["fare"], files=[by_city["la"]]).to_pylist()
    assert [(r["min_value"]["float"], r["max_value"]["float"]) for r in stats] == [(1000.0, 1099.0)]
    found = snapshot.lookup_keys(["k1050", "k0007", "nope"])
    assert found["k1050"] == [by_city["la"]] and found["k0007"] == [by_city["sf"]]
    # a file missing from the index (a writer that predates it) is never pruned
    mdt = MetadataTable(table)
    for partition in (COLUMN_STATS, PARTITION_STATS):
        for entry in mdt.storage.list(partition):
            parsed = MetadataFile.parse(partition, entry.name)
            if parsed and parsed.is_log:
                mdt.storage.delete(entry.path)
    # (a snapshot keeps what it read of the index: the next one sees the files gone)
    fresh = IndexedSnapshot(table).prune(col("fare") < 0).candidates
    assert by_city["ny"] in [f.path for f in fresh]


def test_key_lookup_narrows_by_key_range_then_bloom_filter(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    for city, lo in (("sf", 0), ("la", 100), ("ny", 200)):
        client.insert(rows(keys(lo, lo + 100), city=city))  # one file per city, keys clustered
    files = {f.partition_path: f.path for f in IndexedSnapshot(table).view.latest_base_files()}
    assert len(files) == 3
    everything = sorted(files.values())
    no_index = IndexedSnapshot(table).lookup_keys(["k0150", "nope"])
    assert {k: sorted(v) for k, v in no_index.items()} == {"k0150": everything, "nope": everything}

    initialize(table, [COLUMN_STATS])  # key ranges alone (bloom_filters not built)
    by_range = IndexedSnapshot(table).lookup_keys(["k0150", "k0000", "k0299", "k9999", "a"])
    assert by_range == {
        "k0150": [files["la"]],
        "k0000": [files["sf"]],
        "k0299": [files["ny"]],
        "k9999": [],
        "a": [],
    }
    assert IndexedSnapshot(table).lookup_keys(["k0150"], partition="sf") == {"k0150": []}

    initialize(table, [BLOOM_FILTERS])
    snapshot = IndexedSnapshot(table)
    found = snapshot.lookup_keys(keys(0, 300))
    assert found == {k: [files[["sf", "la", "ny"][int(k[1:]) // 100]]] for k in keys(0, 300)}
    # a key inside a file's range that its bloom filter rules out is not looked for there
    absent = [f"k0{n:03d}x" for n in range(200)]
    assert sum(len(v) for v in snapshot.lookup_keys(absent).values()) < 20

    client.insert(rows(keys(300, 310), city="la"))  # a new file, reflected through log files
    assert snapshot.lookup_keys(["k0305"]) == {"k0305": []}, "a snapshot keeps what it read"
    fresh = IndexedSnapshot(table).lookup_keys(["k0305", "k0150"])
    assert len(fresh["k0305"]) == 1 and fresh["k0305"][0] not in everything
    assert fresh["k0150"] == [files["la"]]


@pytest.fixture
def keys_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files whose keys a writer reads to tag its records, as they are read."""
    read: list[str] = []
    real = writer_client.read_record_keys

    def counted(storage: Any, path: str, *args: Any, **kwargs: Any) -> pa.Table:
        read.append(path)
        return real(storage, path, *args, **kwargs)

    monkeypatch.setattr(writer_client, "read_record_keys", counted)
    return read


def test_upsert_tagging_reads_fewer_files_with_bloom_filters(
    tmp_path: Path, keys_read: list[str]
) -> None:
    read = keys_read

    def files_read_by_upsert(base: Path, with_index: bool) -> int:
        table = make_table(base)
        client = WriteClient(table)
        for batch in range(8):  # 8 file groups in one partition
            client.insert(rows(keys(batch * 100, batch * 100 + 100), city="sf"))
        if with_index:
            initialize(table, [FILES, BLOOM_FILTERS])
        read.clear()
        client.upsert(rows(["k0005"], ts=5, city="sf"))
        return len(read)

    plain = files_read_by_upsert(tmp_path / "plain", with_index=False)
    indexed = files_read_by_upsert(tmp_path / "indexed", with_index=True)
    assert plain == 8  # every file's keys
    assert indexed == 1, f"bloom filters keep the one file that holds the key ({indexed})"


def test_an_upsert_of_new_keys_reads_no_file_through_the_default_filters(
    tmp_path: Path, keys_read: list[str]
) -> None:
    """Files' filters are made for Apache Hudi's default rate (1e-9): 400 new keys and one held
    against 8 files read the one file that holds it (at the old 1%, each file passed the new
    keys about 98% of the time)."""
    table = make_table(tmp_path)
    client = WriteClient(table)
    for batch in range(8):
        client.insert(rows(keys(batch * 100, batch * 100 + 100), city="sf"))
    initialize(table, [FILES, BLOOM_FILTERS])
    keys_read.clear()
    client.upsert(rows(["k0005", *keys(5000, 5400)], city="sf"))
    assert len(keys_read) == 1, "only the file that holds k0005"


def test_a_files_filter_is_sized_for_its_keys_up_to_num_entries(tmp_path: Path) -> None:
    """hoodie.index.bloom.fpp and hoodie.index.bloom.num_entries size the filter the writer puts
    in a file, as they size the filter the index builds for a file that has none."""
    from metadata_table.bloom import BloomSizing, SplitBlockBloomFilter
    from metadata_table.records import info_from_storage

    def filter_bytes(name: str, **config: str) -> int:
        table = make_table(tmp_path / name, **config)
        WriteClient(table).insert(rows(keys(0, 100), city="sf"))
        (base,) = IndexedSnapshot(table).view.latest_base_files()
        info = info_from_storage(
            table.storage, base.partition_path, base.file_name, base.size, base.instant_time
        )
        assert info.bloom is not None
        return len(info.bloom)

    assert filter_bytes("default") == 2048  # 100 keys at 1e-9: 1,280 bytes, rounded up
    assert filter_bytes("capped", **{"hoodie.index.bloom.num_entries": "10"}) == (
        SplitBlockBloomFilter.optimal_bytes(10, 1e-9)
    )
    assert filter_bytes("loose", **{"hoodie.index.bloom.fpp": "0.01"}) == (
        SplitBlockBloomFilter.optimal_bytes(100, 0.01)
    )
    built = BloomSizing(entries=10).build([f"k{n}" for n in range(100)])
    assert len(built.bitset) == SplitBlockBloomFilter.optimal_bytes(10, 1e-9)


def test_initialize_is_idempotent_and_covers_commits_beyond_a_pending_one(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 10)))
    pending = client.start(Operation.INSERT)  # stays pending: the contiguous watermark stops here
    pending.write(rows(keys(100, 105)))
    client.insert(rows(keys(10, 20)))  # completed after the pending one
    assert initialize(table, [FILES, COLUMN_STATS]) == [FILES, COLUMN_STATS]
    assert initialize(table, [FILES]) == []
    assert_exact(table, (FILES, COLUMN_STATS))
    pending.commit()  # writes its own deltacommit now that the partitions exist
    assert_exact(table, (FILES, COLUMN_STATS))


def test_random_ops_stay_exact(tmp_path: Path) -> None:
    rng = random.Random(7)
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 50)))
    initialize(table, list(PARTITIONS))
    for step in range(12):
        op = rng.choice(["insert", "upsert", "delete", "abort"])
        start = rng.randrange(0, 80)
        data = rows(keys(start, start + rng.randrange(1, 20)), ts=step + 2)
        if op == "abort":
            txn = client.start(Operation.UPSERT)
            txn.write(data)
            txn.abort()
        else:
            getattr(client, op)(data)
    assert_exact(table)


def test_file_group_counts_come_from_the_configuration(tmp_path: Path) -> None:
    config = Config.resolve(
        explicit={
            "indexer.lock.url": "inprocess",
            "hoodie.metadata.index.column.stats.file.group.count": "5",
        }
    )
    table = Table.create(str(tmp_path), "trips", ["uuid"], ["city"], "ts", config=config)
    WriteClient(table).insert(rows(keys(0, 40)))
    initialize(table, [FILES, COLUMN_STATS])
    mdt = MetadataTable(table)
    assert mdt.file_groups(COLUMN_STATS) == [f"col-stats-{i:04d}-0" for i in range(5)]
    assert mdt.file_groups(FILES) == ["files-0000-0"]
    WriteClient(table).upsert(rows(keys(0, 40), ts=2))
    assert_exact(table, (FILES, COLUMN_STATS))


@pytest.mark.parametrize("layout", [1, 2])
def test_a_partition_is_written_in_the_layout_it_was_made_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: int
) -> None:
    """At layout 2 column_stats' records of one data file go to one file group, so a commit
    that writes one data file writes one column_stats log file, however many groups there are.
    A partition made at layout 1 (as releases before layouts made it: format 1 state, records
    routed by their own key) is written, compacted and validated in that layout by this
    release, and stays exact."""
    table = make_table(tmp_path, **{"hoodie.metadata.index.column.stats.file.group.count": "8"})
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    with monkeypatch.context() as old_release:
        if layout == 1:
            old_release.setattr(index_state, "LAYOUT", 1)
            old_release.setattr(maintenance, "LAYOUT", 1)
        initialize(table, [COLUMN_STATS, BLOOM_FILTERS])
    state = table.reload_index_state()
    assert state.layout(COLUMN_STATS) == layout
    assert json.loads(table.storage.read(STATE_FILE))["version"] == layout
    mdt = MetadataTable(table)
    assert len(mdt.file_groups(COLUMN_STATS)) == 8

    def logs_of(instant: str) -> list[str]:
        delta = mdt.timeline.load().get(instant, Action.DELTA_COMMIT)
        assert delta is not None and delta.is_completed
        names: list[str] = mdt.timeline.read_json(delta)["logFiles"][COLUMN_STATS]
        return names

    new_file = client.insert(rows(keys(100, 110), city="ny-new"))  # one new data file
    if layout == 2:
        assert len(logs_of(new_file.timestamp)) == 1
    else:
        assert len(logs_of(new_file.timestamp)) > 1  # each column's record in its own group
    client.upsert(rows(keys(0, 20), ts=2))
    client.delete(rows(keys(25, 30)))
    assert maintenance.compact(table, COLUMN_STATS) is not None
    client.upsert(rows(keys(100, 105), ts=3, city="ny-new"))
    assert table.reload_index_state().layout(COLUMN_STATS) == layout
    assert_exact(table, (COLUMN_STATS, BLOOM_FILTERS))
    reports = validate(table)
    assert [r.partition for r in reports if not r.ok] == [], [r.to_json() for r in reports]
