"""The metadata table's on-disk layout (our format; docs/architecture.md §7.8 for what Hudi does).

It lives in a folder of its own, ``.hoodie/.async-indexer`` (see :mod:`timeline.index_state` for
why not Hudi's ``.hoodie/metadata``)::

    <base>/.hoodie/.async-indexer/partitions.json           the partitions' states
    <base>/.hoodie/.async-indexer/.hoodie/                  its own timeline (deltacommits,
                                                            compactions)
    <base>/.hoodie/.async-indexer/<partition>/<fg>_<T>.parquet  base file of file group fg, made
                                                            by MDT instant T (initialisation,
                                                            compaction, index build); sorted by key
    <base>/.hoodie/.async-indexer/<partition>/.<fg>.log.<D>     log file: the records data instant
                                                            D wrote to file group fg (one per
                                                            deltacommit and file group), sorted

Partitions are ``files``, ``column_stats``, ``bloom_filters``, ``partition_stats``,
``record_index`` and one ``secondary_index_<column>`` per indexed column; file group ids are
``files-0000-0``, ``col-stats-0001-0``, ``bloom-filters-0003-0``, ``partition-stats-0000-0``,
``record-index-0002-0``, ``secondary-index-0000-0`` (defaults 1 / 2 / 4 / 1 groups; the record
and secondary indexes get one group per ``indexer.record.index.keys.per.file.group`` records of
the table). A record of a
partition keyed by data file goes to file group ``crc32(utf8(key)) mod n`` (the same in every
process and language); in a ``column_stats`` partition of layout 2
(:data:`timeline.index_state.LAYOUT`, recorded per partition in the state), the key is its data
file's part (:func:`data_file_keys`), so one data file's stats are in one group. The partitions keyed by record key (:func:`keyed_by_record`) route by
:func:`timeline.hashing.key_hash64` instead (of the record key; of the value for a secondary
index): group ``(h >> 32) * n >> 32``, so each group holds one range of hashes, and their files
are sorted by that hash (its top 32 bits are the ``key_hash`` column), so that a key's record is
found by a binary search in the one row group whose ``key_hash`` range holds it.

A base file records in its Parquet key-value metadata ``aix.covers_upto``: it contains every
record of data instants up to and including that time. Readers apply, on top of the newest base
file of a group, the log files of data instants that are *completed on the data timeline* and
later than that watermark.

Files are written in row groups of :data:`ROW_GROUP_ROWS` records; a prefix read decodes only
the row groups whose ``key`` statistics may hold the prefix. Keys keep one partition's and one
column's records together so a prefix scan finds them:
``files`` and ``bloom_filters``: ``enc(partition)|enc(file)``; ``column_stats``:
``enc(column)|enc(partition)|enc(file)``; ``partition_stats``: ``enc(column)|enc(partition)``;
``record_index``: the record key; a secondary index: ``enc(value)|enc(record key)``, where
``enc`` percent-encodes ``%`` and ``|`` (an unpartitioned table's partition is ``.``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from timeline.errors import ConfigError, UnknownPartitionError
from timeline.fs_view import parquet_file, parquet_metadata, read_parquet_file
from timeline.hashing import key_hash64, stable_hash
from timeline.index_state import INDEX_FOLDER
from timeline.storage import Storage

METADATA_FOLDER = INDEX_FOLDER
FILES = "files"
COLUMN_STATS = "column_stats"
BLOOM_FILTERS = "bloom_filters"
PARTITION_STATS = "partition_stats"
RECORD_INDEX = "record_index"
#: a secondary index's partition is this prefix and its column's name
SECONDARY_INDEX = "secondary_index"
SECONDARY_INDEX_PREFIX = f"{SECONDARY_INDEX}_"
#: the index types with a fixed name (secondary indexes are named by their column)
PARTITIONS = (FILES, COLUMN_STATS, BLOOM_FILTERS, PARTITION_STATS, RECORD_INDEX)
#: what ``--index-types`` takes: the fixed names, and ``secondary_index`` with ``--columns``
INDEX_TYPE_NAMES = (*PARTITIONS, SECONDARY_INDEX)
COVERS_UPTO = b"aix.covers_upto"
NOTHING = "00000000000000000"  # covers no data instant
NON_PARTITIONED = "."


def data_partition(name: str) -> str:
    """The data table's partition path of a record's ``partition`` value."""
    return "" if name == NON_PARTITIONED else name


_FG_PREFIX = {
    FILES: "files",
    COLUMN_STATS: "col-stats",
    BLOOM_FILTERS: "bloom-filters",
    PARTITION_STATS: "partition-stats",
    RECORD_INDEX: "record-index",
    SECONDARY_INDEX: "secondary-index",
}
DEFAULT_FILE_GROUPS = {FILES: 1, COLUMN_STATS: 2, BLOOM_FILTERS: 4, PARTITION_STATS: 1}
_BASE = re.compile(r"^(?P<fg>[a-z-]+-\d{4}-0)_(?P<t>\d{17})\.parquet$")
_LOG = re.compile(r"^\.(?P<fg>[a-z-]+-\d{4}-0)\.log\.(?P<d>\d{17}|\d{14})$")
#: column names a secondary index can be named after (its partition is a folder and a name in
#: the index's state file)
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_secondary_index(name: str) -> bool:
    return name.startswith(SECONDARY_INDEX_PREFIX) and bool(
        _COLUMN_NAME.match(name[len(SECONDARY_INDEX_PREFIX) :])
    )


def secondary_index_partition(column: str) -> str:
    """The partition of the secondary index on ``column``."""
    if not _COLUMN_NAME.match(column):
        raise UnknownPartitionError(
            f"{SECONDARY_INDEX_PREFIX}{column}",
            PARTITIONS,
            "a secondary index is on a top-level column named with letters, digits and "
            f"underscores; {column!r} is not such a name",
        )
    return f"{SECONDARY_INDEX_PREFIX}{column}"


def secondary_column(partition: str) -> str:
    """The column a secondary index partition indexes."""
    return check_partition(partition)[len(SECONDARY_INDEX_PREFIX) :]


def index_type_name(partition: str) -> str:
    """The index type of a partition: its name, or ``secondary_index`` for any secondary index."""
    return SECONDARY_INDEX if is_secondary_index(partition) else check_partition(partition)


def keyed_by_column(partition: str) -> bool:
    """Whether a partition's keys start with the column they describe (:func:`column_prefix`):
    the stats partitions."""
    return partition in (COLUMN_STATS, PARTITION_STATS)


def key_columns(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The column each key of a :func:`keyed_by_column` partition starts with, as
    :func:`column_prefix` writes it (without the ``|``)."""
    return pc.list_element(pc.split_pattern(keys, "|", max_splits=1), 0)


def data_file_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The :func:`file_key` in each :func:`column_stats_key` (what follows its column)."""
    return pc.list_element(pc.split_pattern(keys, "|", max_splits=1), 1)


def keyed_by_record(partition: str) -> bool:
    """Whether a partition's records are keyed by record key (routed and ordered by its hash)."""
    return partition == RECORD_INDEX or is_secondary_index(partition)


def expand_index_types(
    names: Iterable[str], columns: Sequence[str] = (), existing: Iterable[str] = ()
) -> list[str]:
    """Index type names as partitions: ``secondary_index`` is one secondary index per column in
    ``columns`` (with none, the ``existing`` secondary indexes, as a drop takes it); every other
    name must be a partition's. An unknown name or column name is an error naming it."""
    out: list[str] = []
    for name in names:
        if name != SECONDARY_INDEX:
            out.append(check_partition(name))
        elif columns:
            out.extend(secondary_index_partition(c) for c in columns)
        else:
            found = [p for p in existing if is_secondary_index(p)]
            if not found and not existing:
                raise ConfigError(
                    "--columns",
                    "secondary_index needs the columns to index (--columns a,b: one index each)",
                )
            out.extend(found)
    return list(dict.fromkeys(out))


def requested_partitions(
    names: Sequence[str], columns: Sequence[str], present: Collection[str], *, with_files: bool
) -> list[str]:
    """The partitions a build of index types ``names`` makes, checked: at least one known name;
    ``files`` first when ``with_files`` and the table has no ``files`` partition among
    ``present`` (completed or being built), as Hudi requires it of every metadata partition; and
    ``record_index`` built with or before a secondary index, which finds records through it (as
    in Hudi)."""
    if not names:
        raise ConfigError("--index-types", "name at least one of " + ", ".join(INDEX_TYPE_NAMES))
    types = expand_index_types(dict.fromkeys(names), columns)
    if with_files and FILES not in types and FILES not in present:
        types = [FILES, *types]
    secondary = any(is_secondary_index(t) for t in types)
    if secondary and RECORD_INDEX not in types and RECORD_INDEX not in present:
        raise ConfigError(
            "--index-types",
            "a secondary index finds records through record_index, which this table does not "
            "have: add record_index to --index-types, or build it first",
        )
    return types


def dropped_partitions(names: Iterable[str], present: Collection[str]) -> list[str]:
    """The partitions a drop of index types ``names`` removes (``secondary_index`` alone: every
    one ``present``), refused when it would leave a secondary index without the
    ``record_index`` it finds records through."""
    types = expand_index_types(names, existing=present)
    orphans = [p for p in present if is_secondary_index(p) and p not in types]
    if RECORD_INDEX in types and orphans:
        raise ConfigError(
            "--index-types",
            f"{', '.join(orphans)} find records through {RECORD_INDEX} and would be left "
            f"unable to answer: drop them with it (--index-types {RECORD_INDEX},"
            f"{','.join(orphans)}), or keep {RECORD_INDEX}",
        )
    return types


def check_partition(name: str) -> str:
    if name not in PARTITIONS and not is_secondary_index(name):
        raise UnknownPartitionError(name, INDEX_TYPE_NAMES)
    return name


def file_group_id(partition: str, index: int) -> str:
    return f"{_FG_PREFIX[index_type_name(partition)]}-{index:04d}-0"


def file_group_of(key: str, groups: int) -> int:
    return stable_hash(key) % groups


def key_hashes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`key_hash64` of record keys (or secondary values), as uint64."""
    return key_hash64(values)


def hash_groups(top: np.ndarray | pa.Array | pa.ChunkedArray, groups: int) -> np.ndarray:
    """The file group (of ``groups``) of each ``key_hash`` (a 64-bit hash's top 32 bits):
    ``key_hash * groups >> 32``, so each group holds a contiguous range of hashes."""
    if not isinstance(top, np.ndarray):
        top = top.to_numpy() if isinstance(top, pa.Array) else top.combine_chunks().to_numpy()
    top = top.astype(np.uint64)
    return ((top * np.uint64(groups)) >> np.uint64(32)).astype(np.int64)


def hash_order(top: np.ndarray, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The permutation that orders rows by (``top``, ``keys``): a stable numpy sort of the 32-bit
    hashes (the runs several tasks sorted this way merge in it at little cost), then the few
    rows that share a hash ordered by key."""
    return hash_sorted(top, keys)[0]


def hash_sorted(top: np.ndarray, keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`hash_order`, and ``top`` in that order (gathered once, for a caller that needs
    the sorted hashes too)."""
    order = _stable_argsort32(top)
    ordered = top[order]
    tie = ordered[1:] == ordered[:-1]
    if not tie.any():
        return order, ordered
    tied = np.zeros(len(order), dtype=bool)
    tied[:-1] |= tie
    tied[1:] |= tie
    at = np.flatnonzero(tied)  # positions in runs of one hash: sorted by (hash, key) in place
    rows = order[at]
    work = pa.table({"h": pa.array(ordered[at]), "k": keys.take(pa.array(rows))})
    # rows move within runs of one hash only: the sorted hashes stay as they are
    order[at] = rows[pc.sort_indices(work, [("h", "ascending"), ("k", "ascending")]).to_numpy()]
    return order, ordered


def _stable_argsort32(top: np.ndarray) -> np.ndarray:
    """``np.argsort(top, kind="stable")`` of values in [0, 2**32). Rows in a few sorted runs
    (merged task outputs) take numpy's timsort, which merges runs; rows in no order are sorted
    as one 64-bit word a row, the value above its position, by numpy's unstable sort (equal
    values then keep their order, as the positions break the ties): 190 against 630 ms for 5M
    hashes here, where numpy's stable sort of the values and two radix passes over their 16-bit
    halves take 810 and 630."""
    n = len(top)
    if n < 2 or n >= 2**32 or np.count_nonzero(top[1:] < top[:-1]) < n // 64:
        return np.argsort(top, kind="stable")
    packed = top.astype(np.uint64) << np.uint64(32)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)


def gather(records: pa.Table, order: np.ndarray) -> pa.Table:
    """``records.take(order)``, the string and binary columns without nulls whose values all
    have one length (the usual record keys: zero-padded ids, hashes, UUIDs) moved by numpy's
    take as rows of that width, one random read a row, where Arrow's take reads the offsets and
    the bytes apart (190 against 560 ms for 5M keys of 12 bytes in hash order here)."""
    return Gather(records).take(order)


class Gather:
    """:func:`gather` from one table any number of times (a writer taking its records in file
    order a row group at a time): its columns are combined into one chunk and checked for one
    width once."""

    def __init__(self, records: pa.Table) -> None:
        self.schema = records.schema
        self._columns: list[tuple[pa.Array, np.ndarray | None]] = []
        for column in records.columns:
            array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
            self._columns.append((array, _fixed_width_rows(array)))

    def take(self, order: np.ndarray) -> pa.Table:
        """The rows at ``order`` (positions), as a table of one chunk."""
        indices: pa.Array | None = None
        columns = []
        for array, rows in self._columns:
            kind = array.type
            large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
            width = 0 if rows is None else rows.dtype.itemsize
            if rows is not None and (large or (len(order) + 1) * width < 2**31):
                data = np.take(rows, order).view(np.uint8)
                step = np.int64 if large else np.int32
                offsets = np.arange(0, (len(order) + 1) * width, width, dtype=step)
                buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
                columns.append(pa.Array.from_buffers(kind, len(order), buffers))
            else:
                if indices is None:
                    indices = pa.array(order, pa.int64())
                columns.append(array.take(indices))
        return pa.Table.from_arrays(columns, schema=self.schema)


def _fixed_width_rows(array: pa.Array) -> np.ndarray | None:
    """A string or binary array without nulls whose values all have one length, as numpy rows
    of that width (a view of its bytes); None for any other array."""
    kind = array.type
    large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if not (large or pa.types.is_string(kind) or pa.types.is_binary(kind)):
        return None
    n = len(array)
    if array.null_count or n == 0:
        return None
    _, offset_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offset_buffer, np.int64 if large else np.int32)
    offsets = offsets[array.offset : array.offset + n + 1]
    lengths = np.diff(offsets)
    width = int(lengths[0])
    if width == 0 or lengths.min() != width or lengths.max() != width:
        return None
    start = int(offsets[0])
    return np.frombuffer(data_buffer, np.uint8)[start : start + n * width].view(f"V{width}")


def stored_hashes(hashes: np.ndarray) -> pa.Array:
    """The ``key_hash`` column: each hash's top 32 bits, as int64."""
    return pa.array((hashes >> np.uint64(32)).astype(np.int64), pa.int64())


def enc(part: str) -> str:
    return part.replace("%", "%25").replace("|", "%7C")


def partition_prefix(partition: str) -> str:
    """What the keys of a data partition's files start with (see :func:`file_key`)."""
    return f"{enc(partition or NON_PARTITIONED)}|"


def file_key(partition: str, file_name: str) -> str:
    return f"{partition_prefix(partition)}{enc(file_name)}"


def column_stats_key(column: str, partition: str, file_name: str) -> str:
    return f"{enc(column)}|{file_key(partition, file_name)}"


def _encoded(values: Any) -> Any:
    """:func:`enc` on an Arrow array."""
    return pc.replace_substring(pc.replace_substring(values, "%", "%25"), "|", "%7C")


def partition_stats_keys(columns: pa.ChunkedArray, partitions: pa.ChunkedArray) -> pa.ChunkedArray:
    """``partition_stats`` keys of records' ``column_name`` and ``partition`` values (already
    ``.`` for an unpartitioned table): :func:`enc` on Arrow arrays."""
    return pc.binary_join_element_wise(_encoded(columns), _encoded(partitions), "|")


def column_stats_keys(columns: pa.Array, partitions: pa.Array, files: pa.Array) -> pa.Array:
    """:func:`column_stats_key` on Arrow arrays (``partitions`` already ``.`` for an
    unpartitioned table)."""
    return pc.binary_join_element_wise(
        _encoded(columns), _encoded(partitions), _encoded(files), "|"
    )


def column_prefix(column: str) -> str:
    return f"{enc(column)}|"


def base_file_name(fg: str, instant_time: str) -> str:
    return f"{fg}_{instant_time}.parquet"


def log_file_name(fg: str, data_instant: str) -> str:
    return f".{fg}.log.{data_instant}"


@dataclass(frozen=True)
class MetadataFile:
    partition: str
    file_group: str
    instant: str  # MDT instant of a base file, data instant of a log file
    is_log: bool
    #: size and modification time as listed (None: not listed): which version of the file
    stamp: tuple[int, float | None] | None = field(default=None, compare=False)

    @property
    def path(self) -> str:
        name = (
            log_file_name(self.file_group, self.instant)
            if self.is_log
            else base_file_name(self.file_group, self.instant)
        )
        return f"{self.partition}/{name}"

    @classmethod
    def parse(
        cls, partition: str, name: str, stamp: tuple[int, float | None] | None = None
    ) -> MetadataFile | None:
        if match := _BASE.match(name):
            return cls(partition, match["fg"], match["t"], False, stamp)
        if match := _LOG.match(name):
            return cls(partition, match["fg"], match["d"], True, stamp)
        return None


# --- record schemas (one per partition) ----------------------------------------------------------

FILES_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("partition", pa.string()),
        ("file_name", pa.string()),
        ("size", pa.int64()),
        ("is_deleted", pa.bool_()),
        ("instant", pa.string()),
    ]
)

#: min/max keep their type: one field per kind of value, ``value_type`` says which is set.
VALUE_TYPE = pa.struct(
    [
        ("int", pa.int64()),
        ("float", pa.float64()),
        ("string", pa.string()),
        ("binary", pa.binary()),
        ("bool", pa.bool_()),
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us")),
        ("decimal", pa.string()),
    ]
)

COLUMN_STATS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("column_name", pa.string()),
        ("partition", pa.string()),
        ("file_name", pa.string()),
        ("value_type", pa.string()),
        ("min_value", VALUE_TYPE),
        ("max_value", VALUE_TYPE),
        ("null_count", pa.int64()),
        ("value_count", pa.int64()),
        ("total_size", pa.int64()),
        ("total_uncompressed_size", pa.int64()),
        ("is_deleted", pa.bool_()),
        ("instant", pa.string()),
    ]
)

BLOOM_FILTERS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("partition", pa.string()),
        ("file_name", pa.string()),
        ("bloom_type", pa.string()),
        ("bloom_filter", pa.binary()),
        ("is_deleted", pa.bool_()),
        ("instant", pa.string()),
    ]
)

#: per data partition and column: the column stats of the files of the partition's latest slices,
#: aggregated (``file_count`` files had stats for the column). ``computed`` is when the record was
#: worked out (an instant time): of several records of one key the newest computed wins, since
#: each is recomputed from the whole partition as the table was then (see
#: :mod:`metadata_table.partition_stats`).
PARTITION_STATS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("column_name", pa.string()),
        ("partition", pa.string()),
        ("value_type", pa.string()),
        ("min_value", VALUE_TYPE),
        ("max_value", VALUE_TYPE),
        ("null_count", pa.int64()),
        ("value_count", pa.int64()),
        ("file_count", pa.int64()),
        ("total_size", pa.int64()),
        ("is_deleted", pa.bool_()),
        ("instant", pa.string()),
        ("computed", pa.string()),
    ]
)

#: record key -> where the record lives: its data partition and file group (the file slice is
#: the group's latest, which the snapshot's listing knows, so a commit that only updates records in
#: place writes nothing here). ``key_hash``: the top 32 bits of the key's 64-bit hash, by which
#: files are routed and sorted.
RECORD_INDEX_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("key_hash", pa.int64()),
        ("partition", pa.string()),
        ("file_id", pa.string()),
        ("is_deleted", pa.bool_()),
        ("instant", pa.string()),
    ]
)

#: a column's value -> the records holding it, one record per (value, record key): ``value`` is
#: the value as text (:func:`metadata_table.records.value_texts`), ``key_hash`` the top 32 bits
#: of the value's hash (every record of one value is in one file group, contiguous), and the
#: record's data partition and file group, by which a commit's changes are found
SECONDARY_INDEX_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("key_hash", pa.int64()),
        ("value", pa.string()),
        ("record_key", pa.string()),
        ("partition", pa.string()),
        ("file_id", pa.string()),
        ("is_deleted", pa.bool_()),
        ("instant", pa.string()),
    ]
)

SCHEMAS = {
    FILES: FILES_SCHEMA,
    COLUMN_STATS: COLUMN_STATS_SCHEMA,
    BLOOM_FILTERS: BLOOM_FILTERS_SCHEMA,
    PARTITION_STATS: PARTITION_STATS_SCHEMA,
    RECORD_INDEX: RECORD_INDEX_SCHEMA,
    SECONDARY_INDEX: SECONDARY_INDEX_SCHEMA,
}


def schema_of(partition: str) -> pa.Schema:
    """The record schema of a metadata partition."""
    return SCHEMAS[index_type_name(partition)]


#: the columns of a partition keyed by record key that repeat a few values (held as dictionary
#: arrays in memory, so that a build sorting millions of records moves indices, not strings)
REPEATED = ("partition", "file_id", "instant")


def memory_schema(partition: str) -> pa.Schema:
    """The schema a partition's records have in memory: its record schema, with the
    :data:`REPEATED` columns of a partition keyed by record key as dictionaries. Files hold
    the record schema (a reader gets strings)."""
    schema = schema_of(partition)
    if not keyed_by_record(partition):
        return schema
    text = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([pa.field(f.name, text) if f.name in REPEATED else f for f in schema])


def routing_column(partition: str) -> str:
    """The column whose hash routes and orders a partition keyed by record key."""
    return "value" if is_secondary_index(partition) else "key"


#: rows per row group of a metadata file: its key statistics let a prefix read (one column's
#: stats, one partition's filters) decode only the row groups that may hold the prefix
ROW_GROUP_ROWS = 16_384


def file_order(partition: str, records: pa.Table) -> pa.Array | None:
    """The permutation that puts records in the order a file of ``partition`` keeps them: by
    key, or, for a partition keyed by record key, by ``key_hash`` (the routing column's hash)
    and then by key (:func:`hash_order`); None when they are in that order already."""
    if records.num_rows < 2:
        return None
    if not keyed_by_record(partition):
        keys = records.column("key")
        if pc.all(pc.less_equal(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py():
            return None
        return pc.sort_indices(keys)
    top = records.column("key_hash").to_numpy()
    if _in_hash_order(top, records.column("key")):
        return None  # merged and sorted by a build's write step
    return pa.array(hash_order(top, records.column("key")), pa.int64())


def in_file_order(partition: str, records: pa.Table) -> pa.Table:
    """Records in the order a file of ``partition`` keeps them (:func:`file_order`); records
    already in that order are returned as they are."""
    order = file_order(partition, records)
    return records if order is None else gather(records, order.to_numpy())


#: a table cut into more pieces than its rows over this (and more than 64) is not runs of a
#: build's workers: it is sorted (records in no order make a piece of about every two rows; a
#: column_stats file group of a 1,000,000-file build, 22,000 pieces of 1.1M records)
_MOST_PIECES = 8


def _merged_runs(partition: str, records: pa.Table) -> pa.Table | None:
    """Records of a partition ordered by key that come as runs each in that order (the parts a
    build's workers sorted, over data files taken in key order), put in order without copying
    them: cut where the key goes down or, in a stats partition, where the column changes, the
    pieces laid end to end by their first keys, when no two of them overlap; else None (the
    records need a sort)."""
    keys = records.column("key")
    n = len(keys)
    if n < 2 or keyed_by_record(partition):
        return None
    cut = pc.less(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    if keyed_by_column(partition):
        cut = cut | _column_changes(_columns_of(records))
    starts = np.concatenate([[0], np.flatnonzero(cut) + 1])
    if len(starts) > max(64, n // _MOST_PIECES):
        return None
    ends = np.append(starts[1:], n)
    firsts, lasts = keys.take(pa.array(starts)), keys.take(pa.array(ends - 1))
    order = pc.sort_indices(firsts)
    if len(order) > 1:
        before, after = order.slice(0, len(order) - 1), order.slice(1)
        if not pc.all(pc.less(lasts.take(before), firsts.take(after))).as_py():
            return None
    pieces = [records.slice(starts[i], ends[i] - starts[i]) for i in order.to_pylist()]
    return pa.concat_tables(pieces)


def _in_hash_order(top: np.ndarray, keys: pa.Array | pa.ChunkedArray) -> bool:
    """Whether rows are ordered by (``top``, ``keys``) already (keys compared only where two
    rows share a hash)."""
    if not bool(np.all(top[1:] >= top[:-1])):
        return False
    ties = np.flatnonzero(top[1:] == top[:-1])
    if not len(ties):
        return True
    first = keys.take(pa.array(ties))
    second = keys.take(pa.array(ties + 1))
    return bool(pc.all(pc.less_equal(first, second)).as_py())


#: columns of the partitions keyed by data file or column whose values are (nearly) all
#: distinct in a file: written plain, as a dictionary of them saves nothing (a column_stats file
#: group of 550,000 records: 6.4 MB written in 458 ms, read back 15% faster, against 8.8 MB
#: in 550 ms with a dictionary tried on every column)
_DISTINCT = frozenset({"key", "file_name", "min_value", "max_value", "bloom_filter"})


def _write_options(partition: str, schema: pa.Schema) -> dict[str, Any]:
    """The Parquet writer's options for records of ``partition`` (of ``schema``)."""
    if not keyed_by_record(partition):
        # a dictionary for the columns of few values (names, counts, instants); nested ones none
        return {
            "use_dictionary": [
                f.name for f in schema if f.name not in _DISTINCT and not pa.types.is_nested(f.type)
            ]
        }
    # hashes in order: deltas; keys and values in hash order: plain; the rest: few distinct values
    plain = {"key", "value", "record_key"}
    return {
        "use_dictionary": [f.name for f in schema if f.name not in plain | {"key_hash"}],
        "column_encoding": {"key_hash": "DELTA_BINARY_PACKED"},
        # a lookup picks row groups by their key_hash range; no other column's bounds are read
        "write_statistics": ["key_hash"],
    }


def _columns_of(records: pa.Table) -> pa.ChunkedArray:
    """The column each record of a stats partition describes: its ``column_name`` or, when a
    record has none (a tombstone names its file alone), the column every key starts with
    (:func:`key_columns`, which splits each key: 85 ms against none for a column_stats file
    group of 550,000 records). Either changes where the other does (:func:`enc` is one to one)."""
    if "column_name" in records.column_names:
        names = records.column("column_name")
        if not names.null_count:
            return names
    return key_columns(records.column("key"))


def _column_changes(columns: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Of a stats partition's records' columns (:func:`_columns_of`, at least two), whether each
    one differs from the one before it (one flag per record after the first)."""
    changed = pc.not_equal(columns.slice(1), columns.slice(0, len(columns) - 1))
    return np.asarray(changed.to_numpy(zero_copy_only=False), dtype=bool)


def _row_groups(
    partition: str, rows: int, columns: pa.ChunkedArray | pa.Array | None
) -> list[tuple[int, int]]:
    """(start, end) of each row group of a file of ``partition`` of ``rows`` records: at most
    :data:`ROW_GROUP_ROWS` rows each and, in a stats partition (whose records' columns, in file
    order, are ``columns``), each column's records in row groups of their own (a read of one
    column opens no other's, and the groups' ``value_type`` statistics tell its value kind)."""
    starts = [0, rows]
    if columns is not None and rows > 1:
        starts = [0, *(np.flatnonzero(_column_changes(columns)) + 1), rows]
    return [
        (at, min(at + ROW_GROUP_ROWS, end))
        for start, end in pairwise(starts)
        for at in range(start, end, ROW_GROUP_ROWS)
    ]


def write_records(
    storage: Storage,
    path: str,
    records: pa.Table,
    covers_upto: str | None = None,
    partition: str | None = None,
    order: np.ndarray | None = None,
) -> int:
    """Write records as one Parquet file (create-if-absent), in file order
    (:func:`file_order` of the partition the path is in; with ``order``, the records at those
    positions, in that order); returns its size. Sorted runs that do not overlap (a build's)
    are laid end to end without a copy; other records out of order are put in order one row
    group at a time, so no sorted copy of them all is made (a 100,000-file build's
    column_stats file group holds 190 MB)."""
    partition = partition or path.split("/", 1)[0]
    if order is None:
        merged = _merged_runs(partition, records)
        if merged is not None:
            records = merged
        else:
            sort = file_order(partition, records)
            order = None if sort is None else sort.to_numpy()
    columns = _columns_of(records) if keyed_by_column(partition) else None
    if order is not None and columns is not None:
        columns = columns.take(pa.array(order))
    groups = _row_groups(partition, records.num_rows if order is None else len(order), columns)
    sink = pa.BufferOutputStream()
    if keyed_by_record(partition):
        # dictionary columns written as the record schema's strings (no Arrow schema stored,
        # which would make readers get dictionaries); the watermark as key-value metadata
        schema = records.schema.remove_metadata()
        options: dict[str, Any] = {"store_schema": False, **_write_options(partition, schema)}
    else:
        if covers_upto is not None:
            records = records.replace_schema_metadata({COVERS_UPTO: covers_upto.encode()})
        schema = records.schema
        options = _write_options(partition, schema)
    taken = None if order is None else (Gather(records), order)

    def piece(start: int, end: int) -> pa.Table:
        if taken is None:
            return records.slice(start, end - start)
        rows, positions = taken
        return rows.take(positions[start:end])

    with pq.ParquetWriter(sink, schema, compression="zstd", **options) as writer:
        for start, end in groups or [(0, 0)]:  # (no records: one empty row group)
            writer.write_table(piece(start, end), row_group_size=ROW_GROUP_ROWS)
        if covers_upto is not None and keyed_by_record(partition):
            writer.add_key_value_metadata({COVERS_UPTO.decode(): covers_upto})
    data = sink.getvalue().to_pybytes()
    storage.create(path, data)
    return len(data)


def read_records(
    storage: Storage, path: str, columns: list[str] | None = None, prefix: str | None = None
) -> tuple[pa.Table, str | None]:
    """Records of one file and, for a base file, its watermark. With ``prefix``, only records
    whose key starts with it, from the row groups whose key range may hold such keys."""
    file = parquet_file(storage, path)
    groups = None if prefix is None else _row_groups_with(file.metadata, prefix)
    table = read_parquet_file(file, path, columns, groups)
    meta = table.schema.metadata or {}
    covers = meta.get(COVERS_UPTO)
    table = table.replace_schema_metadata(None)
    if prefix and table.num_rows:
        table = table.filter(pc.starts_with(table.column("key"), prefix))
    return table, covers.decode() if covers else None


def column_values(storage: Storage, path: str, column: str, prefix: str) -> set[Any] | None:
    """The values ``column`` takes in the row groups of a file whose keys may start with
    ``prefix``, from the groups' statistics alone: None when a group has no statistics for it
    or holds more than one value (or nulls only). A group of no rows (an empty file's) holds
    none."""
    metadata = parquet_metadata(storage, path)
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if column not in names:
        return None
    at = names.index(column)
    groups = _row_groups_with(metadata, prefix)
    values = set()
    for index in range(metadata.num_row_groups) if groups is None else groups:
        if metadata.row_group(index).num_rows == 0:
            continue
        stats = metadata.row_group(index).column(at).statistics
        if stats is None or not stats.has_min_max or stats.min != stats.max:
            return None
        values.add(stats.min)
    return values


def _row_groups_with(metadata: pq.FileMetaData, prefix: str) -> list[int] | None:
    """Row groups whose ``key`` statistics do not rule out a key starting with ``prefix`` (a key
    at or above the prefix that does not start with it is above every key that does); None
    (every group) when a group of rows has no statistics."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if "key" not in names:
        return None
    column = names.index("key")
    groups = []
    for index in range(metadata.num_row_groups):
        if metadata.row_group(index).num_rows == 0:
            continue  # (an empty file's one group, which has no statistics)
        stats = metadata.row_group(index).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        low, high = stats.min, stats.max
        if high >= prefix and (low < prefix or low.startswith(prefix)):
            groups.append(index)
    return groups
