"""Our indexer on tables Apache Hudi 0.15 writes, with Hudi itself (the ``hudi`` fixture): the index
stays out of Hudi's namespace, Hudi's own metadata table and ``hoodie.properties`` are left byte for
byte as they were, and Hudi's writer and readers work as before."""

from __future__ import annotations

import hashlib
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
    base = Path(hudi_table.path)
    hudi_metadata = _checksums(base / ".hoodie" / "metadata")
    assert hudi_metadata, "Hudi wrote its metadata table"
    properties = (base / ".hoodie" / "hoodie.properties").read_bytes()
    rows_before = by_key(hudi.read(hudi_table))

    table = _open(hudi_table, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))

    assert_exact(table)
    assert (base / STATE_FILE).is_file()
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
