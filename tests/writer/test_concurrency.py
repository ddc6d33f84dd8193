"""Concurrent writers: OCC races with real processes, and early conflict detection."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pyarrow as pa
import pytest

from timeline import Table
from timeline.config import Config
from timeline.errors import WriteConflictError
from timeline.fs_view import FileSystemView
from writer.client import Operation, WriteClient, WriteOptions


def _config(tmp_path: Path) -> Config:
    return Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.sqlite'}"})


def _rows(*items: tuple[str, str, int]) -> pa.Table:
    return pa.table(
        {
            "uuid": [i[0] for i in items],
            "city": [i[1] for i in items],
            "ts": pa.array([i[2] for i in items], pa.int64()),
        }
    )


def _completed(table: Table, instant_time: str) -> bool:
    instant = table.timeline.load().get(instant_time)
    return instant is not None and instant.is_completed


def _values(table: Table) -> dict[str, int]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    return {r["uuid"]: r["ts"] for r in data.to_pylist()}


def _seed(tmp_path: Path) -> Table:
    table = Table.create(
        str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=_config(tmp_path)
    )
    WriteClient(table).insert(_rows(("a", "sf", 0), ("b", "sf", 0), ("c", "la", 0)))
    return table


def _racer(base: str, lock_db: str, records: list[tuple[str, str, int]], commit_at: float) -> str:
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{lock_db}"})
    table = Table.open(base, config)
    txn = WriteClient(table).start(Operation.UPSERT)
    try:
        txn.write(_rows(*records))
        while time.time() < commit_at:  # both have written before either commits
            time.sleep(0.001)
        txn.commit()
        return "committed"
    except WriteConflictError:
        txn.abort()
        return "conflict"


def _race(
    tmp_path: Path, first: list[tuple[str, str, int]], second: list[tuple[str, str, int]]
) -> list[str]:
    ctx = multiprocessing.get_context("spawn")
    base, lock_db = str(tmp_path / "t"), str(tmp_path / "locks.sqlite")
    commit_at = time.time() + 6.0
    with ctx.Pool(2) as pool:
        return pool.starmap(
            _racer, [(base, lock_db, first, commit_at), (base, lock_db, second, commit_at)]
        )


def test_same_file_group_exactly_one_commits(tmp_path: Path) -> None:
    table = _seed(tmp_path)
    outcomes = _race(tmp_path, [("a", "sf", 1)], [("b", "sf", 2)])  # a and b share a file group
    assert sorted(outcomes) == ["committed", "conflict"]
    snap = {
        r["uuid"]: r["ts"]
        for r in FileSystemView(table.timeline, table.timeline.load()).read_snapshot().to_pylist()
    }
    winner = outcomes.index("committed")
    assert snap == ({"a": 1, "b": 0, "c": 0} if winner == 0 else {"a": 0, "b": 2, "c": 0})
    assert not table.timeline.load().write_timeline().pending(), "the loser rolled itself back"


def test_disjoint_file_groups_both_commit(tmp_path: Path) -> None:
    table = _seed(tmp_path)
    outcomes = _race(tmp_path, [("a", "sf", 1)], [("c", "la", 2)])
    assert outcomes == ["committed", "committed"]
    snap = {
        r["uuid"]: r["ts"]
        for r in FileSystemView(table.timeline, table.timeline.load()).read_snapshot().to_pylist()
    }
    assert snap == {"a": 1, "b": 0, "c": 2}


# --- early conflict detection --------------------------------------------------------------------


def _early(**extra: bool) -> WriteOptions:
    return WriteOptions(early_conflict_detection=True, **extra)


@pytest.mark.parametrize("transactional", [False, True])
def test_second_writer_stops_at_its_first_overlapping_marker(
    tmp_path: Path, transactional: bool
) -> None:
    table = _seed(tmp_path)
    sf_group = (
        FileSystemView(table.timeline, table.timeline.load()).latest_base_files(["sf"])[0].file_id
    )
    first = WriteClient(table).start(Operation.UPSERT)
    first.write(_rows(("a", "sf", 1)))  # marker for the sf file group, commit still to come
    second = WriteClient(table, _early(early_conflict_transactional=transactional)).start(
        Operation.UPSERT
    )
    with pytest.raises(WriteConflictError) as err:
        # la sorts first: its file is written, then the overlapping sf group stops the write
        second.write(_rows(("c", "la", 5), ("b", "sf", 5)))
    assert err.value.other_instant.timestamp == first.instant_time
    assert err.value.file_ids == [f"sf/{sf_group}"]
    written = [m.data_path for m in second.markers.all()]
    assert len(written) == 1 and written[0].startswith("la/"), "stopped before the sf file"
    second.abort()
    first.commit()
    assert [p for p in (tmp_path / "t").rglob("*.parquet") if second.instant_time in p.name] == []


def test_without_detection_the_conflict_surfaces_only_at_commit(tmp_path: Path) -> None:
    table = _seed(tmp_path)
    first = WriteClient(table).start(Operation.UPSERT)
    first.write(_rows(("a", "sf", 1)))
    second = WriteClient(table).start(Operation.UPSERT)
    second.write(_rows(("b", "sf", 5)))  # the whole write runs
    first.commit()
    with pytest.raises(WriteConflictError):
        second.commit()
    # the failed commit rolled itself back: no pending instant, no file of it
    assert table.timeline.load().get(second.instant_time) is None
    assert [p for p in (tmp_path / "t").rglob("*.parquet") if second.instant_time in p.name] == []


def test_dead_writers_markers_are_ignored(tmp_path: Path) -> None:
    config = Config.resolve(
        explicit={
            "indexer.lock.url": f"sqlite:///{tmp_path / 'locks.sqlite'}",
            "hoodie.client.heartbeat.interval_in_ms": "200",
        }
    )
    table = _seed(tmp_path)
    table = Table.open(table.base_uri, config)
    dead = WriteClient(table).start(Operation.UPSERT)
    dead.write(_rows(("a", "sf", 1)))
    dead.heartbeat.pause()
    time.sleep(0.6)
    live = WriteClient(table, _early()).start(Operation.UPSERT)
    live.write(_rows(("b", "sf", 5)))  # no conflict with a dead writer
    # the two writes overlap: both hold a marker for the same sf file group
    groups = {m.file_id for m in dead.markers.all()}
    assert groups and groups == {m.file_id for m in live.markers.all()}
    live.commit()
    assert _completed(table, live.instant_time)
    assert _values(table)["b"] == 5


def test_commit_conflict_check(tmp_path: Path) -> None:
    table = _seed(tmp_path)
    late = WriteClient(table, _early(early_conflict_check_commits=True)).start(Operation.UPSERT)
    WriteClient(table).upsert(_rows(("a", "sf", 1)))  # commits while `late` is running
    with pytest.raises(WriteConflictError):
        late.write(_rows(("b", "sf", 5)))
    late.abort()
    unchecked = WriteClient(table, _early()).start(Operation.UPSERT)
    WriteClient(table).upsert(_rows(("a", "sf", 2)))
    unchecked.write(_rows(("b", "sf", 5)))  # markers alone do not see the completed commit
    with pytest.raises(WriteConflictError):
        unchecked.commit()
    unchecked.abort()


def test_pending_table_service_markers_are_not_conflicts(tmp_path: Path) -> None:
    import json

    from timeline import Action
    from timeline.markers import DirectMarkers, IOType, Marker

    table = _seed(tmp_path)
    group = (
        FileSystemView(table.timeline, table.timeline.load()).latest_base_files(["sf"])[0].file_id
    )
    plan = {"operations": [{"partitionPath": "sf", "fileId": group}]}
    compaction = table.timeline.create_requested(Action.COMPACTION, json.dumps(plan).encode())
    DirectMarkers(table.storage, compaction.timestamp).create(
        Marker("sf", f"{group}_0-0-0_{compaction.timestamp}.parquet", IOType.MERGE)
    )
    table.heartbeat(compaction.timestamp).beat()  # even with a live heartbeat
    writer = WriteClient(table, _early()).start(Operation.UPSERT)
    writer.write(_rows(("a", "sf", 7)))  # no early conflict with a planned table service
    assert {m.file_id for m in writer.markers.all()} == {group}  # the same file group
    writer.commit()  # and the compaction was planned before this write: compatible at commit too
    assert _completed(table, writer.instant_time)
    assert _values(table)["a"] == 7
