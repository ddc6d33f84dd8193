"""Schema on write: what an incoming batch may differ from the table's schema in, as Apache Hudi
allows, and the batch (or a stored file's rows) cast to the schema the commit writes.

* the same type under other names: a list's element is ``element`` in Arrow and Spark, ``array``
  in files parquet-avro wrote (Hudi's), ``item`` or ``bag`` elsewhere; a map's entries likewise.
  Nullability inside nested types does not make a type differ either: the cast checks the values;
* a column the table lacks is added, nullable (rows written before read null);
* int is promoted to long, float to double, in either direction: the wider type is the commit's;
* columns in another order are put in the table's order.

Anything else (a missing column, any other type change) is refused with
:class:`BadRecordsError` naming the column and both types, before anything is written.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from timeline.errors import BadRecordsError

# (narrower, wider) pairs of scalar types a column may move between
_PROMOTIONS = {
    (pa.int8(), pa.int32()),
    (pa.int16(), pa.int32()),
    (pa.int8(), pa.int64()),
    (pa.int16(), pa.int64()),
    (pa.int32(), pa.int64()),
    (pa.float32(), pa.float64()),
}


def canonical(t: pa.DataType) -> pa.DataType:
    """``t`` with nested field names and nullability made uniform (what a type *is*)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(canonical(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(canonical(t.key_type), canonical(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, canonical(f.type)) for f in t])
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    same: bool = canonical(a) == canonical(b)
    return same


def _promoted(table: pa.DataType, incoming: pa.DataType) -> pa.DataType | None:
    if (incoming, table) in _PROMOTIONS:
        return table
    if (table, incoming) in _PROMOTIONS:
        return incoming
    return None


def evolve(table: pa.Schema | None, incoming: pa.Schema) -> pa.Schema:
    """The schema a commit of ``incoming`` writes into a table whose schema is ``table`` (None:
    a table without data yet takes the batch's)."""
    if table is None:
        return incoming
    have = {f.name: f for f in incoming}
    missing = [f for f in table if f.name not in have]
    if missing:
        f = missing[0]
        raise BadRecordsError(
            f.name,
            f"the table's column {f.name!r} ({f.type}) is missing from the input "
            f"({len(missing)} missing: {', '.join(m.name for m in missing)}); "
            "columns cannot be dropped",
        )
    fields = []
    for f in table:
        new = have[f.name]
        if same_type(f.type, new.type):
            fields.append(f)
            continue
        wider = _promoted(f.type, new.type)
        if wider is None:
            raise BadRecordsError(
                f.name,
                f"type {new.type} in the input, {f.type} in the table: only new nullable "
                "columns, int to long and float to double are allowed",
            )
        fields.append(pa.field(f.name, wider, nullable=f.nullable or new.nullable))
    known = {f.name for f in table}
    added = [f.with_nullable(True) for f in incoming if f.name not in known]
    return pa.schema(fields + added)


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` in ``schema``'s column order and types; columns it lacks are null. A value the
    schema cannot hold (a null where it says not null) is a :class:`BadRecordsError`."""
    columns = []
    for f in schema:
        if f.name not in data.column_names:
            columns.append(pa.nulls(data.num_rows, f.type))
            continue
        values = data.column(f.name)
        _check_nulls(values, f.type, f.nullable, f.name)
        if values.type != f.type:
            try:
                values = values.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise BadRecordsError(
                    f.name, f"cannot be written as {f.type} (it is {values.type}): {e}"
                ) from e
        columns.append(values)
    return pa.Table.from_arrays(columns, schema=schema)


def _check_nulls(
    values: pa.ChunkedArray | pa.Array, t: pa.DataType, nullable: bool, path: str
) -> None:
    """Nulls where ``t`` (the target type) says not null; pyarrow's cast does not check them."""
    if not nullable and values.null_count:
        raise BadRecordsError(path, f"{values.null_count} null value(s) where the table has none")
    if not (pa.types.is_list(t) or pa.types.is_map(t) or pa.types.is_struct(t)):
        return
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    for chunk in chunks:
        if pa.types.is_map(t) and pa.types.is_map(chunk.type):
            _check_nulls(chunk.keys, t.key_type, False, f"{path}.key")
            _check_nulls(chunk.items, t.item_type, t.item_field.nullable, f"{path}.value")
        elif pa.types.is_list(t) and (
            pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type)
        ):
            _check_nulls(
                pc.list_flatten(chunk), t.value_type, t.value_field.nullable, f"{path}.element"
            )
        elif pa.types.is_struct(t) and pa.types.is_struct(chunk.type):
            present = chunk.is_valid()  # a null struct's fields are not values
            for f in t:
                if chunk.type.get_field_index(f.name) >= 0:
                    child = chunk.field(f.name).filter(present)
                    _check_nulls(child, f.type, f.nullable, f"{path}.{f.name}")
