"""Commits that do not go through this kernel's index update (Apache Hudi's own writer, hudi-rs, a
backfill tool) never make a read path answer from a stale index: the files of such an instant are
not pruned and a warning names it; ``indexer validate`` reports the lag (exit 1) until ``indexer
sync`` applies it (exit 0 after). Here a foreign writer is our own writer with its index update
switched off; tests/indexer/test_hudi_interop.py does the same with Apache Hudi itself."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES, PARTITION_STATS, PARTITIONS
from metadata_table.maintenance import compact, initialize
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.table import MetadataTable
from timeline import Table
from timeline.config import LOCK_URL
from timeline.fs_view import FileSystemView
from writer.client import WriteClient, WriteTransaction

from ..metadata_table.test_metadata_table import assert_exact, keys, rows
from ..timeline.hudi_archive import clean_entry, write_archive_file
from .test_indexer import make_table


def foreign_write(table: Table, data: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A commit that writes data files and completes, but writes nothing to our index."""
    with monkeypatch.context() as patch:
        patch.setattr(WriteTransaction, "_update_metadata_table", lambda self, lock: None)
        return WriteClient(table).upsert(data).timestamp


def indexer_cli(table: Table, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "indexer", *args, table.base_uri]
    command += ["--lock-url", table.config.get(LOCK_URL)]
    return subprocess.run(command, capture_output=True, text=True)


def assert_reads_are_current(table: Table) -> None:
    """Every read path agrees with storage: the listings, and for every live row, pruning on its
    fare and the bloom lookup of its key keep the file that holds it."""
    timeline = table.timeline.load()
    truth = FileSystemView(table.timeline, timeline)
    snapshot = IndexedSnapshot(table, timeline)
    assert snapshot.list_partitions() == truth.partitions()
    assert snapshot.view.latest_base_files() == truth.latest_base_files()
    meta = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "fare"]
    for row in truth.read_snapshot(meta).to_pylist():
        holder = f"{row['_hoodie_partition_path']}/{row['_hoodie_file_name']}"
        kept = {f.path for f in snapshot.prune(f"fare = {row['fare']}").candidates}
        key = row["_hoodie_record_key"]
        assert holder in kept, row
        assert holder in snapshot.lookup_keys([key], row["_hoodie_partition_path"])[key], row


@pytest.mark.slow
def test_a_foreign_commit_is_never_answered_from_a_stale_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    # A new partition and a new file group in an old one, as in the reported reproduction.
    foreign = foreign_write(table, rows(keys(1000, 1010), city="tokyo"), monkeypatch)
    foreign_write(table, rows(keys(2000, 2003), city="sf"), monkeypatch)

    with caplog.at_level(logging.WARNING, logger="metadata_table.read.snapshot"):
        snapshot = IndexedSnapshot(table)
        assert "tokyo" in snapshot.list_partitions()
        kept = snapshot.prune("fare >= 1000 AND fare < 1010").candidates
        assert {f.partition_path for f in kept} >= {"tokyo"}
        assert snapshot.prune("fare >= 1000 AND fare < 1010").unapplied
    assert foreign in caplog.text
    assert_reads_are_current(table)

    validated = indexer_cli(table, "validate", "--json")
    assert validated.returncode == 1, validated.stderr
    report = json.loads(validated.stdout)
    behind = {p["partition"]: p for p in report["partitions"]}
    assert set(behind) == set(PARTITIONS)
    assert all(f"{foreign}.commit" in p["unapplied"] and p["missing"] for p in behind.values())
    status = indexer_cli(table, "status")
    assert "2 completed instant(s) not applied" in status.stdout
    applied = table.timeline.load().write_timeline().completed().timestamps[-3]  # before both
    lag = json.loads(indexer_cli(table, "status", "--json").stdout)["lag"]
    assert set(lag) == set(PARTITIONS)
    for row in lag.values():
        assert row["state"] == "completed" and row["reflects_upto"] == applied
        assert row["unapplied_instants"] == 2
        assert 0 <= row["oldest_unapplied_age_seconds"] < 600
        assert row["files"] >= 1 and row["bytes"] > 0 and row["layout"] == 2

    synced = indexer_cli(table, "sync")
    assert synced.returncode == 0, synced.stderr
    assert f"applied {foreign} to bloom_filters, column_stats, files" in synced.stdout
    assert indexer_cli(table, "validate").returncode == 0
    assert indexer_cli(table, "sync").stdout.startswith("in sync")
    lag = json.loads(indexer_cli(table, "status", "--json").stdout)["lag"]
    newest = table.timeline.load().write_timeline().completed().timestamps[-1]
    assert {(r["reflects_upto"], r["unapplied_instants"]) for r in lag.values()} == {(newest, 0)}
    assert_exact(table)
    assert_reads_are_current(table)
    assert not IndexedSnapshot(table).prune("fare >= 1000").unapplied


def test_an_interrupted_sync_is_never_read_half_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers take a sync's log files as applied only once its deltacommit completes."""
    from indexer.indexer import AsyncIndexer
    from metadata_table.table import MetadataTable

    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    foreign = foreign_write(table, rows(keys(1000, 1010), city="tokyo"), monkeypatch)
    with monkeypatch.context() as patch:
        real = MetadataTable.write_logs
        calls = []

        def write_then_die(self: MetadataTable, *args: Any, **kwargs: Any) -> list[str]:
            calls.append(args[0])
            if len(calls) == 2:
                raise RuntimeError("killed mid-sync")
            return real(self, *args, **kwargs)

        patch.setattr(MetadataTable, "write_logs", write_then_die)
        with pytest.raises(RuntimeError, match="mid-sync"):
            AsyncIndexer(table).sync()
    snapshot = IndexedSnapshot(table)
    assert [i.timestamp for i in snapshot.unapplied(calls[0])] == [foreign]
    assert "tokyo" in snapshot.list_partitions()
    assert AsyncIndexer(table).sync().applied == {foreign: sorted(PARTITIONS)}
    assert_exact(table)


def test_apache_hudis_own_indexing_instants_are_left_alone(tmp_path: Path, spark: Any) -> None:
    """A pending ``indexing`` instant of Apache Hudi's HoodieIndexer (an Avro plan) is neither
    executed, aborted nor read as one of our plans."""
    from indexer.indexer import AsyncIndexer

    table = make_table(tmp_path / "t")
    hudis = Path(table.base_uri, ".hoodie", "20200101000000000.indexing.requested")
    hudis.write_bytes(b"Obj\x01" + bytes(40))  # an Avro container file, as Hudi writes its plans
    indexer = AsyncIndexer(table, spark=spark)
    assert indexer.pending() == []
    done = indexer.run([FILES])
    assert done is not None and done.timestamp != "20200101000000000"
    assert hudis.read_bytes().startswith(b"Obj\x01")
    assert [(i["timestamp"], i["owner"]) for i in indexer.status()["indexing"]] == [
        ("20200101000000000", "apache-hudi"),
        (done.timestamp, "async-indexer"),
    ]
    assert_exact(table, (FILES,))


def test_an_instant_with_no_records_for_a_partition_counts_as_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose files give a partition no records (here: none of the indexed columns)
    writes no log file there; its completed metadata deltacommit still says it was applied, so
    it is not reported behind forever, and sync does not retake the lock for it every tick."""
    from indexer.indexer import AsyncIndexer

    table = make_table(tmp_path / "t")
    initialize(table, [COLUMN_STATS], columns=["no_such_column"])
    WriteClient(table).insert(rows(keys(500, 505)))
    indexer = AsyncIndexer(table)
    assert indexer.unapplied() == {}
    foreign = foreign_write(table, rows(keys(600, 605)), monkeypatch)
    assert list(indexer.unapplied()) == [foreign]
    assert indexer.sync().applied == {foreign: [COLUMN_STATS]}
    assert indexer.unapplied() == {} and not indexer.sync()


def test_a_deleted_or_replaced_index_folder_is_never_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A completed partition whose folder vanished is lost: reads use the data (with a warning
    naming the cause), status and validate say so, and sync rebuilds it in place from storage.
    An index folder replaced by files we did not write is not read either."""
    import shutil

    from timeline.index_state import INDEX_FOLDER, STATE_FILE

    table = make_table(tmp_path / "t")
    # without partition_stats, which would still drop partitions once column_stats is lost
    initialize(table, [p for p in PARTITIONS if p != PARTITION_STATS])
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, COLUMN_STATS))
    WriteClient(table).insert(rows(keys(900, 905), city="oslo"))  # writers keep committing

    with caplog.at_level(logging.WARNING, logger="metadata_table.read.snapshot"):
        result = IndexedSnapshot(table).prune("fare > 100000")
    assert not result.used_index and result.pruned == 0
    assert "column_stats" in caplog.text and "is lost" in caplog.text
    assert_reads_are_current(table)
    status = indexer_cli(table, "status", "--json")
    assert json.loads(status.stdout)["partitions"][COLUMN_STATS] == "lost"
    validated = indexer_cli(table, "validate")
    assert validated.returncode == 1 and "lost: no base file of ours" in validated.stdout
    assert "`indexer sync`" in validated.stdout
    synced = indexer_cli(table, "sync")
    assert synced.returncode == 0, synced.stderr
    assert f"rebuilt {COLUMN_STATS} from storage: no base file of ours" in synced.stdout
    assert indexer_cli(table, "validate").returncode == 0
    assert_exact(table, (FILES, COLUMN_STATS, BLOOM_FILTERS))
    assert IndexedSnapshot(table).prune("fare > 100000").used_index
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, COLUMN_STATS))

    folder = Path(table.base_uri, INDEX_FOLDER)
    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "partitions.json").write_text("<html>not ours</html>")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="metadata_table.read.snapshot"):
        snapshot = IndexedSnapshot(table)
        assert not snapshot.prune("fare > 100000").used_index
    assert "not a valid index state file" in caplog.text
    assert_reads_are_current(table)
    broken = indexer_cli(table, "status")
    assert broken.returncode == 1 and STATE_FILE.rsplit("/", 1)[-1] in broken.stderr


def test_compaction_never_covers_an_instant_it_did_not_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A foreign commit that completed after the daemon's sync and before its compaction: a
    compaction up to the last completed write would record it as covered without its records.
    Compaction waits until the partition is caught up."""
    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    WriteClient(table).upsert(rows(keys(0, 5), city="sf"))  # a log file to compact
    foreign = foreign_write(table, rows(keys(1000, 1005), city="tokyo"), monkeypatch)
    for partition in PARTITIONS:
        assert compact(table, partition) is None
        assert [i.timestamp for i in IndexedSnapshot(table).unapplied(partition)] == [foreign]
    assert_reads_are_current(table)
    assert indexer_cli(table, "sync").returncode == 0
    assert all(compact(table, partition) is not None for partition in PARTITIONS)
    assert_exact(table)
    assert_reads_are_current(table)


def test_status_reads_the_metadata_table_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon answers /status, / and /metrics from status(): one snapshot of the metadata
    table per call, not one per thing it reports (it was three)."""
    from metadata_table.table import MetadataTable

    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    made = []
    original = MetadataTable.reader

    def counting(self: MetadataTable, timeline: Any) -> Any:
        made.append(timeline)
        return original(self, timeline)

    monkeypatch.setattr(MetadataTable, "reader", counting)
    status = AsyncIndexer(table).status()
    assert set(status["partitions"].values()) == {"completed"}
    assert all(lag["files"] > 0 for lag in status["lag"].values())
    assert len(made) == 1


def _clean_by_another_writer(table: Table) -> tuple[str, dict[str, list[str]]]:
    """A clean that did not go through this kernel: every superseded file version deleted, the
    clean already moved to Hudi's archive (Hudi archives cleans and commits by separate counts,
    so it may go before older commits do). Returns its instant time and what it deleted."""
    view = FileSystemView(table.timeline, table.timeline.load())
    latest = set(view.latest_base_files())
    deleted: dict[str, list[str]] = {}
    for old in view.all_base_files:
        if old not in latest:
            table.storage.delete(old.path)
            deleted.setdefault(old.partition_path, []).append(old.file_name)
    timestamp = table.timeline.generator.next()
    write_archive_file(
        table.storage,
        ".hoodie/archived/.commits_.archive.1_1-0-1",
        [clean_entry(timestamp, deleted)],
    )
    return timestamp, deleted


def test_an_archived_clean_newer_than_active_commits_is_applied(tmp_path: Path) -> None:
    """The clean is not on the active timeline, yet newer than commits that are: readers count
    it unapplied, validate names it, and sync applies it from the archive (it used to fail with
    ``read .hoodie/<T>.clean: no such file``, or not see the clean at all)."""
    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    WriteClient(table).upsert(rows(keys(0, 20), ts=2))  # older versions of some file groups
    clean, deleted = _clean_by_another_writer(table)
    assert deleted
    WriteClient(table).upsert(rows(keys(40, 45), ts=3))
    assert table.timeline.load().get(clean) is None
    snapshot = IndexedSnapshot(table)
    assert [i.timestamp for i in snapshot.unapplied(FILES)] == [clean]
    assert_reads_are_current(table)
    validated = indexer_cli(table, "validate", "--json")
    assert validated.returncode == 1
    lagging = {u for p in json.loads(validated.stdout)["partitions"] for u in p["unapplied"]}
    assert lagging == {f"{clean}.clean"}
    synced = indexer_cli(table, "sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["applied"] == {clean: sorted(PARTITIONS)}
    assert indexer_cli(table, "validate").returncode == 0
    assert_exact(table)
    assert_reads_are_current(table)


def test_a_trimmed_archive_makes_sync_rebuild_from_storage(tmp_path: Path) -> None:
    """When the instant the index covers up to is in neither the active timeline nor the archive
    (the archive was trimmed), what came after it cannot be known: reads do not use the index,
    and sync rebuilds it from storage, says so, and completes."""
    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    covered = table.timeline.load().last_settled_write()
    assert covered is not None
    WriteClient(table).upsert(rows(keys(0, 20), ts=2))
    for name in Path(table.base_uri, ".hoodie").iterdir():  # archived, and the archive trimmed
        if name.name[:1].isdigit() and name.name[:17] <= covered.timestamp:
            name.unlink()
    assert IndexedSnapshot(table).lost(FILES) is not None
    assert_reads_are_current(table)
    status = indexer_cli(table, "status")
    assert "(`indexer sync` rebuilds it)" in status.stdout
    synced = indexer_cli(table, "sync")
    assert synced.returncode == 0, synced.stderr
    assert "which is neither on the active timeline nor in Hudi's archive" in synced.stdout
    assert synced.stdout.startswith(f"rebuilt {', '.join(sorted(PARTITIONS))} from storage")
    assert indexer_cli(table, "validate").returncode == 0
    assert_exact(table)


def test_a_build_indexes_the_files_of_commits_hudi_archived(tmp_path: Path) -> None:
    """Data files of commits older than the active timeline's start are committed (Hudi
    archived their instants): a build indexes them (it used to index only active commits')."""
    table = make_table(tmp_path / "t")
    first_two = table.timeline.load().write_timeline().timestamps[:2]
    for name in Path(table.base_uri, ".hoodie").iterdir():
        if name.name[:17] in first_two:
            name.unlink()
    AsyncIndexer(table, IndexerOptions(engine="local")).run(list(PARTITIONS))
    assert_exact(table)
    assert indexer_cli(table, "validate").returncode == 0


def test_reads_stay_current_while_a_lost_partition_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resync gives a lost partition its file groups back (empty base files) before it builds
    them: until the build completes, every commit counts as unapplied there, so reads never
    answer from the empty partition (a deltacommit naming log files that the loss deleted does
    not count as applied), and the next sync completes it."""
    import shutil

    from timeline.errors import InjectedFailure
    from timeline.failpoints import ENV
    from timeline.index_state import INDEX_FOLDER

    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    WriteClient(table).upsert(rows(keys(0, 20), ts=2))  # logged in every partition
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, FILES))
    monkeypatch.setenv(ENV, "resync.mid")
    with pytest.raises(InjectedFailure):
        AsyncIndexer(table).sync()
    monkeypatch.delenv(ENV)
    snapshot = IndexedSnapshot(table)
    assert snapshot.uses(FILES) and snapshot.unapplied(FILES), "rebuilt empty, everything behind"
    assert_reads_are_current(table)
    assert not MetadataTable(table).timeline.load().pending(), "the failed rebuild was undone"
    assert AsyncIndexer(table).sync().applied
    assert indexer_cli(table, "validate").returncode == 0
    assert_exact(table)


def test_sync_rolls_back_what_a_crashed_writer_left(tmp_path: Path) -> None:
    """A write whose writer died after writing its files and its metadata deltacommit (a crash
    before its instant completed) is rolled back by ``indexer sync``, its index update with it;
    a live writer's pending write is left alone."""
    import time

    from timeline.instant import Action
    from writer.client import Operation

    table = make_table(tmp_path / "t", heartbeat_ms=200)
    initialize(table, [FILES, COLUMN_STATS])
    client = WriteClient(table)
    live = client.start(Operation.INSERT)
    live.write(rows(keys(800, 801)))
    dead = client.start(Operation.INSERT)
    dead.write(rows(keys(900, 905)))
    dead.heartbeat.pause()  # its writer dies
    time.sleep(0.6)  # its heartbeat expires; the live one keeps beating
    result = AsyncIndexer(table).sync()
    assert result.rolled_back == [dead.instant.timestamp]
    pending = [i.timestamp for i in table.timeline.load().pending() if i.action is Action.COMMIT]
    assert pending == [live.instant.timestamp]
    live.commit()
    assert_exact(table, [FILES, COLUMN_STATS])
    assert not AsyncIndexer(table).sync()


def test_a_clean_read_while_its_writer_writes_its_file_is_applied_whole(tmp_path: Path) -> None:
    """Apache Hudi creates a completed instant's file, then writes its content into it. A sync
    that read a clean in between took it for a clean that deleted nothing, and the index went on
    listing the files it deleted, for good (seen once in CI beside Hudi's writer: three files in
    files, column_stats and bloom_filters). The read now waits for the content."""
    import threading

    from timeline.clean import clean
    from timeline.config import Config

    table = make_table(tmp_path / "t")
    initialize(table, list(PARTITIONS))
    for ts in (2, 3):  # two older versions of some file groups: the oldest is cleaned
        WriteClient(table).upsert(rows(keys(0, 20), ts=ts))
    keep_one = Config.resolve(
        explicit={
            "indexer.lock.url": table.config.get(LOCK_URL),
            "hoodie.cleaner.commits.retained": "1",
            "indexer.clean.grace.seconds": "0",
        }
    )
    # another writer's clean (no index update), read between its file's creation and its content
    (cleaned,) = clean(Table.open(table.base_uri, keep_one), force=True)
    assert cleaned.plan.paths
    done = Path(table.storage.uri(table.timeline.path(cleaned.instant)))
    content = done.read_bytes()
    done.write_bytes(b"")
    writing = threading.Timer(0.3, done.write_bytes, [content])
    writing.start()
    try:
        result = AsyncIndexer(table).sync()
    finally:
        writing.join()
    assert cleaned.instant.timestamp in result.applied
    assert indexer_cli(table, "validate").returncode == 0
    assert_exact(table)
    assert_reads_are_current(table)
