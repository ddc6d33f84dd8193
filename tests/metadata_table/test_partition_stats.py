"""partition_stats: per data partition and column, the column stats of its latest base files,
recomputed from the whole partition by every instant that touches it, so its bounds shrink when
values leave (Hudi 1.0's merged partition stats only widened until a compaction), and used by
prune() to drop whole partitions."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.indexer import AsyncIndexer
from metadata_table.index_types import index_type
from metadata_table.layout import COLUMN_STATS, FILES, PARTITION_STATS
from metadata_table.maintenance import build_records, compact, initialize
from metadata_table.read.snapshot import IndexedSnapshot, _Listing
from metadata_table.table import MetadataTable
from metadata_table.validate import validate
from timeline import Table
from timeline.errors import ConfigError
from writer.client import Operation, WriteClient

from ..indexer.test_foreign_commits import foreign_write
from .test_metadata_table import assert_exact, keys, make_table, rows

PARTS = [FILES, COLUMN_STATS, PARTITION_STATS]


def stats(table: Table, column: str = "fare") -> dict[str, tuple[Any, Any, int, int]]:
    """Data partition -> (min, max, value count, file count) of one column."""
    records = MetadataTable(table).reader(table.timeline.load()).read(PARTITION_STATS)
    out = {}
    for r in records.to_pylist():
        if r["column_name"] == column:
            kind = r["value_type"]
            lo, hi = r["min_value"][kind], r["max_value"][kind]
            out[r["partition"]] = (lo, hi, r["value_count"], r["file_count"])
    return out


def with_fare(batch: pa.Table, fare: float) -> pa.Table:
    index = batch.schema.get_field_index("fare")
    return batch.set_column(index, "fare", pa.array([fare] * batch.num_rows, pa.float64()))


def by_city(batch: pa.Table) -> pa.Table:
    """Fares apart per city: sf below 1000, la from 1000, ny from 2000."""
    base = {"sf": 0, "la": 1000, "ny": 2000}
    fares = [
        float(base[c] + int(k[1:]))
        for c, k in zip(
            batch.column("city").to_pylist(), batch.column("uuid").to_pylist(), strict=True
        )
    ]
    return batch.set_column(batch.schema.get_field_index("fare"), "fare", pa.array(fares))


def test_bounds_shrink_when_values_leave_and_stay_equal_to_a_rebuild(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))  # city by key: k0 sf, k1 la, k2 ny, ...
    initialize(table, PARTS)
    assert stats(table)["sf"] == (0.0, 27.0, 10, 1)
    client.upsert(with_fare(rows(keys(27, 28)), 500.0))  # the max of sf rises
    assert stats(table)["sf"][:2] == (0.0, 500.0)
    client.upsert(with_fare(rows(keys(27, 28)), 3.5))  # ... and falls back: the bound follows
    assert stats(table)["sf"][:2] == (0.0, 24.0)
    assert_exact(table, tuple(PARTS))
    client.delete(rows([k for k in keys(0, 30) if int(k[1:]) % 3 == 1]))  # every row of la
    la = stats(table)["la"]
    assert la[2] == 0, "la's files hold no rows"
    assert_exact(table, tuple(PARTS))
    assert compact(table, PARTITION_STATS) is not None
    assert_exact(table, tuple(PARTS))


def test_the_record_computed_last_wins_whatever_the_instant_order(tmp_path: Path) -> None:
    """An older instant that completes after a newer one: its record, computed later, saw both
    commits; merging in data-instant order would keep the newer instant's record, which did not
    see the older one's files."""
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, PARTS)
    older = client.start(Operation.UPSERT)
    older.write(with_fare(rows(keys(3, 4)), 900.0))  # sf, a new max
    client.upsert(with_fare(rows(keys(30, 33)), 1.0))  # newer instant: new files in sf, la, ny
    done = older.commit()
    assert stats(table)["sf"][1] == 900.0
    mdt = MetadataTable(table)
    logged = {e.name for e in mdt.storage.list(PARTITION_STATS) if done.timestamp in e.name}
    assert logged, "the older instant logged its records"
    assert_exact(table, tuple(PARTS))


def test_prune_drops_whole_partitions_and_never_a_foreign_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    for lo in range(0, 60, 10):
        client.insert(by_city(rows(keys(lo, lo + 10))))  # six files in each of sf, la, ny
    initialize(table, PARTS)
    snapshot = IndexedSnapshot(table)
    result = snapshot.prune("fare = 1004")  # k4 lives in la
    assert (result.partitions, result.partitions_pruned) == (3, 2)
    assert {f.partition_path for f in result.candidates} == {"la"}
    alone = IndexedSnapshot(table)
    alone.completed.discard(COLUMN_STATS)  # partition_stats on its own still drops partitions
    assert {f.partition_path for f in alone.prune("fare = 1004").candidates} == {"la"}

    # Hudi's writer (our writer with its index update off) puts fare 5000 in sf
    foreign_write(table, with_fare(rows(keys(3, 4)), 5000.0), monkeypatch)
    behind = IndexedSnapshot(table).prune("fare = 5000")
    assert behind.partitions_pruned == 0, "partition_stats is behind: no partition is dropped"
    assert "sf" in {f.partition_path for f in behind.candidates}
    AsyncIndexer(table).sync()
    synced = IndexedSnapshot(table).prune("fare = 5000")
    assert synced.partitions_pruned == 2
    assert {f.partition_path for f in synced.candidates} == {"sf"}
    assert_exact(table, tuple(PARTS))


def test_a_partition_whose_file_count_differs_from_the_listing_is_kept(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(by_city(rows(keys(0, 30))))
    initialize(table, PARTS)
    snapshot = IndexedSnapshot(table)
    files = snapshot.view.latest_base_files()
    # a listing with one more file in ny than ny's record counts (as if a file were missed)
    extra = next(f for f in files if f.partition_path == "ny")
    snapshot._listing = _Listing.of_base_files([*files, extra])
    snapshot.completed.discard(COLUMN_STATS)
    kept = snapshot.prune("fare = 1004")
    assert kept.partitions_pruned == 1  # sf dropped; ny kept: its count does not match
    assert {f.partition_path for f in kept.candidates} == {"la", "ny"}


def test_the_rebuild_counts_only_latest_files(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    client.upsert(with_fare(rows(keys(27, 28)), 800.0))
    client.upsert(with_fare(rows(keys(27, 28)), 2.0))  # the 800 is in an older version only
    timeline = table.timeline.load()
    records = build_records(table, timeline, PARTITION_STATS, ["fare"]).to_pylist()
    sf = next(r for r in records if r["partition"] == "sf")
    assert (sf["max_value"]["float"], sf["file_count"]) == (24.0, 1)
    kind = index_type(PARTITION_STATS)
    assert "computed" not in kind.comparable(build_records(table, timeline, PARTITION_STATS))[0]


def test_partition_stats_index_the_columns_column_stats_index(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    WriteClient(table).insert(rows(keys(0, 30)))
    initialize(table, [COLUMN_STATS], columns=["fare"])
    indexer = AsyncIndexer(table)
    with pytest.raises(ConfigError, match="column_stats already indexes fare"):
        indexer.schedule([PARTITION_STATS], ["ts"])
    scheduled = indexer.schedule([PARTITION_STATS])
    assert scheduled.instant is not None
    plan = indexer.plan_of(scheduled.instant)
    # files comes along (indexer.index.files.with.others); it takes no columns
    assert [(p.partition, p.columns) for p in plan.partitions] == [
        (FILES, ()),
        (PARTITION_STATS, ("fare",)),
    ]
    indexer.execute()
    assert set(stats(table, "fare")) == {"sf", "la", "ny"} and not stats(table, "ts")
    assert [(r.partition, r.ok) for r in validate(table)] == [
        (COLUMN_STATS, True),
        (FILES, True),
        (PARTITION_STATS, True),
    ]


def test_decimals_drop_partitions_by_the_row_by_row_rule(tmp_path: Path) -> None:
    """Decimals are kept as text: the Arrow mask cannot compare them, and the partition-level
    rule falls back to Python's comparison, with the same answer."""
    table = Table.create(
        str(tmp_path / "t"), "t", ["uuid"], ["city"], "ts", config=make_table(tmp_path / "x").config
    )
    amounts = [decimal.Decimal(v) for v in ("9.50", "10.25", "100.00", "2.75")]
    batch = pa.table(
        {
            "uuid": ["a", "b", "c", "d"],
            "city": ["sf", "sf", "la", "ny"],
            "ts": pa.array([1, 1, 1, 1], pa.int64()),
            "amount": pa.array(amounts, pa.decimal128(10, 2)),
        }
    )
    WriteClient(table).insert(batch)
    initialize(table, PARTS)
    result = IndexedSnapshot(table).prune("amount > 50")
    assert (result.partitions_pruned, {f.partition_path for f in result.candidates}) == (2, {"la"})
    assert stats(table, "amount")["sf"][:2] == ("9.50", "10.25")
