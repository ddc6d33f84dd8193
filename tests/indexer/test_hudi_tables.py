"""Our indexer on tables Apache Hudi 0.15 writes with each key generator and partition style
(hive-style, plain, multi-level, URL-encoded, non-partitioned), Hudi's metadata table on.

The oracle is Hudi's own reader: the live files are those its rows come from, and each file's
column stats must equal pyarrow's min, max and null count over that file; for every row, pruning
on each indexed column's value keeps the row's file. Hudi reads the same rows before and after,
and its metadata table is left byte for byte as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from indexer.indexer import AsyncIndexer
from metadata_table.layout import PARTITIONS
from metadata_table.read.filters import col
from metadata_table.read.snapshot import IndexedSnapshot

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from ..hudi_peer.tables import HUDI_READER_FAILS, KEYGEN_TABLES, KEYGEN_TS
from ..metadata_table.test_hudi_scan import assert_history_matches_hudi, assert_scans_match_hudi
from ..writer.test_failed_writes import hudi_rs
from .oracle import assert_stats_match_pyarrow
from .test_hudi_interop import _checksums, _open
from .test_indexer import assert_exact

pytestmark = pytest.mark.hudi

PRUNED_COLUMNS = ("id", "fare", "name", "_hoodie_record_key")


def _hudi_rows(hudi: HudiPeer, table: HudiTable) -> list[dict[str, Any]]:
    if Path(table.path).name in HUDI_READER_FAILS:
        return hudi_rs(table.path, {})  # Hudi 0.15's reader cannot read it (apache/hudi#10678)
    return hudi.read(table).to_pylist()


def _file_of(row: dict[str, Any]) -> str:
    partition = row["_hoodie_partition_path"]
    return f"{partition}/{row['_hoodie_file_name']}" if partition else row["_hoodie_file_name"]


@pytest.mark.parametrize("style", sorted(KEYGEN_TABLES))
def test_hudi_written_tables_are_indexed_exactly(
    hudi: HudiPeer, spark: Any, tmp_path: Path, style: str
) -> None:
    hudi_table = HudiTable(
        str(tmp_path / style),
        **KEYGEN_TABLES[style],
        extra={"hoodie.parquet.small.file.limit": "0"},  # several files per partition
    )
    hudi.write(hudi_table, "insert", make_rows(range(12), ts=KEYGEN_TS))
    hudi.write(hudi_table, "upsert", make_rows([1, 4], ts=KEYGEN_TS, fare_offset=50.0))
    hudi.write(hudi_table, "insert", make_rows(range(20, 26), ts=KEYGEN_TS))
    hudi.write(hudi_table, "delete", make_rows([3], ts=KEYGEN_TS))
    base = Path(hudi_table.path)
    hudi_metadata = _checksums(base / ".hoodie" / "metadata")
    rows_before = _hudi_rows(hudi, hudi_table)
    assert len(rows_before) == 17

    table = _open(hudi_table, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))
    assert_exact(table)

    snapshot = IndexedSnapshot(table)
    listed = {f.path for f in snapshot.view.latest_base_files()}
    live = {_file_of(r) for r in rows_before}
    assert live <= listed
    # a file group whose every row was deleted keeps an empty base file, which Hudi reads no rows
    # from: listing it too is right
    assert all(pq.read_metadata(base / p).num_rows == 0 for p in listed - live)
    assert set(snapshot.list_partitions()) == {p.rpartition("/")[0] for p in listed}

    assert_stats_match_pyarrow(snapshot, base, listed)

    for row in rows_before:
        holder = _file_of(row)
        for column in PRUNED_COLUMNS:
            kept = {f.path for f in snapshot.prune(col(column) == row[column]).candidates}
            assert holder in kept, (column, row[column])
    assert snapshot.prune(col("fare") == -1.0).candidates == [], "stats prune what cannot match"

    assert_scans_match_hudi(hudi, hudi_table, table)  # scans read through the index
    if style == "simple-hive-style":
        assert_history_matches_hudi(hudi, hudi_table, table)

    assert _checksums(base / ".hoodie" / "metadata") == hudi_metadata
    assert by_key(_hudi_rows(hudi, hudi_table)) == by_key(rows_before)
