"""Tables Apache Hudi writes with each key generator and partition style, and what Hudi 0.15 does
with them (shared by the harness's own tests and the indexer's tests on Hudi-written tables)."""

from __future__ import annotations

from typing import Any

#: ``ts`` of every row written to these tables: 2024-03-01 12:00 UTC, in milliseconds.
KEYGEN_TS = 1_709_294_400_000

KEYGEN_TABLES: dict[str, dict[str, Any]] = {
    "simple-hive-style": dict(keygen="simple", hive_style=True),
    "complex": dict(keygen="complex", record_key=("id", "name"), partition_fields=("part", "name")),
    "nonpartitioned": dict(keygen="nonpartitioned", partition_fields=()),
    "timestamp": dict(
        keygen="timestamp",
        partition_fields=("ts",),
        timestamp={
            "timestamp.type": "EPOCHMILLISECONDS",
            "output.dateformat": "yyyy/MM/dd",
            "timezone": "UTC",
        },
    ),
    "custom-url-encoded": dict(
        keygen="custom",
        partition_fields=("part:SIMPLE", "ts:TIMESTAMP"),
        url_encode=True,
        timestamp={
            "timestamp.type": "EPOCHMILLISECONDS",
            "output.dateformat": "yyyy-MM-dd HH:mm",
            "timezone": "UTC",
        },
    ),
}
# Hudi's Spark reader answers a partition column that a timestamp-based key generator formats with
# the formatted partition value (a string), not the value stored in the data file.
KEYGEN_READ_TS = {"timestamp": "2024/03/01"}
HUDI_READER_FAILS = {
    "custom-url-encoded": "Failed to cast value `2024-03-01 12%3A00` to `LongType`"
}
KEYGEN_PARTITIONS = {
    "simple-hive-style": {"part=p0", "part=p1"},
    "complex": {f"p{i % 2}/n{i}" for i in range(6)},
    "nonpartitioned": {""},
    "timestamp": {"2024/03/01"},
    # Hudi's "URL encoding" is Hive's path escaping: ':' is escaped, a space is not.
    "custom-url-encoded": {"p0/2024-03-01 12%3A00", "p1/2024-03-01 12%3A00"},
}
