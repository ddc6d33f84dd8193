"""Schema on write, as Apache Hudi allows it: a new nullable column is added, int becomes long and
float double, columns may come in any order; anything else is refused naming the column and both
types, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeline.errors import BadRecordsError
from writer.client import WriteClient
from writer.schema import conform, evolve, same_type

from .test_client import make_table, rows, snapshot


def _data_files(base: Path) -> set[Path]:
    return {p for p in base.rglob("*.parquet") if ".hoodie" not in p.parts}


def test_a_new_nullable_column_is_added_and_old_rows_read_null(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    WriteClient(table).insert(rows(("a", "sf", 1, 1.0), ("b", "sf", 1, 2.0)))
    wider = rows(("c", "sf", 1, 3.0)).append_column("tip", pa.array([0.5]))
    WriteClient(table).insert(wider)
    snap = snapshot(table)
    assert snap["c"]["tip"] == 0.5 and snap["a"]["tip"] is None
    # an upsert that merges into the old file writes the column there too
    WriteClient(table).upsert(rows(("a", "sf", 2, 9.0)).append_column("tip", pa.array([1.0])))
    assert snapshot(table)["a"]["tip"] == 1.0 and snapshot(table)["b"]["tip"] is None


def test_int_is_promoted_to_long_and_float_to_double(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    narrow = pa.table(
        {
            "uuid": ["a", "b"],
            "city": ["sf", "sf"],
            "ts": pa.array([1, 1], pa.int32()),
            "fare": pa.array([1.5, 2.5], pa.float32()),
        }
    )
    WriteClient(table).insert(narrow)
    WriteClient(table).upsert(rows(("a", "sf", 2, 7.25)))  # int64 and float64
    files = _data_files(tmp_path)
    schema = pq.read_schema(max(files, key=lambda p: p.stat().st_mtime_ns))
    assert schema.field("ts").type == pa.int64() and schema.field("fare").type == pa.float64()
    snap = snapshot(table)
    assert snap["a"]["fare"] == 7.25 and snap["b"]["fare"] == 2.5 and snap["b"]["ts"] == 1
    # and the narrow types still go into the wider table
    WriteClient(table).upsert(narrow.slice(1))
    assert snapshot(table)["b"]["fare"] == 2.5


def test_columns_in_another_order_are_accepted(tmp_path: Path) -> None:
    table = make_table(str(tmp_path))
    WriteClient(table).insert(rows(("a", "sf", 1, 1.0)))
    shuffled = rows(("a", "sf", 2, 4.0)).select(["fare", "ts", "uuid", "city"])
    WriteClient(table).upsert(shuffled)
    files = _data_files(tmp_path)
    for f in files:
        assert pq.read_schema(f).names[5:] == ["uuid", "city", "ts", "fare"]
    assert snapshot(table)["a"]["fare"] == 4.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t.set_column(2, "ts", pa.array(["late"])),
            r"column 'ts': type string in the input, int64 in the table",
        ),
        (
            lambda t: t.drop_columns(["fare"]),
            r"column 'fare': the table's column 'fare' \(double\)",
        ),
        (
            lambda t: t.set_column(3, "fare", pa.array([1], pa.int64())),
            r"column 'fare': type int64 in the input, double in the table",
        ),
        (
            lambda t: t.set_column(2, "ts", pa.array([1.0])),
            r"column 'ts': type double in the input, int64 in the table",
        ),
    ],
)
def test_other_changes_are_refused_naming_the_column_and_both_types(
    tmp_path: Path, change: object, message: str
) -> None:
    table = make_table(str(tmp_path))
    WriteClient(table).insert(rows(("a", "sf", 1, 1.0)))
    before = _data_files(tmp_path)
    instants = len(table.timeline.load().write_timeline())
    with pytest.raises(BadRecordsError, match=message):
        WriteClient(table).upsert(change(rows(("b", "sf", 1, 2.0))))  # type: ignore[operator]
    assert _data_files(tmp_path) == before, "nothing was written"
    assert len(table.timeline.load().write_timeline()) == instants


def test_nested_types_are_the_same_under_other_layout_names() -> None:
    arrow = pa.list_(pa.struct([("a", pa.int32()), ("m", pa.map_(pa.string(), pa.string()))]))
    avro_layout = pa.list_(
        pa.field(
            "array",
            pa.struct(
                [
                    ("a", pa.int32()),
                    (
                        "m",
                        pa.map_(
                            pa.field("key", pa.string(), nullable=False),
                            pa.field("value", pa.string()),
                        ),
                    ),
                ]
            ),
            nullable=False,
        )
    )
    assert same_type(arrow, avro_layout)
    assert not same_type(arrow, pa.list_(pa.struct([("a", pa.int64())])))
    table = pa.schema([pa.field("x", avro_layout)])
    assert evolve(table, pa.schema([pa.field("x", arrow)])) == table


def test_a_null_where_the_table_stores_none_is_refused() -> None:
    """pyarrow's cast lets a null element into a list whose elements are required (as in the
    two-level layout of Hudi's files); the conform step does not."""
    schema = pa.schema([pa.field("tags", pa.list_(pa.field("array", pa.string(), nullable=False)))])
    fine = pa.table({"tags": pa.array([["a"], None, []], pa.list_(pa.string()))})
    assert conform(fine, schema).column(0).to_pylist() == [["a"], None, []]
    bad = pa.table({"tags": pa.array([["a", None]], pa.list_(pa.string()))})
    with pytest.raises(BadRecordsError, match=r"column 'tags.element': 1 null value"):
        conform(bad, schema)
    structs = pa.schema([pa.field("s", pa.struct([pa.field("a", pa.int32(), nullable=False)]))])
    null_struct = pa.table({"s": pa.array([None, {"a": 1}], pa.struct([("a", pa.int32())]))})
    assert conform(null_struct, structs).num_rows == 2, "a null struct's fields are not values"
    with pytest.raises(BadRecordsError, match=r"column 's.a'"):
        conform(pa.table({"s": pa.array([{"a": None}], pa.struct([("a", pa.int32())]))}), structs)
