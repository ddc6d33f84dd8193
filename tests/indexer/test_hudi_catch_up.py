"""The index always catches up beside Apache Hudi 0.15, and the daemon never harms Hudi's writes.

Hudi cleans after every commit (KEEP_LATEST_COMMITS, one retained) and archives aggressively
(2 to 3 commits kept); a savepoint midway stops commits from being archived while cleans still
are, so cleans newer than active commits land in the archive (the case that stopped sync for
good). The index is built once; Hudi then commits 30 times (upserts, new partitions, deletes,
insert_overwrite, clustering) with nothing of ours running for the first 20; then the daemon (or
``indexer sync`` by hand) closes the lag, and keeps it closed commit after commit. The oracle is
Hudi's own snapshot read: for every live row, the file Hudi reads it from (``_hoodie_file_name``)
is in our listing, kept by prune() on its value and by the key lookup.

The second test runs the daemon, cleaning every 2 seconds, beside Hudi's writer in its default
single-writer setup (no heartbeats, failed writes rolled back eagerly by the writer itself): no
Hudi commit fails, nothing of Hudi's is rolled back by us, and Hudi's archiver and cleaner pass
over the Avro rollback instant we wrote."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import PARTITIONS
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.validate import validate
from timeline import Action, Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from writer.client import Operation, WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import make_rows
from .test_daemon import HTTP, Daemon, _wait
from .test_foreign_commits import indexer_cli
from .test_hudi_interop import _open

pytestmark = pytest.mark.hudi

AGGRESSIVE = {
    "hoodie.parquet.small.file.limit": "0",
    "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}


def _step(hudi: HudiPeer, table: HudiTable, n: int) -> Callable[[], Any]:
    """Hudi's n-th commit (1-based) after the first insert: mostly upserts, and every ten a new
    partition, a delete, an insert_overwrite and a clustering."""
    kind = n % 10
    if kind == 3:
        return lambda: hudi.write(
            table, "insert", make_rows(range(1000 + 10 * n, 1004 + 10 * n), ts=n, parts=7)
        )
    if kind == 5:
        return lambda: hudi.write(table, "delete", make_rows([n, n + 20], ts=n, parts=3))
    if kind == 7:
        rows = make_rows([2000 + n, 2003 + n], ts=n, parts=3)  # overwrites the partitions p0, p1
        return lambda: hudi.write(table, "insert_overwrite", rows)
    if kind == 9:
        return lambda: hudi.service(table, "cluster")
    ids = [(n * 7 + i) % 40 for i in range(5)]
    return lambda: hudi.write(table, "upsert", make_rows(ids, ts=n, fare_offset=n, parts=3))


def assert_reads_agree_with_hudi(hudi: HudiPeer, hudi_table: HudiTable, table: Table) -> None:
    """Every listing, prune() and key lookup of ours keeps the file Hudi's snapshot read serves
    each live row from; our listing is the table's latest files."""
    meta = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "fare"]
    rows = hudi.read(hudi_table, columns=meta, metadata=False).to_pylist()
    assert rows, "Hudi reads rows"
    timeline = table.timeline.load()
    snapshot = IndexedSnapshot(table, timeline)
    listing = {f.path for f in snapshot.view.latest_base_files()}
    truth = FileSystemView(table.timeline, timeline).latest_base_files()
    assert listing == {f.path for f in truth}
    for row in rows:
        partition, key = row["_hoodie_partition_path"], row["_hoodie_record_key"]
        holder = f"{partition}/{row['_hoodie_file_name']}"
        assert holder in listing, row
        assert holder in {f.path for f in snapshot.prune(f"fare = {row['fare']}").candidates}, row
        assert holder in snapshot.lookup_keys([key], partition)[key], row


def _daemon_config(tmp_path: Path, table: Table, extra: str = "") -> Path:
    """The daemon for ``table``: every index desired, a tick every 0.5 s, cleaning every 2 s."""
    config = tmp_path / "service.toml"
    config.write_text(f"""
[service]
request_store = "sqlite:///{tmp_path / "service.sqlite"}"
http_port = 0
reconcile_interval_seconds = 0.5
clean_interval_seconds = 2

[[tables]]
base = "{table.base_uri}"
index_types = {json.dumps(list(PARTITIONS))}
lock_url = "sqlite:///{tmp_path / "locks.db"}"
{extra}
""")
    return config


def _valid(table: Table) -> bool:
    return all(r.ok for r in validate(table))


@pytest.mark.parametrize("closer", ["daemon", pytest.param("sync", marks=pytest.mark.soak)])
def test_the_index_catches_up_after_an_outage_and_stays_caught_up(
    hudi: HudiPeer, tmp_path: Path, closer: str
) -> None:
    hudi_table = HudiTable(str(tmp_path / "trips"), metadata=False, extra=AGGRESSIVE)
    hudi.write(hudi_table, "insert", make_rows(range(40), parts=3))
    table = _open(hudi_table, tmp_path)
    AsyncIndexer(table, IndexerOptions(engine="local")).run(list(PARTITIONS))
    assert indexer_cli(table, "validate").returncode == 0

    for n in range(1, 21):  # the outage: nothing of ours runs
        _step(hudi, hudi_table, n)()
        if n == 8:
            hudi.service(hudi_table, "savepoint")
    active = {i.timestamp for i in table.timeline.load()}
    archived = table.archived_timeline()
    newest_active_commit = min(
        i.timestamp for i in table.timeline.load().write_timeline().completed()
    )
    assert any(
        a.instant.action is Action.CLEAN and a.instant.timestamp > newest_active_commit
        for a in archived
    ), "a clean newer than active commits is in Hudi's archive (the case this proves)"
    assert any(a.instant.action is Action.COMMIT for a in archived), "commits were archived"
    assert all(a.instant.timestamp not in active for a in archived)
    behind = json.loads(indexer_cli(table, "validate", "--json").stdout)
    assert not behind["ok"]
    assert_reads_agree_with_hudi(hudi, hudi_table, table)  # lagging, never stale

    def close_the_lag() -> None:
        synced = indexer_cli(table, "sync", "--json")
        assert synced.returncode == 0, synced.stderr
        assert indexer_cli(table, "validate").returncode == 0

    daemon = None
    if closer == "daemon":
        daemon = Daemon(_daemon_config(tmp_path, table))

        def close_the_lag() -> None:
            _wait(lambda: _valid(table), 60, "the daemon to close the lag")

    try:
        close_the_lag()  # the daemon's first tick, or `indexer sync`
        assert_reads_agree_with_hudi(hudi, hudi_table, table)
        for n in range(21, 31):
            _step(hudi, hudi_table, n)()
            close_the_lag()
            assert_reads_agree_with_hudi(hudi, hudi_table, table)
        lag = json.loads(indexer_cli(table, "status", "--json").stdout)["lag"]
        assert {row["unapplied_instants"] for row in lag.values()} == {0}
        if daemon is not None:
            metrics = HTTP.request("GET", daemon.url + "/metrics").data.decode()
            synced = [m for m in metrics.splitlines() if m.startswith("async_indexer_synced_")]
            assert synced and int(synced[0].split()[-1]) >= 30, synced
            assert "async_indexer_resyncs_total 0" in metrics
            assert daemon.stop() == 0
    finally:
        if daemon is not None and daemon.process.poll() is None:
            daemon.process.kill()


def test_the_daemon_never_rolls_back_hudis_live_writes(hudi: HudiPeer, tmp_path: Path) -> None:
    hudi_table = HudiTable(str(tmp_path / "trips"), metadata=False, extra=AGGRESSIVE)
    hudi.write(hudi_table, "insert", make_rows(range(40), parts=3))
    table = _open(hudi_table, tmp_path)
    # a write of ours that dies: the daemon's cleaner rolls it back once its heartbeat expires,
    # in Hudi's Avro, and Hudi's archiver later archives that rollback
    conf = {
        "indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}",
        "hoodie.client.heartbeat.interval_in_ms": "200",
    }
    ours = Table.open(table.base_uri, Config.resolve(explicit=conf))
    dead = []
    for n in range(4):  # Hudi archives rollbacks once there are more than keep.max.commits
        txn = WriteClient(ours).start(Operation.UPSERT)
        txn.write(make_rows(range(n * 5, n * 5 + 5), ts=9, parts=3))
        txn.heartbeat.pause()
        dead.append(txn.instant_time)
    heartbeat = 'conf = { "hoodie.client.heartbeat.interval_in_ms" = "200" }'
    daemon = Daemon(_daemon_config(tmp_path, table, heartbeat))
    try:
        _wait(
            lambda: all(ours.timeline.load().get(t) is None for t in dead),
            30,
            "the dead writes' rollbacks",
        )
        ours_rolled = {i.timestamp: i for i in ours.timeline.load().with_actions(Action.ROLLBACK)}
        assert len(ours_rolled) == 4
        written = []
        for n in range(1, 21):  # each runs ~1-2 s, inflight without a heartbeat, across ticks
            started = time.monotonic()
            added = _step(hudi, hudi_table, n)()  # raises if Hudi's write failed
            written += [i for i in added["instants"] if i["state"] == "COMPLETED"]
            assert time.monotonic() - started < 60
        archived = {a.instant.timestamp: a for a in table.archived_timeline()}
        kept = [t for t in ours_rolled if t in archived]
        assert kept, "Hudi's archiver read our rollbacks and archived the oldest"
        targets = {t for k in kept for t in (archived[k].metadata or {})["commitsRollback"]}
        assert targets <= set(dead)
        rollbacks = {t for t, a in archived.items() if a.instant.action is Action.ROLLBACK}
        rollbacks |= {
            i["timestamp"] for i in hudi.instants(hudi_table) if i["action"] == "rollback"
        }
        assert rollbacks == set(ours_rolled), "nothing but our own dead writes was rolled back"
        commits = {i["timestamp"] for i in written if i["action"] in ("commit", "replacecommit")}
        assert len(commits) == 20
        _wait(lambda: _valid(table), 60, "the daemon to apply Hudi's last commits")
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
    assert hudi.read(hudi_table).num_rows > 0
    assert not any(os.path.exists(Path(table.base_uri, ".hoodie", f"{t}.inflight")) for t in dead)
