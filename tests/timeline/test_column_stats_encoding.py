"""The hand-written encoder of column-stats records (timeline/formats/metadata_records.py)
writes exactly fastavro's bytes of Hudi 0.15's HoodieMetadataRecord, for every wrapper and
edge value, and those bytes decode back to the record."""

from __future__ import annotations

import decimal
import random
from typing import Any

import pytest

from timeline.formats import metadata_records as records

D = decimal.Decimal
QUANTUM = D(1).scaleb(-records.DECIMAL_SCALE)

BOUNDS: list[tuple[str, Any]] = [
    ("BooleanWrapper", False),
    ("BooleanWrapper", True),
    ("IntWrapper", 0),
    ("IntWrapper", -1),
    ("IntWrapper", 63),
    ("IntWrapper", 64),
    ("IntWrapper", -(2**31)),
    ("IntWrapper", 2**31 - 1),
    ("LongWrapper", -(2**63)),
    ("LongWrapper", 2**63 - 1),
    ("LongWrapper", 1_700_000_000_000_000),
    ("DateWrapper", 19_723),
    ("DateWrapper", -719_162),
    ("TimestampMicrosWrapper", 1_700_000_000_000_000),
    ("TimeMicrosWrapper", 86_399_999_999),
    ("FloatWrapper", 1.5),
    ("FloatWrapper", -0.0),
    ("DoubleWrapper", 0.1),
    ("DoubleWrapper", -1e308),
    ("DoubleWrapper", float("inf")),
    ("BytesWrapper", b""),
    ("BytesWrapper", bytes(range(256))),
    ("StringWrapper", ""),
    ("StringWrapper", "n000123"),
    ("StringWrapper", "Zürich 東京 🙂"),
    ("StringWrapper", "x" * 300),
    ("DecimalWrapper", D(0).quantize(QUANTUM)),
    ("DecimalWrapper", D("30.50").quantize(QUANTUM)),
    ("DecimalWrapper", D("-0.01").quantize(QUANTUM)),
    ("DecimalWrapper", D("-3.0000").quantize(QUANTUM)),
    ("DecimalWrapper", D("999999999999999.999999999999999")),
    ("DecimalWrapper", D("-999999999999999.999999999999999")),
    ("DecimalWrapper", D("128").quantize(QUANTUM)),
    ("DecimalWrapper", D("-128").quantize(QUANTUM)),
]


def record(low: Any, high: Any, **stats: Any) -> dict[str, Any]:
    values = {
        "fileName": "f1_0-1-0_20240101000000000.parquet",
        "columnName": "amount",
        "minValue": low,
        "maxValue": high,
        "valueCount": 100,
        "nullCount": 3,
        "totalSize": 4096,
        "totalUncompressedSize": 8192,
        "isDeleted": False,
    }
    values.update(stats)
    key = records.column_stats_key(values["columnName"] or "c", "p0", values["fileName"] or "f")
    return {"key": key, "type": records.RecordType.COLUMN_STATS, "ColumnStatsMetadata": values}


@pytest.mark.parametrize(("wrapper", "value"), BOUNDS)
def test_every_wrapper_is_encoded_as_fastavro_does(wrapper: str, value: Any) -> None:
    made = record(records.wrap(wrapper, value), records.wrap(wrapper, value))
    assert records.encode(made) == records.encode_avro(made)
    back = records.decode(made["key"], records.encode(made))
    found = records.unwrap(back["ColumnStatsMetadata"]["maxValue"])
    if wrapper != "TimeMicrosWrapper":  # (fastavro's reader gives a datetime.time)
        assert found == (wrapper, value)


def test_nulls_tombstones_and_large_counts() -> None:
    cases = [
        record(None, None),
        record(None, None, valueCount=-1, nullCount=-1, totalSize=-1, isDeleted=True),
        record(None, None, valueCount=None, nullCount=None, fileName=None, columnName=None),
        record(records.wrap("LongWrapper", 1), None, totalSize=2**62, nullCount=0),
    ]
    for made in cases:
        assert records.encode(made) == records.encode_avro(made)


def test_random_records_are_encoded_as_fastavro_does() -> None:
    generate = random.Random(49)
    for _ in range(2000):
        wrapper, value = generate.choice(BOUNDS)
        other = generate.choice([v for w, v in BOUNDS if w == wrapper])
        made = record(
            records.wrap(wrapper, value),
            records.wrap(wrapper, other),
            valueCount=generate.randrange(0, 2**40),
            nullCount=generate.randrange(0, 2**20),
            columnName=generate.choice(["a", "_hoodie_record_key", "ü" * generate.randrange(9)]),
        )
        assert records.encode(made) == records.encode_avro(made)


def test_other_records_still_go_through_fastavro() -> None:
    other = records.file_list_record("p0", {"a.parquet": 10})
    assert records.encode(other) == records.encode_avro(other)
    extra = {**record(None, None), "_hoodie_commit_time": "20240101000000000"}
    assert records.encode(extra) == records.encode_avro(extra)
