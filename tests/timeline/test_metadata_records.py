"""Hudi 0.15's metadata-table records without a JVM: keys and routing pinned to values Hudi's Java
computes (see HUDI-MDT.md §4.2, and Java's String.hashCode run here), record-index locations in
both encodings. test_hudi_metadata_records.py checks all of it on files Hudi writes."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC
from decimal import Decimal

import fastavro
import numpy as np
import pytest

from timeline.formats import metadata_records as records


def test_the_schema_is_hudis_text_with_the_meta_fields_first() -> None:
    assert len(records.SCHEMA_JSON) == 7156
    fields = [f["name"] for f in json.loads(records.SCHEMA_JSON)["fields"]]
    assert fields[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert fields[5:] == [
        "key",
        "type",
        "filesystemMetadata",
        "BloomFilterMetadata",
        "ColumnStatsMetadata",
        "recordIndexMetadata",
    ]


def test_keys_are_hudis() -> None:
    # XXH64 under Hudi's seed and MD5, Base64 with padding: values Hudi's Java computed
    assert records.column_stats_prefix("ts") == "oyTjviKHuhI="
    assert records.column_stats_prefix("ts", "2024/01/01") == "oyTjviKHuhI=NEj/wCdb1IM="
    assert records.column_stats_key("ts", "2024/01/01", "x.parquet") == (
        "oyTjviKHuhI=NEj/wCdb1IM=fOymB5T8R2LT10LOup9pKQ=="
    )
    assert records.bloom_filter_key("", "x.parquet") == "FXThHwelITM=fOymB5T8R2LT10LOup9pKQ=="
    assert records.partition_identifier("") == "."
    assert records.file_group_id("record_index", 42) == "record-index-0042-0"


@pytest.mark.parametrize(
    ("key", "of7", "of10"),
    [
        ("", 0, 0),
        ("abc", 6, 4),
        ("\U0001f600x", 0, 9),  # a surrogate pair: two UTF-16 code units
        ("key-1", 4, 3),
        ("\u00ff\u00e9", 4, 8),
        ("polygenelubricants", 2, 8),  # hashCode() == Integer.MIN_VALUE
        ("record-key-000123", 1, 2),
    ],
)
def test_file_group_routing_is_javas(key: str, of7: int, of10: int) -> None:
    assert records.file_group_index(key, 7) == of7
    assert records.file_group_index(key, 10) == of10


def test_values_round_trip_with_their_key_outside() -> None:
    stats = {
        "key": records.column_stats_key("price", "p", "f.parquet"),
        "type": records.RecordType.COLUMN_STATS,
        "ColumnStatsMetadata": {
            "fileName": "f.parquet",
            "columnName": "price",
            "minValue": records.wrap("DecimalWrapper", Decimal("1.500000000000000")),
            "maxValue": records.wrap("DecimalWrapper", Decimal("99.250000000000000")),
            "valueCount": 10,
            "nullCount": 1,
            "totalSize": 100,
            "totalUncompressedSize": 120,
            "isDeleted": False,
        },
    }
    value = records.encode(stats)
    assert stats["key"].encode() not in value  # the cell's row holds the key
    back = records.decode(stats["key"], value)
    assert back["ColumnStatsMetadata"]["minValue"] == stats["ColumnStatsMetadata"]["minValue"]
    assert records.unwrap(back["ColumnStatsMetadata"]["maxValue"]) == (
        "DecimalWrapper",
        Decimal("99.250000000000000"),
    )
    assert records.encode(back) == value
    listing = records.file_list_record("", {"a.parquet": 10}, deleted=("b.parquet",))
    assert records.decode(".", records.encode(listing))["filesystemMetadata"] == {
        "a.parquet": {"size": 10, "isDeleted": False},
        "b.parquet": {"size": 0, "isDeleted": True},
    }


@pytest.mark.parametrize(
    ("file_id", "encoding"),
    [
        ("e2a307bd-9c9a-4079-a204-6df342e60633-0", 0),
        ("e2a307bd-9c9a-4079-a204-6df342e60633-17", 0),
        ("e2a307bd-9c9a-4079-a204-6df342e60633", 0),  # a bare UUID: file index -1
        ("f1-0", 1),
        ("E2A307BD-9C9A-4079-A204-6DF342E60633-0", 1),  # not how Java prints a UUID back
    ],
)
def test_record_index_locations_in_both_encodings(file_id: str, encoding: int) -> None:
    location = records.RecordLocation("p1", file_id, 1_795_805_545_328)
    info = records.record_index_value(location)
    assert info["fileIdEncoding"] == encoding
    assert records.record_location(info) == location
    value = records.encode(
        {"key": "k", "type": records.RecordType.RECORD_INDEX, "recordIndexMetadata": info}
    )
    assert records.decode("k", value)["recordIndexMetadata"] == info


def test_record_index_bits_are_javas_signed_longs() -> None:
    # what Hudi wrote for a key in file group ea31c6f6-...-0 of one of its tables here
    info = records.record_index_value(
        records.RecordLocation("p1", "ea31c6f6-7135-49bf-ad84-ba5c9176bb83-0", 0)
    )
    assert info["fileIdHighBits"] == -1571256033212020289
    assert info["fileIdLowBits"] == -5943420701481976957
    assert info["fileIndex"] == 0 and info["fileId"] == ""


def test_instant_times_as_hudi_stores_them() -> None:
    assert records.instant_millis("20261127185225328", UTC) == 1_795_805_545_328
    assert records.instant_millis("20261127185225", UTC) == 1_795_805_545_000


def test_files_and_log_blocks_read_back() -> None:
    from timeline.formats.hfile import HFileReader
    from timeline.log_format import BlockType, HeaderKey, read_blocks

    listed = [
        records.file_list_record("p", {"b.parquet": 2}),
        records.file_list_record("p", {"a.parquet": 1}),  # a key may repeat in a log block
        records.partition_list_record(["p"]),
    ]
    data = records.log_block(listed, "20261127000000000010")
    data += records.delete_block(["k1", "k2"], "record_index", "20261127000000000011")
    data += records.delete_block([], "files", "20261127000000000012")
    hfile, deleted, empty = read_blocks(data)
    assert hfile.block_type == BlockType.HFILE_DATA
    assert hfile.header[HeaderKey.SCHEMA] == records.SCHEMA_JSON
    cells = [(k.decode(), records.decode(k.decode(), v)) for k, v in HFileReader(hfile.content)]
    assert [k for k, _ in cells] == [records.ALL_PARTITIONS_KEY, "p", "p"]
    assert [c["filesystemMetadata"] for k, c in cells if k == "p"] == [
        {"b.parquet": {"size": 2, "isDeleted": False}},
        {"a.parquet": {"size": 1, "isDeleted": False}},
    ]
    assert [d.record_key for d in deleted.deletes()] == ["k1", "k2"]
    assert deleted.instant_time == "20261127000000000011"
    assert empty.deletes() == [] and HeaderKey.SCHEMA not in empty.header
    base = HFileReader(records.base_file(listed[1:]))
    assert base.file_info[b"minRecordKey"] == records.ALL_PARTITIONS_KEY.encode()
    assert [k for k, _ in base] == [records.ALL_PARTITIONS_KEY.encode(), b"p"]


def test_many_varints_at_once_are_each_avros() -> None:
    """:func:`zigzag_array` gives each value's Avro long (zig-zag, then base-128), after a
    prefix: every length from one byte to ten, both signs, the extremes of a long."""
    rng = random.Random(7)
    values = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    values += [rng.randrange(-(2**bits), 2**bits) for bits in range(1, 64) for _ in range(20)]
    for prefix in (b"", b"\x02", b"\x00\x06\x02"):
        made = records.zigzag_array(np.array(values, np.int64), prefix).to_pylist()
        expected = [prefix + fastavro_long(v) for v in values]
        assert made == expected
    assert records.zigzag_array(np.zeros(0, np.int64), b"\x02").to_pylist() == []


def fastavro_long(value: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "long", value)
    return out.getvalue()
