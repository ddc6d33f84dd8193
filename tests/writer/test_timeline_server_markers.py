"""Writers with timeline-server markers: durability across a server crash, integration, fallback,
a server lost mid-write, and the server's asynchronous early conflict detection."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from timeline import Action, Table
from timeline.config import Config
from timeline.errors import MarkerServerError, WriteConflictError
from timeline.fs_view import FileSystemView
from timeline.markers import DirectMarkers, IOType, Marker, read_markers
from timeline.markers.client import TimelineServerMarkers
from timeline.markers.server import MarkerServer, MarkerServerConfig
from timeline.rollback import rollback
from writer.client import Operation, WriteClient, WriteOptions


def _config(tmp_path: Path) -> Config:
    return Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.sqlite'}"})


def _table(tmp_path: Path) -> Table:
    return Table.create(
        str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=_config(tmp_path)
    )


def _rows(keys: list[str], city: str = "sf", ts: int = 1) -> pa.Table:
    return pa.table(
        {"uuid": keys, "city": [city] * len(keys), "ts": pa.array([ts] * len(keys), pa.int64())}
    )


def _start_server_process(base: str, tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "timeline",
            "marker-server",
            base,
            "--conf",
            f"indexer.lock.url=sqlite:///{tmp_path / 'locks.sqlite'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"at (http://\S+)", line)
    assert match, (
        f"no URL in {line!r}: {process.stderr.read() if process.poll() is not None else ''}"
    )
    return process, match.group(1)


def test_acknowledged_markers_survive_a_server_crash(tmp_path: Path) -> None:
    table = _table(tmp_path)
    pending = table.timeline.create_requested(Action.COMMIT)
    t = pending.timestamp
    server, url = _start_server_process(table.base_uri, tmp_path)
    acknowledged: list[Marker] = []

    def task(n: int) -> None:  # like an executor's task: marker, then its data file
        client = TimelineServerMarkers(url, table.storage, t)
        for i in range(n * 30, n * 30 + 30):
            marker = Marker(f"p{i % 3}", f"f{i:04d}-0_{i}-0-0_{t}.parquet", IOType.CREATE)
            client.create(marker)  # returns only once the server flushed it
            table.storage.create(marker.data_path, b"data written after its marker")
            acknowledged.append(marker)

    try:
        tasks = [threading.Thread(target=task, args=(n,)) for n in range(10)]
        for thread in tasks:
            thread.start()
        for thread in tasks:
            thread.join()
        assert len(acknowledged) == 300
    finally:
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
    restarted, url2 = _start_server_process(table.base_uri, tmp_path)
    try:
        listed = TimelineServerMarkers(url2, table.storage, t)._call("GET", "all")[1]
        assert sorted(listed) == sorted(m.name for m in acknowledged), (
            "an acknowledged marker was lost"
        )
        with table.lock("test rollback") as lock:
            rollback(table, pending, lock)
        assert not any(table.storage.exists(m.data_path) for m in acknowledged)
    finally:
        restarted.terminate()
        restarted.wait()
    assert restarted.returncode == 0, "SIGTERM stops the server cleanly"


def test_write_with_timeline_server_markers(tmp_path: Path) -> None:
    table = _table(tmp_path)
    options = WriteOptions(markers="timeline-server")
    with WriteClient(table, options) as client:
        txn = client.start(Operation.INSERT)
        assert isinstance(txn.markers, TimelineServerMarkers)
        stats = txn.write(_rows(["a", "b"]))
        folder = f".hoodie/.temp/{txn.instant_time}"
        names = sorted(e.name for e in table.storage.list(folder))
        assert "MARKERS.type" in names and any(re.fullmatch(r"MARKERS\d+", n) for n in names)
        assert not any(n.endswith(".CREATE") for n in names), "no direct marker files"
        # a retried task's partial file, marked through the server, is removed by finalize
        partial = Marker(
            "sf", f"{stats[0].file_id}_0-0-1_{txn.instant_time}.parquet", IOType.CREATE
        )
        txn.markers.create(partial)
        table.storage.create(partial.data_path, b"partial")
        txn.commit()
        assert not table.storage.exists(partial.data_path)
        assert table.storage.list(folder) == []
        client.upsert(_rows(["a"], ts=2))
    snapshot = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    assert sorted(
        zip(snapshot.column("uuid").to_pylist(), snapshot.column("ts").to_pylist(), strict=True)
    ) == [("a", 2), ("b", 1)]


def test_unreachable_server_falls_back_to_direct_markers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.conftest import free_port

    table = _table(tmp_path)
    options = WriteOptions(
        markers="timeline_server_based", marker_server_url=f"http://127.0.0.1:{free_port()}"
    )
    with caplog.at_level(logging.WARNING, logger="writer.client"):
        txn = WriteClient(table, options).start(Operation.INSERT)
    assert isinstance(txn.markers, DirectMarkers)
    assert "marker server unavailable" in caplog.text
    txn.write(_rows(["a"]))
    txn.commit()


def test_server_lost_mid_write_fails_the_write_and_rollback_needs_no_server(tmp_path: Path) -> None:
    table = _table(tmp_path)
    server = MarkerServer(table).start()
    client = WriteClient(
        table,
        WriteOptions(
            markers="timeline-server", marker_server_url=server.url, max_records_per_file=1
        ),
    )
    txn = client.start(Operation.INSERT)
    txn.markers.create(Marker("sf", f"x-0_9-0-0_{txn.instant_time}.parquet", IOType.CREATE))
    table.storage.create(f"sf/x-0_9-0-0_{txn.instant_time}.parquet", b"written before the loss")
    server.stop()
    with pytest.raises(MarkerServerError):
        txn.write(_rows(["a", "b"]))  # never switches to direct markers midway
    assert isinstance(txn.markers, TimelineServerMarkers)
    txn.abort()  # rollback reads MARKERS* from storage: no server needed
    assert not table.storage.exists(f"sf/x-0_9-0-0_{txn.instant_time}.parquet")
    assert not table.timeline.load().write_timeline()


def test_async_early_conflict_detection(tmp_path: Path) -> None:
    table = _table(tmp_path)
    WriteClient(table).insert(_rows(["a", "b"]))
    group = (
        FileSystemView(table.timeline, table.timeline.load()).latest_base_files(["sf"])[0].file_id
    )
    first = WriteClient(table).start(Operation.UPSERT)  # direct markers, live, older
    first.write(_rows(["a"], ts=2))
    config = MarkerServerConfig(batch_interval=0.01, conflict_check_interval=0.05)
    with MarkerServer(table, config=config) as server:
        second = WriteClient(
            table,
            WriteOptions(
                markers="timeline-server", marker_server_url=server.url, max_records_per_file=1
            ),
        ).start(Operation.UPSERT)
        # the overlapping group is marked first (merges before inserts); the server notices
        # within a check period and answers one of the following creates with a conflict
        many = ["b"] + [f"n{i:03d}" for i in range(200)]
        with pytest.raises(WriteConflictError) as err:
            second.write(_rows(many, ts=3))
        assert err.value.other_instant.timestamp == first.instant_time
        assert err.value.file_ids == [f"sf/{group}"]
        written = len(read_markers(table.storage, second.instant_time))
        assert written < 100, "stopped early, not after the whole write"
        second.abort()
    first.commit()
