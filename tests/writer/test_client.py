"""The write client: files, meta columns, bloom filters, commit metadata, upsert/delete semantics,
bucket layout, sizing, bad input, finalize, heartbeat refusal."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeline import Action, Table
from timeline.commit_metadata import CommitMetadata
from timeline.config import Config
from timeline.errors import BadRecordsError, HeartbeatExpiredError
from timeline.fs_view import FileSystemView
from timeline.markers import IOType, Marker
from writer.client import (
    META_COLUMNS,
    RECORD_KEY,
    Operation,
    WriteClient,
    WriteOptions,
)
from writer.planner import bucket_file_id

CONFIG = Config.resolve(explicit={"indexer.lock.url": "inprocess"})


def make_table(
    base: str, precombine: str | None = "ts", partition: list[str] | None = None
) -> Table:
    return Table.create(
        base,
        "trips",
        ["uuid"],
        ["city"] if partition is None else partition,
        precombine,
        config=CONFIG,
    )


def rows(*items: tuple[str, str, int, float]) -> pa.Table:
    return pa.table(
        {
            "uuid": [i[0] for i in items],
            "city": [i[1] for i in items],
            "ts": pa.array([i[2] for i in items], pa.int64()),
            "fare": [i[3] for i in items],
        }
    )


def snapshot(table: Table) -> dict[str, dict[str, Any]]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    return {r["uuid"]: r for r in data.to_pylist()}


def commit_metadata(table: Table, instant_time: str) -> CommitMetadata:
    instant = table.timeline.load().get(instant_time)
    assert instant is not None and instant.is_completed
    return CommitMetadata.from_bytes(table.timeline.read_content(instant))


def test_insert_writes_hudi_files(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    instant = WriteClient(table).insert(
        rows(("a", "sf", 1, 1.0), ("b", "sf", 2, 2.0), ("c", "la", 3, 3.0))
    )
    t = instant.timestamp
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet"))
    assert len(files) == 2
    for f in files:
        assert re.fullmatch(rf"(la|sf)/[0-9a-f-]{{36}}-0_\d+-0-0_{t}\.parquet", f), f
    assert (
        (tmp_path / "sf" / ".hoodie_partition_metadata")
        .read_text()
        .endswith(f"commitTime={t}\npartitionDepth=1\n")
    )
    sf = next(f for f in files if f.startswith("sf/"))
    data = pq.read_table(tmp_path / sf)
    assert data.column_names[:5] == list(META_COLUMNS)
    assert data.column("_hoodie_commit_time").to_pylist() == [t, t]
    assert data.column(RECORD_KEY).to_pylist() == ["a", "b"]
    assert data.column("_hoodie_partition_path").to_pylist() == ["sf", "sf"]
    assert set(data.column("_hoodie_file_name").to_pylist()) == {sf.split("/")[1]}
    # a native Parquet bloom filter on the record key column
    meta = pq.ParquetFile(tmp_path / sf).metadata
    key_column = meta.row_group(0).column(META_COLUMNS.index(RECORD_KEY))
    assert key_column.bloom_filter_offset is not None and key_column.bloom_filter_length > 0
    md = commit_metadata(table, t)
    assert md.operation_type == "INSERT"
    assert sorted(md.partition_to_write_stats) == ["la", "sf"]
    stat = md.partition_to_write_stats["sf"][0]
    assert (stat.path, stat.prev_commit, stat.num_writes, stat.num_inserts) == (sf, "null", 2, 2)
    assert stat.file_size_in_bytes == (tmp_path / sf).stat().st_size
    schema = json.loads(md.extra_metadata["schema"])
    assert [f["name"] for f in schema["fields"]] == ["uuid", "city", "ts", "fare"]
    raw = json.loads((tmp_path / ".hoodie" / f"{t}.commit").read_text())
    assert raw["partitionToWriteStats"]["sf"][0]["fileId"] == stat.file_id
    assert not (tmp_path / ".hoodie" / ".temp" / t).exists(), "markers are deleted after commit"
    assert not (tmp_path / ".hoodie" / ".heartbeat" / t).exists()


def test_upsert_rewrites_the_file_group_and_respects_precombine(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    client = WriteClient(table)
    first = client.insert(rows(("a", "sf", 5, 1.0), ("b", "sf", 5, 2.0)))
    second = client.upsert(
        rows(
            ("a", "sf", 9, 10.0),  # newer: wins
            ("b", "sf", 1, 20.0),  # older than stored: stored row stays
            ("c", "sf", 1, 30.0),
            ("c", "sf", 3, 31.0),
            ("c", "sf", 2, 32.0),  # dedupe: largest ts
        )
    )
    snap = snapshot(table)
    assert {k: (v["ts"], v["fare"]) for k, v in snap.items()} == {
        "a": (9, 10.0),
        "b": (5, 2.0),
        "c": (3, 31.0),
    }
    assert snap["b"]["_hoodie_commit_time"] == first.timestamp
    assert snap["a"]["_hoodie_commit_time"] == second.timestamp
    md = commit_metadata(table, second.timestamp)
    stats = sorted(md.write_stats, key=lambda s: s.num_update_writes, reverse=True)
    merge = stats[0]
    assert merge.prev_commit == first.timestamp and merge.num_update_writes == 1
    assert merge.file_id == commit_metadata(table, first.timestamp).write_stats[0].file_id
    assert stats[1].num_inserts == 1 and stats[1].prev_commit == "null"


def test_delete_removes_keys(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    client = WriteClient(table)
    client.insert(rows(("a", "sf", 1, 1.0), ("b", "sf", 1, 2.0), ("c", "la", 1, 3.0)))
    instant = client.delete(pa.table({"uuid": ["a", "c", "zz"], "city": ["sf", "la", "la"]}))
    assert sorted(snapshot(table)) == ["b"]
    md = commit_metadata(table, instant.timestamp)
    assert md.operation_type == "DELETE"
    assert sorted((s.partition_path, s.num_deletes, s.num_writes) for s in md.write_stats) == [
        ("la", 1, 0),
        ("sf", 1, 1),
    ]


def test_max_records_per_file_splits_inserts(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    client = WriteClient(table, WriteOptions(max_records_per_file=3))
    data = rows(*[(f"k{i:02d}", "sf", i, float(i)) for i in range(10)])
    instant = client.insert(data)
    stats = commit_metadata(table, instant.timestamp).write_stats
    assert sorted(s.num_writes for s in stats) == [1, 3, 3, 3]
    assert len({s.file_id for s in stats}) == 4
    assert len(snapshot(table)) == 10


@pytest.mark.parametrize("probe_rows", [1, 4, 1_000_000])
def test_tagging_finds_each_key_in_its_file_however_many_files_one_probe_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe_rows: int
) -> None:
    """Keys read from files are tested against the batch in probes of many files (one hash
    set of the batch's keys per probe); where a probe ends never changes a key's file."""
    monkeypatch.setattr("writer.client.PROBE_ROWS", probe_rows)
    table = make_table(str(tmp_path))
    client = WriteClient(table, WriteOptions(max_records_per_file=3))
    client.insert(rows(*[(f"k{i:02d}", "sf", i, float(i)) for i in range(10)]))
    before = {k: r["_hoodie_file_name"].split("_")[0] for k, r in snapshot(table).items()}
    client.upsert(rows(*[(f"k{i:02d}", "sf", 50 + i, 100.0 + i) for i in (0, 4, 8, 9)]))
    after = snapshot(table)
    assert sorted(after) == [f"k{i:02d}" for i in range(10)], "an update became an insert"
    for key, row in after.items():
        assert row["_hoodie_file_name"].split("_")[0] == before[key], key
    assert [after[f"k{i:02d}"]["fare"] for i in (0, 4, 8, 9)] == [100.0, 104.0, 108.0, 109.0]


def test_bucket_layout(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    client = WriteClient(table, WriteOptions(bucket_count=4))
    first = client.insert(rows(*[(f"k{i}", "sf", 1, 1.0) for i in range(20)]))
    ids = {s.file_id for s in commit_metadata(table, first.timestamp).write_stats}
    assert ids <= {bucket_file_id(b) for b in range(4)} and len(ids) == 4
    for file_id in ids:
        assert file_id[:8].isdigit() and int(file_id[:8]) < 4
    second = client.insert(rows(("k3", "sf", 2, 9.0), ("new", "sf", 2, 9.0)))
    stats = commit_metadata(table, second.timestamp).write_stats
    assert {s.file_id for s in stats} <= ids, "a bucket always maps to the same file group"
    assert all(s.prev_commit == first.timestamp for s in stats)
    snap = snapshot(table)
    assert len(snap) == 21 and snap["k3"]["fare"] == 9.0


def test_unpartitioned_table(tmp_path: Path) -> None:
    table = make_table(str(tmp_path), partition=[])
    WriteClient(table).insert(rows(("a", "x", 1, 1.0)))
    files = list(tmp_path.glob("*.parquet"))
    assert len(files) == 1
    assert pq.read_table(files[0]).column("_hoodie_partition_path").to_pylist() == [""]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            pa.table({"uuid": ["a", None], "city": ["x", "y"], "ts": [1, 2]}),
            "null or empty record key",
        ),
        (pa.table({"id": ["a"], "city": ["x"], "ts": [1]}), "column 'uuid': missing"),
        (pa.table({"uuid": ["a"], "city": ["../x"], "ts": [1]}), "cannot be a folder"),
        (pa.table({"uuid": ["a"], "city": ["x"], "other": [1]}), "precombine field is missing"),
        (
            pa.table({"uuid": ["a"], "city": ["x"], "ts": [1], "_hoodie_record_key": ["a"]}),
            "meta columns",
        ),
    ],
)
def test_bad_input_is_rejected_and_rolled_back(
    tmp_path: Path, data: pa.Table, message: str
) -> None:
    table = make_table(str(tmp_path))
    with pytest.raises(BadRecordsError, match=message):
        WriteClient(table).upsert(data)
    timeline = table.timeline.load()
    assert not timeline.write_timeline(), "the failed write left no instant behind"
    assert [i.action for i in timeline] == [Action.ROLLBACK]
    assert list(tmp_path.rglob("*.parquet")) == []


def test_finalize_deletes_partial_files_of_retried_tasks(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    txn = WriteClient(table).start(Operation.INSERT)
    stats = txn.write(rows(("a", "sf", 1, 1.0)))
    # a task attempt that died after creating its marker and part of its file
    partial = f"{stats[0].file_id}_0-0-1_{txn.instant_time}.parquet"
    txn.markers.create(Marker("sf", partial, IOType.CREATE))
    (tmp_path / "sf" / partial).write_bytes(b"PAR1 truncated")
    # before the commit, our reader already ignores it: its instant is not completed
    assert snapshot(table) == {}
    txn.commit()
    assert not (tmp_path / "sf" / partial).exists()
    assert list(snapshot(table)) == ["a"]


def test_commit_is_refused_after_the_heartbeat_expired(tmp_path: Path) -> None:
    config = Config.resolve(
        explicit={"indexer.lock.url": "inprocess", "hoodie.client.heartbeat.interval_in_ms": "200"}
    )
    table = Table.create(str(tmp_path), "trips", ["uuid"], ["city"], "ts", config=config)
    client = WriteClient(table)
    txn = client.start(Operation.INSERT)
    txn.write(rows(("a", "sf", 1, 1.0)))
    txn.heartbeat.pause()  # the writer stalls (GC pause, network partition)
    time.sleep(0.6)
    with pytest.raises(HeartbeatExpiredError):
        txn.commit()
    txn.abort()
    assert not table.timeline.load().write_timeline()
    assert list(tmp_path.rglob("*.parquet")) == []


def test_write_twice_in_one_transaction_is_refused(tmp_path: Path) -> None:
    txn = WriteClient(make_table(str(tmp_path))).start(Operation.INSERT)
    txn.write(rows(("a", "sf", 1, 1.0)))
    with pytest.raises(Exception, match="already wrote"):
        txn.write(rows(("b", "sf", 1, 1.0)))
    txn.abort()


def test_empty_write_commits_nothing(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    instant = WriteClient(table).insert(rows())
    assert commit_metadata(table, instant.timestamp).write_stats == []


def test_parquet_bytes_round_trip(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    WriteClient(table).insert(rows(("a", "sf", 1, 1.5)))
    (path,) = tmp_path.rglob("*.parquet")
    assert pq.read_table(io.BytesIO(path.read_bytes())).column("fare").to_pylist() == [1.5]


def test_a_table_without_indexes_never_reads_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from timeline.storage import Storage

    table = make_table(str(tmp_path))
    touched: list[str] = []
    real_list = Storage.list

    def recording_list(self: Storage, path: str = "", recursive: bool = False) -> Any:
        touched.append(self.uri(path))
        return real_list(self, path, recursive)

    real_names = Storage.file_names

    def recording_names(self: Storage, path: str = "") -> Any:
        touched.append(self.uri(path))
        return real_names(self, path)

    monkeypatch.setattr(Storage, "list", recording_list)
    monkeypatch.setattr(Storage, "file_names", recording_names)
    WriteClient(table).insert(rows(("a", "sf", 1, 1.0)))
    assert touched and not [p for p in touched if "/.hoodie/.async-indexer" in p]


def test_a_delete_that_matches_nothing_records_the_schema(tmp_path: Path) -> None:
    """A commit names the table's schema in extraMetadata, as Hudi's do, a delete too: a delete
    of keys the table does not hold writes no file, and hudi-rs, which takes the schema from
    the latest commit (its extraMetadata, else its files), could not open the table after one
    (the concurrency suite's writers met this in CI)."""
    from .test_failed_writes import hudi_rs

    table = make_table(str(tmp_path / "t"))
    client = WriteClient(table)
    inserted = client.insert(rows(("a", "sf", 1, 1.0), ("b", "la", 1, 2.0)))
    deleted = client.delete(pa.table({"uuid": ["zz"], "city": ["sf"]}))

    def extra(instant: Any) -> dict[str, str]:
        data = table.timeline.read_content(table.timeline.load().get(instant.timestamp))
        return dict(CommitMetadata.from_bytes(data, "commit").extra_metadata)

    assert not CommitMetadata.from_bytes(
        table.timeline.read_content(table.timeline.load().get(deleted.timestamp)), "commit"
    ).write_stats
    assert extra(deleted)["schema"] == extra(inserted)["schema"]
    assert sorted(r["uuid"] for r in hudi_rs(table.base_uri, {})) == ["a", "b"]


@pytest.mark.parametrize("setting", ["auto", "true", "false"])
def test_hudis_bloom_footer_follows_the_table_or_the_setting(tmp_path: Path, setting: str) -> None:
    """auto: a table whose newest file carries Hudi's bloom filter footer gets it in our files
    too (Hudi writes it into all of its own); a table only we write does not (431 KB a file)."""
    from timeline.formats.hudi_bloom import FOOTER_KEY, MAX_KEY, MIN_KEY, HudiBloomFilter

    config = Config.resolve(
        explicit={"indexer.lock.url": "inprocess", "indexer.write.hudi_bloom_footer": setting}
    )
    table = Table.create(str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=config)

    def newest_footer() -> tuple[dict[bytes, bytes], list[str]]:
        newest = max(
            FileSystemView(table.timeline, table.timeline.load()).latest_base_files(),
            key=lambda b: b.instant_time,
        )
        path = tmp_path / "t" / newest.path
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0).to_pylist()
        return dict(pq.ParquetFile(path).metadata.metadata or {}), keys

    with WriteClient(table) as client:
        client.insert(rows(("k1", "p", 1, 1.0), ("k0", "p", 1, 2.0)))
    footer, _ = newest_footer()
    assert (FOOTER_KEY in footer) is (setting == "true")
    if setting == "auto":  # as if Hudi had written the file: the next file follows it
        newest = max(
            FileSystemView(table.timeline, table.timeline.load()).latest_base_files(),
            key=lambda b: b.instant_time,
        )
        path = tmp_path / "t" / newest.path
        data = pq.read_table(path)
        pq.write_table(data.replace_schema_metadata({FOOTER_KEY: b"x"}), path)
    with WriteClient(table) as client:
        client.upsert(rows(("k2", "p", 2, 3.0)))
    footer, keys = newest_footer()
    assert (FOOTER_KEY in footer) is (setting != "false")
    if setting != "false":
        assert footer[FOOTER_KEY] == HudiBloomFilter.of_keys(keys).serialize().encode()
        assert (footer[MIN_KEY], footer[MAX_KEY]) == (min(keys).encode(), max(keys).encode())
