"""Our writer on tables Apache Hudi 0.15 creates, through both engines: for each key generator and
partition style, Hudi creates the table (its metadata table on, which our commits keep current:
``indexer.write.hudi_metadata_table=maintain``, the default) and writes a first batch with
struct, list and map columns; we index it; then our writer upserts every row with one column
changed, deletes one key and inserts new rows with nested values. After each of our commits, Hudi's
Spark reader (its metadata table on and off) and hudi-rs read exactly the expected rows; then
Hudi's writer upserts on top of our commits and its reader still reads the expected rows. Our index
equals a rebuild throughout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.indexer import AsyncIndexer
from metadata_table.hudi_table import HudiMetadataTable
from metadata_table.layout import PARTITIONS
from metadata_table.validate import validate_hudi
from timeline import Table
from timeline.config import Config
from writer.client import WriteClient
from writer.spark import SparkWriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from ..hudi_peer.tables import HUDI_READER_FAILS, KEYGEN_READ_TS, KEYGEN_TABLES, KEYGEN_TS
from ..indexer.test_indexer import assert_exact
from .test_failed_writes import hudi_rs

pytestmark = pytest.mark.hudi

#: what Hudi does not keep in hoodie.properties: the writer is given it as Hudi's writer is
_UNSTORED = ("hoodie.keygen.timebased.", "hoodie.datasource.write.partitionpath.field")


def _open(hudi_table: HudiTable, tmp_path: Path) -> Table:
    settings = {k: v for k, v in hudi_table.options().items() if k.startswith(_UNSTORED)}
    config = Config.resolve(
        explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}", **settings}
    )
    return Table.open(hudi_table.path, config)


def _writer(engine: str, table: Table, spark: Any) -> Callable[[str, pa.Table], None]:
    if engine == "local":
        client = WriteClient(table)
        return lambda op, rows: (client.write(op, rows), None)[1]  # type: ignore[arg-type]
    spark_client = SparkWriteClient(table, spark)
    return lambda op, rows: (
        spark_client.write(op, spark.createDataFrame(rows)),  # type: ignore[arg-type]
        None,
    )[1]


def _assert_reads(
    hudi: HudiPeer, hudi_table: HudiTable, expected: dict[Any, Any], style: str
) -> None:
    """Hudi's reader (metadata table on and off; hudi-rs where Hudi 0.15 cannot read the
    table) and hudi-rs read exactly ``expected``: no duplicate record key, no row missing."""
    readers: dict[str, list[dict[str, Any]]] = {"hudi-rs": hudi_rs(hudi_table.path, {})}
    if style not in HUDI_READER_FAILS:
        for metadata in (True, False):
            readers[f"hudi metadata={metadata}"] = hudi.read(
                hudi_table, metadata=metadata
            ).to_pylist()
    for name, rows in readers.items():
        keys = [r["_hoodie_record_key"] for r in rows]
        assert len(keys) == len(set(keys)), f"{name}: a record key appears twice"
        want = expected
        if style in KEYGEN_READ_TS and name.startswith("hudi "):
            want = {k: {**v, "ts": KEYGEN_READ_TS[style]} for k, v in expected.items()}
        got = by_key(rows)
        assert set(got) == set(want), (name, sorted(set(got) ^ set(want)))
        wrong = {
            k: {c: (got[k][c], want[k][c]) for c in want[k] if got[k].get(c) != want[k][c]}
            for k in want
            if got[k] != want[k]
        }
        assert not wrong, (name, wrong)


@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("style", sorted(KEYGEN_TABLES))
def test_hudi_tables_take_our_upserts_deletes_and_inserts(
    hudi: HudiPeer, spark: Any, tmp_path: Path, style: str, engine: str
) -> None:
    hudi_table = HudiTable(str(tmp_path / style), **KEYGEN_TABLES[style])  # type: ignore[arg-type]
    first = make_rows(range(12), ts=KEYGEN_TS)
    hudi.write(hudi_table, "insert", first)
    table = _open(hudi_table, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))
    write = _writer(engine, table, spark)
    expected = by_key(first)

    changed = make_rows(range(12), ts=KEYGEN_TS, fare_offset=1000.0)
    write("upsert", changed)
    assert HudiMetadataTable(table).present, "Hudi's metadata table was taken down"
    expected = by_key(changed)
    _assert_reads(hudi, hudi_table, expected, style)

    write("delete", make_rows([3], ts=KEYGEN_TS))
    del expected[3]
    _assert_reads(hudi, hudi_table, expected, style)

    new = make_rows(range(100, 104), ts=KEYGEN_TS)
    write("insert", new)
    expected |= by_key(new)
    _assert_reads(hudi, hudi_table, expected, style)
    assert_exact(table)
    assert [r.to_json() for r in validate_hudi(table) if not r.ok] == []

    # Hudi's writer on top of our commits, its metadata table on
    again = make_rows([0, 5, 101], ts=KEYGEN_TS, fare_offset=5000.0)
    hudi.write(hudi_table, "upsert", again)
    expected |= by_key(again)
    _assert_reads(hudi, hudi_table, expected, style)
    AsyncIndexer(table).sync()
    assert_exact(table)


@pytest.mark.parametrize(
    "layout",
    [
        dict(keygen="complex", record_key=("id",), partition_fields=("part",)),
        dict(keygen="simple", partition_fields=("fare",), hive_style=True),
        dict(keygen="complex", record_key=("id", "flag"), partition_fields=("flag", "day")),
        dict(keygen="nonpartitioned", record_key=("id", "name"), partition_fields=()),
    ],
    ids=["complex-one-key", "double-hive", "boolean-date-nulls", "nonpartitioned-two-keys"],
)
def test_our_key_generator_remakes_every_key_and_path_hudi_wrote(
    hudi: HudiPeer, tmp_path: Path, layout: dict[str, Any]
) -> None:
    """Java's value strings (``1.0E7``, ``true``, dates), ``__null__`` and the default partition,
    and Complex with one key field (Simple's keys): whatever Hudi stored, we make the same."""
    import datetime as dt

    import pyarrow.parquet as pq

    rows = make_rows(range(6))
    rows = rows.set_column(4, "fare", pa.array([1.0, 1e7, 0.5, 2.25, 1e-4, -3.0]))
    rows = rows.append_column("flag", pa.array([True, False, None, True, False, None]))
    rows = rows.append_column("day", pa.array([dt.date(2024, 3, d) for d in range(1, 7)]))
    hudi_table = HudiTable(str(tmp_path / "t"), **layout)
    hudi.write(hudi_table, "insert", rows)
    table = _open(hudi_table, tmp_path)
    keygen = WriteClient(table)._key_generator()
    stored = [
        pq.read_table(p)
        for p in Path(hudi_table.path).rglob("*.parquet")
        if ".hoodie" not in p.relative_to(hudi_table.path).parts
    ]
    data = pa.concat_tables(stored)
    assert data.num_rows == 6
    assert keygen.record_keys(data) == data.column("_hoodie_record_key").to_pylist()
    assert keygen.partition_paths(data) == data.column("_hoodie_partition_path").to_pylist()


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_schema_on_write_reads_in_hudi(
    hudi: HudiPeer, spark: Any, tmp_path: Path, engine: str
) -> None:
    """A new nullable column, an int promoted to long and a float to double, columns in another
    order: Hudi's reader reads the old rows and ours, and Hudi's writer writes on top."""
    base = make_rows(range(6))
    narrow = base.append_column("n", pa.array(range(6), pa.int32())).append_column(
        "w", pa.array([0.5] * 6, pa.float32())
    )
    hudi_table = HudiTable(str(tmp_path / "t"), extra={"hoodie.parquet.small.file.limit": "0"})
    hudi.write(hudi_table, "insert", narrow)
    table = _open(hudi_table, tmp_path)
    wider = make_rows([0, 1], ts=2, fare_offset=7.0)
    wider = wider.append_column("n", pa.array([100, 101], pa.int64()))
    wider = wider.append_column("w", pa.array([2.5, 3.5], pa.float64()))
    wider = wider.append_column("tip", pa.array([1.0, 2.0]))
    wider = wider.select(list(reversed(wider.column_names)))
    _writer(engine, table, spark)("upsert", wider)

    expected = {k: {**v, "tip": None} for k, v in by_key(narrow).items()}
    expected |= by_key(wider)
    _assert_reads(hudi, hudi_table, expected, "simple")
    again = make_rows([2], ts=3).append_column("n", pa.array([7], pa.int64()))
    again = again.append_column("w", pa.array([1.25])).append_column("tip", pa.array([9.0]))
    hudi.write(hudi_table, "upsert", again)
    expected |= by_key(again)
    _assert_reads(hudi, hudi_table, expected, "simple")


def test_hudis_bloom_index_tags_upserts_against_our_files(hudi: HudiPeer, tmp_path: Path) -> None:
    """On a table Hudi wrote, our data files carry Hudi's bloom filter footer as its files do
    (indexer.write.hudi_bloom_footer=auto: the string, its type, the first and last keys), so
    Hudi's bloom-index upsert after our commits updates in place; without it (false) Hudi 0.15
    fails on our file."""
    import pyarrow.parquet as pq

    from timeline.formats.hudi_bloom import HudiBloomFilter

    bloom = {"hoodie.index.type": "BLOOM", "hoodie.metadata.enable": "false"}
    for footer in (True, False):
        setting = "auto" if footer else "false"
        hudi_table = HudiTable(str(tmp_path / f"footer-{footer}"), metadata=False)
        hudi.write(hudi_table, "insert", make_rows(range(6)), options=bloom)
        config = Config.resolve(
            explicit={
                "indexer.lock.url": "inprocess",
                "indexer.write.hudi_bloom_footer": setting,
            }
        )
        table = Table.open(hudi_table.path, config)
        with WriteClient(table) as client:
            client.upsert(make_rows(range(3, 9), ts=2))
        ours = list(Path(hudi_table.path).glob("p*/*.parquet"))
        newest = max(ours, key=lambda p: p.name.rsplit("_", 1)[1])
        metadata = pq.ParquetFile(newest).metadata.metadata or {}
        if footer:
            keys = pq.read_table(newest, columns=["_hoodie_record_key"]).column(0).to_pylist()
            expected = HudiBloomFilter.of_keys(keys).serialize().encode()
            assert metadata[b"org.apache.hudi.bloomfilter"] == expected
            assert metadata[b"hoodie_min_record_key"] == min(keys).encode()
            hudi.write(hudi_table, "upsert", make_rows([0, 4, 8, 20], ts=3), options=bloom)
            rows = hudi.read(hudi_table, metadata=False, columns=["id", "ts"]).to_pylist()
            got = sorted((r["id"], r["ts"]) for r in rows)
            assert got == sorted(
                [(0, 3), (1, 1), (2, 1), (3, 2), (4, 3), (5, 2), (6, 2), (7, 2), (8, 3), (20, 3)]
            )
        else:
            assert b"org.apache.hudi.bloomfilter" not in metadata
            with pytest.raises(Exception, match=r"(?s)NullPointer|bloom"):
                hudi.write(hudi_table, "upsert", make_rows([0, 4], ts=3), options=bloom)
