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
from timeline.errors import TableConfigError
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


def test_merge_on_read_tables_are_refused_by_name(hudi: HudiPeer, tmp_path: Path) -> None:
    """Stats of base files alone would let data skipping drop a file slice whose log files hold a
    matching row: a merge-on-read table is refused, and left as it was."""
    hudi_table = HudiTable(str(tmp_path / "mor"), table_type="MERGE_ON_READ")
    hudi.write(hudi_table, "insert", make_rows(range(10)))
    hudi.write(hudi_table, "upsert", make_rows(range(3), ts=2, fare_offset=5.0))
    before = _checksums(Path(hudi_table.path))
    table = _open(hudi_table, tmp_path)
    with pytest.raises(TableConfigError, match="MERGE_ON_READ: merge-on-read tables are not"):
        AsyncIndexer(table).run(list(PARTITIONS))
    assert _checksums(Path(hudi_table.path)) == before


def test_beside_hudis_writer_every_read_is_current_and_sync_closes_the_lag(
    hudi: HudiPeer, spark: Any, tmp_path: Path
) -> None:
    """Hudi's writer commits upserts, new partitions, deletes, an insert_overwrite and a
    clustering beside our index: after each, every read path answers from current data at once,
    ``indexer validate`` names the instant our index lacks, and ``indexer sync`` closes the gap."""
    hudi_table = HudiTable(
        str(tmp_path / "trips"),
        extra={"hoodie.clean.automatic": "false", "hoodie.parquet.small.file.limit": "0"},
    )
    hudi.write(hudi_table, "insert", make_rows(range(30), parts=3))
    table = _open(hudi_table, tmp_path)
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
