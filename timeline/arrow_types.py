"""One classifier of Arrow types for the project: what a column's type is, once.

The writer's Avro schema (``writer/avro.py``) and the column statistics of the metadata table
(``metadata_table/records.py``) both start from :func:`scalar_kind` and map its answer to their
own vocabulary; a type it does not name (nested, time, duration, float16, dictionary, ...) is
not a scalar either of them handles.
"""

from __future__ import annotations

import enum

import pyarrow as pa


class ScalarKind(enum.Enum):
    BOOLEAN = "boolean"
    INT = "int"  # fits 32 signed bits: int8/16/32, uint8/16
    LONG = "long"  # fits 64 signed bits: int64, uint32
    UNSIGNED_LONG = "unsigned_long"  # uint64
    FLOAT = "float"
    DOUBLE = "double"
    STRING = "string"
    BINARY = "binary"
    FIXED_BINARY = "fixed_binary"
    DATE = "date"  # date32, days
    DATE_MILLIS = "date_millis"  # date64
    TIMESTAMP = "timestamp"
    DECIMAL = "decimal"


def scalar_kind(t: pa.DataType) -> ScalarKind | None:
    """The kind of a scalar Arrow type, or None for any other type."""
    checks = (
        (pa.types.is_boolean, ScalarKind.BOOLEAN),
        (
            lambda x: pa.types.is_int8(x) or pa.types.is_int16(x) or pa.types.is_int32(x),
            ScalarKind.INT,
        ),
        (lambda x: pa.types.is_uint8(x) or pa.types.is_uint16(x), ScalarKind.INT),
        (lambda x: pa.types.is_int64(x) or pa.types.is_uint32(x), ScalarKind.LONG),
        (pa.types.is_uint64, ScalarKind.UNSIGNED_LONG),
        (pa.types.is_float32, ScalarKind.FLOAT),
        (pa.types.is_float64, ScalarKind.DOUBLE),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), ScalarKind.STRING),
        (lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x), ScalarKind.BINARY),
        (pa.types.is_fixed_size_binary, ScalarKind.FIXED_BINARY),
        (pa.types.is_date32, ScalarKind.DATE),
        (pa.types.is_date64, ScalarKind.DATE_MILLIS),
        (pa.types.is_timestamp, ScalarKind.TIMESTAMP),
        (pa.types.is_decimal, ScalarKind.DECIMAL),
    )
    for check, kind in checks:
        if check(t):
            return kind
    return None
