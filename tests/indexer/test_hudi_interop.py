"""Our indexer on tables Apache Hudi 0.15 writes, with Hudi itself (the ``hudi`` fixture): the index
stays out of Hudi's namespace, Hudi's own metadata table and ``hoodie.properties`` are left byte for
byte as they were, and Hudi's writer and readers work as before."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer
from metadata_table.layout import PARTITIONS
from timeline import Table
from timeline.config import Config
from timeline.index_state import STATE_FILE

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from .test_foreign_commits import assert_reads_are_current, indexer_cli
from .test_indexer import assert_exact

pytestmark = pytest.mark.hudi


def _checksums(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` with the SHA-256 of its bytes."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _cleaned_by_hand(hudi: HudiPeer, tmp_path: Path) -> tuple[HudiTable, Table]:
    """A table Hudi wrote (30 rows, 3 partitions, one file per write) that Hudi cleans only when
    a test asks, keeping one commit: a clean then deletes every older slice."""
    hudi_table = HudiTable(
        str(tmp_path / "trips"),
        extra={
            "hoodie.clean.automatic": "false",
            "hoodie.parquet.small.file.limit": "0",
            "hoodie.cleaner.commits.retained": "1",
        },
    )
    hudi.write(hudi_table, "insert", make_rows(range(30), parts=3))
    return hudi_table, _open(hudi_table, tmp_path)


def _open(table: HudiTable, tmp_path: Path) -> Table:
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}"})
    return Table.open(table.path, config)


def test_indexing_a_hudi_table_leaves_hudi_untouched(
    hudi: HudiPeer, spark: Any, tmp_path: Path
) -> None:
    hudi_table = HudiTable(str(tmp_path / "trips"))  # Hudi's own metadata table on
    hudi.write(hudi_table, "insert", make_rows(range(40)))
    hudi.write(hudi_table, "upsert", make_rows(range(10), ts=2, fare_offset=10.0))
    hudi.index(hudi_table, ["column_stats"])  # Hudi's own async indexer, in its metadata table
    base = Path(hudi_table.path)
    hudi_metadata = _checksums(base / ".hoodie" / "metadata")
    assert hudi_metadata, "Hudi wrote its metadata table"
    properties = (base / ".hoodie" / "hoodie.properties").read_bytes()
    rows_before = by_key(hudi.read(hudi_table))

    table = _open(hudi_table, tmp_path)
    indexer = AsyncIndexer(table, spark=spark)
    indexer.run(list(PARTITIONS))

    assert_exact(table)
    assert (base / STATE_FILE).is_file()
    owners = [i["owner"] for i in indexer.status()["indexing"]]
    assert owners == ["apache-hudi", "async-indexer"], "Hudi's indexing instant is left to Hudi"
    assert _checksums(base / ".hoodie" / "metadata") == hudi_metadata
    assert (base / ".hoodie" / "hoodie.properties").read_bytes() == properties
    for metadata in (True, False):
        assert by_key(hudi.read(hudi_table, metadata=metadata)) == rows_before

    # Hudi keeps writing and cleaning beside our index, and reads what it wrote.
    hudi.write(hudi_table, "upsert", make_rows(range(5), ts=3, fare_offset=20.0))
    hudi.service(hudi_table, "clean")
    expected = {**rows_before, **by_key(make_rows(range(5), ts=3, fare_offset=20.0))}
    for metadata in (True, False):
        assert by_key(hudi.read(hudi_table, metadata=metadata)) == expected
    assert (base / STATE_FILE).is_file(), "Hudi left our index folder alone"


def test_beside_hudis_writer_every_read_is_current_and_sync_closes_the_lag(
    hudi: HudiPeer, spark: Any, tmp_path: Path
) -> None:
    """Hudi's writer commits upserts, new partitions, deletes, an insert_overwrite, a clustering
    and a clean beside our index: after each, every read path answers from current data at once,
    ``indexer validate`` names the instant our index lacks, and ``indexer sync`` closes the gap."""
    hudi_table, table = _cleaned_by_hand(hudi, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))

    steps = [
        ("upsert", lambda: hudi.write(hudi_table, "upsert", make_rows(range(5), ts=2, parts=3))),
        (
            "new partition",
            lambda: hudi.write(hudi_table, "insert", make_rows(range(100, 106), parts=7)),
        ),
        ("delete", lambda: hudi.write(hudi_table, "delete", make_rows([7, 8], ts=3, parts=3))),
        (
            "insert_overwrite",
            lambda: hudi.write(
                hudi_table, "insert_overwrite", make_rows([201, 204], ts=4, parts=3)
            ),
        ),
        ("clustering", lambda: hudi.service(hudi_table, "cluster")),
        # deletes old slices and the file groups the insert_overwrite and clustering replaced
        ("clean", lambda: hudi.service(hudi_table, "clean")),
    ]
    for name, step in steps:
        added = [i for i in step()["instants"] if i["state"] == "COMPLETED"]
        assert added, name
        assert_reads_are_current(table)
        validated = indexer_cli(table, "validate", "--json")
        assert validated.returncode == 1, (name, validated.stdout, validated.stderr)
        lagging = {u for p in json.loads(validated.stdout)["partitions"] for u in p["unapplied"]}
        assert {f"{i['timestamp']}.{i['action']}" for i in added} <= lagging, name
        synced = indexer_cli(table, "sync", "--json")
        assert synced.returncode == 0, (name, synced.stderr)
        again = indexer_cli(table, "validate")
        assert again.returncode == 0, (name, again.stdout)
        assert_reads_are_current(table)
    assert_exact(table)


def _sync_then_valid(table: Table) -> None:
    synced = indexer_cli(table, "sync")
    assert synced.returncode == 0, synced.stderr
    validated = indexer_cli(table, "validate")
    assert validated.returncode == 0, validated.stdout
    assert_reads_are_current(table)


def test_hudis_rollback_and_restore_beside_our_index(
    hudi: HudiPeer, spark: Any, tmp_path: Path
) -> None:
    """A rollback of Hudi's last commit and a restore to a savepoint remove commits our index
    had applied, in log files and in the base files it built: reads stay current throughout, and
    the files they deleted leave the index (validate names the restore until sync)."""
    hudi_table = HudiTable(
        str(tmp_path / "trips"),
        extra={"hoodie.clean.automatic": "false", "hoodie.parquet.small.file.limit": "0"},
    )
    hudi.write(hudi_table, "insert", make_rows(range(20)))
    savepoint = hudi.service(hudi_table, "savepoint")["detail"]["instant"]
    hudi.write(hudi_table, "upsert", make_rows(range(5), ts=2, fare_offset=100.0))
    hudi.write(hudi_table, "insert", make_rows(range(50, 60)))
    table = _open(hudi_table, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))  # its base files cover both commits

    hudi.write(hudi_table, "upsert", make_rows(range(3), ts=3, fare_offset=200.0))
    _sync_then_valid(table)  # applied as log files
    hudi.service(hudi_table, "rollback")
    assert_reads_are_current(table)
    _sync_then_valid(table)

    restore = hudi.service(hudi_table, "restore", instant=savepoint)
    assert_reads_are_current(table)
    validated = indexer_cli(table, "validate", "--json")
    assert validated.returncode == 1, validated.stdout
    lagging = {u for p in json.loads(validated.stdout)["partitions"] for u in p["unapplied"]}
    assert lagging == {f"{restore['instants'][0]['timestamp']}.restore"}
    _sync_then_valid(table)
    assert_exact(table)
    assert by_key(hudi.read(hudi_table)) == by_key(make_rows(range(20)))


def test_instants_hudi_archived_before_our_index_applied_them(
    hudi: HudiPeer, spark: Any, tmp_path: Path
) -> None:
    """Hudi cleans and archives automatically: commits (and cleans) our index never saw leave
    the active timeline. Their files stay committed for every read path, validate names them
    from Hudi's archived timeline, and sync applies them from it."""
    hudi_table = HudiTable(
        str(tmp_path / "trips"),
        metadata=False,
        extra={
            "hoodie.parquet.small.file.limit": "0",
            "hoodie.cleaner.commits.retained": "1",
            "hoodie.keep.min.commits": "2",
            "hoodie.keep.max.commits": "3",
        },
    )
    hudi.write(hudi_table, "insert", make_rows(range(20)))
    table = _open(hudi_table, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))
    written = []
    for ts in range(2, 8):
        added = hudi.write(hudi_table, "insert", make_rows(range(ts * 100, ts * 100 + 4), ts=ts))
        written += [i["timestamp"] for i in added["instants"] if i["action"] == "commit"]
    active = {i.timestamp for i in table.timeline.load()}
    archived = {a.instant.timestamp for a in table.archived_timeline()}
    assert set(written) - active, "Hudi archived some of the commits our index has not applied"
    assert set(written) - active <= archived

    assert_reads_are_current(table)
    validated = indexer_cli(table, "validate", "--json")
    assert validated.returncode == 1
    lagging = {u for p in json.loads(validated.stdout)["partitions"] for u in p["unapplied"]}
    assert {f"{t}.commit" for t in written} <= lagging
    _sync_then_valid(table)
    assert_exact(table)
    rows = by_key(hudi.read(hudi_table))
    assert len(rows) == 20 + 6 * 4


def test_the_daemon_builds_beside_hudis_writer_and_catches_up_each_step(
    hudi: HudiPeer, tmp_path: Path
) -> None:
    """Our daemon builds every index while Hudi's writer commits an upsert, a delete, an
    insert_overwrite, a clustering and a clean: after each, every read path answers from current
    data at once, and within a daemon tick or two `indexer validate` exits 0."""
    from metadata_table.validate import validate

    from .test_daemon import Daemon, _completed, _wait

    hudi_table, table = _cleaned_by_hand(hudi, tmp_path)
    config = tmp_path / "service.toml"
    config.write_text(f"""
[service]
request_store = "sqlite:///{tmp_path / "service.sqlite"}"
http_port = 0
reconcile_interval_seconds = 0.5
backoff_seconds = 0.5

[spark]
master = "local[1]"

[[tables]]
base = "{table.base_uri}"
index_types = {json.dumps(list(PARTITIONS))}
lock_url = "sqlite:///{tmp_path / "locks.db"}"
""")
    daemon = Daemon(config)
    try:
        steps = [
            lambda: hudi.write(hudi_table, "upsert", make_rows(range(5), ts=2, parts=3)),
            lambda: hudi.write(hudi_table, "delete", make_rows([7, 8], ts=3, parts=3)),
            lambda: hudi.write(hudi_table, "insert_overwrite", make_rows([201], ts=4, parts=3)),
            lambda: hudi.service(hudi_table, "cluster"),
            lambda: hudi.service(hudi_table, "clean"),
        ]
        for step in steps:  # the first ones land while the daemon is still building
            step()
            assert_reads_are_current(table)
        _wait(_completed(table, list(PARTITIONS)), 180, "the daemon's build")
        _wait(lambda: all(r.ok for r in validate(table)), 60, "the daemon to catch up")
        assert_reads_are_current(table)
        assert_exact(table)
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
