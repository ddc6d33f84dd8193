"""The writer on hudi-rs's sample tables (Apache Hudi 0.14 wrote them; vendored in tests/data/hudi_rs),
as a new user tries it: read the rows with hudi-rs, change one column, upsert them back with
``indexer-write``. Every table has structs, lists of structs and maps of structs, in parquet-avro's
two-level list layout; each takes the upsert, hudi-rs reads the same keys with the changed values,
and the files we wrote keep the table's Parquet layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from writer.cli import main

from ..indexer.test_hudi_rs_samples import COW, DATA, unpack

# what Hudi does not keep in hoodie.properties (the sample's SQL says it)
SETTINGS = {
    "v6_timebasedkeygen_nonhivestyle": ["hoodie.keygen.timebased.timestamp.type=DATE_STRING"]
}
WRITABLE = [n for n in COW if n not in ("v6_empty", "v6_simplekeygen_hivestyle_no_metafields")]
# (the table without meta fields has a test of its own: its rows carry no _hoodie_ columns)


def _read(base: Path) -> pa.Table:
    import hudi

    batches = hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
    return pa.Table.from_batches(batches)


def parquet_layout(path: Path) -> str:
    """The Parquet schema as stored (not Arrow's reading of it): names, levels, annotations."""
    return "\n".join(str(pq.ParquetFile(path).schema).splitlines()[1:])  # after its address


def _data_files(base: Path) -> dict[Path, str]:
    return {
        p: parquet_layout(p)
        for p in base.rglob("*.parquet")
        if ".hoodie" not in p.relative_to(base).parts
    }


@pytest.mark.parametrize("name", WRITABLE)
def test_an_upsert_of_every_row_with_one_column_changed(
    name: str, tmp_path: Path, capsys: Any
) -> None:
    base = unpack(DATA / "cow" / f"{name}.zip", tmp_path)
    before = _read(base)
    stored_schemas = _data_files(base)
    rows = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie_")])
    changed = rows.set_column(
        rows.schema.get_field_index("doubleField"),
        "doubleField",
        pc.add(rows.column("doubleField"), 1000.0),
    )
    pq.write_table(changed, tmp_path / "rows.parquet")
    conf = [f"indexer.lock.url=sqlite:///{tmp_path / 'locks.db'}", *SETTINGS.get(name, [])]
    args = [str(base), "--input", str(tmp_path / "rows.parquet"), "--operation", "upsert"]
    for item in conf:
        args += ["--conf", item]
    assert main(args) == 0, capsys.readouterr().err

    after = _read(base)
    keys = after.column("_hoodie_record_key").to_pylist()
    assert len(keys) == len(set(keys)) == before.num_rows, "no second copy of any record"
    assert sorted(keys) == sorted(before.column("_hoodie_record_key").to_pylist())
    assert sorted(after.column("_hoodie_partition_path").to_pylist()) == sorted(
        before.column("_hoodie_partition_path").to_pylist()
    ), "no record moved to another partition"
    old = {r["_hoodie_record_key"]: r for r in before.to_pylist()}
    for row in after.to_pylist():
        was = old[row["_hoodie_record_key"]]
        assert row["doubleField"] == was["doubleField"] + 1000.0
        for column in ("arrayField", "mapField", "structField", "decimalField", "binaryField"):
            assert row[column] == was[column], column

    template = next(iter(stored_schemas.values()))
    assert "repeated group field_id=-1 array {" in template, "the sample stores two-level lists"
    new = {p: s for p, s in _data_files(base).items() if p not in stored_schemas}
    assert new
    for path, schema in new.items():
        assert schema == template, f"{path.name} keeps the table's layout"


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_table_without_meta_fields_takes_upserts_and_deletes_by_its_virtual_keys(
    tmp_path: Path, capsys: Any, engine: str, request: pytest.FixtureRequest
) -> None:
    """hoodie.populate.meta.fields=false (Hudi's virtual keys): the files hold no record key, so
    the writer makes keys from the key fields (to tag, merge and index), writes files of the
    data columns alone, and the record index and bloom filters are built from those keys."""
    from metadata_table.layout import BLOOM_FILTERS, RECORD_INDEX
    from metadata_table.maintenance import initialize
    from metadata_table.read.snapshot import IndexedSnapshot
    from metadata_table.validate import validate
    from timeline import Table
    from timeline.config import Config

    session = request.getfixturevalue("spark") if engine == "spark" else None
    base = unpack(DATA / "cow" / "v6_simplekeygen_hivestyle_no_metafields.zip", tmp_path)
    lock = f"indexer.lock.url=sqlite:///{tmp_path / 'locks.db'}"
    table = Table.open(
        str(base), Config.resolve(explicit={"indexer.lock.url": lock.split("=", 1)[1]})
    )
    assert initialize(table, [RECORD_INDEX, BLOOM_FILTERS]) == [RECORD_INDEX, BLOOM_FILTERS]
    before = _read(base)
    assert "_hoodie_record_key" not in before.column_names
    key = table.table_config.record_key_fields[0]
    changed = before.set_column(
        before.schema.get_field_index("doubleField"),
        "doubleField",
        pc.add(before.column("doubleField"), 1000.0),
    )
    pq.write_table(changed, tmp_path / "rows.parquet")
    args = [str(base), "--input", str(tmp_path / "rows.parquet"), "--operation", "upsert"]
    assert main([*args, "--engine", engine, "--conf", lock]) == 0, capsys.readouterr().err
    after = _read(base)
    ids = after.column(key).to_pylist()
    assert sorted(ids) == sorted(before.column(key).to_pylist()), "no second copy, none lost"
    old = {r[key]: r for r in before.to_pylist()}
    assert all(r["doubleField"] == old[r[key]]["doubleField"] + 1000.0 for r in after.to_pylist())
    for path in _data_files(base):  # the meta columns as Hudi 0.14 left them: null
        meta = pq.read_table(path, columns=["_hoodie_record_key", "_hoodie_partition_path"])
        assert meta.column(0).null_count == meta.column(1).null_count == meta.num_rows, path
    gone = after.filter(pc.equal(after.column(key), ids[0]))
    pq.write_table(gone, tmp_path / "gone.parquet")
    delete = [str(base), "--input", str(tmp_path / "gone.parquet"), "--operation", "delete"]
    assert main([*delete, "--engine", engine, "--conf", lock]) == 0, capsys.readouterr().err
    assert sorted(_read(base).column(key).to_pylist()) == sorted(ids[1:])
    assert all(r.ok for r in validate(table))
    snapshot = IndexedSnapshot(table)
    assert snapshot.key_indexes() == [RECORD_INDEX]
    located = snapshot.record_locations([str(i) for i in ids[1:]])
    assert len(located) == len(ids) - 1 and str(ids[0]) not in located
    if session is not None:  # the CLI used the caller's session and left it running
        assert session.range(3).count() == 3


def test_a_merge_on_read_table_is_refused_by_name_by_both_engines(
    tmp_path: Path, capsys: Any, spark: Any
) -> None:
    """Our writer reads base files only: rewriting one of a merge-on-read table would drop the
    updates in its log files (it did: the update in v6_trips_8i1u's log file was lost). Both
    engines refuse before anything is written, and leave every file of the table as it was."""
    from timeline import Table
    from timeline.config import Config
    from timeline.errors import TableConfigError
    from writer.spark import SparkWriteClient

    from ..indexer.test_hudi_interop import _checksums

    base = unpack(DATA / "mor" / "v6_trips_8i1u.zip", tmp_path)
    rows = _read(base)
    rows = rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")])
    pq.write_table(rows, tmp_path / "rows.parquet")
    before = _checksums(base)
    lock = f"indexer.lock.url=sqlite:///{tmp_path / 'locks.db'}"
    args = [str(base), "--input", str(tmp_path / "rows.parquet"), "--operation", "upsert"]
    assert main([*args, "--conf", lock]) == 1
    assert "hoodie.table.type=MERGE_ON_READ: this writer writes copy-on-write tables only" in (
        capsys.readouterr().err
    )
    table = Table.open(
        str(base), Config.resolve(explicit={"indexer.lock.url": lock.split("=", 1)[1]})
    )
    with pytest.raises(TableConfigError, match="MERGE_ON_READ"):
        SparkWriteClient(table, spark).upsert(spark.createDataFrame(rows.to_pandas()))
    assert _checksums(base) == before
