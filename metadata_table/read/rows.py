"""How a scan reads the rows of the files its plan kept: DuckDB's Parquet reader where it can be
told exactly what the filter means, pyarrow's dataset everywhere else; both give the same rows.

Why DuckDB: once the index has dropped what it can, what is left is decoding Parquet. DuckDB's
reader decodes the filter's columns first and the other columns only for the rows that pass;
pyarrow's dataset decodes every column of every row group its statistics cannot skip, then
filters. On TPC-H lineitem at scale factor 1 (140 files, 6M rows, two cores) a 1% filter on a
date took 1.23 s through pyarrow and 0.37 s through DuckDB over the same files.

pyarrow reads instead (:func:`duckdb_reason` says why) when the files are not on the local file
system (DuckDB would need its ``httpfs`` extension, fetched from the network, for S3) or a
path holds a character DuckDB expands as a pattern (``*?[{``: a partition may be named so); when a
column read or filtered has a type outside :func:`_duckdb_type`'s (nanosecond timestamps, maps,
intervals, ...), where DuckDB's conversion is not Arrow's; when two columns' names differ only in
case (DuckDB's names are case-insensitive); and, in a process that has not loaded DuckDB yet,
when the kept files hold less than :data:`DUCKDB_MIN_BYTES` (loading it and opening a
connection cost about 90 ms, more than such a read). And a group of files none of which has a
column the query names yet (a column added since) is read by pyarrow, which fills it with nulls.
DuckDB refuses a string column holding bytes that are not UTF-8 (another writer may write them;
pyarrow and Spark read them as they are): the files of the query that met one are read again by
pyarrow, less the rows DuckDB handed out already.

Exactness: every literal is the Arrow scalar the pyarrow path compares with
(:func:`~metadata_table.read.filters.row_literal`), cast to its column's DuckDB type, so both
engines compare the same values with SQL's null rules. DuckDB orders NaN above every number and
equal to itself, where Arrow's comparisons with NaN are false: DuckDB's rows are then a superset,
and a filter on a floating-point column is applied again, with Arrow, to them. The rows are cast
to the scan's output schema (the table's newest file's; older files' missing columns are nulls,
their narrower types widened, as pyarrow's dataset does), a cast that would lose data failing.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from metadata_table.read.filters import And, Compare, Expr, In, IsNull, Or, row_literal

logger = logging.getLogger(__name__)

#: rows per batch a scan hands out
BATCH_ROWS = 64 * 1024
#: files per query (DuckDB) or Arrow dataset (pyarrow): a dataset's fragments keep each file's
#: parsed footer (tens of KB) until the dataset goes, so one dataset over every file would grow
#: with the table; progress is told after each such group
FILES_PER_DATASET = 512
#: bytes of kept files from which a process that has not loaded DuckDB loads it to read them
DUCKDB_MIN_BYTES = 16 << 20
#: the engines
DUCKDB, PYARROW = "duckdb", "pyarrow"

COMMIT_TIME = "_hoodie_commit_time"


@dataclass(frozen=True)
class RowRead:
    """What to read: ``paths`` (in the ``filesystem``, with ``sizes`` in bytes), the columns of
    ``output``, the rows where ``row_filter`` (bound to ``schema``, the table's) holds and, for
    an incremental read, whose commit time is in ``window`` (begin, end]; at most ``limit``."""

    filesystem: Any
    paths: Sequence[str]
    sizes: Sequence[int]
    schema: pa.Schema
    output: pa.Schema
    row_filter: Expr | None
    window: tuple[str, str] | None = None
    limit: int | None = None

    def arrow_filter(self) -> pc.Expression | None:
        expr = None if self.row_filter is None else self.row_filter.expression(self.schema)
        if self.window is not None:
            begin, end = self.window
            window = (pc.field(COMMIT_TIME) > begin) & (pc.field(COMMIT_TIME) <= end)
            expr = window if expr is None else expr & window
        return expr


def engine(read: RowRead) -> tuple[str, str]:
    """The engine that reads ``read``, and why."""
    why = duckdb_reason(read)
    if why is not None:
        return PYARROW, why
    if "duckdb" not in sys.modules and sum(read.sizes) < DUCKDB_MIN_BYTES:
        return PYARROW, f"less than {DUCKDB_MIN_BYTES >> 20} MB to read"
    return DUCKDB, "the filter's columns decoded first, the others for the rows that pass"


def duckdb_reason(read: RowRead) -> str | None:
    """Why DuckDB cannot read ``read`` exactly, or None when it can."""
    if not isinstance(read.filesystem, pafs.LocalFileSystem):
        return "the files are not on the local file system"
    if any(c in path for path in read.paths for c in _GLOB):
        return "a file's path holds a character DuckDB reads as a pattern (* ? [ {)"
    if not len(read.output):
        return "no column is read"
    names = [*read.output.names, *(read.row_filter.columns() if read.row_filter else ())]
    if len({n.lower() for n in read.schema.names}) < len(read.schema.names):
        return "two columns' names differ only in case"
    for name in names:
        kind = read.schema.field(name).type
        if _duckdb_type(kind) is None:
            return f"column {name} is {kind}"
    if read.row_filter is not None and _sql(read.row_filter, read.schema) is None:
        return "a literal of the filter has no exact DuckDB form"
    return None


def read_rows(
    read: RowRead, progress: Callable[[int, int], None] | None = None, using: str | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of ``read``, batch by batch, as they are read (``progress(files done, files)``),
    by :func:`engine`'s choice or the engine named ``using`` (DuckDB only where it can)."""
    chosen, why = engine(read)
    if using is not None and using != chosen:
        if using not in (DUCKDB, PYARROW):
            raise ValueError(f"no engine {using!r}: {DUCKDB} or {PYARROW}")
        if using == DUCKDB:  # pyarrow was chosen: by size, or because DuckDB cannot
            cannot = duckdb_reason(read)
            if cannot is not None:
                raise ValueError(f"DuckDB cannot read these files exactly: {cannot}")
        chosen, why = using, "asked for"
    logger.debug("reading %d file(s) with %s: %s", len(read.paths), chosen, why)
    chunks = _duckdb_chunks if chosen == DUCKDB else _arrow_chunks
    left = read.limit
    if left == 0 or not read.paths:
        return
    done = 0
    for start in range(0, len(read.paths), FILES_PER_DATASET):
        chunk = read.paths[start : start + FILES_PER_DATASET]
        for batch in chunks(read, chunk, left, functools.partial(_told, progress, read, done)):
            if not batch.num_rows:
                continue
            if left is not None:
                if batch.num_rows >= left:
                    yield batch.slice(0, left)
                    return
                left -= batch.num_rows
            yield batch
        done += len(chunk)
        _told(progress, read, done, 0)


def _told(
    progress: Callable[[int, int], None] | None, read: RowRead, before: int, started: int
) -> None:
    """``progress`` told of the files of groups read ``before`` and of the current group
    ``started``."""
    if progress is not None:
        progress(before + started, len(read.paths))


# --- pyarrow -------------------------------------------------------------------------------------


def _arrow_chunks(
    read: RowRead, paths: Sequence[str], limit: int | None, started: Callable[[int], None]
) -> Iterator[pa.RecordBatch]:
    import pyarrow.dataset as ds  # here: with pandas, a quarter second of every CLI start

    # Python-backed file systems hand Arrow buffers over Python bytes: read them on this thread
    # (see timeline.fs_view.read_parquet)
    threads = not isinstance(read.filesystem, pafs.PyFileSystem)
    dataset = ds.dataset(paths, schema=read.schema, format="parquet", filesystem=read.filesystem)
    scanner = dataset.scanner(
        columns=read.output.names,
        filter=read.arrow_filter(),
        batch_size=BATCH_ROWS,
        use_threads=threads,
    )
    seen: set[str] = set()
    for tagged in scanner.scan_batches():
        if tagged.fragment.path not in seen:
            seen.add(tagged.fragment.path)
            started(len(seen))
        yield tagged.record_batch


# --- DuckDB --------------------------------------------------------------------------------------

#: what DuckDB's read_parquet expands in a path, where a partition's name may hold them
_GLOB = "*?[{"

#: the process's DuckDB connection, and the process it was made in
_connection: tuple[int, Any] | None = None
_connecting = threading.Lock()


def _cursor() -> Any:
    """A cursor of the process's one DuckDB connection (made on first use, about 25 ms, and
    again in a process forked from one that had it: a connection does not survive a fork)."""
    global _connection
    import duckdb

    with _connecting:
        if _connection is None or _connection[0] != os.getpid():
            _connection = (os.getpid(), duckdb.connect())
        return _connection[1].cursor()


def _duckdb_chunks(
    read: RowRead, paths: Sequence[str], limit: int | None, started: Callable[[int], None]
) -> Iterator[pa.RecordBatch]:
    again = _refilter(read)
    names = read.output.names
    if again is not None:  # the filter's columns too, to apply it again
        names = [*names, *sorted(again.columns() - set(names))]
    schema = pa.schema([read.schema.field(name) for name in names])
    files = "[" + ", ".join(_string(p) for p in paths) + "]"
    where = []
    if read.row_filter is not None:
        condition = _sql(read.row_filter, read.schema)
        if condition is None:  # duckdb_reason said so first
            raise ValueError(f"no DuckDB form for {read.row_filter!r}")
        where.append(condition)
    if read.window is not None:
        begin, end = read.window
        column = _quote(COMMIT_TIME)
        where.append(f"{column} > {_string(begin)} AND {column} <= {_string(end)}")
    # files of several schemas (columns added over time) are read by name; binding by name
    # reads every file's schema first, which one file does not need (0.3 to 0.6 ms of a 3 to
    # 3.8 ms read of a 0.4 MB file)
    union = "true" if len(paths) > 1 else "false"
    query = (
        f"SELECT {', '.join(_quote(name) for name in names)} FROM read_parquet({files}, "
        f"hive_partitioning = false, union_by_name = {union}, filename = false)"
        + (" WHERE " + " AND ".join(f"({w})" for w in where) if where else "")
        + (f" LIMIT {limit}" if limit is not None and again is None else "")
    )
    import duckdb

    cursor = _cursor()
    try:
        try:
            relation = cursor.sql(query)
        except duckdb.BinderException as e:  # a column none of these files has yet
            logger.debug("pyarrow reads %d file(s): %s", len(paths), e)
            yield from _arrow_chunks(read, paths, limit, started)
            return
        handed = 0
        try:
            # to_arrow_reader since DuckDB 1.4, fetch_arrow_reader before
            stream = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
            reader = stream(BATCH_ROWS)
            started(len(paths))
            for batch in reader:
                batch = _conform(batch, schema)
                if again is not None:
                    batch = batch.filter(again.expression(read.schema))
                    batch = batch.select(read.output.names)
                handed += batch.num_rows
                yield batch
        except (duckdb.InvalidInputException, OSError) as e:  # OSError: from Arrow's stream
            if _NOT_UTF8 not in str(e):
                raise
            # a string column holding bytes that are not UTF-8 (another writer's file): DuckDB
            # refuses to read it, pyarrow reads it as it is. DuckDB hands the rows over in the
            # files' order (insertion order is kept), as pyarrow does: the rows handed out
            # already are pyarrow's first ones
            logger.info("pyarrow reads %d file(s): %s", len(paths), str(e).splitlines()[0])
            yield from _skipped(_arrow_chunks(read, paths, limit, lambda _: None), handed)
    finally:
        cursor.close()


#: the start of DuckDB's error for a string that is not UTF-8 in a Parquet file
_NOT_UTF8 = "Invalid string encoding found in Parquet file"


def _skipped(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` less their first ``rows`` rows."""
    for batch in batches:
        if rows >= batch.num_rows:
            rows -= batch.num_rows
            continue
        yield batch.slice(rows) if rows else batch
        rows = 0


def _refilter(read: RowRead) -> Expr | None:
    """The filter, when DuckDB's rows must be filtered again by Arrow: when it reads a
    floating-point column (see the module)."""
    expr = read.row_filter
    if expr is None or not any(
        pa.types.is_floating(read.schema.field(c).type) for c in expr.columns()
    ):
        return None
    return expr


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema):
        return batch
    return pa.RecordBatch.from_arrays(
        [
            column if column.type == f.type else column.cast(f.type, safe=True)
            for column, f in zip(batch.columns, schema, strict=True)
        ],
        schema=schema,
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _duckdb_type(kind: pa.DataType) -> str | None:
    """``kind``'s DuckDB type when DuckDB reads a Parquet column of it back as Arrow reads it,
    or None."""
    simple = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.uint8(): "UTINYINT",
        pa.uint16(): "USMALLINT",
        pa.uint32(): "UINTEGER",
        pa.uint64(): "UBIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR",
        pa.binary(): "BLOB",
        pa.large_binary(): "BLOB",
        pa.date32(): "DATE",
    }
    if kind in simple:
        return simple[kind]
    if pa.types.is_decimal128(kind):
        return f"DECIMAL({kind.precision}, {kind.scale})"
    if pa.types.is_timestamp(kind) and kind.unit in ("s", "ms", "us"):
        return "TIMESTAMPTZ" if kind.tz is not None else "TIMESTAMP"
    if pa.types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        inner = [(f.name, _duckdb_type(f.type)) for f in fields]
        if any(t is None for _, t in inner):
            return None
        return "STRUCT(" + ", ".join(f"{_quote(n)} {t}" for n, t in inner) + ")"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner_type = _duckdb_type(kind.value_type)
        return None if inner_type is None else f"{inner_type}[]"
    return None


def _sql(expr: Expr, schema: pa.Schema) -> str | None:
    """``expr`` (bound to ``schema``) as DuckDB SQL comparing the values the pyarrow path does,
    or None where a part has no exact form."""
    if isinstance(expr, And | Or):
        left, right = _sql(expr.left, schema), _sql(expr.right, schema)
        if left is None or right is None:
            return None
        return f"({left}) {'AND' if isinstance(expr, And) else 'OR'} ({right})"
    if isinstance(expr, IsNull):
        return f"{_quote(expr.column)} IS {'NOT ' if expr.negated else ''}NULL"
    if isinstance(expr, Compare):
        value = _literal(schema, expr.column, expr.value)
        if value is None:
            return None
        op = "<>" if expr.op == "!=" else expr.op
        return f"{_quote(expr.column)} {op} {value}"
    if isinstance(expr, In):
        values = [_literal(schema, expr.column, v) for v in expr.values]
        if not values or any(v is None for v in values):
            return None
        listed = ", ".join(v for v in values if v is not None)
        return f"{_quote(expr.column)} {'NOT ' if expr.negated else ''}IN ({listed})"
    return None


def _literal(schema: pa.Schema, column: str, value: Any) -> str | None:
    """``value`` as the scalar Arrow compares ``column`` with (:func:`row_literal`), written as
    a DuckDB literal of that scalar's type, or None."""
    if value is None:
        return None
    scalar = row_literal(schema, column, value)
    kind = scalar.type
    name = _duckdb_type(kind)
    if name is None or not scalar.is_valid:
        return None
    v = scalar.as_py()
    if pa.types.is_boolean(kind):
        return "TRUE" if v else "FALSE"
    if pa.types.is_integer(kind):
        return f"CAST({int(v)} AS {name})"
    if pa.types.is_floating(kind):
        if v != v or v in (float("inf"), float("-inf")):
            return f"CAST('{v}' AS {name})"
        return f"CAST({float(v)!r} AS {name})"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _string(v) if "\x00" not in v else None
    if pa.types.is_decimal128(kind) and isinstance(v, decimal.Decimal):
        return f"CAST('{v}' AS {name})"
    if pa.types.is_date32(kind) and isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if pa.types.is_timestamp(kind) and isinstance(v, dt.datetime):
        if kind.tz is None:
            return f"TIMESTAMP '{v.replace(tzinfo=None).isoformat(sep=' ')}'"
        return f"TIMESTAMPTZ '{v.astimezone(dt.UTC).isoformat(sep=' ')}'"
    return None


__all__ = [
    "BATCH_ROWS",
    "DUCKDB",
    "FILES_PER_DATASET",
    "PYARROW",
    "RowRead",
    "duckdb_reason",
    "engine",
    "read_rows",
]
