"""Rows for tables Apache Hudi writes in the tests: nested columns (struct, list, map) and helpers
that compare what a reader returns with what was written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("part", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("fare", pa.float64()),
        pa.field("rider", pa.struct([("name", pa.string()), ("rating", pa.int32())])),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.string())),
    ]
)


def make_rows(
    ids: Iterable[int], ts: int = 1, fare_offset: float = 0.0, parts: int = 2
) -> pa.Table:
    """One row per id, deterministic: partition ``p<id % parts>``, nested values from the id."""
    ids = list(ids)
    return pa.Table.from_pylist(
        [
            {
                "id": i,
                "name": f"n{i}",
                "part": f"p{i % parts}",
                "ts": ts,
                "fare": i * 1.5 + fare_offset,
                "rider": {"name": f"r{i}", "rating": i % 5},
                "tags": [f"t{i}", f"t{i + 1}"] if i % 3 else [],
                "attrs": {"k": str(i)} if i % 2 else {"k": str(i), "even": "y"},
            }
            for i in ids
        ],
        schema=SCHEMA,
    )


def _plain(value: Any) -> Any:
    """A value as a comparable Python object: a map (list of key/value pairs) becomes a dict."""
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def by_key(rows: pa.Table | list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    """Rows keyed by ``key``, without Hudi's meta columns; fails on a duplicate key."""
    records = rows.to_pylist() if isinstance(rows, pa.Table) else rows
    out: dict[Any, dict[str, Any]] = {}
    for record in records:
        plain = {k: _plain(v) for k, v in record.items() if not k.startswith("_hoodie_")}
        if plain[key] in out:
            raise AssertionError(f"key {plain[key]!r} appears twice")
        out[plain[key]] = plain
    return out
