"""Archiving the active timeline: Hudi's bounds (min/max commits, cleans and rollbacks apart),
what stops it (a pending instant, the last clean's earliest retained commit, a savepoint, an
instant the index has not applied), Hudi's archive format read back, and a crash part-way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timeline import Action, Table
from timeline.archived import read_archived
from timeline.archiver import ArchivalPolicy, archive, instants_to_archive
from timeline.config import Config
from timeline.errors import ConfigError
from timeline.fs_view import FileSystemView
from timeline.instant import State
from timeline.instant_time import CLAIM_FOLDER
from writer.client import WriteClient

from .test_clean import rows

BASE_CONFIG = {
    "indexer.lock.url": "inprocess",
    "hoodie.clean.automatic": "false",
    "hoodie.archive.automatic": "false",
    "indexer.clean.grace.seconds": "0",
    "hoodie.keep.min.commits": "3",
    "hoodie.keep.max.commits": "5",
}
POLICY = ArchivalPolicy(3, 5)


def make_table(base: Path, **values: str) -> Table:
    config = Config.resolve(explicit={**BASE_CONFIG, **values})
    return Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config)


def write(table: Table, commits: int, start: int = 0) -> list[str]:
    with WriteClient(table) as client:
        return [
            client.upsert(rows([f"k{ts}", "a"], ts)).timestamp
            for ts in range(start, start + commits)
        ]


def snapshot(table: Table) -> list[dict[str, Any]]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot(["uuid", "ts"])
    return sorted(data.to_pylist(), key=lambda r: r["uuid"])


def test_archival_keeps_the_active_timeline_between_its_bounds(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    times = write(table, 5)
    assert archive(table, POLICY) is None  # 5 completed writes: not more than max
    times += write(table, 1, 5)
    before = snapshot(table)
    completions = {t: table.timeline.completion_time(_done(table, t)) for t in times[:3]}
    result = archive(table, POLICY)
    assert result is not None
    assert [i.timestamp for i in result.instants] == times[:3]  # down to min = 3
    assert result.file.endswith(".commits_.archive.1_1-0-1")
    timeline = table.timeline.load()
    assert [i.timestamp for i in timeline.write_timeline()] == times[3:]
    names = set(table.storage.file_names(".hoodie"))
    assert not any(n.startswith(tuple(times[:3])) for n in names)
    assert snapshot(table) == before  # the archived commits' files are still committed
    archived = read_archived(table.storage, ".hoodie/archived")
    assert [a.instant.timestamp for a in archived] == times[:3]
    assert {a.instant.timestamp: a.completion_time for a in archived} == completions
    for entry in archived:  # the commit metadata, in Hudi's Avro shape
        stats = entry.metadata["partitionToWriteStats"]  # type: ignore[index]
        assert stats["sf"][0]["fileId"] and stats["sf"][0]["numWrites"] == 2
    times += write(table, 3, 6)
    second = archive(table, POLICY)
    assert second is not None and second.file.endswith(".commits_.archive.2_1-0-1")
    archived = read_archived(table.storage, ".hoodie/archived")
    assert [a.instant.timestamp for a in archived] == times[:6]


def test_what_archival_never_passes(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    times = write(table, 8)
    timeline = table.timeline.load()
    assert [i.timestamp for i in instants_to_archive(table, timeline, POLICY)] == times[:5]
    # an instant the index has not applied
    unapplied = instants_to_archive(table, timeline, POLICY, unapplied=times[2])
    assert [i.timestamp for i in unapplied] == times[:2]
    # one archivable instant is fewer than a batch (max - min): it waits for more, or every
    # commit behind such a bound would write an archive file of its own
    assert instants_to_archive(table, timeline, POLICY, unapplied=times[1]) == []
    # the earliest pending instant of any action
    pending = table.timeline.create_requested(Action.CLEAN, b"", _between(times[1], times[2]))
    timeline = table.timeline.load()
    assert [i.timestamp for i in instants_to_archive(table, timeline, POLICY)] == times[:2]
    table.timeline.delete_pending(pending)
    # the earliest commit the last clean retains
    from timeline.clean import CleanPlanner, clean

    cleaner = CleanPlanner(table)
    cleaner.policy = cleaner.policy.__class__(commits_retained=5, grace_seconds=0)
    (done,) = clean(table, planner=cleaner)
    assert done.plan.earliest_to_retain is not None
    assert done.plan.earliest_to_retain.timestamp == times[3]
    timeline = table.timeline.load()
    assert [i.timestamp for i in instants_to_archive(table, timeline, POLICY)] == times[:3]


def _done(table: Table, timestamp: str) -> Any:
    instant = table.timeline.load().get(timestamp)
    assert instant is not None and instant.is_completed
    return instant


def _between(a: str, b: str) -> str:
    """An instant time after ``a`` and before ``b`` (17 digits)."""
    value = str(int(a) + 1)
    assert value < b
    return value


def test_cleans_are_archived_by_their_own_count(tmp_path: Path) -> None:
    table = make_table(
        tmp_path,
        **{"hoodie.clean.automatic": "true", "hoodie.cleaner.commits.retained": "1"},
    )
    write(table, 9)
    timeline = table.timeline.load()
    cleans = [i.timestamp for i in timeline.with_actions(Action.CLEAN).completed()]
    # the first clean deletes nothing: its plan, the first past the retained commit, listed the
    # table (nothing cleanable yet) and is recorded for the next plans to count from
    assert len(cleans) == 8
    chosen = instants_to_archive(table, timeline, POLICY)
    assert [i.timestamp for i in chosen if i.action is Action.CLEAN] == cleans[:5]
    result = archive(table, POLICY)
    assert result is not None
    archived = read_archived(table.storage, ".hoodie/archived")
    kept = [a for a in archived if a.instant.action is Action.CLEAN]
    assert [a.instant.timestamp for a in kept] == cleans[:5]
    deleted = [a.metadata["totalFilesDeleted"] if a.metadata else None for a in kept]
    assert deleted == [0, 1, 1, 1, 1]


def test_a_crash_between_the_archive_file_and_the_deletes_converges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path)
    times = write(table, 6)
    before = snapshot(table)
    deleted: list[str] = []
    original = table.storage.delete

    def crash_after_two(path: str, *args: Any, **kwargs: Any) -> Any:
        if len(deleted) == 2:
            raise OSError("killed")
        deleted.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(table.storage, "delete", crash_after_two)
    with pytest.raises(OSError, match="killed"):
        archive(table, POLICY)
    monkeypatch.undo()
    # the first instant lost its requested and inflight files: its completed file is still there
    first = table.timeline.load().get(times[0])
    assert first is not None and first.state is State.COMPLETED
    assert archive(table, POLICY) is not None
    assert [i.timestamp for i in table.timeline.load().write_timeline()] == times[3:]
    archived = read_archived(table.storage, ".hoodie/archived")
    assert [a.instant.timestamp for a in archived] == times[:3]  # each once
    assert snapshot(table) == before


def test_our_writers_archive_after_each_commit_by_default(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"hoodie.archive.automatic": "true"})
    with WriteClient(table) as client:
        archived = 0
        for ts in range(14):
            client.upsert(rows([f"k{ts}"], ts))
            archived += len(client.last_archive.instants) if client.last_archive else 0
            assert len(table.timeline.load().write_timeline().completed()) <= 5
    # at the 6th, 9th and 12th commits 6 were active: 3 archived each time, 5 left at the end
    assert archived == 9
    assert len(table.timeline.load().write_timeline()) == 5
    assert len(snapshot(table)) == 14


def test_the_bounds_are_checked(tmp_path: Path) -> None:
    config = Config.resolve(
        explicit={"hoodie.keep.min.commits": "30", "hoodie.keep.max.commits": "30"}
    )
    with pytest.raises(ConfigError, match=r"hoodie\.keep\.max\.commits"):
        ArchivalPolicy.from_config(config)


def test_archival_prunes_old_instant_time_claims(tmp_path: Path) -> None:
    """One claim file per instant time would pile up for the table's whole life: archival
    deletes those older than the retention window, and keeps the recent ones."""
    table = make_table(tmp_path)
    old = "20200101000000000"
    table.storage.create(f"{CLAIM_FOLDER}/{old}", b"")
    write(table, 6)
    claims = set(table.storage.file_names(CLAIM_FOLDER))
    assert old in claims and len(claims) > 6
    assert archive(table, POLICY) is not None
    left = set(table.storage.file_names(CLAIM_FOLDER))
    assert left == claims - {old}


def test_a_fast_writer_is_still_cleaned_archival_keeps_the_cleaners_guard(
    tmp_path: Path,
) -> None:
    """A writer that commits more than hoodie.keep.max.commits times per grace period: archival
    used to move every write that completed before the grace period, so the cleaner (which
    keeps what a snapshot opened within it reads, measured by such a write) never found one and
    never deleted a version. Archival now keeps the newest of them active."""
    import time

    from timeline.clean import clean

    from .test_clean import versions

    table = make_table(
        tmp_path,
        **{
            "indexer.clean.grace.seconds": "2",
            "hoodie.archive.automatic": "true",
            "hoodie.cleaner.commits.retained": "2",
        },
    )
    write(table, 8)
    time.sleep(2.5)
    times = write(table, 8, 8)
    oldest = table.timeline.load().write_timeline().completed().first()
    assert oldest is not None and oldest.timestamp < times[0]  # an aged write stayed active
    before = len(versions(tmp_path))
    assert clean(table)  # it finds its guard: versions before it go
    assert len(versions(tmp_path)) < before


def test_time_travel_past_our_clean_and_archival_is_refused_by_name(tmp_path: Path) -> None:
    """After our writers' own clean and archival, a read as of an archived instant whose files
    were cleaned is refused naming the clean and the setting that keeps more; one within what
    the cleaner keeps answers as the table was."""
    from metadata_table.read.scan import load_table
    from timeline.errors import SnapshotUnavailableError

    table = make_table(
        tmp_path,
        **{
            "hoodie.clean.automatic": "true",
            "hoodie.archive.automatic": "true",
            "hoodie.cleaner.commits.retained": "2",
        },
    )
    times = write(table, 10)
    assert table.timeline.load().get(times[0]) is None  # archived
    trips = load_table(table.base_uri, config=table.config)
    with pytest.raises(SnapshotUnavailableError, match=r"\.clean deleted .*commits\.retained"):
        trips.scan(as_of=times[0]).plan()
    then = trips.scan(as_of=times[-2]).to_arrow().to_pylist()
    assert sorted((r["uuid"], r["ts"]) for r in then) == [("a", 8)] + [
        (f"k{ts}", ts) for ts in range(9)
    ]


def test_archived_instants_newer_than_an_instant(tmp_path: Path) -> None:
    """A reader that needs only the archived instants after a watermark (an index's unapplied
    check, a catch-up, an incremental read) gets exactly those, whichever file holds them, and
    a file holding only older ones adds none (it is passed over, not read instant by instant)."""
    from timeline.archived import ArchivedTimeline
    from timeline.storage import Storage

    from .hudi_archive import clean_entry, write_archive_file

    storage = Storage(str(tmp_path))
    times = [f"2026010100000{i:04d}" for i in range(12)]
    for n, batch in enumerate((times[:4], times[4:8], [times[2], *times[8:]])):
        entries = [clean_entry(t, {"p": [f"{t}.parquet"]}) for t in batch]
        write_archive_file(storage, f"archived/.commits_.archive.{n + 1}_1-0-1", entries)
    archive = ArchivedTimeline(storage, "archived")
    assert [a.instant.timestamp for a in archive.instants()] == times
    assert [a.instant.timestamp for a in archive.instants(newer_than=times[5])] == times[6:]
    assert [a.instant.timestamp for a in archive.instants(newer_than=times[1])] == times[2:]
    assert archive.instants(newer_than=times[-1]) == []


def test_a_kept_listing_of_the_archive_still_sees_new_and_grown_files(tmp_path: Path) -> None:
    """The archive folder's listing is kept per process while the folder is unchanged: a file
    added is seen (the folder changes), and so are instants appended to the newest file (an
    archiver appending, which leaves the folder's time as it was)."""
    import os

    from timeline.archived import ArchivedTimeline
    from timeline.storage import Storage

    from .hudi_archive import clean_entry, write_archive_file

    storage = Storage(str(tmp_path))
    times = [f"2026010100000{i:04d}" for i in range(6)]
    write_archive_file(storage, "archived/.commits_.archive.1_1-0-1", [clean_entry(times[0], {})])
    first = ArchivedTimeline(storage, "archived")
    assert [a.instant.timestamp for a in first.instants()] == times[:1]
    write_archive_file(storage, "archived/.commits_.archive.2_1-0-1", [clean_entry(times[1], {})])
    second = [a.instant.timestamp for a in ArchivedTimeline(storage, "archived").instants()]
    assert second == times[:2]
    listed = storage.requests["list"]
    assert len(ArchivedTimeline(storage, "archived").files) == 2
    assert storage.requests["list"] == listed  # unchanged: not listed again
    folder = tmp_path / "archived"
    stamp = os.stat(folder).st_mtime_ns
    write_archive_file(storage, "scratch", [clean_entry(times[2], {})])
    with open(folder / ".commits_.archive.2_1-0-1", "ab") as newest:
        newest.write((tmp_path / "scratch").read_bytes())
    assert os.stat(folder).st_mtime_ns == stamp  # appending leaves the folder as it was
    third = [a.instant.timestamp for a in ArchivedTimeline(storage, "archived").instants()]
    assert third == times[:3]


def test_small_archive_files_are_merged_as_hudi_merges_them(tmp_path: Path) -> None:
    """Each archival writes a file; once ``hoodie.archive.merge.files.batch.size`` small ones
    are newest in a row they are merged into one (plan first, then the merged file, then the
    old files and the plan go), and the archived timeline reads the same instants."""
    from timeline.archiver import MERGE_PLAN

    table = make_table(
        tmp_path,
        **{"hoodie.archive.automatic": "true", "hoodie.archive.merge.files.batch.size": "3"},
    )
    folder = tmp_path / ".hoodie" / "archived"
    merges = []
    with WriteClient(table) as client:
        for ts in range(24):  # an archival every 3 commits from the 6th: 7 of them
            client.upsert(rows([f"k{ts}"], ts))
            if client.last_archive and client.last_archive.merged:
                merges.append(client.last_archive.merged)
                names = sorted(p.name for p in folder.iterdir())
                assert names == [Path(client.last_archive.merged).name], names
    # after the 3rd archival, then every 2 more (with the merged file, itself still small)
    assert [Path(m).name for m in merges] == [f".commits_.archive.{n}_1-0-1" for n in (4, 7, 10)]
    archived = [a.instant.timestamp for a in read_archived(table.storage, ".hoodie/archived")]
    active = [i.timestamp for i in table.timeline.load().write_timeline()]
    assert len(archived) == len(set(archived)) == 24 - len(active)
    assert not (folder / MERGE_PLAN).exists()
    assert len(snapshot(table)) == 24


def test_an_interrupted_merge_is_finished_or_undone(tmp_path: Path) -> None:
    """Hudi's rules for a merge plan a crash left: every candidate still there, the merged file
    is deleted (the merge is retried later); some gone, the merged file is complete and the
    rest go; a plan that cannot be read is deleted. Readers take each instant once meanwhile."""
    from timeline.archiver import MERGE_PLAN, MergePolicy, finish_interrupted_merge
    from timeline.hudi_avro import avro_file

    table = make_table(tmp_path, **{"hoodie.archive.automatic": "true"})
    write(table, 9)  # two archivals (at the 6th and 9th commits): two archive files
    folder = tmp_path / ".hoodie" / "archived"
    small = sorted(folder.iterdir())
    assert len(small) == 2
    expected = [a.instant.timestamp for a in read_archived(table.storage, ".hoodie/archived")]
    plan = folder / MERGE_PLAN
    merged = folder / ".commits_.archive.3_1-0-1"

    def crash_after_merging(delete_first: bool) -> None:
        from timeline.archiver import merge_archive_files

        merging = MergePolicy(True, 2, 1 << 20)
        with table.lock("test") as lock:
            merge_archive_files(table.storage, ".hoodie/archived", merging, lock)
        assert sorted(p.name for p in folder.iterdir()) == [merged.name]
        # put the crashed state back: the plan, the merged file, the candidates (or some)
        for path, content in saved.items():
            if path != small[0] or not delete_first:
                path.write_bytes(content)
        plan.write_bytes(
            avro_file(
                "merge_archive_plan",
                {
                    "version": 1,
                    "candidate": [f"file:{p}" for p in small],
                    "mergedArchiveFileName": merged.name,
                },
            )
        )

    saved = {p: p.read_bytes() for p in small}
    crash_after_merging(delete_first=False)  # every candidate there: the merged file goes
    read = [a.instant.timestamp for a in read_archived(table.storage, ".hoodie/archived")]
    assert read == expected  # (each instant once, with both the merged file and its sources)
    with table.lock("test") as lock:
        finish_interrupted_merge(table.storage, ".hoodie/archived", lock)
    assert sorted(folder.iterdir()) == small

    crash_after_merging(delete_first=True)  # one candidate deleted: the others go
    with table.lock("test") as lock:
        finish_interrupted_merge(table.storage, ".hoodie/archived", lock)
    assert sorted(p.name for p in folder.iterdir()) == [merged.name]
    read = [a.instant.timestamp for a in read_archived(table.storage, ".hoodie/archived")]
    assert read == expected

    plan.write_bytes(b"half a plan")
    with table.lock("test") as lock:
        finish_interrupted_merge(table.storage, ".hoodie/archived", lock)
    assert not plan.exists() and merged.exists()


def test_two_archivers_at_once_archive_each_instant_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's services and the daemon's archive at once: the second waits for the first
    under the table lock, as Hudi's archiver does, and finds nothing left to archive (CI saw the
    two choose the same instants and collide on one archive file's name)."""
    import threading

    from timeline import archiver

    table = make_table(tmp_path)
    times = write(table, 6)
    first_writing, go_on = threading.Event(), threading.Event()
    real = archiver.write_archive_file

    def slow_first(*args: Any, **kwargs: Any) -> str:
        if not first_writing.is_set():
            first_writing.set()
            go_on.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(archiver, "write_archive_file", slow_first)
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        results[name] = archive(Table.open(table.base_uri, table.config), POLICY)

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert first_writing.wait(10)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    second.join(1.0)  # without the lock, it archives the same instants meanwhile
    go_on.set()
    first.join()
    second.join()
    assert results["first"] is not None and results["second"] is None
    archived = read_archived(table.storage, ".hoodie/archived")
    assert [a.instant.timestamp for a in archived] == times[:3]
    assert len(table.archive().files) == 1
