"""Record keys stored in more than one file group, and their copies a delete should remove.

Keys are global once a table has a record index (every writer of ours then tags a key wherever it
lives). Before, a writer tags within the partition a record goes to, as Hudi's bloom index does:
an upsert that moves a key to another partition leaves the old copy where it was. A record index
keeps one location per key, so its build refuses such a table, and this module says which keys
and which copies. The copy kept is the newest, as an upsert would keep it: the largest value of
the table's precombine field, else (or on a tie) the one written last; the others are the stale
copies. Their stored rows (the data columns, no meta columns) are what ``indexer-write
--operation delete`` takes: without a record index, a delete finds a key in the partition its
row names, so each stale copy goes and the newest stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.maintenance import duplicate_keys
from metadata_table.records import RECORD_KEY, virtual_keys, with_record_keys
from timeline.errors import TableConfigError
from timeline.fs_view import FileSystemView, read_parquet
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE, TYPE, TableType

META_PREFIX = "_hoodie_"


@dataclass(frozen=True)
class Duplicates:
    """Every copy of the keys in more than one file group (``record_key``, ``partition_path``,
    ``file_id``, ``instant``, ``newest``: whether it is the copy kept), and the stored rows of
    the others (``stale``, the data columns)."""

    copies: pa.Table
    stale: pa.Table

    @property
    def keys(self) -> int:
        return len(pc.unique(self.copies.column("record_key"))) if self.copies.num_rows else 0


def find_duplicates(table: Table) -> Duplicates:
    """The keys the latest file slices of ``table`` hold in more than one file group, and the
    stale copies' rows (see the module). A merge-on-read table's rows are merged from log files,
    which this reads not: refused by name."""
    if table.table_config.table_type is TableType.MERGE_ON_READ:
        raise TableConfigError(
            table.storage.uri(PROPERTIES_FILE),
            f"{TYPE}=MERGE_ON_READ: its rows are merged from log files, which this does not "
            "read; resolve duplicate keys with Apache Hudi",
        )
    timeline = table.timeline.load()
    copies = duplicate_keys(table, timeline)
    if not copies.num_rows:
        return Duplicates(copies.append_column("newest", pa.array([], pa.bool_())), pa.table({}))
    view = FileSystemView(table.timeline, timeline)
    latest: dict[tuple[object, ...], str] = {
        (b.partition_path, b.file_id): b.path for b in view.latest_base_files()
    }
    keygen = virtual_keys(table)
    precombine = table.table_config.precombine_field
    parts = []
    groups = sorted(set(_columns(copies, "partition_path", "file_id")))
    for partition, file_id in groups:
        path = latest[(partition, file_id)]
        here = copies.filter(
            pc.and_(
                pc.equal(copies["partition_path"], partition), pc.equal(copies["file_id"], file_id)
            )
        )
        rows = read_parquet(table.storage, path)
        if keygen is not None:
            rows = with_record_keys(rows, keygen, path)
        rows = rows.filter(pc.is_in(rows[RECORD_KEY], value_set=here["record_key"]))
        written = pc.take(here["instant"], pc.index_in(rows[RECORD_KEY], here["record_key"]))
        parts.append(
            rows.append_column("_aix_partition", pa.repeat(pa.scalar(partition), rows.num_rows))
            .append_column("_aix_file_id", pa.repeat(pa.scalar(file_id), rows.num_rows))
            .append_column("_aix_instant", written)
        )
    stored = pa.concat_tables(parts, promote_options="default")
    order = [(RECORD_KEY, "ascending")]
    if precombine and precombine in stored.column_names:
        order.append((precombine, "descending"))
    order.append(("_aix_instant", "descending"))
    stored = stored.sort_by(order)
    keys = stored[RECORD_KEY]
    first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    newest = pa.concat_arrays([pa.array([True]), first.combine_chunks()])
    kept = set(_columns(stored.filter(newest), "_aix_partition", "_aix_file_id", RECORD_KEY))
    flags = [c in kept for c in _columns(copies, "partition_path", "file_id", "record_key")]
    stale = stored.filter(pc.invert(newest))
    data_columns = [c for c in stale.column_names if not c.startswith((META_PREFIX, "_aix_"))]
    return Duplicates(copies.append_column("newest", pa.array(flags)), stale.select(data_columns))


def _columns(table: pa.Table, *names: str) -> list[tuple[object, ...]]:
    """The rows of some columns of ``table`` as tuples."""
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))
