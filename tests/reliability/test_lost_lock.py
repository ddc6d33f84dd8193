"""A lock holder paused (SIGSTOP) past its lease must not write under the lock it lost: another
process takes the lock and commits meanwhile; when the paused one resumes, its check right before
its write fails (its lease is gone), it writes nothing under the lock, and exits non-zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from timeline import Action, Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from writer.client import WriteClient

from ..metadata_table.test_metadata_table import keys, rows

LEASE_MS = 1500


def settings(tmp: Path) -> dict[str, str]:
    return {
        "indexer.lock.url": f"sqlite:///{tmp / 'locks.sqlite'}",
        "indexer.lock.lease_ms": str(LEASE_MS),
        "hoodie.client.heartbeat.interval_in_ms": "60000",
    }


def paused_at(args: list[str], point: str, tmp: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Start a CLI that stalls at ``point`` (inside the lock); SIGSTOP it once it is there."""
    env = dict(os.environ, AIX_FAILPOINT=f"{point}:sleep=1")
    conf = [f"--conf={k}={v}" for k, v in settings(tmp).items()]
    process = subprocess.Popen(
        [sys.executable, "-m", *args, *conf],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    assert process.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    deadline = time.monotonic() + 60
    while not any(f"failpoint {point}" in line for line in list(lines)):
        assert process.poll() is None, "".join(lines)
        assert time.monotonic() < deadline, "".join(lines)
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGSTOP)
    return process, lines


@pytest.fixture
def table(tmp_path: Path) -> Table:
    config = Config.resolve(explicit=settings(tmp_path))
    table = Table.create(str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=config)
    WriteClient(table).insert(rows(keys(0, 30)))
    return table


def test_a_paused_writer_does_not_commit_under_a_lost_lock(table: Table, tmp_path: Path) -> None:
    pq.write_table(rows(keys(0, 10), ts=5), tmp_path / "in.parquet")
    args = ["writer", table.base_uri, "--input", str(tmp_path / "in.parquet"), "--operation"]
    paused, lines = paused_at([*args, "upsert"], "writer.commit.locked", tmp_path)
    try:
        time.sleep(2 * LEASE_MS / 1000)  # its lease runs out while it cannot renew
        # takes the lock and commits to other file groups: no conflict stops the paused writer
        other = WriteClient(table).insert(rows(keys(100, 110), ts=7, city="zz"))
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    paused.wait(timeout=60)
    err = "".join(lines)
    assert paused.returncode == 1, err
    assert "lock" in err and ("lost" in err or "no longer" in err), err
    timeline = table.timeline.load()
    commits = list(timeline.write_timeline().completed())
    assert [c.timestamp for c in commits][-1] == other.timestamp
    assert not list(timeline.pending()), "the paused writer left its instant behind"
    data = FileSystemView(table.timeline, timeline).read_snapshot().to_pylist()
    ts = {r["_hoodie_record_key"]: r["ts"] for r in data}
    assert {ts[k] for k in keys(0, 30)} == {1} and {ts[k] for k in keys(100, 110)} == {7}


def test_a_paused_indexer_does_not_write_its_plan_under_a_lost_lock(
    table: Table, tmp_path: Path
) -> None:
    args = ["indexer", "schedule", table.base_uri, "--index-types", "files"]
    paused, lines = paused_at(args, "schedule.before_plan", tmp_path)
    try:
        time.sleep(2 * LEASE_MS / 1000)
        WriteClient(table).upsert(rows(keys(0, 3), ts=4))  # commits under the lock meanwhile
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    paused.wait(timeout=60)
    err = "".join(lines)
    assert paused.returncode == 1, err
    assert "lock" in err, err
    assert not list(table.timeline.load().with_actions(Action.INDEXING)), "a plan was written"
    state = table.reload_index_state()
    assert not state.inflight and not state.completed
