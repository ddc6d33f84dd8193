"""Merge-on-read tables that Apache Hudi 0.15 writes, indexed with their log files and kept in
step with Hudi's deltacommits, compactions, rollbacks and cleans.

Two tables go through Hudi's actions with our index built early:

* ``scheduled``: Hudi's bloom index, Hudi's metadata table on, compaction off inline and scheduled
  and executed later (``hoodie.compact.inline.max.delta.commits`` = 1); updates into log files, an
  update that moves a value far outside its base file's range, deletes, a log compaction, a
  completed deltacommit rolled back (a rollback command block), updates while the compaction is pending, the
  compaction, a clean of the compacted slices.
* ``inline``: the consistent-hashing bucket index (inserts into log files: slices of log files
  alone), Hudi's
  metadata table off, inline compaction every 2 deltacommits, cleaning and archival after every
  commit (one commit retained, 2 to 3 kept active), a deltacommit that crashed before it
  completed, rolled back by Hudi's next write, and a restore to a savepoint (Hudi 0.15 refuses
  one on a table with its metadata table on).

After every Hudi action the oracle is Hudi's own snapshot read (with ``_hoodie_file_name``): before
``sync`` (lagging, never stale) and after it, every live row's file slice is in our listing,
kept by prune() on each of its indexed values and by the key lookup; after sync the listing from
the index equals the slices a storage listing makes (less log files that hold nothing that
counts), and ``validate`` finds nothing (the CLI at
the end). Nothing of Hudi's changes, and Hudi reads the same rows after our runs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import PARTITIONS
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.validate import validate
from timeline import Action, Table
from timeline.fs_view import FileSystemView
from timeline.log_format import DATA_BLOCKS, BlockType, read_blocks

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from .oracle import assert_every_row_keeps_its_slice, slice_of_row
from .test_foreign_commits import indexer_cli
from .test_hudi_interop import _checksums, _open
from .test_hudi_rs_samples import assert_only_ours_added

pytestmark = pytest.mark.hudi

#: the columns prune() is checked on: a value of every indexed kind, meta columns included
COLUMNS = ["_hoodie_commit_time", "_hoodie_record_key", "id", "name", "part", "ts", "fare"]
META = ["_hoodie_partition_path", "_hoodie_file_name"]

SCHEDULED = {
    "hoodie.compact.inline": "false",
    "hoodie.compact.inline.max.delta.commits": "1",
    "hoodie.clean.automatic": "false",
    "hoodie.cleaner.commits.retained": "1",
}
INLINE = {
    "hoodie.index.type": "BUCKET",
    # the consistent-hashing engine indexes log files (the simple one does not): inserts go to
    # log files, making slices of log files alone
    "hoodie.index.bucket.engine": "CONSISTENT_HASHING",
    "hoodie.bucket.index.num.buckets": "2",
    "hoodie.compact.inline": "true",
    "hoodie.compact.inline.max.delta.commits": "2",
    "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}


class Steps:
    """One Hudi table and our index over it, checked after each of Hudi's actions."""

    def __init__(self, hudi: HudiPeer, hudi_table: HudiTable, tmp_path: Path) -> None:
        self.hudi, self.hudi_table, self.tmp_path = hudi, hudi_table, tmp_path
        self.table: Table | None = None
        self.last_rows: list[dict[str, Any]] = []
        self.seen = {"log_only": 0, "with_logs": 0, "checks": 0, "synced": 0}

    def build(self) -> Table:
        self.table = _open(self.hudi_table, self.tmp_path)
        AsyncIndexer(self.table, IndexerOptions(engine="local")).run(list(PARTITIONS))
        return self.table

    def rows(self) -> list[dict[str, Any]]:
        read = self.hudi.read(self.hudi_table, columns=[*COLUMNS, *META], metadata=False)
        return read.to_pylist()

    def check(self, step: str) -> None:
        assert self.table is not None
        rows = self.rows()
        before = _checksums(Path(self.hudi_table.path))
        self._agree(rows, step + " (before sync)")
        result = AsyncIndexer(self.table, IndexerOptions(engine="local")).sync()
        assert not result.resynced, (step, result.resynced)  # applied instant by instant
        self.seen["synced"] += len(result.applied)
        self.last_rows = rows
        reports = validate(self.table)
        assert all(r.ok for r in reports), (step, str([r.to_json() for r in reports if not r.ok]))
        self._agree(rows, step + " (after sync)")
        assert_only_ours_added(before, _checksums(Path(self.hudi_table.path)))

    def _agree(self, rows: list[dict[str, Any]], step: str) -> None:
        assert self.table is not None
        timeline = self.table.timeline.load()
        snapshot = IndexedSnapshot(self.table, timeline)
        ours = snapshot.view.latest_file_slices()
        truth = FileSystemView(self.table.timeline, timeline).latest_file_slices()
        if not snapshot.unapplied("files"):  # listed by the index
            listed = {p for s in ours for p in s.paths}
            stored = {p for s in truth for p in s.paths}
            assert listed <= stored, step
            # the files it leaves out hold nothing that counts (a rolled-back write's, or a
            # rollback command block alone)
            view = FileSystemView(self.table.timeline, timeline)
            for path in stored - listed:
                blocks = read_blocks(self.table.storage.read(path))
                assert not any(
                    b.block_type in (*DATA_BLOCKS, BlockType.DELETE)
                    and view.is_committed(b.instant_time or "")
                    for b in blocks
                ), (step, path)
        served = {(s.partition_path, s.file_id) for s in ours}
        assert {slice_of_row(r) for r in rows} <= served, step
        self.seen["checks"] += assert_every_row_keeps_its_slice(snapshot, rows)
        self.seen["log_only"] += sum(s.base_file is None for s in ours)
        self.seen["with_logs"] += sum(bool(s.log_files) for s in ours)


def test_scheduled_compaction_with_hudis_metadata_table(hudi: HudiPeer, tmp_path: Path) -> None:
    hudi_table = HudiTable(str(tmp_path / "mor"), table_type="MERGE_ON_READ", extra=SCHEDULED)
    steps = Steps(hudi, hudi_table, tmp_path)
    hudi.write(hudi_table, "insert", make_rows(range(40), parts=3))
    hudi.write(hudi_table, "upsert", make_rows(range(0, 40, 4), ts=2, fare_offset=5.0, parts=3))
    table = steps.build()
    steps.check("built over a base file and log files")

    far = make_rows([4, 9], ts=3, parts=3)
    far = far.set_column(far.schema.get_field_index("fare"), "fare", [[1e9, -1e9]])
    hudi.write(hudi_table, "upsert", far)
    steps.check("an update far outside its base file's range")
    hudi.write(hudi_table, "delete", make_rows([1, 2, 5], ts=4, parts=3))
    steps.check("deletes (delete blocks)")
    hudi.service(hudi_table, "log_compact", options={"hoodie.log.compaction.blocks.threshold": "2"})
    steps.check("a log compaction (the slices' blocks merged into one new log file)")
    hudi.write(hudi_table, "upsert", make_rows(range(10, 16), ts=5, fare_offset=3.0, parts=3))
    hudi.service(hudi_table, "rollback")
    steps.check("a completed deltacommit rolled back")
    hudi.service(hudi_table, "schedule_compact")
    hudi.write(hudi_table, "upsert", make_rows(range(20, 26), ts=6, fare_offset=1.0, parts=3))
    steps.check("updates while the compaction is pending")
    hudi.service(hudi_table, "execute_compact")
    steps.check("the compaction executed")
    hudi.write(hudi_table, "upsert", make_rows(range(30, 34), ts=7, fare_offset=2.0, parts=3))
    hudi.service(hudi_table, "clean")
    steps.check("updates after the compaction, and a clean of the compacted slices")

    assert steps.seen["with_logs"] > 0 and steps.seen["synced"] >= 7, steps.seen
    validated = indexer_cli(table, "validate")
    assert validated.returncode == 0, validated.stdout
    expected = by_key(hudi.read(hudi_table, metadata=False))
    for metadata in (True, False):  # Hudi reads the same rows after our runs
        assert by_key(hudi.read(hudi_table, metadata=metadata)) == expected


def test_bucket_index_inline_compaction_and_aggressive_cleaning(
    hudi: HudiPeer, tmp_path: Path
) -> None:
    hudi_table = HudiTable(
        str(tmp_path / "mor"), table_type="MERGE_ON_READ", metadata=False, extra=INLINE
    )
    steps = Steps(hudi, hudi_table, tmp_path)
    hudi.write(hudi_table, "upsert", flat(range(30)))
    table = steps.build()
    steps.check("inserts into log files (slices of log files alone)")
    for n in range(2, 8):
        ids = [(n * 7 + i) % 30 for i in range(6)] + [100 + n]
        hudi.write(hudi_table, "upsert", flat(ids, ts=n, fare_offset=n * 100.0))
        if n == 5:  # a deltacommit no inline compaction followed
            _crash_last_deltacommit(hudi_table)
            steps.check("a deltacommit that crashed before completing")
            continue  # Hudi's next write rolls it back
        steps.check(f"upsert {n} (inline compaction, clean and archival)")
    hudi.write(hudi_table, "delete", flat([3, 4], ts=9))
    steps.check("deletes")
    savepoint = hudi.service(hudi_table, "savepoint")["detail"]["instant"]
    hudi.write(hudi_table, "upsert", flat([5, 6, 300], ts=10, fare_offset=7.0))
    hudi.write(hudi_table, "delete", flat([7], ts=10))
    steps.check("upserts and deletes after a savepoint (an inline compaction among them)")
    hudi.service(hudi_table, "restore", instant=savepoint)
    steps.check("a restore to the savepoint (deltacommits and a compaction undone)")

    assert steps.seen["log_only"] > 0 and steps.seen["synced"] >= 6, steps.seen
    archived = table.archived_timeline()
    assert archived, "Hudi archived instants"
    compactions = [i for i in table.timeline.load() if i.action is Action.COMMIT]
    compactions += [a.instant for a in archived if a.instant.action is Action.COMMIT]
    assert compactions, "Hudi compacted inline (a compaction completes as a commit)"
    validated = indexer_cli(table, "validate")
    assert validated.returncode == 0, validated.stdout
    assert sorted(steps.rows(), key=repr) == sorted(steps.last_rows, key=repr)


def flat(ids: Iterable[int], ts: int = 1, fare_offset: float = 0.0) -> pa.Table:
    """Rows without nested columns: after an inline compaction, Hudi 0.15's own schema check
    refuses the next upsert of a nested record (the compaction's schema loses its namespace)."""
    return make_rows(ids, ts, fare_offset, parts=3).select(["id", "name", "part", "ts", "fare"])


def _crash_last_deltacommit(hudi_table: HudiTable) -> None:
    """Hudi's writer dying after writing its log files, before completing its instant: the
    newest completed deltacommit becomes inflight again (its completed file removed)."""
    timeline = Path(hudi_table.path) / ".hoodie"
    completed = sorted(timeline.glob("*.deltacommit"))
    assert completed, "a deltacommit to crash"
    completed[-1].unlink()
