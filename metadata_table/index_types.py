"""Index types: what each metadata partition holds, declared once.

An index type is its name (the metadata partition), its record schema (whose ``key`` column
identifies a record), how its records are made from data files (footers, a log file's records,
or a file's rows), how they are routed to file groups, the configuration key of its file-group
count, whether it indexes chosen columns, and whether a data instant's records are recomputed
over whole data partitions (``partition_stats``: see :mod:`metadata_table.partition_stats`)
rather than made from the instant's own files.

The indexes keyed by record key (``record_index``, ``secondary_index_<column>``) are made from
data files' rows (:attr:`~metadata_table.records.DataFileInfo.rows`), routed and ordered by the
hash of their routing column (:mod:`metadata_table.layout`), and a file group's base file holds
what the latest file slices hold (:meth:`IndexType.combine`). The indexer, the partition writer,
initialisation, compaction and validation all go through :func:`index_type`; a new index type is
one more entry here and its records function, with no change to the code that builds, catches
up, syncs or compacts it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from metadata_table.layout import (
    BLOOM_FILTERS,
    BLOOM_FILTERS_SCHEMA,
    COLUMN_STATS,
    COLUMN_STATS_SCHEMA,
    FILES,
    FILES_SCHEMA,
    PARTITION_STATS,
    PARTITION_STATS_SCHEMA,
    RECORD_INDEX,
    RECORD_INDEX_SCHEMA,
    SECONDARY_INDEX_SCHEMA,
    check_partition,
    data_file_keys,
    file_group_of,
    hash_groups,
    is_secondary_index,
    memory_schema,
    secondary_column,
)
from metadata_table.records import (
    DataFileInfo,
    aggregate_partition_stats,
    bloom_records,
    column_stats_records,
    files_records,
    latest_live,
    live_order,
    partition_stats_records,
    record_index_records,
    secondary_index_records,
)
from timeline.config import (
    BLOOM_FILTER_FILE_GROUPS,
    COLUMN_STATS_FILE_GROUPS,
    DATA_FILES_PER_FILE_GROUP,
    FILES_FILE_GROUPS,
    PARTITION_STATS_FILE_GROUPS,
    RECORD_INDEX_FILE_GROUPS,
    RECORD_INDEX_KEYS_PER_FILE_GROUP,
    Config,
    ConfigKey,
)

#: records of some data files; the second argument is the chosen columns (None: all), the third
#: when they are computed (an instant time, kept by recomputed types only)
RecordsOf = Callable[[Sequence[DataFileInfo], Sequence[str] | None, str], pa.Table]


@dataclass(frozen=True)
class IndexType:
    name: str
    schema: pa.Schema
    make_records: RecordsOf
    file_groups_key: ConfigKey[int]
    takes_columns: bool = False
    #: an instant's records are its touched data partitions recomputed, not its files' records
    recomputed: bool = False
    #: fields that say when a record was made, not what it says (left out of comparisons)
    volatile: tuple[str, ...] = ()
    #: records keyed by data file and large: a Spark build lays its read tasks out by this
    #: type's file groups, and each task writes its group's base file instead of shuffling them
    written_where_read: bool = False
    #: the columns beside the record key a data file's rows are read for (None: rows are not
    #: read; the records come from footers)
    row_columns: tuple[str, ...] | None = None
    #: records per data file: the file-group count grows with the table's data files
    #: (``indexer.metadata.data.files.per.file.group``)
    keyed_by_data_file: bool = False

    @property
    def memory_schema(self) -> pa.Schema:
        """The schema of this type's records in memory (:func:`layout.memory_schema`)."""
        return memory_schema(self.name)

    @property
    def keyed_by_record(self) -> bool:
        """Records keyed by record key, made from data files' rows (record and secondary
        indexes): a base file holds what the latest file slices hold (:meth:`combine`)."""
        return self.row_columns is not None

    def records(
        self, infos: Sequence[DataFileInfo], columns: Sequence[str] = (), computed: str = ""
    ) -> pa.Table:
        """The records of ``infos``; ``columns`` (empty: all) only where the type takes them."""
        chosen = list(columns) or None if self.takes_columns else None
        return self.make_records(infos, chosen, computed)

    def combine(self, records: pa.Table, computed: str) -> pa.Table:
        """A base file's records from the records of every file it covers (made by several
        tasks, in any order): partition_stats' partial aggregates combined; for an index keyed
        by record key, what the latest file slices hold (:func:`latest_live`)."""
        if self.recomputed:
            return aggregate_partition_stats(records, computed)
        if self.keyed_by_record:
            return latest_live(records, by=self._identity)
        return records

    def combined(self, records: pa.Table, computed: str) -> tuple[pa.Table, np.ndarray | None]:
        """:meth:`combine`'s records as a table and the positions of its records in it, in file
        order (None: the table is the records, in any order): for the record index, whose live
        records come in the order of its files, a writer then takes them a row group at a time
        instead of copying them all."""
        if self.name == RECORD_INDEX:
            return live_order(records, by=self._identity)
        return self.combine(records, computed), None

    @property
    def _identity(self) -> str:
        return "key" if self.name == RECORD_INDEX else "record_key"

    def groups_of(self, records: pa.Table, groups: int, layout: int) -> np.ndarray:
        """The file group of each record (of ``groups``) in a partition of ``layout``
        (:data:`~timeline.index_state.LAYOUT`): for an index keyed by record key, by the hash
        of its routing column; else by the hash of its key or, for an index of columns keyed by
        data file (column_stats) from layout 2, of its data file's key (the key less its
        column)."""
        if self.keyed_by_record:
            return hash_groups(records.column("key_hash"), groups)
        keys = records.column("key")
        if self.keyed_by_data_file and self.takes_columns and layout >= 2:
            keys = data_file_keys(keys)
        values = keys.to_pylist()
        return np.fromiter((file_group_of(k, groups) for k in values), np.int64, len(values))

    def configured_groups(
        self, config: Config, records: int | None = None, data_files: int | None = None
    ) -> int:
        """File groups a new partition of this type gets: for an index keyed by data file, at
        least one per ``indexer.metadata.data.files.per.file.group`` of the table's
        ``data_files``; for an index keyed by record key with no count configured, one per
        ``indexer.record.index.keys.per.file.group`` of the table's ``records`` (at least one)."""
        count = config.get(self.file_groups_key)
        if self.keyed_by_data_file:
            return max(count, -(-(data_files or 0) // config.get(DATA_FILES_PER_FILE_GROUP)))
        if count or not self.keyed_by_record:
            return count
        per_group = config.get(RECORD_INDEX_KEYS_PER_FILE_GROUP)
        return max(1, -(-(records or 0) // per_group))

    def comparable_table(self, records: pa.Table) -> pa.Table:
        """Records to compare with a rebuild's: volatile fields left out."""
        return records.drop_columns(list(self.volatile))

    def comparable(self, records: pa.Table) -> list[dict[str, Any]]:
        """:meth:`comparable_table` as rows."""
        rows: list[dict[str, Any]] = self.comparable_table(records).to_pylist()
        return rows


INDEX_TYPES: dict[str, IndexType] = {
    FILES: IndexType(
        FILES, FILES_SCHEMA, lambda infos, _c, _t: files_records(infos), FILES_FILE_GROUPS
    ),
    COLUMN_STATS: IndexType(
        COLUMN_STATS,
        COLUMN_STATS_SCHEMA,
        lambda infos, columns, _: column_stats_records(infos, columns),
        COLUMN_STATS_FILE_GROUPS,
        takes_columns=True,
        keyed_by_data_file=True,
    ),
    BLOOM_FILTERS: IndexType(
        BLOOM_FILTERS,
        BLOOM_FILTERS_SCHEMA,
        lambda infos, _c, _t: bloom_records(infos),
        BLOOM_FILTER_FILE_GROUPS,
        written_where_read=True,
        keyed_by_data_file=True,
    ),
    PARTITION_STATS: IndexType(
        PARTITION_STATS,
        PARTITION_STATS_SCHEMA,
        partition_stats_records,
        PARTITION_STATS_FILE_GROUPS,
        takes_columns=True,
        recomputed=True,
        volatile=("computed",),
    ),
    RECORD_INDEX: IndexType(
        RECORD_INDEX,
        RECORD_INDEX_SCHEMA,
        lambda infos, _c, _t: record_index_records(infos),
        RECORD_INDEX_FILE_GROUPS,
        # which instant last wrote a record says nothing of where it is: an update in place
        # writes no record, and a rebuild's records carry their file slice's instant
        volatile=("instant",),
        row_columns=(),
    ),
}


@functools.lru_cache(maxsize=256)
def _secondary_index(partition: str) -> IndexType:
    column = secondary_column(partition)
    return IndexType(
        partition,
        SECONDARY_INDEX_SCHEMA,
        lambda infos, _c, _t: secondary_index_records(infos, column),
        RECORD_INDEX_FILE_GROUPS,
        volatile=("instant",),
        row_columns=(column,),
    )


def index_type(name: str) -> IndexType:
    """The index type of metadata partition ``name``; an unknown name is an error naming it."""
    if is_secondary_index(name):
        return _secondary_index(name)
    return INDEX_TYPES[check_partition(name)]
