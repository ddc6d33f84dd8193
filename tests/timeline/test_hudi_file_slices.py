"""File slices and log blocks of merge-on-read tables that Apache Hudi 0.15 writes, action by
action: after each, the rows merged from the kernel's view (latest_file_slices) and its log
reader (read_blocks, effective_blocks) are exactly the rows Hudi's snapshot read returns.

One table (3 partitions, nested columns, Hudi's metadata table on) goes through inserts,
updates into log files (Avro data blocks), an update far outside a base file's range, deletes
(delete blocks), a rollback of a completed deltacommit (a rollback command block), a compaction
scheduled and left pending while more updates land (slices read with the slice before them),
the compaction executed, and updates after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from timeline.fs_view import FileSystemView
from timeline.log_format import read_blocks
from timeline.storage import Storage
from timeline.timeline import ActiveTimeline

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from .test_log_format import merge


def merged_rows(base: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The table's live rows from the kernel's file slices and log blocks, and counts of what
    they were made from (slices, log files, slices read across a pending compaction)."""
    storage = Storage(base)
    active = ActiveTimeline(storage)
    view = FileSystemView(active, active.load())
    rows: list[dict[str, Any]] = []
    counts = {"slices": 0, "log_files": 0, "merged_across_compaction": 0}
    for file_slice in view.latest_file_slices():
        base_rows = []
        if file_slice.base_file is not None:
            base_rows = pq.read_table(f"{base}/{file_slice.base_file.path}").to_pylist()
        log_files = [read_blocks(storage.read(log.path)) for log in file_slice.log_files]
        rows.extend(merge(base_rows, log_files, view.is_committed).values())
        counts["slices"] += 1
        counts["log_files"] += len(log_files)
        bases = {log.name.base_instant for log in file_slice.log_files}
        counts["merged_across_compaction"] += bool(bases & view.pending_compactions)
    return rows, counts


def test_slices_of_hudis_merge_on_read_writes_hold_hudis_rows(
    hudi: HudiPeer, tmp_path: Path
) -> None:
    table = HudiTable(
        str(tmp_path / "mor"),
        table_type="MERGE_ON_READ",
        extra={"hoodie.compact.inline": "false", "hoodie.compact.inline.max.delta.commits": "1"},
    )
    seen: dict[str, int] = {"log_files": 0, "merged_across_compaction": 0}

    def check(step: str) -> None:
        ours, counts = merged_rows(table.path)
        assert by_key(ours) == by_key(hudi.read(table)), step
        for key in seen:
            seen[key] = max(seen[key], counts[key])

    hudi.write(table, "insert", make_rows(range(60), parts=3))
    check("insert")
    hudi.write(table, "upsert", make_rows(range(0, 60, 3), ts=2, fare_offset=7.0, parts=3))
    check("updates into log files")
    far = make_rows([4], ts=3, parts=3).set_column(4, "fare", pa.array([1e9]))
    hudi.write(table, "upsert", far)
    check("an update far outside its base file's range")
    hudi.write(table, "delete", make_rows([1, 2, 5, 8], ts=4, parts=3))
    check("deletes")
    hudi.write(table, "upsert", make_rows(range(10, 20), ts=5, fare_offset=3.0, parts=3))
    hudi.service(table, "rollback")
    check("a rolled-back deltacommit")
    hudi.service(table, "schedule_compact")
    hudi.write(table, "upsert", make_rows(range(20, 30), ts=6, fare_offset=1.0, parts=3))
    check("updates while a compaction is pending")
    hudi.service(table, "execute_compact")
    check("the compaction executed")
    hudi.write(table, "upsert", make_rows(range(30, 36), ts=7, fare_offset=2.0, parts=3))
    check("updates after the compaction")
    assert seen["log_files"] > 0 and seen["merged_across_compaction"] > 0, seen
