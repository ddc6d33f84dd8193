"""Index records of data files: of base files from their Parquet footers (never a scan of the
data), of merge-on-read log files from the records their data blocks hold.

* ``files``: partition, file name, size.
* ``column_stats``: per top-level column: min, max (typed), null count, value count, compressed and
  uncompressed size, aggregated over row groups. Supported types: integers, floats, strings,
  binary, booleans, dates, timestamps (kept as UTC microseconds) and decimals (kept exactly, as
  text). Nested columns (lists, structs, maps) and other types (time, duration, float16,
  dictionaries of those) are skipped. A row group without min/max makes the file's min/max
  unknown (null): such a file is never pruned on that column.
* ``bloom_filters``: the Parquet split-block bloom filter of the record key column, read from the
  file when it has one (one row group); otherwise built from the key column (a log file's from
  the keys of its data blocks).

A log file (:func:`info_from_log`) counts the data blocks of the instants the caller names (the
committed ones up to a build's instant, or the one deltacommit a sync applies): its stats cover
every value its counted blocks hold, so data skipping never drops a row an update moved outside
its base file's range. Delete blocks add no values (a log file of deletes alone has stats with
no values, under the schema its header names); command blocks add nothing.
* ``partition_stats``: per data partition and column, the ``column_stats`` of some files
  aggregated (:func:`aggregate_partition_stats`): min of mins, max of maxes, summed counts; a file
  whose min/max is unknown makes the partition's unknown.
* ``record_index`` and secondary indexes are made from a file's *rows* (:attr:`DataFileInfo.rows`:
  its record keys, and the indexed columns' values), read with a column projection: a base file's
  every row, a log file's rows of its counted data blocks and, as deletions, the keys of its
  counted delete blocks. :func:`latest_live` merges the rows of a file slice's files (newest
  instant per key and file group, deletions dropped) into what the slice holds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import functools
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata_table.bloom import BLOOM_TYPE, BloomSizing, parse_bloom_filter
from metadata_table.layout import (
    BLOOM_FILTERS_SCHEMA,
    COLUMN_STATS_SCHEMA,
    FILES_SCHEMA,
    NON_PARTITIONED,
    PARTITION_STATS_SCHEMA,
    RECORD_INDEX,
    VALUE_TYPE,
    column_stats_keys,
    enc,
    file_key,
    gather,
    hash_sorted,
    key_hashes,
    memory_schema,
    partition_stats_keys,
    secondary_index_partition,
    stored_hashes,
)
from timeline.arrow_types import ScalarKind, scalar_kind
from timeline.errors import DuplicateRecordKeyError, NotParquetError, TableConfigError
from timeline.fs_view import file_id_of, footer_metadata, parquet_metadata, read_columns
from timeline.instant import is_after, normalize_timestamp
from timeline.keys import KeyGenerator
from timeline.log_format import (
    DATA_BLOCKS,
    BlockType,
    HeaderKey,
    LogFileName,
    arrow_schema,
    read_log_file,
)
from timeline.storage import Storage
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE

RECORD_KEY = "_hoodie_record_key"
#: columns of :attr:`DataFileInfo.rows` beside the record key and the indexed columns: the
#: instant that wrote the row (a log block's), and whether it is a deletion (a delete block's key)
ROW_INSTANT = "_aix_instant"
ROW_DELETED = "_aix_deleted"
#: in a writer's changed rows (:func:`changed_rows`): an update of a record that stays in its
#: file group (no new location; a secondary index still sees its new value)
ROW_IN_PLACE = "_aix_in_place"
_TAIL = 64 * 1024


@dataclass
class DataFileInfo:
    """What the index needs of one data file: its footer and its key bloom filter bitset."""

    partition: str
    file_name: str
    size: int
    instant: str
    metadata: pq.FileMetaData | None
    bloom: bytes | None = None  # SBBF bitset of the record key column
    #: a log file's column aggregates, from its records (a base file's come from ``metadata``)
    stats: dict[str, _ColumnAggregate] | None = dataclasses.field(default=None, compare=False)
    #: a log file's data and delete blocks' instants, counted or not
    block_instants: frozenset[str] = frozenset()
    #: the file's rows (record key, :data:`ROW_INSTANT` as a dictionary, :data:`ROW_DELETED` and
    #: the columns the caller asked for), read only for the indexes keyed by record key; of a
    #: file a writer is committing, the rows it changed (:func:`changed_rows`)
    rows: pa.Table | None = dataclasses.field(default=None, compare=False)
    #: of a file a writer is committing, the stored rows its changes superseded (updated in place
    #: or moved to another file group): a secondary index drops their old values
    replaced: pa.Table | None = dataclasses.field(default=None, compare=False)

    def column_stats(self, columns: Sequence[str] | None = None) -> Iterator[ColumnStats]:
        """:data:`ColumnStats` of the file's indexed columns (of ``columns`` only, when given)."""
        if self.stats is None:
            assert self.metadata is not None
            return footer_stats(self.metadata, columns)
        stats = self.stats
        names = [c for c in columns if c in stats] if columns else list(stats)
        return (_aggregate_row(name, stats[name]) for name in names)

    @property
    def path(self) -> str:
        return f"{self.partition}/{self.file_name}" if self.partition else self.file_name


def _bloom_from(data_at: Any, metadata: pq.FileMetaData) -> bytes | None:
    """The key column's native bloom filter, when the file has exactly one row group with one.

    ``data_at(offset, length)`` returns bytes of the file."""
    key = footer_layout(metadata).leaves.get(RECORD_KEY)
    if key is None or metadata.num_row_groups != 1:
        return None
    column = metadata.row_group(0).column(key)
    offset, length = column.bloom_filter_offset, column.bloom_filter_length
    if offset is None or not length:
        return None
    return bytes(parse_bloom_filter(data_at(offset, length)).bitset)


def info_from_bytes(partition: str, file_name: str, instant: str, data: bytes) -> DataFileInfo:
    """From a file's bytes in memory (the writer has them when it commits)."""
    try:
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    except (pa.ArrowException, OSError) as e:
        raise NotParquetError(f"{partition}/{file_name}", str(e)) from e
    bloom = _bloom_from(lambda off, n: data[off : off + n], metadata)
    return DataFileInfo(partition, file_name, len(data), instant, metadata, bloom)


def _footer(storage: Storage, path: str, size: int) -> tuple[pq.FileMetaData, bytes]:
    """A data file's footer and the bytes of the file's end read with it (empty: none kept).
    A local file's footer is read by pyarrow's reader from a descriptor (46 us a footer of 11
    columns here, against 60 through a read of the file's last 64 KB); a remote one in one
    ranged read of the file's end (two for a large footer), which is kept: a bloom filter
    written just before the footer is often in it."""
    if storage.is_local:
        return parquet_metadata(storage, path), b""
    tail = storage.read_range(path, -_TAIL)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise NotParquetError(path, "no Parquet footer (missing PAR1 magic)")
    footer_len = struct.unpack("<I", tail[-8:-4])[0]
    if footer_len + 8 > len(tail):
        if footer_len + 8 > size:
            raise NotParquetError(path, f"footer length {footer_len} exceeds the file")
        tail = storage.read_range(path, -(footer_len + 8))
    return footer_metadata(b"PAR1" + tail[-(footer_len + 8) :], path), tail


def info_from_storage(
    storage: Storage,
    partition: str,
    file_name: str,
    size: int,
    instant: str,
    bloom: bool = True,
    rows: Sequence[str] | None = None,
    keygen: KeyGenerator | None = None,
) -> DataFileInfo:
    """From storage, reading the footer (:func:`_footer`) and, with ``bloom``, the bloom filter
    bytes; with ``rows`` (columns beside the record key), the rows of those columns, reading
    only their column chunks; no other data page is read. With ``keygen`` (a table without meta
    fields: Hudi's virtual keys) record keys are made from the key fields."""
    path = f"{partition}/{file_name}" if partition else file_name
    metadata, tail = _footer(storage, path, size)
    row_table = None
    if rows is not None:
        row_table = base_rows(storage, path, instant, rows, metadata, keygen)
    if not bloom:
        return DataFileInfo(partition, file_name, size, instant, metadata, rows=row_table)
    tail_start = size - len(tail)

    def data_at(offset: int, length: int) -> bytes:
        if offset >= tail_start:
            return tail[offset - tail_start : offset - tail_start + length]
        return storage.read_range(path, offset, offset + length)

    bitset = _bloom_from(data_at, metadata)
    if bitset is None and (keygen or RECORD_KEY in footer_layout(metadata).names):
        if row_table is None:
            row_table = base_rows(storage, path, instant, (), metadata, keygen)
        values = [k for k in row_table.column(RECORD_KEY).to_pylist() if k is not None]
        bitset = bytes(BloomSizing().build(values).bitset)
        if rows is None:
            row_table = None
    return DataFileInfo(partition, file_name, size, instant, metadata, bitset, rows=row_table)


def base_rows(
    storage: Storage,
    path: str,
    instant: str,
    columns: Sequence[str],
    metadata: pq.FileMetaData | None = None,
    keygen: KeyGenerator | None = None,
) -> pa.Table:
    """A base file's rows for the indexes keyed by record key: its record keys (with
    ``keygen``, made from the key fields: a table without meta fields) and ``columns`` (null
    where the file has no such column: written before the column was added), all written by
    ``instant``; only those column chunks are read."""
    present = set((metadata.schema.to_arrow_schema() if metadata else pa.schema([])).names)
    key_columns = keygen.key_columns() if keygen is not None else [RECORD_KEY]
    wanted = [*key_columns, *(c for c in columns if c in present or metadata is None)]
    table = read_columns(storage, path, list(dict.fromkeys(wanted)), metadata)
    table = with_record_keys(table, keygen, path)
    return _row_table(table, columns, instant, False)


def virtual_keys(table: Table) -> KeyGenerator | None:
    """The key generator that makes a table's record keys when its files do not store them
    (``hoodie.populate.meta.fields=false``: Hudi's virtual keys); None when they do."""
    config = table.table_config
    if config.populate_meta_fields:
        return None
    try:
        return KeyGenerator.of(config, table.config.extra)
    except TableConfigError as e:
        raise TableConfigError(table.storage.uri(PROPERTIES_FILE), e.reason) from e


def read_record_keys(
    storage: Storage,
    path: str,
    keygen: KeyGenerator | None,
    columns: Sequence[str] = (),
) -> pa.Table:
    """A data file's record keys (``_hoodie_record_key``; with ``keygen``, made from its key
    fields) and ``columns``, reading those columns only."""
    key_columns = keygen.key_columns() if keygen is not None else [RECORD_KEY]
    table = read_columns(storage, path, list(dict.fromkeys([*key_columns, *columns])))
    return with_record_keys(table, keygen, path).select([RECORD_KEY, *columns])


def missing_key_fields(keygen: KeyGenerator | None, columns: Sequence[str]) -> list[str]:
    """The record key fields of a table without meta fields (``keygen``) that are not among
    ``columns`` (a file's, the table's); none for a table whose files store record keys."""
    if keygen is None:
        return []
    return [c for c in keygen.key_columns() if c not in columns]


def _missing_reason(missing: Sequence[str], holder: str) -> str:
    return (
        f"a table without meta fields (hoodie.populate.meta.fields=false) makes its record keys "
        f"from its record key fields (hoodie.table.recordkey.fields), and {holder} no column "
        + ", ".join(repr(c) for c in missing)
    )


def key_fields_refusal(table: Table, schema: pa.Schema | None) -> str | None:
    """Why a table's record keys cannot be made from its files (``schema``: the newest file's):
    a table without meta fields whose key fields the files lack; None when they can."""
    missing = missing_key_fields(virtual_keys(table), schema.names if schema is not None else [])
    if not missing or schema is None:
        return None
    return _missing_reason(missing, "the table's newest file has")


def with_record_keys(table: pa.Table, keygen: KeyGenerator | None, path: str = "") -> pa.Table:
    """``table`` (read from ``path``) with its ``_hoodie_record_key`` column: the stored one, or,
    with ``keygen`` (a table without meta fields), made from the key fields as Hudi makes virtual
    keys (a file of such a table may still have the meta columns, all null: Hudi 0.14 wrote them
    so). A key field the file lacks is a :class:`TableConfigError` naming it."""
    if keygen is None:
        return table
    missing = missing_key_fields(keygen, table.column_names)
    if missing:
        raise TableConfigError(path or PROPERTIES_FILE, _missing_reason(missing, "it has"))
    if RECORD_KEY in table.column_names:
        table = table.drop_columns([RECORD_KEY])
    keys = (
        pa.array(keygen.record_keys(table), pa.string())
        if table.num_rows
        else pa.array([], pa.string())
    )
    return table.append_column(RECORD_KEY, keys)


def _row_table(records: pa.Table, columns: Sequence[str], instant: str, deleted: bool) -> pa.Table:
    """Rows in :attr:`DataFileInfo.rows` form: record key, instant, deletion flag, ``columns``;
    the rows' one instant as a dictionary of one value (no string a row)."""
    n = records.num_rows
    out = {
        RECORD_KEY: records.column(RECORD_KEY).cast(pa.string()),
        ROW_INSTANT: pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([instant], pa.string())
        ),
        ROW_DELETED: pa.repeat(pa.scalar(deleted), n),
    }
    for column in columns:
        if column in records.column_names:
            out[column] = records.column(column)
        else:
            out[column] = pa.nulls(n)
    return pa.table(out)


def changed_rows(
    written: pa.Table,
    in_place: pa.Array,
    deleted: pa.Table,
    replaced: pa.Table,
    instant: str,
) -> tuple[pa.Table, pa.Table]:
    """A writer's changes to one file group, as :attr:`DataFileInfo.rows` and
    :attr:`DataFileInfo.replaced`: the rows it wrote (inserts, records moved in, and updates,
    ``in_place`` flagging those that stay in the group), the stored rows it deleted, and the
    stored rows its writes superseded (updated in place, or moved to another group). Every
    top-level column comes along: the indexes keyed by record key pick theirs."""
    columns = [c for c in written.column_names if c != RECORD_KEY]

    def of(table: pa.Table, deletions: bool) -> pa.Table:
        return _row_table(
            table, [c for c in columns if c in table.column_names], instant, deletions
        )

    live = of(written, False).append_column(ROW_IN_PLACE, in_place)
    gone = of(deleted, True)
    gone = gone.append_column(ROW_IN_PLACE, pa.repeat(pa.scalar(False), gone.num_rows))
    rows = pa.concat_tables([live, gone], promote_options="permissive")
    return rows, of(replaced, True)


def _concat_rows(parts: list[pa.Table], columns: Sequence[str]) -> pa.Table:
    """Row tables of several blocks as one (an indexed column typed as its non-null parts)."""
    if not parts:
        empty = pa.table({RECORD_KEY: pa.array([], pa.string())})
        return _row_table(empty, columns, "", False)
    return pa.concat_tables(parts, promote_options="permissive")


def info_from_log(
    storage: Storage,
    partition: str,
    file_name: str,
    size: int,
    counted: Callable[[str], bool],
    bloom: bool = True,
    rows: Sequence[str] | None = None,
    keygen: KeyGenerator | None = None,
) -> DataFileInfo | None:
    """A merge-on-read log file's info, from the records of its data blocks whose instant is
    ``counted`` (read block by block, never the whole file at once): its column aggregates and,
    with ``bloom``, a bloom filter of its record keys; with ``rows``, its rows (the counted data
    blocks' records, and the counted delete blocks' keys as deletions). Its ``instant`` is the
    newest counted block's. None when no data or delete block of the file is counted (a failed
    write's file, or one holding only a rollback command): such a file adds nothing to the
    slice."""
    path = f"{partition}/{file_name}" if partition else file_name
    aggregates: dict[str, _ColumnAggregate] = {}
    keys: set[str] = set()
    newest: str | None = None
    count = 0
    seen: set[str] = set()
    row_parts: list[pa.Table] = []
    for block in read_log_file(storage, path, size):
        instant = block.instant_time
        if block.block_type not in (*DATA_BLOCKS, BlockType.DELETE) or instant is None:
            continue
        seen.add(instant)
        if not counted(instant):
            continue
        newest = instant if newest is None or is_after(instant, newest) else newest
        if block.block_type == BlockType.DELETE:
            if rows is not None:
                gone = pa.table({RECORD_KEY: [str(d.record_key) for d in block.deletes()]})
                row_parts.append(_row_table(gone, rows, instant, True))
            if HeaderKey.SCHEMA not in block.header:
                continue
            # keys of deleted rows, no values: the table's columns, each with none
            records = arrow_schema(block.avro_schema()).empty_table()
        else:
            records = with_record_keys(block.records(), keygen, path)
            if rows is not None:
                row_parts.append(_row_table(records, rows, instant, False))
        count += records.num_rows
        for name, agg in record_aggregates(records).items():
            aggregates[name] = (
                merge_aggregates(aggregates[name], agg) if name in aggregates else agg
            )
        if bloom and RECORD_KEY in records.column_names:
            keys.update(k for k in records.column(RECORD_KEY).to_pylist() if k is not None)
    if newest is None:
        return None
    for agg in aggregates.values():  # rows of blocks written before a column was added: nulls
        missing = count - agg.value_count
        agg.value_count += missing
        agg.null_count = None if agg.null_count is None else agg.null_count + missing
    bitset = None
    if bloom and keys:
        bitset = bytes(BloomSizing().build(sorted(keys)).bitset)
    row_table = None if rows is None else _concat_rows(row_parts, rows)
    return DataFileInfo(
        partition, file_name, size, newest, None, bitset, aggregates, frozenset(seen), row_table
    )


#: (partition path, file name, size, instant) of a committed data file; a log file's instant is
#: "" (its blocks name theirs: the reader says which count)
DataFile = tuple[str, str, int, str]


def info_of(
    storage: Storage,
    partition: str,
    file_name: str,
    size: int,
    instant: str,
    counted: Callable[[str], bool],
    bloom: bool = True,
    rows: Sequence[str] | None = None,
    keygen: KeyGenerator | None = None,
) -> DataFileInfo | None:
    """A data file's info, base file (``instant`` wrote it) or log file (its blocks of
    ``counted`` instants; None when it holds none); with ``rows``, its rows too; with
    ``keygen`` (a table without meta fields), record keys made from the key fields."""
    if LogFileName.parse(file_name) is not None:
        return info_from_log(storage, partition, file_name, size, counted, bloom, rows, keygen)
    return info_from_storage(storage, partition, file_name, size, instant, bloom, rows, keygen)


# --- typed min/max -------------------------------------------------------------------------------


_VALUE_TYPE = {
    ScalarKind.INT: "int",
    ScalarKind.LONG: "int",
    ScalarKind.UNSIGNED_LONG: "int",
    ScalarKind.FLOAT: "float",
    ScalarKind.DOUBLE: "float",
    ScalarKind.STRING: "string",
    ScalarKind.BINARY: "binary",
    ScalarKind.FIXED_BINARY: "binary",
    ScalarKind.BOOLEAN: "bool",
    ScalarKind.DATE: "date",
    ScalarKind.DATE_MILLIS: "date",
    ScalarKind.TIMESTAMP: "timestamp",
    ScalarKind.DECIMAL: "decimal",
}


@functools.lru_cache(maxsize=1024)
def value_kind(t: pa.DataType) -> str | None:
    """The VALUE_TYPE field a column's min/max go to, or None when the type is not indexed
    (remembered per type: asked for every column of every file)."""
    kind = scalar_kind(t)
    return None if kind is None else _VALUE_TYPE[kind]


def indexed_columns(schema: pa.Schema) -> list[str]:
    """The top-level columns of ``schema`` whose stats column_stats keeps (nested ones and
    types without an order are skipped, as Hudi skips them)."""
    return [f.name for f in schema if value_kind(f.type) is not None]


def _normalize(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "timestamp" and isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if kind == "date" and isinstance(value, dt.datetime):
        return value.date()
    if kind == "decimal":
        return str(value)
    return value


def typed_value(kind: str, value: Any) -> dict[str, Any]:
    """A VALUE_TYPE struct with only ``kind`` set."""
    return {kind: value} if value is not None else {}


def python_value(kind: str | None, struct_value: dict[str, Any] | None) -> Any:
    """Back from a VALUE_TYPE struct to a comparable Python value."""
    if not struct_value or kind is None:
        return None
    value = struct_value.get(kind)
    if kind == "decimal" and value is not None:
        return decimal.Decimal(value)
    return value


def _decimal_key(kind: str, value: Any) -> Any:
    return decimal.Decimal(value) if kind == "decimal" else value


@dataclass
class _ColumnAggregate:
    kind: str
    minimum: Any = None
    maximum: Any = None
    min_known: bool = True
    null_count: int | None = 0
    value_count: int = 0
    total_size: int = 0
    uncompressed: int = 0


@dataclass(frozen=True)
class FooterLayout:
    """What the index reads of a Parquet schema, worked out once per schema: the top-level
    field names, the leaf column index of each column path, and the indexed columns as (name,
    VALUE_TYPE kind, leaf index), nested and unsupported ones left out."""

    schema: pq.ParquetSchema
    #: the footer's stored Arrow schema, which also decides the Arrow types (and so the kinds)
    arrow_schema: bytes | None
    names: frozenset[str]
    leaves: dict[str, int]
    #: (name, kind, leaf index, whether its statistics' raw min and max are the value: strings
    #: (their UTF-8 decoded), signed integers, floats, booleans, binaries)
    indexed: tuple[tuple[str, str, int, bool], ...]


#: the layout of the last schema seen (a table's data files mostly share one): one entry,
#: replaced whole, so threads may share it
_LAST_LAYOUT: list[FooterLayout] = []


def footer_layout(metadata: pq.FileMetaData) -> FooterLayout:
    """:class:`FooterLayout` of ``metadata``'s schema; that of the last file when its schema and
    stored Arrow schema are equal (compared in about 2 us, against 20 to work it out again)."""
    schema = metadata.schema
    stored = (metadata.metadata or {}).get(b"ARROW:schema")
    last = _LAST_LAYOUT[:1]
    if last and last[0].arrow_schema == stored and last[0].schema.equals(schema):
        return last[0]
    leaves = {schema.column(i).path: i for i in range(metadata.num_columns)}
    fields = schema.to_arrow_schema()
    indexed = tuple(
        (field.name, kind, leaf, _raw_is_value(kind, field.type, schema.column(leaf)))
        for field in fields
        if (kind := value_kind(field.type)) is not None
        and (leaf := leaves.get(field.name)) is not None
    )
    layout = FooterLayout(schema, stored, frozenset(fields.names), leaves, indexed)
    _LAST_LAYOUT[:] = [layout]
    return layout


#: the Parquet physical types whose statistics' raw min and max are a column's value, by kind
_RAW_PHYSICAL = {
    "string": {"BYTE_ARRAY"},
    "binary": {"BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"},
    "float": {"FLOAT", "DOUBLE"},
    "bool": {"BOOLEAN"},
    "int": {"INT32", "INT64"},
}


def _raw_is_value(kind: str, arrow_type: pa.DataType, column: pq.ColumnSchema) -> bool:
    """Whether a column's statistics' raw min and max (``min_raw``: the physical value, about a
    fifth of the cost of ``min``, which goes through an Arrow scalar) are its value as ``min``
    gives it: not for unsigned integers (stored as signed), dates, timestamps and decimals."""
    if column.physical_type not in _RAW_PHYSICAL.get(kind, ()):
        return False
    return kind != "int" or pa.types.is_signed_integer(arrow_type)


def _raw_bounds(kind: str, stats: pq.Statistics) -> tuple[Any, Any] | None:
    """A chunk's raw min and max as values; None for a string chunk whose bounds are not UTF-8
    (bytes a writer put in a string column), which no filter can compare: unknown."""
    lo, hi = stats.min_raw, stats.max_raw
    if kind == "string":
        try:
            return lo.decode(), hi.decode()
        except UnicodeDecodeError:
            return None
    return lo, hi


#: one file's statistics of one column, as a column_stats record takes them: (column, kind,
#: min, max (both None: unknown, or no value), null count (None: unknown), value count,
#: compressed size, uncompressed size)
ColumnStats = tuple[str, str, Any, Any, int | None, int, int, int]


def footer_stats(
    metadata: pq.FileMetaData, columns: Sequence[str] | None = None
) -> Iterator[ColumnStats]:
    """:data:`ColumnStats` of a footer's indexed columns (``columns`` only, when given), over
    its row groups; as tuples, not objects (a build makes one for every column of every data
    file)."""
    indexed = footer_layout(metadata).indexed
    if columns:
        wanted = set(columns)
        indexed = tuple(column for column in indexed if column[0] in wanted)
    if metadata.num_row_groups == 1:  # most files: each chunk's statistics are the column's
        return _one_group_stats(metadata.row_group(0), indexed)
    return _widened_stats(metadata, indexed)


def _one_group_stats(
    row_group: pq.RowGroupMetaData, indexed: Sequence[tuple[str, str, int, bool]]
) -> Iterator[ColumnStats]:
    """:func:`footer_stats` of a footer of one row group: nothing to widen."""
    for name, kind, leaf, raw in indexed:
        chunk = row_group.column(leaf)
        values = chunk.num_values
        stats = chunk.statistics
        low = high = nulls = None
        if stats is not None:
            nulls = stats.null_count if stats.has_null_count else None
            if values != nulls and stats.has_min_max:
                if raw:
                    low, high = _raw_bounds(kind, stats) or (None, None)
                else:
                    low, high = _normalize(kind, stats.min), _normalize(kind, stats.max)
        yield (
            name,
            kind,
            low,
            high,
            nulls,
            values,
            chunk.total_compressed_size,
            chunk.total_uncompressed_size,
        )


def _widened_stats(
    metadata: pq.FileMetaData, indexed: Sequence[tuple[str, str, int, bool]]
) -> Iterator[ColumnStats]:
    """:func:`footer_stats` of a footer of any number of row groups: each column's bounds
    widened over its chunks; unknown when a chunk with values has none."""
    row_groups = [metadata.row_group(rg) for rg in range(metadata.num_row_groups)]
    for name, kind, leaf, raw in indexed:
        agg = _ColumnAggregate(kind)
        for row_group in row_groups:
            chunk = row_group.column(leaf)
            agg.value_count += chunk.num_values
            agg.total_size += chunk.total_compressed_size
            agg.uncompressed += chunk.total_uncompressed_size
            stats = chunk.statistics
            if stats is None:
                agg.min_known = False
                agg.null_count = None
                continue
            if agg.null_count is not None:
                agg.null_count = agg.null_count + stats.null_count if stats.has_null_count else None
            if chunk.num_values == (stats.null_count if stats.has_null_count else -1):
                continue  # all nulls: no min/max in this row group, nothing to widen
            if not stats.has_min_max:
                agg.min_known = False
                continue
            if raw:
                bounds = _raw_bounds(kind, stats)
                if bounds is None:
                    agg.min_known = False
                    continue
                lo, hi = bounds
            else:
                lo, hi = _normalize(kind, stats.min), _normalize(kind, stats.max)
            if agg.minimum is None or _decimal_key(kind, lo) < _decimal_key(kind, agg.minimum):
                agg.minimum = lo
            if agg.maximum is None or _decimal_key(kind, hi) > _decimal_key(kind, agg.maximum):
                agg.maximum = hi
        yield _aggregate_row(name, agg)


def _aggregate_row(name: str, agg: _ColumnAggregate) -> ColumnStats:
    low, high = (agg.minimum, agg.maximum) if agg.min_known else (None, None)
    return (
        name,
        agg.kind,
        low,
        high,
        agg.null_count,
        agg.value_count,
        agg.total_size,
        agg.uncompressed,
    )


def record_aggregates(records: pa.Table) -> dict[str, _ColumnAggregate]:
    """Column aggregates of records in memory (a log file's data block): exact min and max,
    null and value counts; no sizes (a block's bytes are not split by column)."""
    out: dict[str, _ColumnAggregate] = {}
    for field in records.schema:
        kind = value_kind(field.type)
        if kind is None:
            continue
        column = records.column(field.name)
        agg = _ColumnAggregate(kind, null_count=column.null_count, value_count=len(column))
        if column.null_count < len(column):
            bounds = pc.min_max(column)
            agg.minimum = _normalize(kind, bounds["min"].as_py())
            agg.maximum = _normalize(kind, bounds["max"].as_py())
        out[field.name] = agg
    return out


def merge_aggregates(a: _ColumnAggregate, b: _ColumnAggregate) -> _ColumnAggregate:
    """One column's aggregates of two parts of a file (a log file's blocks); parts that disagree
    on the kind of value (an evolved schema) leave min and max unknown."""
    if a.kind != b.kind:
        unknown = _ColumnAggregate(a.kind, min_known=False, null_count=None)
        unknown.value_count = a.value_count + b.value_count
        return unknown
    merged = _ColumnAggregate(
        a.kind,
        min_known=a.min_known and b.min_known,
        null_count=None
        if a.null_count is None or b.null_count is None
        else a.null_count + b.null_count,
        value_count=a.value_count + b.value_count,
        total_size=a.total_size + b.total_size,
        uncompressed=a.uncompressed + b.uncompressed,
    )
    if merged.min_known:
        lows = [v for v in (a.minimum, b.minimum) if v is not None]
        highs = [v for v in (a.maximum, b.maximum) if v is not None]
        key = functools.partial(_decimal_key, a.kind)
        merged.minimum = min(lows, key=key) if lows else None
        merged.maximum = max(highs, key=key) if highs else None
    return merged


# --- records -------------------------------------------------------------------------------------


def _partition_name(partition: str) -> str:
    return partition or NON_PARTITIONED


def files_records(infos: Iterable[DataFileInfo], deleted: bool = False) -> pa.Table:
    rows = [
        {
            "key": file_key(i.partition, i.file_name),
            "partition": _partition_name(i.partition),
            "file_name": i.file_name,
            "size": i.size,
            "is_deleted": deleted,
            "instant": i.instant,
        }
        for i in infos
    ]
    return pa.Table.from_pylist(rows, schema=FILES_SCHEMA)


def column_stats_records(
    infos: Iterable[DataFileInfo], columns: Sequence[str] | None = None
) -> pa.Table:
    """One record per (indexed column, data file), built column by column (no row objects):
    the files' :data:`ColumnStats` transposed into one sequence per field, the fields of a
    file's records repeated from one value per file, and each min and max in the struct field
    of its kind, gathered from one list of values per kind."""
    found: list[ColumnStats] = []
    per_file: list[int] = []
    partitions: list[str] = []
    files: list[str] = []
    instants: list[str] = []
    for info in infos:
        before = len(found)
        found.extend(info.column_stats(columns))
        per_file.append(len(found) - before)
        partitions.append(_partition_name(info.partition))
        files.append(info.file_name)
        instants.append(info.instant)
    n = len(found)
    names, kinds, lows, highs, nulls, values, sizes, uncompressed = (
        zip(*found, strict=True) if found else ((),) * 8
    )
    of_file = pa.array(np.repeat(np.arange(len(per_file), dtype=np.int64), per_file), pa.int64())

    def repeated(per: list[str]) -> pa.Array:
        return pa.array(per, pa.string()).take(of_file)

    column_names = pa.array(names, pa.string())
    partition_names = repeated(partitions)
    file_names = repeated(files)
    kind_names_array = pa.array(kinds, pa.string())
    kind_codes = pc.dictionary_encode(kind_names_array)
    kind_names = kind_codes.dictionary.to_pylist()
    codes = kind_codes.indices.to_numpy(zero_copy_only=False)
    # per kind: the records of that kind, and each record's place among them (null elsewhere)
    of_kind = {kind: np.flatnonzero(codes == code) for code, kind in enumerate(kind_names)}
    places: dict[str, pa.Array] = {}
    for code, kind in enumerate(kind_names):
        place = np.zeros(n, dtype=np.int64)
        place[of_kind[kind]] = np.arange(len(of_kind[kind]))
        places[kind] = pa.array(place, mask=codes != code)

    def value_struct(bounds: Sequence[Any]) -> pa.StructArray:
        """VALUE_TYPE structs: each value in the field of its record's kind."""
        fields = [
            pa.array([bounds[i] for i in of_kind[f.name].tolist()], f.type).take(places[f.name])
            if f.name in of_kind
            else pa.nulls(n, f.type)
            for f in VALUE_TYPE
        ]
        return pa.StructArray.from_arrays(fields, fields=list(VALUE_TYPE))

    keys = column_stats_keys(column_names, partition_names, file_names)
    return pa.table(
        {
            "key": keys,
            "column_name": column_names,
            "partition": partition_names,
            "file_name": file_names,
            "value_type": kind_names_array,
            "min_value": value_struct(lows),
            "max_value": value_struct(highs),
            "null_count": pa.array(nulls, pa.int64()),
            "value_count": pa.array(values, pa.int64()),
            "total_size": pa.array(sizes, pa.int64()),
            "total_uncompressed_size": pa.array(uncompressed, pa.int64()),
            "is_deleted": pa.repeat(pa.scalar(False), n),
            "instant": repeated(instants),
        },
        schema=COLUMN_STATS_SCHEMA,
    )


def bloom_records(infos: Iterable[DataFileInfo]) -> pa.Table:
    rows = [
        {
            "key": file_key(i.partition, i.file_name),
            "partition": _partition_name(i.partition),
            "file_name": i.file_name,
            "bloom_type": BLOOM_TYPE,
            "bloom_filter": i.bloom,
            "is_deleted": False,
            "instant": i.instant,
        }
        for i in infos
        if i.bloom is not None
    ]
    return pa.Table.from_pylist(rows, schema=BLOOM_FILTERS_SCHEMA)


# --- partition stats -----------------------------------------------------------------------------


def partition_stats_records(
    infos: Iterable[DataFileInfo], columns: Sequence[str] | None = None, computed: str = ""
) -> pa.Table:
    """One record per (column, data partition) of ``infos``: their column stats aggregated.
    The caller chooses the files (those of a partition's latest file slices, or a share of them that a
    later aggregation combines)."""
    stats = column_stats_records(infos, columns)
    n = stats.num_rows
    key = partition_stats_keys(stats.column("column_name"), stats.column("partition"))
    per_file = pa.table(
        {
            "key": key,
            "column_name": stats.column("column_name"),
            "partition": stats.column("partition"),
            "value_type": stats.column("value_type"),
            "min_value": stats.column("min_value"),
            "max_value": stats.column("max_value"),
            "null_count": stats.column("null_count"),
            "value_count": stats.column("value_count"),
            "file_count": pa.array([1] * n, pa.int64()),
            "total_size": stats.column("total_size"),
            "is_deleted": pa.array([False] * n, pa.bool_()),
            "instant": stats.column("instant"),
            "computed": pa.array([computed] * n, pa.string()),
        },
        schema=PARTITION_STATS_SCHEMA,
    )
    return aggregate_partition_stats(per_file, computed)


def _kind_struct(kind: str, values: pa.Array) -> pa.StructArray:
    """A VALUE_TYPE array with only field ``kind`` set (from ``values``)."""
    fields = [
        values.cast(f.type) if f.name == kind else pa.nulls(len(values), f.type) for f in VALUE_TYPE
    ]
    return pa.StructArray.from_arrays(fields, fields=list(VALUE_TYPE))


def aggregate_partition_stats(rows: pa.Table, computed: str) -> pa.Table:
    """``rows`` (PARTITION_STATS_SCHEMA: one per file, or partial aggregates) combined into one
    record per key, at ``computed``: min of the known mins, max of the maxes, summed counts (a
    missing null count makes the sum unknown); the min/max is unknown when any part's is
    unknown (a part with values but no min), or when parts disagree on the kind of value. Each
    record's ``instant`` is the newest of its parts'. On Arrow, except for decimals (kept as
    text), which are compared as numbers."""
    rows = rows.filter(pc.invert(rows.column("is_deleted")))
    if rows.num_rows == 0:
        return PARTITION_STATS_SCHEMA.empty_table()
    out = []
    for kind in pc.unique(rows.column("value_type")).to_pylist():
        part = rows.filter(pc.equal(rows.column("value_type"), kind))
        if kind == "decimal":
            out.append(_aggregate_in_python(part, computed))
            continue
        lo = pc.struct_field(part.column("min_value"), kind)
        hi = pc.struct_field(part.column("max_value"), kind)
        nulls = part.column("null_count")
        all_null = pc.fill_null(pc.equal(nulls, part.column("value_count")), False)
        unknown = pc.and_(pc.is_null(lo), pc.invert(all_null))
        work = pa.table(
            {
                "key": part.column("key"),
                "column_name": part.column("column_name"),
                "partition": part.column("partition"),
                "lo": lo,
                "hi": hi,
                "unknown": unknown,
                "no_nulls": pc.is_null(nulls),
                "null_count": nulls,
                "value_count": part.column("value_count"),
                "file_count": part.column("file_count"),
                "total_size": part.column("total_size"),
                "instant": part.column("instant"),
            }
        )
        g = work.group_by("key", use_threads=False).aggregate(
            [
                ("column_name", "min"),
                ("partition", "min"),
                ("lo", "min"),
                ("hi", "max"),
                ("unknown", "any"),
                ("no_nulls", "any"),
                ("null_count", "sum"),
                ("value_count", "sum"),
                ("file_count", "sum"),
                ("total_size", "sum"),
                ("instant", "max"),
            ]
        )
        unknown_g = g.column("unknown_any")
        n = g.num_rows
        lo_g = pc.if_else(unknown_g, pa.scalar(None, lo.type), g.column("lo_min"))
        hi_g = pc.if_else(unknown_g, pa.scalar(None, hi.type), g.column("hi_max"))
        nulls_g = pc.if_else(
            g.column("no_nulls_any"), pa.scalar(None, pa.int64()), g.column("null_count_sum")
        )
        out.append(
            pa.table(
                {
                    "key": g.column("key"),
                    "column_name": g.column("column_name_min"),
                    "partition": g.column("partition_min"),
                    "value_type": pa.array([kind] * n, pa.string()),
                    "min_value": _kind_struct(kind, lo_g.combine_chunks()),
                    "max_value": _kind_struct(kind, hi_g.combine_chunks()),
                    "null_count": nulls_g,
                    "value_count": g.column("value_count_sum"),
                    "file_count": g.column("file_count_sum"),
                    "total_size": g.column("total_size_sum"),
                    "is_deleted": pa.array([False] * n, pa.bool_()),
                    "instant": g.column("instant_max"),
                    "computed": pa.array([computed] * n, pa.string()),
                },
                schema=PARTITION_STATS_SCHEMA,
            )
        )
    merged = pa.concat_tables(out)
    if pc.count_distinct(merged.column("key")).as_py() != merged.num_rows:
        merged = _aggregate_in_python(merged, computed)  # one column with several kinds
    return merged.sort_by("key")


def _aggregate_in_python(rows: pa.Table, computed: str) -> pa.Table:
    """:func:`aggregate_partition_stats` row by row (decimals, and keys whose parts disagree on
    the kind of value, which leaves their min/max unknown)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        groups.setdefault(row["key"], []).append(row)
    out = []
    for key, parts in groups.items():
        kinds = {p["value_type"] for p in parts}
        kind = parts[0]["value_type"] if len(kinds) == 1 else None
        values = [
            (python_value(kind, p["min_value"]), python_value(kind, p["max_value"])) for p in parts
        ]
        unknown = kind is None or any(
            lo is None and p["null_count"] != p["value_count"]
            for (lo, _), p in zip(values, parts, strict=True)
        )
        known = [(lo, hi) for lo, hi in values if lo is not None]
        lo = None if unknown or not known else min(v[0] for v in known)
        hi = None if unknown or not known else max(v[1] for v in known)
        nulls = [p["null_count"] for p in parts]
        out.append(
            {
                "key": key,
                "column_name": parts[0]["column_name"],
                "partition": parts[0]["partition"],
                "value_type": kind if kind is not None else parts[-1]["value_type"],
                "min_value": typed_value(kind, _normalize(kind, lo)) if kind else {},
                "max_value": typed_value(kind, _normalize(kind, hi)) if kind else {},
                "null_count": None if None in nulls else sum(nulls),
                "value_count": sum(p["value_count"] for p in parts),
                "file_count": sum(p["file_count"] for p in parts),
                "total_size": sum(p["total_size"] for p in parts),
                "is_deleted": False,
                "instant": max(p["instant"] for p in parts),
                "computed": computed,
            }
        )
    return pa.Table.from_pylist(out, schema=PARTITION_STATS_SCHEMA).sort_by("key")


# --- record index and secondary indexes ----------------------------------------------------------


def _file_rows(
    infos: Iterable[DataFileInfo], replaced: bool = False
) -> Iterable[tuple[DataFileInfo, str, pa.Table]]:
    """Each info with rows (with ``replaced``, with superseded rows), its file id, and those rows
    without null keys."""
    for info in infos:
        rows = info.replaced if replaced else info.rows
        file_id = file_id_of(info.file_name)
        if rows is None or file_id is None or not rows.num_rows:
            continue
        if rows.column(RECORD_KEY).null_count:
            rows = rows.filter(pc.is_valid(rows.column(RECORD_KEY)))
        yield info, file_id, rows


def placed_keys(infos: Iterable[DataFileInfo]) -> set[str]:
    """The record keys a writer's files put somewhere new: inserted, or moved in from another
    partition (their rows neither updates in place nor deletions)."""
    out: set[str] = set()
    for info in infos:
        rows = info.rows
        if rows is None or not rows.num_rows:
            continue
        new = pc.invert(rows.column(ROW_DELETED))
        if ROW_IN_PLACE in rows.column_names:
            new = pc.and_(new, pc.invert(pc.fill_null(rows.column(ROW_IN_PLACE), False)))
        out.update(k for k in rows.column(RECORD_KEY).filter(new).to_pylist() if k is not None)
    return out


def key_changes(infos: Iterable[DataFileInfo]) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """What a writer's files did to its record keys' locations: the keys it put somewhere new
    (inserted, or moved from another file group) with the (partition, file name) they are in
    now, and the keys it deleted and put nowhere."""
    placed: dict[str, tuple[str, str]] = {}
    gone: set[str] = set()
    for info in infos:
        rows = info.rows
        if rows is None or not rows.num_rows:
            continue
        deleted = rows.column(ROW_DELETED)
        new = pc.invert(deleted)
        if ROW_IN_PLACE in rows.column_names:
            new = pc.and_(new, pc.invert(pc.fill_null(rows.column(ROW_IN_PLACE), False)))
        keys = rows.column(RECORD_KEY)
        where = (info.partition, info.file_name)
        placed.update((k, where) for k in keys.filter(new).to_pylist() if k is not None)
        gone.update(k for k in keys.filter(deleted).to_pylist() if k is not None)
    return placed, gone - set(placed)


class _Codes:
    """String values coded as a dictionary array, one chunk at a time: a value repeated over a
    whole chunk (a file's partition, its file id, a base file's instant) costs no string per
    row and no hashing of its rows."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._parts: list[np.ndarray] = []

    def _code(self, value: object) -> int:
        return self._codes.setdefault(str(value), len(self._codes))

    def repeat(self, value: str, count: int) -> None:
        self._parts.append(np.full(count, self._code(value), np.int32))

    def add(self, chunk: pa.DictionaryArray) -> None:
        """Code a dictionary array's values (of strings, without nulls)."""
        values = chunk.dictionary.to_pylist()
        if len(values) == 1:
            self.repeat(values[0], len(chunk))
            return
        mapped = np.array([self._code(v) for v in values], np.int32)
        self._parts.append(mapped[chunk.indices.to_numpy(zero_copy_only=False)])

    def array(self) -> pa.DictionaryArray:
        parts = self._parts
        indices = pa.array(np.concatenate(parts) if parts else np.zeros(0, np.int32), pa.int32())
        return pa.DictionaryArray.from_arrays(indices, pa.array(list(self._codes), pa.string()))


def _located_rows(
    rows_of: Iterable[tuple[DataFileInfo, str, pa.Table]],
) -> tuple[list[pa.Table], pa.DictionaryArray, pa.DictionaryArray, pa.DictionaryArray]:
    """Rows of several files, and their data partitions, file ids and instants as dictionary
    arrays (one entry per row)."""
    tables: list[pa.Table] = []
    partitions, file_ids, instants = _Codes(), _Codes(), _Codes()
    for info, file_id, rows in rows_of:
        tables.append(rows)
        partitions.repeat(_partition_name(info.partition), rows.num_rows)
        file_ids.repeat(file_id, rows.num_rows)
        for chunk in rows.column(ROW_INSTANT).chunks:
            instants.add(chunk)
    return tables, partitions.array(), file_ids.array(), instants.array()


def record_index_records(infos: Iterable[DataFileInfo]) -> pa.Table:
    """One record per row of ``infos``' rows: record key -> (data partition, file id), with the
    instant that wrote it; a deletion's record is a tombstone (see :func:`latest_live`). A
    writer's updates in place change no location: they make no record. Built column by column
    over all files at once (one hash pass over every key), in the memory schema
    (:func:`metadata_table.layout.memory_schema`)."""

    def moved(rows_of: Iterable[tuple[DataFileInfo, str, pa.Table]]) -> Iterable[Any]:
        for info, file_id, rows in rows_of:
            if ROW_IN_PLACE in rows.column_names:
                rows = rows.filter(pc.invert(pc.fill_null(rows.column(ROW_IN_PLACE), False)))
            if rows.num_rows:
                yield info, file_id, rows

    tables, partitions, file_ids, instants = _located_rows(moved(_file_rows(infos)))
    schema = memory_schema(RECORD_INDEX)
    if not tables:
        return schema.empty_table()
    key = pa.concat_arrays(
        [c.cast(pa.string()) for t in tables for c in t.column(RECORD_KEY).chunks]
    )
    deleted = pa.concat_arrays([c for t in tables for c in t.column(ROW_DELETED).chunks])
    return pa.table(
        {
            "key": key,
            "key_hash": stored_hashes(key_hashes(key)),
            "partition": partitions,
            "file_id": file_ids,
            "is_deleted": deleted,
            "instant": instants,
        },
        schema=schema,
    )


#: the value kinds a secondary index takes (values compared as text of one canonical form)
SECONDARY_KINDS = frozenset({"int", "float", "string", "bool", "date", "timestamp", "decimal"})


def secondary_index_refusal(field: pa.Field) -> str | None:
    """Why a secondary index cannot take a table column, or None when it can."""
    if value_kind(field.type) in SECONDARY_KINDS:
        return None
    return (
        "a secondary index takes top-level columns of integer, floating point, string, boolean, "
        f"date, timestamp or decimal type; {field.name!r} is {field.type}"
    )


def value_texts(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Values as the text a secondary index keys them by: one form per value whatever the
    column's width (integers as int64, floats as float64 with -0.0 as 0.0, timestamps in UTC
    microseconds), so a filter's value, cast to the column's type, finds the same text."""
    kind = value_kind(values.type)
    if kind is None or kind not in SECONDARY_KINDS:
        raise TypeError(f"a secondary index does not take values of type {values.type}")
    if kind == "int":
        values = values.cast(pa.int64())
    elif kind == "float":
        values = values.cast(pa.float64())
        values = pc.if_else(pc.equal(values, 0.0), pa.scalar(0.0), values)
    elif kind == "timestamp":
        tz = values.type.tz
        values = values.cast(pa.timestamp("us", tz=tz)).cast(pa.timestamp("us", tz=None))
    elif kind == "bool":
        values = pc.if_else(values, pa.scalar("true"), pa.scalar("false"))
    return values.cast(pa.string())


def secondary_index_records(infos: Iterable[DataFileInfo], column: str) -> pa.Table:
    """One record per row of ``infos``' rows with a value in ``column``: (value, record key) ->
    the row's data partition and file id; a deletion's record is a tombstone. Of a writer's
    changes: an update in place whose value did not change makes no record, and a superseded
    row's old value becomes a tombstone unless the same (value, key) is written again (a record
    moved to another file group with its value)."""
    infos = list(infos)
    written = _secondary_records(_file_rows(infos), column)
    old = _secondary_records(_file_rows(infos, replaced=True), column)
    if not old.num_rows:
        return _without_in_place(written, old)
    again = pc.is_in(old.column("key"), value_set=written.column("key"))
    return pa.concat_tables([_without_in_place(written, old), old.filter(pc.invert(again))])


def _without_in_place(written: pa.Table, old: pa.Table) -> pa.Table:
    """``written`` less the updates in place that kept their value (the same key as a record
    they superseded)."""
    if "in_place" not in written.column_names:
        return written
    in_place = pc.fill_null(written.column("in_place"), False)
    unchanged = pc.and_(in_place, pc.is_in(written.column("key"), value_set=old.column("key")))
    return written.filter(pc.invert(unchanged)).drop_columns(["in_place"])


def _secondary_records(
    rows_of: Iterable[tuple[DataFileInfo, str, pa.Table]], column: str
) -> pa.Table:
    schema = memory_schema(secondary_index_partition(column))
    kept = []
    for info, file_id, rows in rows_of:
        values = rows.column(column) if column in rows.column_names else pa.nulls(rows.num_rows)
        if pa.types.is_null(values.type):
            texts = pa.nulls(rows.num_rows, pa.string())
        else:
            texts = value_texts(values)
        # a deletion of a delete block holds no value (it names keys only): kept, to be
        # resolved by the key in :func:`latest_live`
        keep = pc.or_(pc.is_valid(texts), rows.column(ROW_DELETED))
        if pc.any(keep).as_py():
            rows = rows.filter(keep).append_column("_aix_text", texts.filter(keep))
            kept.append((info, file_id, rows))
    tables, partitions, file_ids, instants = _located_rows(kept)
    if not tables:
        return schema.empty_table()
    rows = pa.concat_tables(tables, promote_options="permissive")
    keys = rows.column(RECORD_KEY).cast(pa.string())
    texts = rows.column("_aix_text").cast(pa.string())
    filled = pc.fill_null(texts, "")
    out = pa.table(
        {
            "key": pc.binary_join_element_wise(_enc_array(filled), _enc_array(keys), "|"),
            "key_hash": stored_hashes(key_hashes(filled)),
            "value": texts,
            "record_key": keys,
            "partition": partitions,
            "file_id": file_ids,
            "is_deleted": rows.column(ROW_DELETED),
            "instant": instants,
        },
        schema=schema,
    )
    if ROW_IN_PLACE in rows.column_names:
        out = out.append_column("in_place", pc.fill_null(rows.column(ROW_IN_PLACE), False))
    return out


def _enc_array(values: Any) -> Any:
    return pc.replace_substring(pc.replace_substring(values, "%", "%25"), "|", "%7C")


def value_key(value_text: str, record_key: str) -> str:
    """The key of a secondary index record."""
    return f"{enc(value_text)}|{enc(record_key)}"


def latest_live(records: pa.Table, by: str = "key") -> pa.Table:
    """What the rows of some file slices hold, from records made of their files' rows (a base
    file's, and log files' blocks and deletions, in any order): per ``by`` (the record key
    column) and file group the record of the newest instant, deletions dropped. A record key
    live in two file groups is a :class:`DuplicateRecordKeyError` (naming how many are): the
    record and secondary indexes are global, one location per key.

    Records come out ordered by (hash, ``by``) (:func:`hash_order`): for the record index, the
    order of its files."""
    return gather(*live_order(records, by))


def live_order(records: pa.Table, by: str = "key") -> tuple[pa.Table, np.ndarray]:
    """``records`` in one chunk, and the positions in it of :func:`latest_live`'s records in
    its order: what a writer takes row group by row group, so no sorted copy of them all is
    made."""
    records, order, copies = _live_per_group(records, by)
    if copies is not None and copies.num_rows:
        raise duplicates_error(copies, by)
    return records, order


def duplicates_error(
    copies: pa.Table, by: str = "key", base: str | None = None
) -> DuplicateRecordKeyError:
    """The error of the keys of ``copies`` (:func:`live_copies`, not empty): how many, one of
    them and where its copies are (with ``base``, the commands that resolve them)."""
    keys = copies.column(by)
    first = keys[0].as_py()
    one = copies.filter(pc.equal(keys, first))
    places = sorted(
        f"{data_partition_of(p) or '.'}/{f}"
        for p, f in zip(
            one.column("partition").to_pylist(), one.column("file_id").to_pylist(), strict=True
        )
    )
    return DuplicateRecordKeyError(len(pc.unique(keys)), str(first), places, base)


def live_copies(records: pa.Table, by: str = "key") -> pa.Table:
    """The live records (:func:`latest_live`) of the keys live in more than one file group:
    every copy, ordered by key (empty when every key is in one file group)."""
    _, _, copies = _live_per_group(records, by)
    return records.slice(0, 0) if copies is None else copies


def _live_per_group(records: pa.Table, by: str) -> tuple[pa.Table, np.ndarray, pa.Table | None]:
    """``records`` in one chunk, the positions in it of the newest live record per (``by``,
    file group) in hash order, and the records of the keys live in several file groups (None:
    there are none). Keys are compared only where two rows share a hash (equal keys have equal
    hashes), so the records are not moved here."""
    n = records.num_rows
    if n == 0:
        return records, np.zeros(0, np.int64), None
    records = records.combine_chunks()  # one chunk: the takes below read it in place
    identity = records.column(by)
    if by == "key":
        top = records.column("key_hash").to_numpy()
    else:
        top = (key_hashes(identity) >> np.uint64(32)).astype(np.int64)
    order, ordered = hash_sorted(top, identity)
    deleted = records.column("is_deleted").to_numpy(zero_copy_only=False)[order]
    same = np.zeros(n - 1, dtype=bool)  # whether each sorted row's key is the next one's
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):
        first = identity.take(pa.array(order[tie]))
        second = identity.take(pa.array(order[tie + 1]))
        same[tie] = pc.equal(first, second).to_numpy(zero_copy_only=False)
    if not same.any():
        return records, (order[~deleted] if deleted.any() else order), None
    # keys with several records (a base file's and a log file's, or copies in two groups):
    # resolved per key and file group
    repeated = np.zeros(n, dtype=bool)
    repeated[:-1] |= same
    repeated[1:] |= same
    rows = np.flatnonzero(repeated)  # positions in sorted order
    starts = np.ones(len(rows), dtype=bool)
    starts[1:] = ~((rows[1:] == rows[:-1] + 1) & same[rows[:-1]])
    run_id = np.cumsum(starts)
    at = pa.array(order[rows])
    location = pc.binary_join_element_wise(
        records.column("partition").take(at).cast(pa.string()),
        records.column("file_id").take(at).cast(pa.string()),
        "/",
    )
    group_code = pc.index_in(location, value_set=pc.unique(location)).to_numpy(zero_copy_only=False)
    instants = records.column("instant").take(at).to_pylist()
    instant_code = np.array([int(normalize_timestamp(t or "0")) for t in instants], dtype=np.int64)
    ranked = np.lexsort((instant_code, group_code, run_id))
    run_sorted, group_sorted = run_id[ranked], group_code[ranked]
    last = np.ones(len(ranked), dtype=bool)  # the newest record of each (key, file group)
    last[:-1] = (run_sorted[1:] != run_sorted[:-1]) | (group_sorted[1:] != group_sorted[:-1])
    newest = rows[ranked[last]]
    alive = ~deleted[newest]
    live, live_runs = newest[alive], run_sorted[last][alive]
    keep = ~deleted
    keep[rows] = False
    keep[live] = True
    copies = None
    runs, counts = np.unique(live_runs, return_counts=True)
    if (counts > 1).any():
        several = np.isin(live_runs, runs[counts > 1])
        copies = records.take(pa.array(order[np.sort(live[several])], pa.int64()))
    return records, order[keep], copies


def data_partition_of(name: str) -> str:
    """A record's ``partition`` value as the data table's partition path."""
    return "" if name == NON_PARTITIONED else name
