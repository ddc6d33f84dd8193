"""Index types: what each metadata partition holds, declared once.

An index type is its name (the metadata partition), its record schema (whose ``key`` column
routes a record to a file group and orders a file), how its records are made from data files'
footers (a log file's from its records), the configuration key of its file-group count, whether it indexes chosen columns, and
whether a data instant's records are recomputed over whole data partitions (``partition_stats``:
see :mod:`metadata_table.partition_stats`) rather than made from the instant's own files.
The indexer, the partition writer, initialisation, compaction and validation all go through
:func:`index_type`; a new index type is one more entry in :data:`INDEX_TYPES` and its records
function, with no change to the code that builds, catches up, syncs or compacts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
    check_partition,
)
from metadata_table.records import (
    DataFileInfo,
    bloom_records,
    column_stats_records,
    files_records,
    partition_stats_records,
)
from timeline.config import (
    BLOOM_FILTER_FILE_GROUPS,
    COLUMN_STATS_FILE_GROUPS,
    FILES_FILE_GROUPS,
    PARTITION_STATS_FILE_GROUPS,
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

    def records(
        self, infos: Sequence[DataFileInfo], columns: Sequence[str] = (), computed: str = ""
    ) -> pa.Table:
        """The records of ``infos``; ``columns`` (empty: all) only where the type takes them."""
        chosen = list(columns) or None if self.takes_columns else None
        return self.make_records(infos, chosen, computed)

    def configured_groups(self, config: Config) -> int:
        """File groups a new partition of this type gets."""
        return config.get(self.file_groups_key)

    def comparable(self, records: pa.Table) -> list[dict[str, Any]]:
        """Records as rows to compare with a rebuild's (volatile fields left out)."""
        rows: list[dict[str, Any]] = records.drop_columns(list(self.volatile)).to_pylist()
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
    ),
    BLOOM_FILTERS: IndexType(
        BLOOM_FILTERS,
        BLOOM_FILTERS_SCHEMA,
        lambda infos, _c, _t: bloom_records(infos),
        BLOOM_FILTER_FILE_GROUPS,
        written_where_read=True,
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
}


def index_type(name: str) -> IndexType:
    """The index type of metadata partition ``name``; an unknown name is an error naming it."""
    return INDEX_TYPES[check_partition(name)]
