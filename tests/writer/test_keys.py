"""Record keys and partition paths as Apache Hudi 0.x's key generators make them (the values Hudi
0.15 wrote in the harness tests, tests/hudi_peer/tables.py, are the reference)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from timeline.errors import BadRecordsError, TableConfigError
from timeline.keys import KeyGenerator, escape_path_name, format_java
from timeline.table_config import TableConfig

TS = 1_709_294_400_000  # 2024-03-01 12:00 UTC, ms


def config(keys: str, parts: str, keygen: str | None, **extra: str) -> TableConfig:
    props = {
        "hoodie.table.name": "t",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.table.recordkey.fields": keys,
        "hoodie.table.partition.fields": parts,
        **extra,
    }
    if keygen:
        props["hoodie.table.keygenerator.class"] = f"org.apache.hudi.keygen.{keygen}"
    return TableConfig(props)


ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "name": ["a", None, ""],
        "part": ["p0", "p1", None],
        "ts": pa.array([TS, TS + 86_400_000, None], pa.int64()),
        "fare": [1.0, 1e7, 0.25],
        "ok": [True, False, None],
        "rider": pa.array([{"city": "sf"}, {"city": "la"}, {"city": "ny"}]),
    }
)
EPOCH_MS = {
    "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
    "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
    "hoodie.keygen.timebased.timezone": "UTC",
}


@pytest.mark.parametrize(
    ("table", "settings", "keys", "paths"),
    [
        (
            config("id", "part", "SimpleKeyGenerator"),
            {},
            ["1", "2", "3"],
            ["p0", "p1", "__HIVE_DEFAULT_PARTITION__"],
        ),
        (
            config(
                "id",
                "part",
                "SimpleKeyGenerator",
                **{"hoodie.datasource.write.hive_style_partitioning": "true"},
            ),
            {},
            ["1", "2", "3"],
            ["part=p0", "part=p1", "part=__HIVE_DEFAULT_PARTITION__"],
        ),
        (
            config("id,name", "part,name", "ComplexKeyGenerator"),
            {},
            ["id:1,name:a", "id:2,name:__null__", "id:3,name:__empty__"],
            [
                "p0/a",
                "p1/__HIVE_DEFAULT_PARTITION__",
                "__HIVE_DEFAULT_PARTITION__/__HIVE_DEFAULT_PARTITION__",
            ],
        ),
        (  # one key field: Simple's keys (as Hudi 0.15 wrote them in the harness)
            config("id", "part", "ComplexKeyGenerator"),
            {},
            ["1", "2", "3"],
            ["p0", "p1", "__HIVE_DEFAULT_PARTITION__"],
        ),
        (config("id", "", "NonpartitionedKeyGenerator"), {}, ["1", "2", "3"], ["", "", ""]),
        (
            config("id,ok", "", "NonpartitionedKeyGenerator"),
            {},
            ["id:1,ok:true", "id:2,ok:false", "id:3,ok:__null__"],
            ["", "", ""],
        ),
        (
            config("id", "ts", "TimestampBasedKeyGenerator"),
            EPOCH_MS,
            ["1", "2", "3"],
            ["2024/03/01", "2024/03/02", "1970/01/01"],  # a null time is epoch + 1 ms, as in Hudi
        ),
        (
            config(
                "id",
                "part,ts",
                "CustomKeyGenerator",
                **{"hoodie.datasource.write.partitionpath.urlencode": "true"},
            ),
            {
                **EPOCH_MS,
                "hoodie.keygen.timebased.output.dateformat": "yyyy-MM-dd HH:mm",
                "hoodie.datasource.write.partitionpath.field": "part:SIMPLE,ts:TIMESTAMP",
            },
            ["1", "2", "3"],
            [
                "p0/2024-03-01 12%3A00",
                "p1/2024-03-02 12%3A00",
                "__HIVE_DEFAULT_PARTITION__/1970-01-01 00%3A00",
            ],
        ),
        (config("id", "rider.city", "SimpleKeyGenerator"), {}, ["1", "2", "3"], ["sf", "la", "ny"]),
        (
            config("id", "fare", None),
            {},
            ["1", "2", "3"],
            ["1.0", "1.0E7", "0.25"],
        ),  # inferred: Simple
    ],
)
def test_keys_and_paths_as_hudi_makes_them(
    table: TableConfig, settings: dict[str, str], keys: list[str], paths: list[str]
) -> None:
    keygen = KeyGenerator.of(table, settings)
    assert keygen.record_keys(ROWS) == keys
    assert keygen.partition_paths(ROWS) == paths


def test_time_formats_zones_and_input_patterns() -> None:
    when = dt.datetime(2024, 3, 1, 12, 5, 9, 123000, tzinfo=dt.UTC)
    assert format_java(when, "yyyy-MM-dd'T'HH:mm:ss.SSS") == "2024-03-01T12:05:09.123"
    assert format_java(when, "yyyyMMddHH") == "2024030112"
    assert escape_path_name("a b/c:d=e%") == "a b%2Fc%3Ad%3De%25"
    table = config("id", "ts", "TimestampBasedKeyGenerator")
    seconds = {**EPOCH_MS, "hoodie.keygen.timebased.timestamp.type": "UNIX_TIMESTAMP"}
    seconds["hoodie.keygen.timebased.timezone"] = "America/Los_Angeles"
    rows = pa.table({"id": [1], "ts": pa.array([1_709_294_400], pa.int64())})
    assert KeyGenerator.of(table, seconds).partition_paths(rows) == ["2024/03/01"]
    rows = pa.table({"id": [1], "ts": pa.array([1_709_254_800], pa.int64())})  # 01:00 UTC
    assert KeyGenerator.of(table, seconds).partition_paths(rows) == ["2024/02/29"]
    strings = {
        "hoodie.keygen.timebased.timestamp.type": "DATE_STRING",
        "hoodie.keygen.timebased.input.dateformat": "yyyy-MM-dd'T'HH:mm:ss.SSSZ,yyyy-MM-dd",
        "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd/HH",
    }
    rows = pa.table({"id": [1, 2], "ts": ["2023-04-01T12:01:00.000Z", "2023-04-02"]})
    assert KeyGenerator.of(table, strings).partition_paths(rows) == [
        "2023/04/01/12",
        "2023/04/02/00",
    ]
    with pytest.raises(BadRecordsError, match=r"matches no input\.dateformat"):
        KeyGenerator.of(table, strings).partition_paths(pa.table({"id": [1], "ts": ["01/04/2023"]}))


@pytest.mark.parametrize(
    ("table", "settings", "message"),
    [
        (config("id", "ts", "TimestampBasedKeyGenerator"), {}, "timestamp.type is not set"),
        (
            config("id", "part,ts", "CustomKeyGenerator"),
            EPOCH_MS,
            "partitionpath.field=part:SIMPLE|TIMESTAMP,ts:SIMPLE|TIMESTAMP",
        ),
        (
            config("id", "part", "GlobalDeleteKeyGenerator"),
            {},
            "GlobalDeleteKeyGenerator is not supported",
        ),
        (config("", "part", None), {}, "keyless table"),
        (config("id,name", "part", "SimpleKeyGenerator"), {}, "one record key field"),
    ],
)
def test_settings_hudi_did_not_store_are_asked_for_by_name(
    table: TableConfig, settings: dict[str, str], message: str
) -> None:
    with pytest.raises(TableConfigError, match=message):
        KeyGenerator.of(table, settings)


def test_settings_that_do_not_make_the_stored_keys_are_refused() -> None:
    """A table written with yyyy/MM/dd partitions, a writer told yyyy-MM-dd: its upserts would
    put a second copy of each record in another folder; verify() refuses."""
    table = config("id", "ts", "TimestampBasedKeyGenerator")
    stored = pa.table(
        {
            "_hoodie_record_key": ["1"],
            "_hoodie_partition_path": ["2024/03/01"],
            "id": pa.array([1], pa.int64()),
            "ts": pa.array([TS], pa.int64()),
        }
    )
    KeyGenerator.of(table, EPOCH_MS).verify(stored, "f.parquet")
    wrong = {**EPOCH_MS, "hoodie.keygen.timebased.output.dateformat": "yyyy-MM-dd"}
    with pytest.raises(
        TableConfigError, match="partition path '2024-03-01' for a row stored as '2024/03/01'"
    ):
        KeyGenerator.of(table, wrong).verify(stored, "f.parquet")
    complex_keys = config("id,ts", "ts", "ComplexKeyGenerator")
    with pytest.raises(TableConfigError, match="record key 'id:1,ts:1709294400000' for a row"):
        KeyGenerator.of(complex_keys).verify(stored, "f.parquet")


def test_a_value_that_would_make_another_folder_is_refused_unless_url_encoded() -> None:
    """Hudi writes a slash in a partition value as a deeper folder; we refuse it (and '.', '..'),
    naming the column; URL encoding escapes it, and a time format's slashes are the layout."""
    rows = pa.table({"id": [1], "part": ["a/b"]})
    with pytest.raises(BadRecordsError, match=r"'part'.*'a/b' cannot be a folder name"):
        KeyGenerator.of(config("id", "part", "SimpleKeyGenerator")).partition_paths(rows)
    encoded = config(
        "id",
        "part",
        "SimpleKeyGenerator",
        **{"hoodie.datasource.write.partitionpath.urlencode": "true"},
    )
    assert KeyGenerator.of(encoded).partition_paths(rows) == ["a%2Fb"]
    with pytest.raises(BadRecordsError, match=r"'\.\.' cannot be a folder name"):
        KeyGenerator.of(config("id", "part", None)).partition_paths(
            pa.table({"id": [1], "part": [".."]})
        )
