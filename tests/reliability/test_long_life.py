"""A table's long life: our writers commit for many commits with default settings (the readers'
grace period shortened to one second, so the retention rules bind within the test), first alone,
then with ``indexer serve`` running its table services beside them. After each phase: the data
on storage within what the cleaner retains, the active timeline within the archival bounds, the
index within its bound (a base file and the logs since the last compaction per file group, and
a short timeline of its own), our scan and hudi-rs read exactly the replayed rows, and
``indexer validate`` exits 0. Without any one of cleaning, archival or the index's upkeep a
bound fails: every commit adds a version per file group, an instant, and a log per index group.

Commit latency and a fresh read's time against the number of commits are measured by
``make bench-longrun`` (scripts/bench/longrun.py), not here.

``make test`` runs 80 commits per phase; ``make soak`` (``AIX_SOAK=1``) 1,500.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata_table.layout import PARTITIONS, MetadataFile
from metadata_table.maintenance import initialize
from metadata_table.table import MetadataTable
from timeline import Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from writer.client import WriteClient

from ..indexer.test_daemon import Daemon
from ..metadata_table.test_metadata_table import keys, rows
from ..writer.test_failed_writes import hudi_rs
from .conftest import SOAK, SUMMARY

pytestmark = pytest.mark.slow

COMMITS = 1500 if SOAK else 80  # per phase: each bound binds several times over (30, 10, 10)
GRACE_SECONDS = 1.0
RETAINED = 10  # hoodie.cleaner.commits.retained's default
KEEP_MAX = 30  # hoodie.keep.max.commits's default
MAX_DELTAS = 10  # hoodie.metadata.compact.max.delta.commits's default
ROWS = 300


def settings(folder: Path) -> dict[str, str]:
    return {
        "indexer.lock.url": f"sqlite:///{folder / 'locks.sqlite'}",
        "indexer.clean.grace.seconds": str(GRACE_SECONDS),
    }


def write_phase(table: Table, replayed: dict[str, Any], commits: int, start: int) -> None:
    """``commits`` upserts of one warm client, each updating 10 keys and inserting 2."""
    with WriteClient(table) as client:
        for n in range(start, start + commits):
            first = (n * 37) % ROWS
            batch = rows(
                [*keys(first, min(first + 10, ROWS)), *keys(ROWS + 2 * n, ROWS + 2 * n + 2)]
            )
            batch = batch.set_column(2, "ts", pa.array([n] * batch.num_rows, pa.int64()))
            client.upsert(batch)
            for r in batch.to_pylist():
                replayed[r["uuid"]] = (r["ts"], r["fare"])
        # one commit after the grace period, whose services can then pass over every earlier one
        time.sleep(GRACE_SECONDS * 1.5)
        last = rows(keys(0, 3))
        last = last.set_column(2, "ts", pa.array([start + commits] * 3, pa.int64()))
        client.upsert(last)
        for r in last.to_pylist():
            replayed[r["uuid"]] = (r["ts"], r["fare"])


def check_bounds(table: Table, phase: str) -> None:
    timeline = table.timeline.load()
    view = FileSystemView(table.timeline, timeline)
    per_group: dict[str, int] = defaultdict(int)
    for base in view.all_base_files:
        per_group[base.file_id] += 1
    # KEEP_LATEST_COMMITS keeps every slice of the 10 retained commits and the newest before
    # them; a slice per commit of the last grace period may stay too
    assert max(per_group.values()) <= RETAINED + 3, (phase, max(per_group.values()))
    writes = len(timeline.write_timeline().completed())
    # above hoodie.keep.max.commits, archival waits for a batch of max - min (10) instants
    assert writes <= KEEP_MAX + 10, (phase, writes)
    archive_files = len(table.archive().files)
    assert archive_files <= 2 * writes_so_far(table) // (KEEP_MAX - 20) + 2, archive_files
    mdt = MetadataTable(table)
    for partition in PARTITIONS:
        files: dict[str, list[MetadataFile]] = defaultdict(list)
        for entry in mdt.storage.list(partition):
            parsed = MetadataFile.parse(partition, entry.name)
            if parsed is not None:
                files[parsed.file_group].append(parsed)
        for group, found in files.items():
            bases = [f for f in found if not f.is_log]
            logs = [f for f in found if f.is_log]
            # the newest base, one a compaction within the grace period replaced, and the logs
            # since (and those the replaced base needs)
            assert len(bases) <= 2 and len(logs) <= 2 * MAX_DELTAS + 2, (phase, group, found)
    index_instants = len(mdt.timeline.load())
    assert index_instants <= 2 * len(PARTITIONS) + 2 * MAX_DELTAS + 2, (phase, index_instants)
    SUMMARY.append(
        f"long life, {phase}: {len(view.all_base_files)} data files for "
        f"{len(view.latest_base_files())} latest, {writes} active writes, "
        f"{sum(1 for _ in mdt.storage.file_paths(''))} index files, {index_instants} index instants"
    )


def writes_so_far(table: Table) -> int:
    """Completed writes, active and archived."""
    timeline = table.timeline.load()
    archived = [a for a in table.archive().instants() if a.instant.action.value == "commit"]
    return len(timeline.write_timeline().completed()) + len(archived)


def check_reads(table: Table, replayed: dict[str, Any]) -> None:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    ours = {r["_hoodie_record_key"]: (r["ts"], r["fare"]) for r in data.to_pylist()}
    assert ours == replayed
    theirs = {r["_hoodie_record_key"]: (r["ts"], r["fare"]) for r in hudi_rs(table.base_uri, {})}
    assert theirs == replayed
    done = subprocess.run(
        [sys.executable, "-m", "indexer", "validate", table.base_uri]
        + [f"--conf={k}={v}" for k, v in settings(Path(table.base_uri).parent).items()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_table_written_for_a_long_time_stays_small(tmp_path: Path) -> None:
    config = Config.resolve(explicit=settings(tmp_path))
    table = Table.create(str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=config)
    first = rows(keys(0, ROWS))
    WriteClient(table).insert(first)
    replayed = {r["uuid"]: (r["ts"], r["fare"]) for r in first.to_pylist()}
    initialize(table, PARTITIONS)

    write_phase(table, replayed, COMMITS, start=2)
    check_bounds(table, "writers alone")
    check_reads(table, replayed)

    service = tmp_path / "service.toml"
    conf = ", ".join(f'"{k}" = "{v}"' for k, v in settings(tmp_path).items())
    service.write_text(
        f"""
[service]
request_store = "sqlite:///{tmp_path / "service.sqlite"}"
http_port = 0
reconcile_interval_seconds = 0.5
clean_interval_seconds = 1
compaction_interval_seconds = 1

[[tables]]
base = "{table.base_uri}"
index_types = {list(PARTITIONS)!r}
lock_url = "{settings(tmp_path)["indexer.lock.url"]}"
conf = {{ {conf} }}
""".replace("'", '"')
    )
    daemon = Daemon(service)
    try:
        write_phase(table, replayed, COMMITS, start=2 + COMMITS + 1)
        status = daemon.get("/status")["tables"][table.base_uri]
    finally:
        assert daemon.stop() == 0
    assert status["footprint"] is not None, status  # the daemon measured the table
    check_bounds(table, "writers beside indexer serve")
    check_reads(table, replayed)
