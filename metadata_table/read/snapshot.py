"""Reads for query engines and writers: listings, column stats, data skipping, key lookups.

:class:`IndexedSnapshot` ties a data timeline snapshot to the metadata table and uses only
*completed* partitions (docs/architecture.md §3, invariant 4): with ``files`` completed, listings come from the
index instead of storage; with ``column_stats`` completed, :meth:`prune` skips files whose stats
prove that no row matches; with ``bloom_filters`` completed, :meth:`lookup_keys` narrows record
keys to the files that may hold them. A file that has no entry in the index is never pruned.

A completed data instant that a partition does not reflect (a commit that did not go through this
kernel: Apache Hudi's own writer, hudi-rs, a backfill tool) never makes an answer stale: its files
are treated as not pruned and a warning names it; with ``files`` behind, listings come from storage;
with ``partition_stats`` behind, no partition is dropped by it. ``indexer sync`` (or the daemon's
next tick) applies such instants.

With ``partition_stats`` completed, :meth:`prune` first drops whole data partitions whose
aggregated stats prove that no row matches, and looks at file stats only in the others. A
partition's record is used only when it counts as many files as the listing holds there.

On a merge-on-read table the unit of an answer is the file slice (a base file and its log files,
or log files alone): :meth:`prune` and :meth:`lookup_keys` judge every file of the latest slices
by its own records (a log file's from the records it holds) and keep a slice when **any** of its
files may match, so a row an update moved into a log file is never dropped with its base file.
On a copy-on-write table a slice is its base file.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.bloom import (
    FiltersAt,
    SplitBlockBloomFilter,
    hash_value,
    might_contain_any,
)
from metadata_table.hudi_table import HudiMetadataTable
from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    METADATA_FOLDER,
    NON_PARTITIONED,
    PARTITION_STATS,
    RECORD_INDEX,
    SECONDARY_INDEX_PREFIX,
    column_prefix,
    column_stats_key,
    data_partition,
    is_secondary_index,
    partition_prefix,
    secondary_index_partition,
)
from metadata_table.read import key_filter
from metadata_table.read.filters import (
    And,
    ColumnArrays,
    ColumnStats,
    Compare,
    Expr,
    In,
    Or,
    parse_filter,
    row_literal,
)
from metadata_table.read.hudi_index import SERVED as HUDI_SERVED
from metadata_table.read.hudi_index import HudiIndex
from metadata_table.read.kept import KeptFilters
from metadata_table.read.keyed import KeyedLookup
from metadata_table.reader import MetadataReader
from metadata_table.records import RECORD_KEY, python_value, value_texts
from metadata_table.table import MetadataTable
from timeline.config import HUDI_METADATA_READ
from timeline.errors import FilterTypeError, IndexStateError, TableConfigError, TableError
from timeline.fs_view import (
    PATH_CHECK,
    PATH_HASH,
    PATH_HASHES,
    BaseFile,
    FileSlice,
    FileSystemView,
    LogFile,
    base_files_of,
    read_parquet_head,
    read_parquet_schema,
    take_rows,
    with_base_name_fields,
)
from timeline.hashing import CHECK_SEED, key_hash64
from timeline.index_state import IndexState
from timeline.instant import Action, Instant
from timeline.removals import REMOVAL_ACTIONS
from timeline.storage import FileInfo
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE, TYPE, TableType
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)


#: the order in which :meth:`IndexedSnapshot.prune` applies the indexes (every secondary index
#: between record_index and bloom_filters)
PRUNE_ORDER = (PARTITION_STATS, COLUMN_STATS, RECORD_INDEX, SECONDARY_INDEX_PREFIX, BLOOM_FILTERS)


@dataclass(frozen=True)
class PruneResult:
    #: the base files of the kept slices (on a copy-on-write table, the kept files)
    candidates: list[BaseFile]
    #: slices (of the listing) before pruning
    total: int
    #: data partitions listed, and those dropped whole by ``partition_stats``
    partitions: int = 0
    partitions_pruned: int = 0
    #: the kept file slices, whose files a reader merges (log-only slices included)
    slices: list[FileSlice] = field(default_factory=list)
    #: per index applied, in the order applied (:data:`PRUNE_ORDER`): the slices it dropped
    #: beyond those before it
    dropped: dict[str, int] = field(default_factory=dict)
    #: per index not applied: why
    unused: dict[str, str] = field(default_factory=dict)
    #: per index applied: completed data instants it does not reflect yet (their files kept)
    unapplied: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def pruned(self) -> int:
        return self.total - len(self.slices)

    @property
    def used_index(self) -> bool:
        return bool(self.dropped)


class _Stages:
    """The kept files of a listing as one index after another drops some, and what each
    dropped: a slice goes when none of its files may match (a stage's answer is taken per
    slice first, so a base file one index keeps and a log file another keeps keep it)."""

    def __init__(self, listing: _Listing) -> None:
        self.listing = listing
        self.keep = np.ones(listing.size, dtype=bool)
        self.dropped: dict[str, int] = {}

    def apply(self, index: str, mask: np.ndarray) -> None:
        before = self.listing.count_kept(self.keep)
        self.keep &= self.listing.by_slice(mask)
        self.dropped[index] = (
            self.dropped.get(index, 0) + before - self.listing.count_kept(self.keep)
        )


class IndexedSnapshot:
    def __init__(
        self, table: Table, timeline: Timeline | None = None, reader: MetadataReader | None = None
    ) -> None:
        self.table = table
        self.timeline = timeline if timeline is not None else table.timeline.load()
        if reader is not None:  # a caller's reader of the same timeline: read once
            self.__dict__["reader"] = reader
        #: why the index's state file could not be read (then no index is used), or None
        self.state_error: str | None = None
        try:
            state = table.reload_index_state()
        except IndexStateError as e:
            logger.warning("the index of %s is not used: %s", table.base_uri, e)
            self.state_error = str(e)
            state = IndexState()
        self.completed = set(state.completed)
        self.inflight = set(state.inflight)
        self._view: FileSystemView | None = None
        #: where the view's files were listed from (set with the view)
        self.listed_by = "storage"
        self._unapplied: dict[str, list[Instant]] = {}
        self._lost: dict[str, str | None] = {}
        self._column_tables: dict[str, pa.Table] = {}
        self._narrow_reads = 0  # (see _key_ranges)
        self._partition_tables: dict[str, pa.Table] = {}
        self._partition_aligned: dict[str, tuple[bool, ColumnArrays | None]] = {}
        #: column -> (whether any file has stats for it, its arrays aligned with the listing)
        self._listing_arrays: dict[str, tuple[bool, ColumnArrays | None]] = {}
        self._bloom_table: pa.Table | None = None
        #: the listing the bloom filters were last aligned with, and those filters
        self._blooms_of: tuple[_Listing, FiltersAt] | None = None
        self._keyed: dict[str, KeyedLookup] = {}

    @cached_property
    def reader(self) -> MetadataReader:
        """Built on first use: a table without completed partitions never reads its metadata."""
        return MetadataTable(self.table).reader(self.timeline)

    def uses(self, partition: str) -> bool:
        """Whether reads use ``partition``: completed, and its files are there; or, where ours
        is not completed, Apache Hudi's metadata table has it (:attr:`hudi_index`)."""
        if partition in self.completed:
            return self.lost(partition) is None
        return self.from_hudi(partition)

    @cached_property
    def hudi_index(self) -> HudiIndex | None:
        """Apache Hudi's metadata table as the index of the partitions ours has not completed
        (:mod:`.hudi_index`), or None."""
        wanted = [p for p in HUDI_SERVED if p not in self.completed]
        if not wanted:
            return None
        return HudiIndex.open(self.table, self.timeline, wanted, lambda: self.table_schema)

    def from_hudi(self, partition: str) -> bool:
        """Whether reads use ``partition`` of Apache Hudi's metadata table (not ours)."""
        if partition in self.completed or partition not in HUDI_SERVED:
            return False
        return self.hudi_index is not None and partition in self.hudi_index.partitions

    def lost(self, partition: str) -> str | None:
        """Why a completed partition cannot be used (warned once), or None."""
        if partition not in self._lost:
            reason = self.reader.lost(partition) if partition in self.completed else None
            if reason:
                logger.warning(
                    "metadata partition %s of %s is lost, reads use the data instead: %s",
                    partition,
                    self.table.base_uri,
                    reason,
                )
            self._lost[partition] = reason
        return self._lost[partition]

    def unapplied(self, partition: str) -> list[Instant]:
        """Completed data instants a completed ``partition`` does not reflect (warned once)."""
        if partition not in self._unapplied:
            # (Hudi's metadata table is used only when it reflects every completed instant)
            ours = partition in self.completed and self.uses(partition)
            behind = self.reader.unapplied(partition) if ours else []
            if behind:
                logger.warning(
                    "metadata partition %s of %s does not reflect %d completed instant(s) (%s): "
                    "their files are not pruned until `indexer sync` or the daemon applies them",
                    partition,
                    self.table.base_uri,
                    len(behind),
                    ", ".join(f"{i.timestamp}.{i.action}" for i in behind),
                )
            self._unapplied[partition] = behind
        return self._unapplied[partition]

    def _unapplied_times(self, partition: str) -> set[str]:
        return {i.timestamp for i in self.unapplied(partition)}

    # --- listings --------------------------------------------------------------------------------

    def indexed_files(self) -> pa.Table:
        """Every data file the ``files`` partition lists: its ``partition_path`` (empty at the
        base path), ``file_name``, ``path`` and ``size``, and the fields of base files' names
        (worked out once per metadata file in a process: :func:`_listing_of`)."""
        return self._indexed_files(None)

    def _indexed_files(self, partitions: list[str] | None) -> pa.Table:
        """:meth:`indexed_files`, or those of some partitions alone: the ``files`` records of
        their keys' prefixes (a partition's keys are together in each file group's sorted
        files: the row groups that hold them are the ones read)."""
        columns = ["partition", "file_name", "size"]
        prefixes = [None] if partitions is None else [partition_prefix(p) for p in partitions]
        parts = [
            self.reader.read(FILES, prefix, columns, ordered=False, derive=_listing_of)
            for prefix in prefixes
        ]
        rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        return rows.drop_columns(["key", "is_deleted", "instant", "partition"])

    @property
    def view(self) -> FileSystemView:
        if self._view is None:
            indexed = self.uses(FILES) and not self.unapplied(FILES)
            hudi = None if indexed else self._hudi_files()
            self._view = FileSystemView(
                self.table.timeline,
                self.timeline,
                listing=self.indexed_files if indexed else hudi,
                partition_listing=self._indexed_files if indexed else None,
            )
            self.listed_by = (
                "the index's files partition"
                if indexed
                else "Apache Hudi's metadata table (files)"
                if hudi is not None
                else "storage"
            )
        return self._view

    def _hudi_files(self) -> Callable[[], list[FileInfo]] | None:
        """The listing of Apache Hudi's own metadata table, for a table with no ``files``
        partition of ours in use: its ``files`` partition, when every completed data instant of
        this snapshot is in it (a writer that does not keep it leaves it behind; storage is
        listed then, with a warning)."""
        if (
            FILES in self.completed
            or "files" not in self.table.table_config.hudi_metadata_partitions
            or not self.table.config.get(HUDI_METADATA_READ)
        ):
            return None  # (the table's config as opened: no read of it per snapshot)
        hudi = HudiMetadataTable(self.table)
        if not hudi.present:
            return None
        try:
            behind = hudi.unapplied(self.timeline)
            listed = [] if behind else hudi.listing()
        except Exception as e:  # unreadable (a bad file, a format not read here): storage is
            logger.warning(  # listed, as for any metadata the reader cannot trust
                "Apache Hudi's metadata table of %s cannot be read (%s): files are listed from "
                "storage",
                self.table.base_uri,
                e,
            )
            return None
        if behind:
            logger.warning(
                "Apache Hudi's metadata table of %s does not reflect %d completed instant(s) "
                "(%s): files are listed from storage",
                self.table.base_uri,
                len(behind),
                ", ".join(behind[:5]),
            )
            return None
        return lambda: listed

    def list_partitions(self) -> list[str]:
        return self.view.partitions()

    def list_files(self, partition: str) -> list[BaseFile]:
        """The latest base files of a partition (:meth:`list_slices` for its log files too)."""
        return self.view.latest_base_files([partition])

    # --- column stats and pruning ----------------------------------------------------------------

    def column_stats(
        self, columns: Sequence[str] | None = None, files: Iterable[str] | None = None
    ) -> pa.Table:
        """Column stats records (merged, live) for some columns and files (``partition/name``)."""
        if self.from_hudi(COLUMN_STATS):
            assert self.hudi_index is not None
            names = columns or self.table_schema.names
            tables = [self.hudi_index.column_records(c, self._partitions[0]) for c in names]
            stats = pa.concat_tables(tables)
        elif columns:
            tables = [self.reader.read(COLUMN_STATS, prefix=column_prefix(c)) for c in columns]
            stats = pa.concat_tables(tables)
        else:
            stats = self.reader.read(COLUMN_STATS)
        if files is not None:
            wanted = set(files)
            keep = [
                (f"{data_partition(p)}/{n}" if data_partition(p) else n) in wanted
                for p, n in zip(
                    stats.column("partition").to_pylist(),
                    stats.column("file_name").to_pylist(),
                    strict=True,
                )
            ]
            stats = stats.filter(pa.array(keep, pa.bool_()))
        return stats

    def _stats_by_file(self, columns: set[str]) -> dict[str, dict[str, ColumnStats]]:
        by_file: dict[str, dict[str, ColumnStats]] = defaultdict(dict)
        for row in self.column_stats(sorted(columns)).to_pylist():
            partition = data_partition(row["partition"])
            path = f"{partition}/{row['file_name']}" if partition else row["file_name"]
            by_file[path][row["column_name"]] = _column_stats(row)
        return by_file

    def _column_records(self, column: str) -> pa.Table:
        """One column's live stats records with each file's ``path``, read once per snapshot
        (:meth:`_stats_records`)."""
        if column not in self._column_tables and self.from_hudi(COLUMN_STATS):
            assert self.hudi_index is not None
            records = self.hudi_index.column_records(column, self._partitions[0])
            self._column_tables[column] = _with_paths(records)
        if column not in self._column_tables:
            self._column_tables[column] = self._stats_records(column_prefix(column))
        return self._column_tables[column]

    def _stats_records(self, prefix: str) -> pa.Table:
        """The live column_stats records whose keys start with ``prefix`` (of one column), with
        each file's ``path``: the fields :func:`_aligned` uses, and of min and max only the
        field of the value kind the files' statistics say every such record has (all fields
        when they do not say)."""
        kinds = self.reader.column_values(COLUMN_STATS, prefix, "value_type")
        fields = None
        if kinds is not None and len(kinds) == 1:
            kind = kinds.pop()
            fields = [*_ALIGNED_FIELDS, f"min_value.{kind}", f"max_value.{kind}"]
        return self.reader.read(COLUMN_STATS, prefix, fields, ordered=False, derive=_with_paths)

    def _key_ranges(
        self, paths: pa.Array | pa.ChunkedArray, hashes: pa.Table | None
    ) -> ColumnArrays | None:
        """The record key ranges of the files ``paths`` (whose :data:`PATH_HASHES` are
        ``hashes``, when known), aligned with them (None: not of one kind). From the column's
        records the snapshot holds; or, for a few files whose keys share more than the column's
        prefix (one file, files of one partition), from their records alone, until the
        snapshot has read this way :data:`_FEW_FILES` times and then reads the whole column. A
        one-key lookup at 100,000 files whose bloom filters keep one file so reads the row
        groups that file's records are in, not every file's key range (45 ms, cold)."""
        column = RECORD_KEY
        if (
            column in self._column_tables
            or self.from_hudi(COLUMN_STATS)
            or len(paths) > _FEW_FILES
            or self._narrow_reads >= _FEW_FILES
        ):
            records = self._column_records(column)
        else:
            keys = [column_stats_key(column, *_split_path(p)) for p in paths.to_pylist()]
            prefix = _common_prefix(keys)
            if prefix == column_prefix(column):
                records = self._column_records(column)
            else:
                self._narrow_reads += 1
                records = self._stats_records(prefix)  # (kept decoded by the process)
                records = records.filter(pc.is_in(records.column("key"), pa.array(keys)))
        return _aligned(records, "path", paths, hashes) if records.num_rows else None

    def _arrow_stats(
        self,
        columns: set[str],
        paths: pa.Array | pa.ChunkedArray,
        hashes: pa.Table | None = None,
    ) -> dict[str, ColumnArrays | None]:
        """Each column's stats aligned with ``paths`` (whose :data:`PATH_HASHES` are
        ``hashes``, when known; see :class:`ColumnArrays`); a column whose records do not share
        one value kind maps to None."""
        out: dict[str, ColumnArrays | None] = {}
        for column in sorted(columns):
            records = self._column_records(column)
            if not records.num_rows:
                continue  # no file has stats for it: nothing is pruned on it
            out[column] = _aligned(records, "path", paths, hashes)
        return out

    def prune(self, expr: Expr | str) -> PruneResult:
        """The latest file slices that may hold rows matching ``expr``, each index that can
        drop some applied in turn (:data:`PRUNE_ORDER`): ``partition_stats`` drops whole data
        partitions by their aggregated stats, ``column_stats`` files by theirs, ``record_index``
        the slices that hold none of the record keys the filter asks for (:mod:`.key_filter`:
        ``=`` or ``IN`` on the key fields or on ``_hoodie_record_key``), each secondary index
        those without a value its column's ``=`` or ``IN`` asks for, and ``bloom_filters`` files
        whose filter holds none of the keys. A slice is kept when any of its files may match;
        files of instants an index does not reflect are kept by it. The result says what each
        index dropped beyond those before it, and why any was not used."""
        expr = self.bind(expr)
        listing = self._listing
        partitions, of_file = self._partitions
        stages = _Stages(listing)
        unused: dict[str, str] = {}
        unapplied: dict[str, tuple[str, ...]] = {}
        keys, why_no_keys = self.asked_keys(expr)
        stats_expr = expr
        asks_by_fields = keys is not None and RECORD_KEY not in expr.columns()
        if asks_by_fields and self._stores_keys and len(keys or ()) <= _KEY_RANGE_KEYS:
            # the stats of _hoodie_record_key are key ranges: column_stats tests the keys too
            stats_expr = And(expr, In(RECORD_KEY, tuple(keys or ())))

        by_partition, why = self._partition_keep(stats_expr)
        dropped_partitions = 0
        if by_partition is None:
            unused[PARTITION_STATS] = why or self.why_unused(PARTITION_STATS)
        else:
            stages.apply(PARTITION_STATS, by_partition[of_file])
            dropped_partitions = int(len(partitions) - np.count_nonzero(by_partition))

        if not self.uses(COLUMN_STATS):
            unused[COLUMN_STATS] = self.why_unused(COLUMN_STATS)
        else:
            selected = np.flatnonzero(stages.keep)
            arrays = self._listing_stats(stats_expr.columns())
            if not arrays:
                unused[COLUMN_STATS] = _no_stats(stats_expr)
            else:
                if len(selected) < listing.size:  # else every file is asked about: no copy
                    indices = pa.array(selected, pa.int64())
                    arrays = {c: None if a is None else a.take(indices) for c, a in arrays.items()}
                mask = np.zeros(listing.size, dtype=bool)
                mask[selected], behind = self._keep_by_file_stats(
                    stats_expr, listing, selected, arrays
                )
                stages.apply(COLUMN_STATS, mask | ~stages.keep)
                if behind:
                    unapplied[COLUMN_STATS] = behind

        exact = False
        if keys is None:
            unused[RECORD_INDEX] = why_no_keys
        elif not self.uses(RECORD_INDEX):
            unused[RECORD_INDEX] = self.why_unused(RECORD_INDEX)
        else:
            holders = {p for where in self.record_locations(keys).values() for p in where.paths}
            held = pc.is_in(listing.paths, value_set=pa.array(sorted(holders), pa.string()))
            touched = self.record_index_touched()
            mask = np.asarray(held.to_numpy(zero_copy_only=False), dtype=bool)
            stages.apply(RECORD_INDEX, mask | listing.in_partitions(touched))
            behind_ri = self.unapplied(RECORD_INDEX)
            if behind_ri:
                unapplied[RECORD_INDEX] = tuple(i.timestamp for i in behind_ri)
            exact = not touched

        self._secondary_stages(expr, listing, stages, unused, unapplied)

        if keys is None:
            unused[BLOOM_FILTERS] = why_no_keys
        elif not self.uses(BLOOM_FILTERS):
            unused[BLOOM_FILTERS] = self.why_unused(BLOOM_FILTERS)
        elif exact:
            unused[BLOOM_FILTERS] = "record_index answered the record keys exactly"
        else:
            behind_bf = self._unapplied_times(BLOOM_FILTERS)
            # the filters of the files still kept alone: a slice an index before dropped stays
            # dropped whatever its filters answer
            mask = self._bloom_keep(listing, keys, stages.keep)
            mask = mask | listing.written_by(behind_bf)
            if RECORD_INDEX in stages.dropped:  # it answered outside the partitions it lags in
                mask = mask | ~listing.in_partitions(self.record_index_touched())
            stages.apply(BLOOM_FILTERS, mask)
            if behind_bf:
                unapplied[BLOOM_FILTERS] = tuple(sorted(behind_bf))

        kept = listing.kept_slices(stages.keep)
        return PruneResult(
            [s.base_file for s in kept if s.base_file is not None],
            listing.count,
            partitions=len(partitions),
            partitions_pruned=dropped_partitions,
            slices=kept,
            dropped=stages.dropped,
            unused=unused,
            unapplied=unapplied,
        )

    def why_unused(self, partition: str) -> str:
        """Why reads do not use ``partition`` (or, when they do, that nothing asked for it)."""
        if self.state_error is not None:
            return f"the index's state file cannot be read: {self.state_error}"
        if partition in self.inflight:
            return "being built (inflight): readers use it once it completes"
        if partition not in self.completed:
            return "not built"
        lost = self.lost(partition)
        if lost:
            return f"lost: {lost}"
        behind = self.unapplied(partition)
        if behind and partition in (PARTITION_STATS, FILES):
            return f"it does not reflect {', '.join(i.timestamp for i in behind)} yet"
        return "nothing to use it for"

    # --- record keys asked for ------------------------------------------------------------------

    @cached_property
    def _stores_keys(self) -> bool:
        """Whether the table's files store their record keys (``_hoodie_record_key``)."""
        return (
            self.table.table_config.populate_meta_fields and RECORD_KEY in self.table_schema.names
        )

    def asked_keys(self, expr: Expr) -> tuple[list[str] | None, str]:
        """The record keys ``expr`` (bound) confines rows to (:mod:`.key_filter`), or None and
        why not."""
        fields = self.table.table_config.record_key_fields
        on_fields = any(f in expr.columns() for f in fields)
        # checking that the fields make the stored keys reads rows: only for a filter on them
        by_fields, why_fields = self._key_fields_make_keys if on_fields else (False, "")
        keys = key_filter.asked_keys(expr, fields, self.table_schema, by_fields)
        if keys is not None:
            return keys, ""
        named = " and ".join(fields) if fields else RECORD_KEY
        why = f"the filter has no = or IN on the record key: {named}, or {RECORD_KEY}"
        if why_fields:
            why = why_fields
        return None, why

    @cached_property
    def _key_fields_make_keys(self) -> tuple[bool, str]:
        """Whether record keys made from the key fields' values are the keys the table's files
        store (checked on rows of its newest base file: a table an older Hudi wrote may key
        one field as ``f:v``), and why not."""
        fields = self.table.table_config.record_key_fields
        if not fields or not self._stores_keys:
            return bool(fields), ""  # virtual keys: the index keys rows by the key fields
        newest = self.newest_base_file
        if newest is None:
            return True, ""
        top = sorted({f.partition(".")[0] for f in fields})
        if any(c not in self.table_schema.names for c in top):
            return False, f"the key fields {', '.join(fields)} are not columns of the files"

        def made_as_stored() -> bool:
            rows = read_parquet_head(self.table.storage, newest.path, [*top, RECORD_KEY], 64)
            try:
                made = key_filter.key_generator(fields).record_keys(rows)
            except TableError:
                made = []
            return bool(made == rows.column(RECORD_KEY).to_pylist())

        if not self.reader.data_file_fact(newest, ("keys made from", *fields), made_as_stored):
            return False, (
                f"the record keys in {newest.path} are not made from "
                f"{', '.join(fields)} as this release makes them; filter on {RECORD_KEY}"
            )
        return True, ""

    def bind(self, expr: Expr | str) -> Expr:
        """``expr`` (parsed when text) checked against the table's schema, its literals read as
        their columns read them (:meth:`~metadata_table.read.filters.Expr.bind`); as it is
        when the table holds no data file yet (no schema to check against)."""
        if isinstance(expr, str):
            expr = parse_filter(expr)
        schema = self.table_schema
        return expr.bind(schema) if len(schema) else expr

    # --- secondary indexes -----------------------------------------------------------------------

    def secondary_index_used(self, column: str) -> str | None:
        """The secondary index partition that answers ``=`` and ``IN`` on ``column`` (through
        the record index), or None: not built, or the record index not usable."""
        if not is_secondary_index(SECONDARY_INDEX_PREFIX + column):
            return None
        partition = secondary_index_partition(column)
        if self.uses(partition) and self.uses(RECORD_INDEX):
            return partition
        return None

    def records_with(self, column: str, values: Iterable[Any]) -> dict[str, RecordLocation]:
        """Record key -> location of every record whose ``column`` holds one of ``values``
        (each cast to the column's type), from ``column``'s secondary index through the record
        index; files of instants either does not reflect are not looked at (see
        :meth:`_secondary_keep`)."""
        partition = self.secondary_index_used(column)
        if partition is None:
            raise IndexStateError(
                self.table.storage.uri(METADATA_FOLDER),
                f"no completed secondary index on {column!r} with a completed record_index",
            )
        literals = [row_literal(self.table_schema, column, v) for v in values]
        texts = [value_texts(pa.array([v.as_py()], v.type))[0].as_py() for v in literals]
        found = self.keyed_lookup(partition).find(texts)
        return self.record_locations(found.column("record_key").to_pylist())

    @cached_property
    def newest_base_file(self) -> BaseFile | None:
        """The latest base file written last (None: the table holds none). The newest completed
        write that wrote a base file names it in its commit metadata, so a table's whole
        listing is read only when no active instant settles it: that write's base files were
        replaced since (a newer replacecommit), are gone, or archived with it."""
        writes = self.timeline.write_timeline().completed()
        for instant in reversed(list(writes)):
            if not self.view.is_committed(instant.timestamp):
                continue
            newest = self.reader.newest_written(instant)
            if newest is None:
                continue
            replaced_since = writes.with_actions(Action.REPLACE_COMMIT).after(instant.timestamp)
            if not list(replaced_since) and self.table.storage.exists(newest.path):
                return newest
            break
        files = self.view.latest_base_files()
        return max(files, key=lambda b: (b.instant_time, b.path), default=None)

    @cached_property
    def table_schema(self) -> pa.Schema:
        """The table's schema: that of its newest base file (columns are only ever added and
        types only widened); empty when the table holds no base file."""
        newest = self.newest_base_file
        if newest is None:
            return pa.schema([])
        return self.reader.data_file_fact(
            newest, "schema", lambda: read_parquet_schema(self.table.storage, newest.path)
        )

    def _secondary_stages(
        self,
        expr: Expr,
        listing: _Listing,
        stages: _Stages,
        unused: dict[str, str],
        unapplied: dict[str, tuple[str, ...]],
    ) -> None:
        """Apply each secondary index that answers some of ``expr`` (:meth:`_secondary_keep`),
        one after another by name, then any answer only they give together (an ``OR`` of two
        indexed columns), credited to both; say why each of the others was not used."""
        answered = []
        for partition in self.secondary_indexes:
            column = partition[len(SECONDARY_INDEX_PREFIX) :]
            if not self.uses(partition):
                unused[partition] = self.why_unused(partition)
            elif not self.uses(RECORD_INDEX):
                unused[partition] = (
                    f"it finds records through record_index, which is {self.why_unused(RECORD_INDEX)}"
                )
            else:
                mask = self._secondary_keep(expr, listing, {partition})
                if mask is None:
                    unused[partition] = f"the filter asks for no value of {column} (= or IN)"
                    continue
                answered.append(partition)
                stages.apply(partition, mask)
                behind = self._unapplied_times(partition) | self._unapplied_times(RECORD_INDEX)
                if behind:
                    unapplied[partition] = tuple(sorted(behind))
        if len(answered) > 1:
            together = self._secondary_keep(expr, listing, set(answered))
            if together is not None:
                stages.apply(" and ".join(answered), together)

    @property
    def secondary_indexes(self) -> list[str]:
        """The secondary index partitions the table has, completed or being built."""
        return sorted(
            p for p in {*self.completed, *self.inflight} if p.startswith(SECONDARY_INDEX_PREFIX)
        )

    def _secondary_keep(
        self, expr: Expr, listing: _Listing, partitions: set[str]
    ) -> np.ndarray | None:
        """Which files of ``listing`` may hold a row matching ``expr`` by its ``=`` and ``IN``
        on columns whose secondary index is one of ``partitions``: exactly those of the slices
        holding a matching record, and every file of a partition an instant either index does
        not reflect wrote to; None where none of them answers. ``AND`` narrows, ``OR`` needs
        both sides answered; anything else keeps every file."""

        def mask(node: Expr) -> np.ndarray | None:
            if isinstance(node, And | Or):
                left, right = mask(node.left), mask(node.right)
                if isinstance(node, Or):
                    if left is None or right is None:
                        return None
                    either: np.ndarray = np.logical_or(left, right)
                    return either
                if left is None or right is None:
                    return left if right is None else right
                both: np.ndarray = np.logical_and(left, right)
                return both
            if isinstance(node, Compare) and node.op == "=":
                column, values = node.column, [node.value]
            elif isinstance(node, In) and not node.negated:
                column, values = node.column, list(node.values)
            else:
                return None
            partition = self.secondary_index_used(column)
            if partition not in partitions or column not in self.table_schema.names:
                return None
            try:
                found = self.records_with(column, values)
            except (FilterTypeError, TypeError):
                return None  # a value the column cannot hold: the other indexes judge it
            holders = {path for where in found.values() for path in where.paths}
            touched = self._touched(partition) | self.record_index_touched()
            held = pc.is_in(listing.paths, value_set=pa.array(sorted(holders), pa.string()))
            keep = np.asarray(held.to_numpy(zero_copy_only=False), dtype=bool)
            keep |= listing.in_partitions(touched)
            return keep

        return mask(expr)

    def prune_files(self, expr: Expr, files: Sequence[BaseFile]) -> PruneResult:
        """:meth:`prune` over any ``files`` (say, a listing as of an earlier instant), by
        ``column_stats`` only: a file's stats never change, while ``partition_stats`` describe
        the latest files."""
        expr = self.bind(expr)
        if not self.uses(COLUMN_STATS):
            unused = {COLUMN_STATS: self.why_unused(COLUMN_STATS)}
            return PruneResult(list(files), len(files), slices=_as_slices(files), unused=unused)
        listing = _Listing.of_base_files(files)
        arrays = self._arrow_stats(expr.columns(), listing.paths)
        if not arrays:
            unused = {COLUMN_STATS: _no_stats(expr)}
            return PruneResult(list(files), len(files), slices=_as_slices(files), unused=unused)
        everything = np.arange(listing.size)
        keep, behind = self._keep_by_file_stats(expr, listing, everything, arrays)
        kept = [files[int(i)] for i in np.flatnonzero(keep)]
        return PruneResult(
            kept,
            len(files),
            slices=_as_slices(kept),
            dropped={COLUMN_STATS: len(files) - len(kept)},
            unapplied={COLUMN_STATS: behind} if behind else {},
        )

    def _keep_by_file_stats(
        self,
        expr: Expr,
        listing: _Listing,
        selected: np.ndarray,
        arrays: dict[str, ColumnArrays | None],
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        """Which of the ``selected`` files of ``listing`` their column stats (``arrays``,
        aligned with them) say may match, every base file of an instant ``column_stats`` does
        not reflect included (and those instants). A log file such an instant wrote has no
        record yet, so it is kept as unrecorded."""
        behind = self._unapplied_times(COLUMN_STATS)
        keep = self._file_keep(expr, listing.paths, selected, arrays)
        if behind:
            keep = keep | listing.written_by(behind)[selected]
        return keep, tuple(sorted(behind))

    def _listing_stats(self, columns: set[str]) -> dict[str, ColumnArrays | None]:
        """:meth:`_arrow_stats` of the whole listing, worked out once per snapshot and column
        (a column no file has stats for is left out)."""
        missing = columns - self._listing_arrays.keys()
        if missing:
            listing = self._listing
            found = self._arrow_stats(missing, listing.paths, listing.path_hashes)
            for column in missing:
                self._listing_arrays[column] = (column in found, found.get(column))
        out = {}
        for column in sorted(columns):
            recorded, arrays = self._listing_arrays[column]
            if recorded:
                out[column] = arrays
        return out

    def _file_keep(
        self,
        expr: Expr,
        paths: pa.Array | pa.ChunkedArray,
        selected: np.ndarray,
        arrays: dict[str, ColumnArrays | None],
    ) -> np.ndarray:
        """Which of the files at ``selected`` in ``paths`` their column stats (``arrays``,
        aligned with the selected files) say may match ``expr``."""
        count = len(selected)
        mask = expr.mask(arrays, count) if None not in arrays.values() else None
        if mask is None:
            stats = self._stats_by_file(expr.columns())
            chosen = take_rows(paths, selected).to_pylist()
            return np.array(
                [p not in stats or expr.might_match(stats[p]) for p in chosen], dtype=bool
            )
        # a file without any stats record for these columns is kept, as file by file
        unrecorded = pa.array(np.ones(count, dtype=bool))
        for c in arrays.values():
            if c is not None:
                unrecorded = pc.and_(unrecorded, pc.invert(c.present))
        return np.asarray(pc.or_(mask, unrecorded).to_numpy(zero_copy_only=False), dtype=bool)

    def _partition_records(self, column: str) -> pa.Table:
        """One column's live partition_stats records; read once per snapshot."""
        if column not in self._partition_tables:
            prefix = column_prefix(column)
            records = self.reader.read(PARTITION_STATS, prefix=prefix, ordered=False)
            self._partition_tables[column] = records
        return self._partition_tables[column]

    @cached_property
    def _partition_names(self) -> tuple[pa.Array, np.ndarray]:
        """The listing's data partitions as records name them, and their file counts."""
        partitions, of_file = self._partitions
        names = pa.array([p or NON_PARTITIONED for p in partitions], pa.string())
        return names, np.bincount(of_file, minlength=len(partitions))

    def _partition_arrays(self, column: str) -> tuple[bool, ColumnArrays | None]:
        """(whether any listed partition has a usable record for ``column``, its stats aligned
        with the listing's partitions, or None when they do not share one kind); once per
        snapshot and column. A record is usable only when its ``file_count`` is the listing's."""
        if column not in self._partition_aligned:
            rows = self._partition_records(column)
            names, listed = self._partition_names
            # a record counts only when it counts as many files as the listing holds there
            listing = pc.take(pa.array(listed), pc.index_in(rows.column("partition"), names))
            counted = pc.fill_null(pc.equal(rows.column("file_count"), listing), False)
            rows = rows.filter(counted)
            arrays = _aligned(rows, "partition", names) if rows.num_rows else None
            self._partition_aligned[column] = (rows.num_rows > 0, arrays)
        return self._partition_aligned[column]

    def _partition_keep(self, expr: Expr) -> tuple[np.ndarray | None, str | None]:
        """Per listed data partition, whether ``partition_stats`` says it may hold a matching
        row; None when ``partition_stats`` is not used (not completed, lost, or behind: see
        :meth:`why_unused`), or holds no usable stats of the filter's columns (and then why)."""
        if not self.uses(PARTITION_STATS) or self.unapplied(PARTITION_STATS):
            return None, None
        names, listed = self._partition_names
        arrays: dict[str, ColumnArrays | None] = {}
        for column in sorted(expr.columns()):
            recorded, aligned = self._partition_arrays(column)
            if recorded:  # else no partition has stats for it: nothing is dropped on it
                arrays[column] = aligned
        if not arrays:
            return None, _no_stats(expr)
        mask = expr.mask(arrays, len(names)) if None not in arrays.values() else None
        if mask is not None:
            return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool), None
        stats: dict[str, dict[str, ColumnStats]] = defaultdict(dict)
        where = dict(zip(names.to_pylist(), listed.tolist(), strict=True))
        for column in arrays:
            for row in self._partition_records(column).to_pylist():
                if where.get(row["partition"]) == row["file_count"]:
                    stats[row["partition"]][column] = _column_stats(row)
        return np.array([expr.might_match(stats[n]) for n in names.to_pylist()], dtype=bool), None

    @property
    def merge_on_read(self) -> bool:
        return self.table.table_config.table_type is TableType.MERGE_ON_READ

    def _slice_listing(self, partitions: Iterable[str] | None = None) -> _Listing:
        """The latest file slices (of some partitions) and their files."""
        if self.merge_on_read:
            return _Listing.of_slices(self.view.latest_file_slices(partitions))
        if partitions is None:
            return _Listing.of_base_table(self.view.latest_base_table)
        return _Listing.of_base_files(self.view.latest_base_files(partitions))

    @cached_property
    def _listing(self) -> _Listing:
        """The latest file slices of every partition and their files, once per snapshot."""
        return self._slice_listing()

    @property
    def files_held(self) -> int:
        """How many files the listing of the whole table this snapshot holds counts (0 before
        one is made): what its memory grows with, beside the decoded index files."""
        listing = self.__dict__.get("_listing")
        return 0 if listing is None else int(listing.size)

    def list_slices(self, partition: str) -> list[FileSlice]:
        """The latest file slices of a partition (a base file each on a copy-on-write table)."""
        return self._slice_listing([partition]).slices

    @cached_property
    def _partitions(self) -> tuple[list[str], np.ndarray]:
        """The listing's data partitions, and each file's index among them."""
        names = self._listing.partition_paths
        unique = pc.unique(names)
        of_file = pc.index_in(names, value_set=unique).to_numpy(zero_copy_only=False)
        return unique.to_pylist(), np.asarray(of_file, dtype=np.int64)

    def spark_paths(self, expr: Expr | str) -> list[str]:
        """Full paths of the files to read, for ``spark.read.parquet(*paths)`` (a copy-on-write
        table's: a merge-on-read slice's rows need its log files merged)."""
        if self.merge_on_read:
            raise TableConfigError(
                self.table.storage.uri(PROPERTIES_FILE),
                f"{TYPE}=MERGE_ON_READ: its file slices need their log files merged, which "
                "spark.read.parquet does not do; read prune(...).slices with a merge-on-read "
                "reader (Apache Hudi, hudi-rs)",
            )
        return [self.table.storage.uri(f.path) for f in self.prune(expr).candidates]

    # --- bloom filters ---------------------------------------------------------------------------

    def _key_bitsets(
        self, partition: str, files: pa.Table
    ) -> tuple[pa.ChunkedArray, np.ndarray] | None:
        """The bloom filter bitsets of ``files`` (rows of base files in ``partition``, with
        their ``file_name`` and ``instant_time``): a column of bitsets and each file's position
        in it, -1 for a file that must be read anyway (no filter, or its instant not applied
        yet); None when ``bloom_filters`` is not used (every file may hold any key). One rule
        for both write engines' tagging."""
        if not self.uses(BLOOM_FILTERS):
            return None
        rows = self._partition_filters(partition)
        found = pc.index_in(files.column("file_name"), rows.column("file_name"))
        at = np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        at[self._unfiltered(files)] = -1
        return rows.column("bloom_filter"), at

    def _partition_filters(self, partition: str) -> pa.Table:
        """The ``file_name`` and ``bloom_filter`` of every file of ``partition`` the
        ``bloom_filters`` index holds."""
        columns = ["file_name", "bloom_filter"]
        return self.reader.read(
            BLOOM_FILTERS, partition_prefix(partition), columns=columns, ordered=False
        )

    def _unfiltered(self, files: pa.Table) -> np.ndarray:
        """Which of ``files`` (with their ``instant_time``) were written by instants
        ``bloom_filters`` does not reflect: they must be read whatever a filter says."""
        behind = self._unapplied_times(BLOOM_FILTERS)
        if not behind:
            return np.zeros(files.num_rows, dtype=bool)
        stale = pc.is_in(files.column("instant_time"), pa.array(sorted(behind), pa.string()))
        return np.asarray(stale.to_numpy(zero_copy_only=False), dtype=bool)

    def key_filters(
        self, partition: str, files: Sequence[BaseFile]
    ) -> dict[str, SplitBlockBloomFilter | None] | None:
        """File name -> the bloom filter of its record keys, or None for a file that must be
        read anyway; None when ``bloom_filters`` is not used (see :meth:`_key_bitsets`): the
        filters as objects, for a Spark writer's tasks."""
        rows = pa.table(
            {
                "file_name": pa.array([f.file_name for f in files], pa.string()),
                "instant_time": pa.array([f.instant_time for f in files], pa.string()),
            }
        )
        found = self._key_bitsets(partition, rows)
        if found is None:
            return None
        bitsets, at = found
        values = [None if p < 0 else bitsets[p].as_py() for p in at.tolist()]
        return {
            f.file_name: None if value is None else SplitBlockBloomFilter(value)
            for f, value in zip(files, values, strict=True)
        }

    def candidate_files(
        self,
        partition: str,
        keys: Iterable[str],
        files: pa.Table,
        kept: KeptFilters | None = None,
    ) -> pa.Table:
        """Of ``files`` (rows of base files in ``partition``, as
        :meth:`~timeline.fs_view.FileSystemView.latest_base_table_of` gives them), those whose
        bloom filter may hold one of ``keys`` (:meth:`_key_bitsets`' rule), probed on the
        filters' Arrow buffers for all keys at once: a partition's 1,000 files against 1,000
        keys in a tenth of a second, where a probe per filter object and key was most of an
        upsert's 3 s. With ``kept`` (a warm writer's), the partition's filters are those kept,
        read from the index only when a file has none there (and then kept)."""
        hashes = np.fromiter((hash_value(k) for k in keys), dtype=np.uint64)
        if kept is None:
            found = self._key_bitsets(partition, files)
            if found is None:
                return files
            bitsets, at = found
            return files.filter(pa.array(might_contain_any(bitsets, hashes, at)))
        if not self.uses(BLOOM_FILTERS):
            return files
        names = files.column("file_name")
        unfiltered = self._unfiltered(files)
        where = kept.positions(partition, names)
        if where is None or np.any((where < 0) & ~unfiltered):
            rows = self._partition_filters(partition)
            kept.put(partition, rows.column("file_name"), rows.column("bloom_filter"))
            where = kept.positions(partition, names)
            assert where is not None  # (just kept)
        where[unfiltered] = -1
        return files.filter(pa.array(kept.might_contain_any(partition, hashes, where)))

    def _bloom_records(self) -> pa.Table:
        """Every live bloom filter record with its file's ``path``; read once per snapshot."""
        if self._bloom_table is None:
            columns = ["partition", "file_name", "bloom_filter"]
            self._bloom_table = self.reader.read(
                BLOOM_FILTERS, columns=columns, ordered=False, derive=_with_paths
            )
        return self._bloom_table

    def key_indexes(self) -> list[str]:
        """The indexes :meth:`lookup_keys` answers with: ``record_index`` (exact), and, for files
        of instants it does not reflect (or without it), ``bloom_filters`` and ``column_stats``
        when it holds record key ranges; none: every latest file may hold any key."""
        exact = self.uses(RECORD_INDEX)
        if exact and not self.record_index_touched():
            return [RECORD_INDEX]
        used = [RECORD_INDEX] if exact else []
        if self.uses(BLOOM_FILTERS):
            used.append(BLOOM_FILTERS)
        if self._key_ranges_indexed():
            used.append(COLUMN_STATS)
        return used

    def _key_ranges_indexed(self) -> bool:
        return self.uses(COLUMN_STATS) and self._column_records(RECORD_KEY).num_rows > 0

    def lookup_keys(
        self, keys: Iterable[str], partition: str | None = None
    ) -> dict[str, list[str]]:
        """Record key -> paths of the files of the latest slices that may hold it (a base file
        each on a copy-on-write table).

        With ``record_index`` used, a key's answer is exact: the files of the one slice that
        holds it (none: not in the table). Files written by instants ``record_index`` does not
        reflect yet are judged as without it, below (the partitions those instants touched may
        hold keys it does not know of).

        Otherwise a file may hold a key when its bloom filter may hold it (tested on Arrow arrays
        over all files at once) and its record key range (column_stats of
        ``_hoodie_record_key``, when indexed) holds the key (tested on the files the filters
        kept); a file without a record, or written by an instant an index does not reflect, is
        kept; a slice is kept when any of its files is (a log file that holds inserts or updates
        of the key)."""
        wanted = list(keys)
        listing = self._listing if partition is None else self._slice_listing([partition])
        out: dict[str, list[str]] = {k: [] for k in wanted}
        if not wanted or not listing.size:
            return out
        if not self.uses(RECORD_INDEX):
            return self._may_hold(wanted, listing)
        for key, where in self.record_locations(wanted).items():
            if partition is None or where.partition_path == partition:
                out[key] = list(where.paths)
        touched = self.record_index_touched()
        if touched:  # files of instants the record index does not reflect: the other indexes
            stale = listing.in_partitions(touched)
            if stale.any():
                for key, paths in self._may_hold(wanted, listing, stale).items():
                    out[key] = sorted(set(out[key]) | set(paths))
        return out

    def record_locations(self, keys: Iterable[str]) -> dict[str, RecordLocation]:
        """Where ``record_index`` says each key lives (keys not in the table left out): its data
        partition, file group, and the files of that group's latest slice in this snapshot. Only
        with ``record_index`` used; instants it does not reflect are not looked at (see
        :meth:`record_index_touched`). :meth:`locate_keys` answers the same on Arrow."""
        found = self.locate_keys(keys)
        rows = list(
            zip(
                found.column("record_key").to_pylist(),
                found.column("partition_path").to_pylist(),
                found.column("file_id").to_pylist(),
                strict=True,
            )
        )
        slices = self._listing.slices_of({(data, file_id) for _, data, file_id in rows})
        out = {}
        for key, data, file_id in rows:
            held = slices.get((data, file_id))
            paths = tuple(held.paths) if held is not None else ()
            instant = held.base_instant if held is not None else None
            out[key] = RecordLocation(data, file_id, instant, paths)
        return out

    def locate_keys(self, keys: Iterable[str] | pa.Array) -> pa.Table:
        """:meth:`record_locations` as an Arrow table (``record_key``, ``partition_path``,
        ``file_id``; one row per key found), with no Python object per key: for lookups of
        many keys (tagging a large batch)."""
        if not self.uses(RECORD_INDEX):
            raise IndexStateError(
                self.table.storage.uri(METADATA_FOLDER), "record_index is not completed"
            )
        asked = keys if isinstance(keys, pa.Array) else pa.array(list(keys), pa.string())
        if self.from_hudi(RECORD_INDEX):
            assert self.hudi_index is not None
            found = self.hudi_index.locate(asked.to_pylist())
        else:
            found = self.record_lookup.find(asked)
        partitions = found.column("partition")
        data = pc.if_else(pc.equal(partitions, NON_PARTITIONED), "", partitions)
        return pa.table(
            {
                "record_key": found.column("key"),
                "partition_path": data,
                "file_id": found.column("file_id"),
            }
        )

    @cached_property
    def record_lookup(self) -> KeyedLookup:
        """Lookups in ``record_index`` over this snapshot (what they decode is kept)."""
        return self.keyed_lookup(RECORD_INDEX)

    def keyed_lookup(self, partition: str) -> KeyedLookup:
        """A lookup in a partition keyed by record key, over this snapshot's files of it."""
        if partition not in self._keyed:
            files = self.reader.keyed_files(partition)
            self._keyed[partition] = KeyedLookup(self.reader.storage, partition, files)
        return self._keyed[partition]

    def record_index_touched(self) -> set[str]:
        """The data partitions that instants ``record_index`` does not reflect yet wrote to or
        deleted from: keys there may be where it does not say."""
        return self._touched(RECORD_INDEX)

    def _touched(self, partition: str) -> set[str]:
        touched: set[str] = set()
        for instant in self.unapplied(partition):
            try:
                if instant.action in REMOVAL_ACTIONS:
                    removal = self.reader.removal(instant)
                    touched.update(removal.deleted, removal.whole_partitions)
                else:
                    metadata = self.reader.commit_metadata(instant)
                    touched.update(s.partition_path for s in metadata.write_stats)
                    touched.update(metadata.partition_to_replace_file_ids)
            except TableError:  # unreadable: every partition may hold anything
                return set(self._partitions[0]) | {""}
        return touched

    def _bloom_keep(self, listing: _Listing, keys: Sequence[str], only: np.ndarray) -> np.ndarray:
        """Per file of ``listing``, whether its bloom filter may hold any of ``keys`` (the files
        ``only`` leaves out, and those without a filter, answer True)."""
        if self.from_hudi(BLOOM_FILTERS):
            return np.asarray(self._hudi_blooms(listing, keys, only).any(axis=0), dtype=bool)
        blooms = self._listing_blooms(listing)
        return blooms.might_contain_any([hash_value(k) for k in keys], only=only)

    def _hudi_blooms(
        self, listing: _Listing, keys: Sequence[str], only: np.ndarray | None = None
    ) -> np.ndarray:
        """(keys, files of ``listing``): what Apache Hudi's bloom filters say of each key."""
        assert self.hudi_index is not None
        partitions = listing.partition_paths.to_pylist()
        paths = listing.paths.to_pylist()
        names = [p[len(d) + 1 :] if d else p for p, d in zip(paths, partitions, strict=True)]
        return self.hudi_index.bloom_matrix(partitions, names, keys, only)

    def _listing_blooms(self, listing: _Listing) -> FiltersAt:
        """Each file of ``listing``'s bloom filter (none: read the file), aligned once per
        snapshot and listing (at a million files the alignment took most of a lookup on a kept
        snapshot), by positions: the filters are not copied (:class:`FiltersAt`)."""
        if self._blooms_of is None or self._blooms_of[0] is not listing:
            records = self._bloom_records()
            at = _positions(
                listing.paths, records.column("path"), listing.path_hashes, _hashes_of(records)
            )
            where = np.asarray(pc.fill_null(at, -1).to_numpy(zero_copy_only=False), np.int64)
            self._blooms_of = (listing, FiltersAt(records.column("bloom_filter"), where))
        return self._blooms_of[1]

    def _may_hold(
        self, wanted: list[str], listing: _Listing, only: np.ndarray | None = None
    ) -> dict[str, list[str]]:
        """The bloom filter and key range answer of :meth:`lookup_keys` (of the files ``only``
        marks, when given)."""
        paths = listing.paths
        out: dict[str, list[str]] = {k: [] for k in wanted}
        filtered = self.uses(BLOOM_FILTERS)
        if filtered:
            # files of instants the filters do not reflect are read whatever their filter says
            unfiltered = listing.written_by(self._unapplied_times(BLOOM_FILTERS))
        # Apache Hudi's filters: every key against each file's filter at once
        hudi = self._hudi_blooms(listing, wanted, only) if self.from_hudi(BLOOM_FILTERS) else None
        keeps = {}
        for number, key in enumerate(wanted):
            keep = np.ones(listing.size, dtype=bool) if only is None else only.copy()
            if hudi is not None:
                keep &= hudi[number] | unfiltered
            elif filtered:
                keep &= self._bloom_keep(listing, [key], keep) | unfiltered
            keeps[key] = keep
        if self.uses(COLUMN_STATS) and wanted:
            # key ranges, of the files some bloom filter kept (all of them without filters)
            at = np.flatnonzero(np.logical_or.reduce(list(keeps.values())))
            hashes = None if listing.path_hashes is None else take_rows(listing.path_hashes, at)
            arrays = self._key_ranges(take_rows(paths, at), hashes) if len(at) else None
            if arrays is not None and arrays.kind == "string":
                stale = listing.written_by(self._unapplied_times(COLUMN_STATS))[at]
                unknown = pc.or_(pc.invert(arrays.present), pa.array(stale))
                for key, keep in keeps.items():
                    inside = pc.and_kleene(
                        pc.less_equal(arrays.minimum, key), pc.greater_equal(arrays.maximum, key)
                    )
                    either = pc.or_(pc.fill_null(inside, True), unknown)
                    keep[at] &= np.asarray(either.to_numpy(zero_copy_only=False), dtype=bool)
        for key, keep in keeps.items():
            out[key] = [p for s in listing.kept_slices(keep) for p in s.paths]
        return out


@dataclass(frozen=True)
class RecordLocation:
    """Where a record lives: its data partition, file group, the instant of that group's latest
    slice and that slice's files (empty when the snapshot's listing has no such slice)."""

    partition_path: str
    file_id: str
    instant: str | None
    paths: tuple[str, ...]


class _Listing:
    """Latest file slices and their files in one list (base file first, then log files, slice by
    slice), the files' paths, partitions and writing instants as Arrow arrays, and each file's
    slice. On a copy-on-write table a slice is its base file, and base files are made as
    objects only for the slices a caller keeps (:meth:`of_base_table`)."""

    def __init__(
        self,
        files: Sequence[BaseFile | LogFile] | pa.Table,
        slices: list[FileSlice] | None = None,
        slice_of: np.ndarray | None = None,
    ) -> None:
        self._slices = slices  # None: one per base file
        if isinstance(files, pa.Table):  # base files, as FileSystemView.latest_base_table
            self._table: pa.Table | None = files
            self._files: list[BaseFile | LogFile] | None = None
            self.paths = files.column("path")
            self.partition_paths = files.column("partition_path")
            self.written_at = files.column("instant_time")
            #: the paths' hashes (:data:`PATH_HASHES`), when the listing came from the files index
            self.path_hashes: pa.Table | None = _hashes_of(files)
        else:
            self._table = None
            self._files = list(files)
            self.paths = pa.array([f.path for f in self._files], pa.string())
            self.partition_paths = pa.array([f.partition_path for f in self._files], pa.string())
            self.written_at = pa.array([_written_at(f) for f in self._files], pa.string())
            self.path_hashes = None
        self.size = len(self.paths)
        self.slice_of = slice_of if slice_of is not None else np.arange(self.size)

    @classmethod
    def of_base_files(cls, files: Sequence[BaseFile]) -> _Listing:
        return cls(files)

    @classmethod
    def of_base_table(cls, table: pa.Table) -> _Listing:
        """Base files as :attr:`timeline.fs_view.FileSystemView.latest_base_table` gives them."""
        return cls(table)

    @classmethod
    def of_slices(cls, slices: list[FileSlice]) -> _Listing:
        files: list[BaseFile | LogFile] = []
        slice_of: list[int] = []
        for number, s in enumerate(slices):
            members: list[BaseFile | LogFile] = [s.base_file] if s.base_file is not None else []
            members.extend(s.log_files)
            files.extend(members)
            slice_of.extend([number] * len(members))
        return cls(files, slices, np.asarray(slice_of, dtype=np.int64))

    def files_at(self, indices: Iterable[int]) -> list[BaseFile | LogFile]:
        """The files at ``indices``, made as objects when the listing holds a table."""
        if self._files is not None:
            return [self._files[int(i)] for i in indices]
        assert self._table is not None
        return list(base_files_of(take_rows(self._table, list(indices))))

    @property
    def count(self) -> int:
        """How many slices."""
        return len(self._slices) if self._slices is not None else self.size

    @property
    def slices(self) -> list[FileSlice]:
        return self._slices if self._slices is not None else self._base_slices(range(self.count))

    def _kept(self, keep_file: np.ndarray) -> np.ndarray:
        """Indices of the slices with at least one kept file."""
        if self._slices is None:
            return np.flatnonzero(keep_file)
        keep = np.zeros(len(self._slices), dtype=bool)
        np.logical_or.at(keep, self.slice_of, keep_file)
        return np.flatnonzero(keep)

    def by_slice(self, keep_file: np.ndarray) -> np.ndarray:
        """Per file, whether any file of its slice is kept in ``keep_file``."""
        if self._slices is None:
            return keep_file
        keep = np.zeros(len(self._slices), dtype=bool)
        np.logical_or.at(keep, self.slice_of, keep_file)
        out: np.ndarray = keep[self.slice_of]
        return out

    def count_kept(self, keep_file: np.ndarray) -> int:
        return len(self._kept(keep_file))

    def kept_slices(self, keep_file: np.ndarray) -> list[FileSlice]:
        """The slices with at least one kept file."""
        kept = self._kept(keep_file)
        if self._slices is None:
            return self._base_slices(kept)
        return [self._slices[int(i)] for i in kept]

    def _base_slices(self, indices: Iterable[int]) -> list[FileSlice]:
        return _as_slices([f for f in self.files_at(indices) if isinstance(f, BaseFile)])

    @cached_property
    def _by_group(self) -> dict[tuple[str, str], FileSlice]:
        return {(s.partition_path, s.file_id): s for s in self.slices}

    @cached_property
    def _groups(self) -> pa.ChunkedArray | pa.Array:
        """Per file of a listing that holds a table: ``<partition>/<file id>``."""
        assert self._table is not None
        table = self._table
        return pc.binary_join_element_wise(
            table.column("partition_path"), table.column("file_id"), "/"
        )

    def slices_of(self, groups: set[tuple[str, str]]) -> dict[tuple[str, str], FileSlice]:
        """The latest slices of the file groups ``(partition, file id)`` among ``groups`` that
        the listing holds: on a listing that holds a table, one scan of its arrays and objects
        for those slices alone (a kept snapshot's lookups stay that cheap at any size)."""
        if self._table is None:
            return {g: self._by_group[g] for g in groups if g in self._by_group}
        wanted = pa.array(sorted(f"{p}/{f}" for p, f in groups), pa.string())
        at = np.flatnonzero(pc.is_in(self._groups, value_set=wanted).to_numpy(zero_copy_only=False))
        return {(s.partition_path, s.file_id): s for s in self._base_slices(at)}

    def in_partitions(self, partitions: set[str]) -> np.ndarray:
        """Per file, whether its partition is one of ``partitions``."""
        if not partitions:
            return np.zeros(self.size, dtype=bool)
        inside = pc.is_in(self.partition_paths, value_set=pa.array(sorted(partitions)))
        return np.asarray(inside.to_numpy(zero_copy_only=False), dtype=bool)

    def written_by(self, instants: set[str]) -> np.ndarray:
        """Per file, whether a base file written by one of ``instants`` (never a log file)."""
        if not instants:
            return np.zeros(self.size, dtype=bool)
        by = pc.fill_null(pc.is_in(self.written_at, value_set=pa.array(sorted(instants))), False)
        return np.asarray(by.to_numpy(zero_copy_only=False), dtype=bool)


#: at most this many record keys a filter asks for are also tested against the key ranges of
#: column_stats (``_hoodie_record_key``): each is a comparison over every file
_KEY_RANGE_KEYS = 100


def _no_stats(expr: Expr) -> str:
    return f"it holds no stats of {', '.join(sorted(expr.columns()))}"


def _written_at(file: BaseFile | LogFile) -> str | None:
    """The instant that wrote a base file; None for a log file (its blocks name theirs)."""
    return file.instant_time if isinstance(file, BaseFile) else None


def _as_slices(files: Sequence[BaseFile]) -> list[FileSlice]:
    """Copy-on-write slices: a base file each."""
    return [FileSlice(b.partition_path, b.file_id, b.instant_time, b) for b in files]


#: at most this many files' key ranges are read by their keys (see :meth:`_key_ranges`)
_FEW_FILES = 64

#: the column_stats fields :func:`_aligned` reads, besides min and max
_ALIGNED_FIELDS = ("partition", "file_name", "value_type", "null_count", "value_count")


def _aligned(
    records: pa.Table,
    key: str,
    wanted: pa.Array | pa.ChunkedArray,
    wanted_hashes: pa.Table | None = None,
) -> ColumnArrays | None:
    """One column's stats ``records`` (keyed by their ``key`` column: files' paths, or
    partitions) aligned with ``wanted`` (with ``wanted_hashes``, paths are matched by their
    hashes: :func:`_positions`); None when the records do not share one value kind."""
    kinds = pc.unique(records.column("value_type")).to_pylist()
    if len(kinds) != 1 or kinds[0] is None:
        return None
    kind = kinds[0]
    key_hashes = _hashes_of(records) if wanted_hashes is not None and key == "path" else None
    if len(wanted) * 8 < records.num_rows:  # a few files: hash those, not every record's key
        if wanted_hashes is not None and key_hashes is not None:  # (collisions: see below)
            some = pc.is_in(key_hashes.column(PATH_HASH), value_set=wanted_hashes.column(PATH_HASH))
        else:
            some = pc.is_in(records.column(key), value_set=wanted)
        records = records.filter(some)
        key_hashes = None if key_hashes is None else key_hashes.filter(some)
    at = _positions(wanted, records.column(key), wanted_hashes, key_hashes)
    return ColumnArrays(
        kind,
        pc.is_valid(at),
        pc.take(pc.struct_field(records.column("min_value"), kind), at),
        pc.take(pc.struct_field(records.column("max_value"), kind), at),
        pc.take(records.column("null_count"), at),
        pc.take(records.column("value_count"), at),
    )


def _column_stats(row: dict[str, Any]) -> ColumnStats:
    """A stats record (column_stats or partition_stats) as :class:`ColumnStats`."""
    kind = row["value_type"]
    return ColumnStats(
        python_value(kind, row["min_value"]),
        python_value(kind, row["max_value"]),
        row["null_count"],
        row["value_count"],
    )


def _listing_of(records: pa.Table) -> pa.Table:
    """``files`` records with the columns of a listing (:class:`FileSystemView`): the data
    partition's path, each file's path, and the fields of base files' names."""
    partition = records.column("partition")
    data = pc.if_else(pc.equal(partition, NON_PARTITIONED), "", partition)
    listed = _with_paths(records).append_column("partition_path", data)
    return with_base_name_fields(listed)


def _common_prefix(texts: list[str]) -> str:
    """The longest prefix of every one of ``texts`` (not empty): their least and greatest's."""
    low, high = min(texts), max(texts)
    size = 0
    while size < len(low) and low[size] == high[size]:
        size += 1
    return low[:size]


def _split_path(path: str) -> tuple[str, str]:
    """A data file's path as its partition path ("" at the base path) and its name."""
    partition, _, name = path.rpartition("/")
    return partition, name


def _with_paths(records: pa.Table) -> pa.Table:
    """Records with a ``partition`` and ``file_name``, plus the data file's ``path`` and its two
    64-bit hashes (:data:`~timeline.fs_view.PATH_HASHES`: records of other partitions are
    aligned with a listing by them, see :func:`_positions`)."""
    partition, name = records.column("partition"), records.column("file_name")
    path = pc.if_else(
        pc.equal(partition, NON_PARTITIONED),
        name,
        pc.binary_join_element_wise(partition, name, "/"),
    )
    records = records.append_column("path", path)
    records = records.append_column(PATH_HASH, pa.array(key_hash64(path), pa.uint64()))
    return records.append_column(PATH_CHECK, pa.array(key_hash64(path, CHECK_SEED), pa.uint64()))


def _hashes_of(records: pa.Table) -> pa.Table | None:
    """The :data:`PATH_HASHES` columns of ``records``; None when they have not both."""
    if not set(PATH_HASHES) <= set(records.column_names):
        return None
    return records.select(list(PATH_HASHES))


def _positions(
    wanted: pa.Array | pa.ChunkedArray,
    keys: pa.Array | pa.ChunkedArray,
    wanted_hashes: pa.Table | None = None,
    key_hashes: pa.Table | None = None,
) -> pa.Array:
    """Where each of ``wanted`` is in ``keys`` (null: not there), as ``pc.index_in``.

    When both sides have their :data:`PATH_HASHES` (computed once per decoded index file),
    by them instead: found by the first hash, and the same path where the second agrees too.
    128 bits tell a million paths apart (a false match about once in 10^26 alignments), where
    hashing or comparing the strings cost most of a new snapshot's prune at a million files.
    Where the first hash matched and the second did not (two paths of one first hash), the
    strings decide."""
    if wanted_hashes is None or key_hashes is None:
        return pc.index_in(wanted, value_set=keys)
    at = pc.index_in(wanted_hashes.column(PATH_HASH), value_set=key_hashes.column(PATH_HASH))
    checks, key_checks = wanted_hashes.column(PATH_CHECK), key_hashes.column(PATH_CHECK)
    if at.null_count:
        found = pc.is_valid(at)
        same = pc.equal(pc.filter(checks, found), pc.take(key_checks, pc.filter(at, found)))
    else:  # every one found (the usual case)
        same = pc.equal(checks, pc.take(key_checks, at))
    if pc.all(same).as_py() is False:
        return pc.index_in(wanted, value_set=keys)
    return at
