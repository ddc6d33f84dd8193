"""Record keys and partition paths of incoming records (Hudi's key generators).

* record key: one field -> its value as a string; several -> ``f1:v1,f2:v2`` (ComplexKeyGenerator);
* partition path: the partition fields' values joined with ``/`` (not Hive-style), or "" for an
  unpartitioned table; a null value is ``__HIVE_DEFAULT_PARTITION__``.

Bad input gets an error naming the column and value: a missing field, a null key, a partition
value that would escape its folder (``/``, ``..``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from timeline.errors import BadRecordsError

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _as_strings(data: pa.Table, column: str) -> pa.ChunkedArray:
    if column not in data.column_names:
        raise BadRecordsError(column, f"missing (columns are {', '.join(data.column_names)})")
    values = data.column(column)
    if pa.types.is_string(values.type):
        return values
    try:
        return pc.cast(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise BadRecordsError(
            column, f"type {values.type} cannot be a key or partition value"
        ) from e


def record_keys(data: pa.Table, fields: Sequence[str]) -> list[str]:
    columns = [_as_strings(data, f) for f in fields]
    for name, col in zip(fields, columns, strict=True):
        if col.null_count:
            raise BadRecordsError(name, f"{col.null_count} record(s) have a null record key")
    if len(fields) == 1:
        return [str(v) for v in columns[0].to_pylist()]
    values = [c.to_pylist() for c in columns]
    return [
        ",".join(f"{f}:{v}" for f, v in zip(fields, row, strict=True))
        for row in zip(*values, strict=True)
    ]


def partition_paths(data: pa.Table, fields: Sequence[str]) -> list[str]:
    if not fields:
        return [""] * data.num_rows
    parts = []
    for name in fields:
        values = [
            DEFAULT_PARTITION if v is None else str(v) for v in _as_strings(data, name).to_pylist()
        ]
        for v in set(values):
            if v in ("", ".", "..") or "/" in v or "\\" in v or "\x00" in v:
                raise BadRecordsError(name, f"partition value {v!r} cannot be a folder name")
        parts.append(values)
    return ["/".join(p) for p in zip(*parts, strict=True)]
