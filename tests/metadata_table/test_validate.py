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
    caplog.set_level("INFO", logger="metadata_table.maintenance")
    in_processes = [r.to_json() for r in validate(table)]
    assert "(2 processes)" in caplog.text
    assert in_processes == in_threads


def test_stats_are_compared_one_column_at_a_time(tmp_path: Any, monkeypatch: Any) -> None:
    """validate reads column_stats one column (key prefix) at a time, never the whole merge,
    and still finds the records of a column the rebuild does not hold (stale) and a rebuilt
    record the index lacks (missing)."""
    import metadata_table.validate as validation
    from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES, column_prefix
    from metadata_table.maintenance import initialize
    from metadata_table.reader import MetadataReader
    from writer.client import WriteClient

    from .test_metadata_table import keys, make_table, rows

    table = make_table(tmp_path / "t")
    with WriteClient(table) as client:
        client.insert(rows(keys(0, 20)))
    initialize(table, [FILES, COLUMN_STATS, BLOOM_FILTERS])
    whole: list[Any] = []
    read = MetadataReader.read

    def watched(
        self: Any, partition: str, prefix: Any = None, columns: Any = None, **kw: Any
    ) -> Any:
        if partition == COLUMN_STATS and prefix is None and columns is None:
            whole.append(partition)
        return read(self, partition, prefix, columns, **kw)

    monkeypatch.setattr(MetadataReader, "read", watched)
    assert all(r.ok for r in validation.validate(table))
    assert not whole, "column_stats was read whole"

    rebuild = validation.build_records_each
    fare = column_prefix("fare")

    def tampered(*args: Any) -> Any:
        for partition, records in rebuild(*args):
            if partition == COLUMN_STATS:  # fare's stats gone, one made-up record added
                keep = pc.invert(pc.starts_with(records.column("key"), fare))
                extra = records.slice(0, 1).set_column(0, "key", pa.array(["zz|made-up"]))
                records = pa.concat_tables([records.filter(keep), extra])
            yield partition, records

    monkeypatch.setattr(validation, "build_records_each", tampered)
    report = {r.partition: r for r in validation.validate(table)}[COLUMN_STATS]
    assert report.missing == ["zz|made-up"] and not report.wrong
    assert report.stale and all(k.startswith(fare) for k in report.stale)
