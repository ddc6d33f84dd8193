"""The column-stats records made for Apache Hudi's metadata table from a Parquet footer, as Hudi
0.15's ParquetUtils and wrapValueIntoAvro make them (checked record for record against Hudi's own
build in tests/indexer/test_hudi_format_build.py): the wrapper of each type, values in Hudi's
units, and the columns left without a record (Hudi's reader then keeps the file)."""

from __future__ import annotations

import datetime as dt
import decimal
import io

import pyarrow as pa
import pyarrow.parquet as pq

from metadata_table import hudi_table
from metadata_table.hudi_table import HudiColumnStatsCells, hudi_column_stats
from timeline.formats import metadata_records as records

UTC = dt.UTC


def _footer(table: pa.Table, **options: object) -> pq.FileMetaData:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)  # type: ignore[arg-type]
    return pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata


def _cells(*files: tuple[pq.FileMetaData, str, str]) -> list[tuple[str, bytes]]:
    """A build's cells of some files (footer, partition, name), made together without the
    records, against fastavro's bytes of each record :func:`hudi_column_stats` makes."""
    made = HudiColumnStatsCells()
    for file in files:
        made.add(*file)
    keys, values = made.cells()
    cells = list(zip(keys.to_pylist(), values.to_pylist(), strict=True))
    expected = [(r["key"], records.encode_avro(r)) for f in files for r in hudi_column_stats(*f)]
    assert sorted(cells) == sorted(expected)
    return cells


def _stats(table: pa.Table, **options: object) -> dict[str, dict[str, object]]:
    footer = _footer(table, **options)
    made = list(hudi_column_stats(footer, "p1", "f1_0-0-0_20240101000000000.parquet"))
    _cells((footer, "p1", "f1_0-0-0_20240101000000000.parquet"))
    if footer.num_row_groups == 1:  # a footer of one row group: the aggregation's answer
        columns = hudi_table._indexed_columns(footer.schema)
        one = hudi_table._one_group_stats(footer.row_group(0), columns)
        aggregated = hudi_table._aggregated_stats([footer.row_group(0)], columns)
        assert list(one) == list(aggregated)
    out = {}
    for record in made:
        value = record["ColumnStatsMetadata"]
        low, high = records.unwrap(value["minValue"]), records.unwrap(value["maxValue"])
        out[value["columnName"]] = {"min": low, "max": high, "nulls": value["nullCount"]}
        assert record["key"] == records.column_stats_key(
            value["columnName"], "p1", "f1_0-0-0_20240101000000000.parquet"
        )
        assert records.decode(record["key"], records.encode(record))  # encodes as Hudi's schema
    return out


def test_each_type_in_the_wrapper_and_unit_hudi_stores() -> None:
    table = pa.table(
        {
            "i8": pa.array([3, -2], pa.int8()),
            "l": pa.array([7, None], pa.int64()),
            "d": pa.array([dt.date(2024, 1, 2), dt.date(2023, 12, 31)], pa.date32()),
            "us": pa.array(
                [dt.datetime(2024, 1, 1, 1, tzinfo=UTC), None], pa.timestamp("us", "UTC")
            ),
            "ms": pa.array(
                [dt.datetime(2024, 1, 1, 1), dt.datetime(2024, 1, 1)], pa.timestamp("ms")
            ),
            "dec": pa.array(
                [decimal.Decimal("1.25"), decimal.Decimal("-3.50")], pa.decimal128(10, 2)
            ),
            "wide": pa.array([decimal.Decimal("123456789012345.5")] * 2, pa.decimal128(20, 1)),
            # more than 30 digits at scale 15: Hudi refuses it
            "huge": pa.array([decimal.Decimal("12345678901234567.5")] * 2, pa.decimal128(20, 1)),
            "s": pa.array(["b", "a"]),
            "bin": pa.array([b"\x01", b"\x00\xff"]),
            "f": pa.array([0.0, 2.5]),
            "b": pa.array([True, False]),
            "nulls": pa.array([None, None], pa.int64()),
            # left out: unsigned, fixed-length binary, a decimal of scale > 15, nested
            "u": pa.array([1, 2], pa.uint32()),
            "fixed": pa.array([b"ab", b"cd"], pa.binary(2)),
            "fine": pa.array([decimal.Decimal("1." + "0" * 19 + "1")] * 2, pa.decimal128(38, 20)),
            "nested": pa.array([{"x": 1}, {"x": 2}]),
        }
    )
    found = _stats(table, coerce_timestamps=None)
    assert found["i8"] == {"min": ("IntWrapper", -2), "max": ("IntWrapper", 3), "nulls": 0}
    assert found["l"] == {"min": ("LongWrapper", 7), "max": ("LongWrapper", 7), "nulls": 1}
    days = (dt.date(2023, 12, 31) - dt.date(1970, 1, 1)).days
    assert found["d"]["min"] == ("DateWrapper", days) and found["d"]["max"] == (
        "DateWrapper",
        days + 2,
    )
    micros = int(dt.datetime(2024, 1, 1, 1, tzinfo=UTC).timestamp() * 1_000_000)
    assert found["us"]["min"] == ("LongWrapper", micros)  # the raw long of the unit
    millis = int(dt.datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert found["ms"]["min"] == ("LongWrapper", millis)
    assert found["dec"]["min"] == ("DecimalWrapper", decimal.Decimal("-3.500000000000000"))
    assert found["dec"]["max"] == ("DecimalWrapper", decimal.Decimal("1.250000000000000"))
    assert found["wide"]["max"] == ("DecimalWrapper", decimal.Decimal("123456789012345.5"))
    assert found["s"]["min"] == ("StringWrapper", "a") and found["s"]["max"] == (
        "StringWrapper",
        "b",
    )
    assert found["bin"]["min"] == ("BytesWrapper", b"\x00\xff")
    assert found["f"]["min"] == ("DoubleWrapper", -0.0) and found["f"]["max"] == (
        "DoubleWrapper",
        2.5,
    )
    assert found["b"]["min"] == ("BooleanWrapper", False)
    assert found["nulls"] == {"min": None, "max": None, "nulls": 2}
    assert not {"u", "fixed", "fine", "huge", "nested", "nested.x"} & set(found)


def test_a_column_without_statistics_has_no_record() -> None:
    table = pa.table({"kept": [1, 2], "bare": [3, 4]})
    found = _stats(table, write_statistics=["kept"])
    assert set(found) == {"kept"}


def test_row_groups_aggregate_and_nulls_add_up() -> None:
    table = pa.table({"v": pa.array([5, None, 1, 9, None, None], pa.int32())})
    found = _stats(table, row_group_size=2)
    assert found["v"] == {"min": ("IntWrapper", 1), "max": ("IntWrapper", 9), "nulls": 3}


def test_cells_of_files_of_several_partitions_and_schemas() -> None:
    """Cells of files of several partitions and schemas (a column some files lack, one of
    another type, row groups to aggregate, zeros, empty strings, the extremes of a long, a
    column of nulls) are each file's records, byte for byte."""
    first = pa.table(
        {
            "k": ["a", "", "Zürich"],
            "n": pa.array([1, -(2**63), None], pa.int64()),
            "x": [0.0, -2.5, 1.5],
            "f": pa.array([0.0, -1.5, 2.0], pa.float32()),
            "d": pa.array([dt.date(2024, 1, 2), None, None], pa.date32()),
            "empty": pa.array([None, None, None], pa.string()),
        }
    )
    second = pa.table(
        {
            "k": ["b", "c", "d", "e"],
            "n": pa.array([7, 8, 2**63 - 1, -3], pa.int64()),
            "x": [-0.0, 3.0, -2.0, 0.0],
            "t": pa.array([1, 2, 3, 4], pa.timestamp("us")),
        }
    )
    third = pa.table({"k": ["q"], "n": pa.array([5], pa.int32())})  # n of another type
    files = [
        (_footer(first), "p1", "f1_0-0-0_20240101000000000.parquet"),
        (_footer(second, row_group_size=2), "p2/x", "f2_0-0-0_20240101000000000.parquet"),
        (_footer(first), "", "f3_0-0-0_20240101000000000.parquet"),
        (_footer(third), "p1", "f4_0-0-0_20240101000000000.parquet"),
    ]
    assert [len(_cells(file)) for file in files] == [6, 4, 6, 2]
    together = _cells(*files)  # as a build makes them: the files' columns encoded at once
    assert len({key for key, _ in together}) == len(together) == 18


def test_a_string_column_whose_bounds_are_not_utf8_has_no_record() -> None:
    """Bytes that are not UTF-8 in a string column have no exact value for Hudi's reader to
    compare: that column of that file has no record (Hudi's reader keeps the file), and the
    build goes on."""
    bad = pa.array([b"\xff\xfe", b"a"], pa.binary()).view(pa.string())
    assert set(_stats(pa.table({"s": bad, "n": [1, 2]}))) == {"n"}
    assert _stats(pa.table({"s": bad})) == {}  # no record at all


def test_cells_of_many_files_leave_out_only_the_bounds_without_an_exact_value() -> None:
    """Made together, the files whose bounds have no exact value (bytes that are not UTF-8, a
    NaN, a decimal of more than 30 digits at scale 15) lose those columns' records alone; the
    other files' records of the same columns, and their nulls-only columns, are kept."""
    bad_text = pa.array([b"\xff\xfe", b"a"], pa.binary()).view(pa.string())

    def table(text: pa.Array, number: list[float | None], dec: str, flag: bool | None) -> pa.Table:
        return pa.table(
            {
                "s": text,
                "x": pa.array(number, pa.float64()),
                "dec": pa.array([decimal.Decimal(dec)] * 2, pa.decimal128(20, 1)),
                "b": pa.array([flag, None], pa.bool_()),
            }
        )

    files = [
        table(pa.array(["b", "a"]), [1.0, 0.0], "1.5", True),
        table(bad_text, [float("nan"), float("nan")], "12345678901234567.5", None),
        table(pa.array([None, None], pa.string()), [None, None], "-2.5", False),
    ]
    footers = [
        (_footer(t), f"p{i}", f"f{i}_0-0-0_20240101000000000.parquet") for i, t in enumerate(files)
    ]
    made = _cells(*footers)
    columns = [records.decode(k, v)["ColumnStatsMetadata"]["columnName"] for k, v in made]
    # file 1 keeps only its booleans' (nulls only); files 0 and 2 keep every column
    assert sorted(columns) == sorted(["s", "x", "dec", "b"] * 2 + ["b"])
    # a NaN bound (pyarrow's writer leaves NaN out of statistics; older writers did not)
    lows, highs = [1.0, float("nan"), None, 0.0, -0.0], [2.0, 3.0, None, 0.0, 0.0]
    low, high, kept = hudi_table._bounds_arrays("DoubleWrapper", lows, highs)
    assert kept is not None and kept.tolist() == [True, False, True, True, True]
    encode = records.bound_encoder("DoubleWrapper")
    for at in (0, 2, 3, 4):
        bounds = (None, None) if lows[at] is None else _bounds("DoubleWrapper", lows, highs, at)
        want = [b"\x00" if v is None else encode(v) for v in bounds]
        assert [low[at].as_py(), high[at].as_py()] == want


def _bounds(wrapper: str, lows: list[float | None], highs: list[float | None], at: int) -> tuple:
    made = hudi_table._hudi_bounds(wrapper, lows[at], highs[at])
    assert made is not None
    return made
