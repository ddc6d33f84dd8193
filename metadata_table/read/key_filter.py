"""Which record keys a filter confines rows to: what the key indexes (``record_index``,
``bloom_filters``) can answer.

A user filters on the record key fields by their own names (``uuid = 'k'``, ``uuid IN (...)``,
and with several key fields ``l_orderkey = 1 AND l_linenumber = 2``), or on Hudi's meta column
(``_hoodie_record_key = 'k'``). Either confines the rows to a set of record keys when every
key field is confined to a set of values by ``=`` or ``IN`` in conjuncts of the filter (``OR``
of two such filters unions their keys). The keys are made from the values as the table's key
generator makes them from rows (:class:`timeline.keys.KeyGenerator`: the value for one key
field, ``f1:v1,f2:v2`` for several), so a key index answers exactly as for the meta column.

The key indexes only ever drop files; the scan still applies the whole filter to every row.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from metadata_table.read.filters import And, Compare, Expr, In, Or
from metadata_table.records import RECORD_KEY
from timeline.errors import BadRecordsError
from timeline.keys import KeyGenerator

#: at most this many keys a filter's key field values may combine into; past it no key index
#: answers (a lookup of more keys than files is no saving)
MAX_KEYS = 10_000


def confined_values(expr: Expr, column: str) -> set[Any] | None:
    """The values ``expr`` confines ``column`` to (by ``=`` and ``IN``), or None when it does
    not confine it: a row matching ``expr`` has one of them there."""
    if isinstance(expr, Compare):
        return {expr.value} if expr.column == column and expr.op == "=" else None
    if isinstance(expr, In):
        return set(expr.values) if expr.column == column and not expr.negated else None
    if isinstance(expr, And):
        left, right = confined_values(expr.left, column), confined_values(expr.right, column)
        if left is not None and right is not None:
            return left & right
        return left if left is not None else right
    if isinstance(expr, Or):
        left, right = confined_values(expr.left, column), confined_values(expr.right, column)
        return None if left is None or right is None else left | right
    return None


def key_generator(key_fields: Sequence[str]) -> KeyGenerator:
    """The generator of a table's record keys: the key does not depend on the partition
    settings, only on the key fields (Simple's for one, Complex's for several)."""
    return KeyGenerator("complex" if len(key_fields) > 1 else "simple", tuple(key_fields))


def asked_keys(
    expr: Expr, key_fields: Sequence[str], schema: pa.Schema, by_fields: bool = True
) -> list[str] | None:
    """The record keys ``expr`` (bound to ``schema``) confines rows to, sorted; None when it
    confines them to none (or to more than :data:`MAX_KEYS`). With ``by_fields`` false only
    ``_hoodie_record_key`` counts (the key fields do not make the table's stored keys)."""
    found: set[str] | None = None
    meta = confined_values(expr, RECORD_KEY)
    if meta is not None:
        found = {v for v in meta if isinstance(v, str)}
    fields = _field_keys(expr, key_fields, schema) if by_fields else None
    if fields is not None:
        found = fields if found is None else found & fields
    if found is None or len(found) > MAX_KEYS:
        return None
    return sorted(found)


def _field_keys(expr: Expr, key_fields: Sequence[str], schema: pa.Schema) -> set[str] | None:
    if not key_fields or any("." in f or schema.get_field_index(f) < 0 for f in key_fields):
        return None  # a nested key field: filters name top-level columns only
    values = []
    for name in key_fields:
        confined = confined_values(expr, name)
        if confined is None:
            return None
        kind = schema.field(name).type
        typed = [t for t in (_typed(v, kind) for v in confined if v is not None) if t is not None]
        values.append(typed)
    combinations = 1
    for typed in values:
        combinations *= len(typed)
    if combinations > MAX_KEYS:
        return None
    if combinations == 0:
        return set()
    rows = list(zip(*itertools.product(*values), strict=True))
    table = pa.table(
        {
            name: pa.array(list(column), schema.field(name).type)
            for name, column in zip(key_fields, rows, strict=True)
        }
    )
    try:
        return set(key_generator(key_fields).record_keys(table))
    except BadRecordsError:
        return None  # an empty key value: no stored key is made of it, but let the rows say


def _typed(value: Any, kind: pa.DataType) -> Any:
    """``value`` as a value of ``kind`` (None: no value of the column equals it, e.g. 2.5 for
    an integer column)."""
    try:
        typed = pa.scalar(value, kind).as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        return None
    return typed if typed == value else None  # Arrow truncates 2.5 to 2 for an int64


def key_field_names(key_fields: Sequence[str]) -> str:
    """The key fields as a filter names them, for messages."""
    return " AND ".join(f"{f} = ..." for f in key_fields) if key_fields else RECORD_KEY
