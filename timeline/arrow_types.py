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


def stored_type(t: pa.DataType) -> pa.DataType:
    """The type a table stores for values that arrive as ``t``: Arrow's other layouts of one
    logical type become the plain one (``string_view`` and ``large_string`` a string,
    ``binary_view`` and ``large_binary`` binary, a dictionary its values, ``large_list`` and the
    list views a list), inside nested types too; any other type is itself. Polars, DuckDB and
    tpchgen-cli hand out the views, pandas and Parquet readers dictionaries."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return stored_type(t.value_type)
    if (
        pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
        or pa.types.is_list(t)
    ):
        return pa.list_(t.value_field.with_type(stored_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(stored_type(t.key_type)),
            t.item_field.with_type(stored_type(t.item_type)),
        )
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(stored_type(f.type)) for f in t])
    return t


def as_stored(data: pa.Table) -> pa.Table:
    """``data`` with every column in its :func:`stored_type` (the same table when none
    differs): what the writers take in, at their boundary, so that keys, partition values,
    tagging and files see one layout per type."""
    fields = [f.with_type(stored_type(f.type)) for f in data.schema]
    if all(f.type == g.type for f, g in zip(fields, data.schema, strict=True)):
        return data
    columns = [
        column if column.type == f.type else _cast(column, f.type)
        for column, f in zip(data.columns, fields, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, data.schema.metadata))


def _cast(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if _has_list_view(column.type):
        # pyarrow 26's cast of a list view to a list makes an invalid array (offsets one
        # short); views are rare in data, so they go through Python values
        return pa.chunked_array([pa.array(column.to_pylist(), target)], target)
    return column.cast(target)


def _has_list_view(t: pa.DataType) -> bool:
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return True
    return t.num_fields > 0 and any(_has_list_view(t.field(i).type) for i in range(t.num_fields))
