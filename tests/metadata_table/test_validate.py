"""validate compares a partition with its rebuild on Arrow arrays; this holds that comparison to
the record-for-record rule it replaced (Python dicts of both sides, keyed by ``key``)."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_table.validate import differences

VALUE = pa.struct([("int", pa.int64()), ("string", pa.string())])
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("value", VALUE),
        ("blob", pa.binary()),
        ("count", pa.int64()),
        ("file", pa.dictionary(pa.int32(), pa.string())),
    ]
)

values = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"int": st.one_of(st.none(), st.integers(0, 2)), "string": st.sampled_from([None, "a"])}
    ),
)
records = st.dictionaries(
    st.sampled_from([f"k{i}" for i in range(8)]),
    st.fixed_dictionaries(
        {
            "value": values,
            "blob": st.sampled_from([None, b"", b"x"]),
            "count": st.one_of(st.none(), st.integers(0, 2)),
            "file": st.sampled_from([None, "f1", "f2"]),
        }
    ),
    max_size=8,
)


def _table(rows: dict[str, dict[str, Any]], plain: bool) -> pa.Table:
    listed = [{"key": k, **v} for k, v in rows.items()]
    schema = SCHEMA
    if plain:  # one side's repeated column as plain strings, as a rebuild may give it
        schema = schema.set(4, pa.field("file", pa.string()))
    return pa.Table.from_pylist(listed, schema=schema)


@settings(max_examples=300, deadline=None)
@given(records, records, st.booleans())
def test_differences_follow_the_record_for_record_rule(
    ours: dict[str, dict[str, Any]], rebuilt: dict[str, dict[str, Any]], plain: bool
) -> None:
    missing, stale, wrong = differences(_table(ours, False), _table(rebuilt, plain))
    assert missing == sorted(rebuilt.keys() - ours.keys())
    assert stale == sorted(ours.keys() - rebuilt.keys())
    assert wrong == sorted(k for k in ours.keys() & rebuilt.keys() if ours[k] != rebuilt[k])


def test_a_null_struct_differs_from_a_struct_of_nulls() -> None:
    empty = {"int": None, "string": None}
    row = {"blob": b"x", "count": 1, "file": "f1"}
    ours = _table({"k": {"value": None, **row}}, False)
    rebuilt = _table({"k": {"value": empty, **row}}, False)
    assert differences(ours, rebuilt) == ([], [], ["k"])


def test_validate_reads_each_data_file_once_for_the_per_file_partitions(
    tmp_path: Any, monkeypatch: Any, caplog: Any
) -> None:
    """files, column_stats and bloom_filters hold one record per data file: validate rebuilds
    all three from one read of each file's footer (it read the table once per partition), in
    threads for a small table and in worker processes for a large one (forced here), with the
    same reports."""
    from collections import Counter

    import metadata_table.records as records
    from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES
    from metadata_table.maintenance import initialize
    from metadata_table.validate import validate
    from writer.client import WriteClient

    from .test_metadata_table import keys, make_table, rows

    table = make_table(tmp_path / "t")
    with WriteClient(table) as client:
        for n in range(3):
            client.insert(rows(keys(n * 20, n * 20 + 20)))
    initialize(table, [FILES, COLUMN_STATS, BLOOM_FILTERS])
    reads: Counter[str] = Counter()
    read_footer = records.info_from_storage

    def counted(storage: Any, partition: str, name: str, *args: Any, **kwargs: Any) -> Any:
        reads[f"{partition}/{name}"] += 1
        return read_footer(storage, partition, name, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(records, "info_from_storage", counted)
        reports = validate(table)
    assert [r.partition for r in reports] == list(table.reload_index_state().completed)
    assert all(r.ok for r in reports), [r.to_json() for r in reports]
    assert reads and set(reads.values()) == {1}, reads

    # a data file rewritten behind the index's back: its column stats are now wrong
    victim = sorted(reads)[0]
    data = pq.read_table(io.BytesIO(table.storage.read(victim)))
    fares = pa.array([f + 1000.0 for f in data.column("fare").to_pylist()])
    out = io.BytesIO()
    pq.write_table(data.set_column(data.schema.get_field_index("fare"), "fare", fares), out)
    table.storage.overwrite(victim, out.getvalue())
    in_threads = [r.to_json() for r in validate(table)]
    assert any(r["wrong"] for r in in_threads), in_threads
    monkeypatch.setattr("metadata_table.workers.PROCESS_MIN_FILES", 1)
    monkeypatch.setattr("metadata_table.workers.DEFAULT_WORKERS", 2)
    caplog.set_level("INFO", logger="metadata_table.group_records")  # logs the rebuild
    in_processes = [r.to_json() for r in validate(table)]
    assert "(2 processes)" in caplog.text
    assert in_processes == in_threads


def test_partitions_of_a_record_per_file_are_compared_a_file_group_at_a_time(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """validate holds the rebuild of files, column_stats and bloom_filters per file group
    (spilled to local disk past its budget, 0 here) and reads the index one file group at
    a time, never a partition whole; it still finds the records the rebuild lacks (stale), a
    rebuilt record the index lacks (missing), and leaves no spill file behind."""
    import tempfile

    import metadata_table.group_records as group_records
    import metadata_table.partition_writer as partition_writer
    import metadata_table.validate as validate_module
    from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES, column_prefix
    from metadata_table.maintenance import initialize
    from metadata_table.reader import MetadataReader
    from metadata_table.validate import validate
    from writer.client import WriteClient

    from .test_metadata_table import keys, make_table, rows

    table = make_table(tmp_path / "t", **{"indexer.build.local.memory.mb": "0"})
    with WriteClient(table) as client:
        for n in range(4):
            client.insert(rows(keys(n * 20, n * 20 + 20)))
    initialize(table, [FILES, COLUMN_STATS, BLOOM_FILTERS], groups={COLUMN_STATS: 3})
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    spilled: list[int] = []

    class Watched(group_records.GroupRecords):
        def __exit__(self, *exc: object) -> None:
            spilled.append(self.spilled)
            super().__exit__(*exc)

    monkeypatch.setattr(validate_module, "GroupRecords", Watched)
    reads: list[tuple[str, Any]] = []
    read = MetadataReader.read

    def watched(self: Any, partition: str, *args: Any, **kw: Any) -> Any:
        reads.append((partition, kw.get("groups")))
        return read(self, partition, *args, **kw)

    monkeypatch.setattr(MetadataReader, "read", watched)
    assert all(r.ok for r in validate(table))
    assert spilled and spilled[0] > 0 and not list(spill.iterdir())
    assert sorted(sorted(g) for p, g in reads if p == COLUMN_STATS) == [
        [f"col-stats-{n:04d}-0"] for n in range(3)
    ], reads
    assert all(g is not None for p, g in reads if p in (FILES, COLUMN_STATS, BLOOM_FILTERS))

    conformed = partition_writer.PartitionBuild.conformed
    fare = column_prefix("fare")
    made_up: list[str] = []

    def tampered(self: Any, part: Any) -> Any:
        records = conformed(self, part)
        if self.partition != COLUMN_STATS:
            return records
        keep = pc.invert(pc.starts_with(records.column("key"), fare))  # fare's stats gone
        if not made_up:  # and one made-up record
            made_up.append("zz|made-up")
            extra = records.slice(0, 1).set_column(0, "key", pa.array(made_up))
            return pa.concat_tables([records.filter(keep), extra])
        return records.filter(keep)

    monkeypatch.setattr(partition_writer.PartitionBuild, "conformed", tampered)
    report = {r.partition: r for r in validate(table)}[COLUMN_STATS]
    assert report.missing == ["zz|made-up"] and not report.wrong
    assert report.stale and all(k.startswith(fare) for k in report.stale)
