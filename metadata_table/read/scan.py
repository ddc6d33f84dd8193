"""Rows of a table, read through its index: ``load_table(path).scan(...)``.

One line gets rows, as pyiceberg's ``table.scan(...).to_arrow()`` and hudi-rs's
``read_snapshot(filters=...)`` do::

    from metadata_table import load_table

    trips = load_table("/data/trips")
    rows = trips.scan("fare > 50 AND city IN ('sf', 'la')", ("uuid", "fare")).to_arrow()

The names:

* :func:`load_table` opens a table (local path or ``s3://``; ``storage_options`` as fsspec/s3fs
  take them) and returns an :class:`IndexedTable`.
* :meth:`IndexedTable.scan` describes a read of a snapshot: ``row_filter`` (the filter language
  of :mod:`metadata_table.read.filters`, text or built in code; empty for every row),
  ``selected_fields`` (columns to return, ``("*",)`` for all, Hudi's meta columns included),
  ``limit`` (stop after that many rows), ``as_of`` (read the table as it was at that instant, as
  Hudi's ``as.of.instant``; default the latest). :meth:`IndexedTable.changes` describes an
  incremental read: the latest values of the rows that commits after ``begin`` (up to ``end``)
  wrote, as Hudi's incremental query gives them.
* A :class:`TableScan` plans first (:meth:`~TableScan.plan`, :meth:`~TableScan.explain`): the
  snapshot's files, then every completed index that can drop some, in turn
  (:meth:`IndexedSnapshot.prune <metadata_table.read.snapshot.IndexedSnapshot.prune>`:
  ``partition_stats`` whole partitions, ``column_stats`` files, ``record_index`` the files
  that hold none of the record keys the filter asks for, by ``=`` or ``IN`` on the key fields
  or on ``_hoodie_record_key``, each secondary index those without a value asked for,
  ``bloom_filters`` files whose filter holds none of the keys), each credited with what it
  dropped, and each index that dropped nothing with why; files of instants an index does not
  reflect yet are kept. It then reads only the kept files, only the columns it returns and
  those the filter needs, streaming, with DuckDB's Parquet reader or pyarrow's
  (:mod:`metadata_table.read.rows` says which when), and applies the whole filter to every
  row: an index only ever drops files, it never decides a row.
* Outputs: :meth:`~TableScan.to_arrow_batch_reader` (memory bounded by a batch, not the
  result), :meth:`~TableScan.to_arrow`, :meth:`~TableScan.to_pandas`,
  :meth:`~TableScan.to_duckdb`, :meth:`~TableScan.to_polars` (Polars is the optional extra
  ``async-indexer[polars]``) and :meth:`~TableScan.to_spark`.

Merge-on-read tables are refused by name: their file slices' log files are not merged here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    PARTITION_STATS,
    RECORD_INDEX,
)
from metadata_table.read.filters import And, Compare, Expr, In, IsNull, Or, parse_filter
from metadata_table.read.hudi_index import SERVED as HUDI_SERVED
from metadata_table.read.hudi_index import SOURCE as HUDI_SOURCE
from metadata_table.read.rows import COMMIT_TIME, RowRead, read_rows
from metadata_table.read.rows import engine as row_engine
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.reader import MetadataReader
from metadata_table.table import MetadataTable
from timeline.commit_metadata import CommitMetadata
from timeline.config import READ_CACHE_MAX_MB, Config
from timeline.errors import (
    CorruptInstantError,
    InvalidInstantError,
    SnapshotUnavailableError,
    StorageFileNotFoundError,
    TableConfigError,
    UnknownColumnError,
)
from timeline.fs_view import BaseFile, FileSystemView
from timeline.index_state import STATE_FILE
from timeline.instant import WRITE_ACTIONS, Action, Instant, is_after, validate_timestamp
from timeline.removals import REMOVAL_ACTIONS
from timeline.storage import FileInfo
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE, TYPE, TableType
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

ALL_FIELDS = ("*",)
RECORD_KEY = "_hoodie_record_key"
CLEANER_RETAINED = "hoodie.cleaner.commits.retained"
ARCHIVE_KEEP = "hoodie.keep.min.commits (and an archive left whole)"


def load_table(
    path: str, storage_options: Mapping[str, Any] | None = None, config: Config | None = None
) -> IndexedTable:
    """Open the table at ``path`` (a local path or ``s3://...``) for reads through its index;
    ``storage_options`` are fsspec/s3fs options (``endpoint_url``, ``key``, ``secret``, ...)."""
    if config is None:
        explicit = {f"indexer.storage.{k}": v for k, v in (storage_options or {}).items()}
        config = Config.resolve(explicit=explicit)
    return IndexedTable(Table.open(path, config))


#: a table's place among the kept snapshots (its URI and configuration), and what its snapshot
#: was made of (see IndexedTable._state_key)
Slot = tuple[str, tuple[tuple[str, str], ...]]
StateKey = tuple[object, ...]
#: the indexed snapshot kept for each table this process read last, shared by its table
#: objects (least recently used out past KEPT_TABLES, or past KEPT_FILES files listed in all:
#: a snapshot holds about 150 bytes of Arrow memory a file beside the decoded index files)
_kept: OrderedDict[Slot, tuple[StateKey, IndexedSnapshot]] = OrderedDict()
_keeping = threading.Lock()
KEPT_TABLES = 8
KEPT_FILES = 2_000_000
#: pending instants a kept snapshot does not depend on (see IndexedTable._state_key)
_UNSEEN_PENDING = frozenset({Action.COMMIT, Action.DELTA_COMMIT})


class IndexedTable:
    """A table opened for reads; each :meth:`scan` sees the timeline as it is when it is made.

    The index as decoded for one state of the table (an :class:`IndexedSnapshot`: its listing,
    the stats and keys read so far) is kept for the next scan while the table's timeline (but
    for writes still pending), the index's state file, the index's own timeline and
    ``hoodie.properties`` are unchanged (checked on every scan, about 0.2 ms locally), so a
    warm reader plans in about a millisecond; any change starts a new one. It is kept for the
    process, not for this object, as Delta's readers keep a table's log: a new table object of
    the same table and configuration (a query service calling :func:`load_table` per request)
    plans on it too. What it decoded describes the data of that timeline exactly, so it
    answers as a snapshot read again would. With ``indexer.read.cache.max.mb`` 0 nothing is
    kept between table objects.
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        shared = table.config.get(READ_CACHE_MAX_MB) > 0
        self._slots: dict[Slot, tuple[StateKey, IndexedSnapshot]] = _kept if shared else {}
        self._slot: Slot = (table.base_uri, table.config.fingerprint())

    def snapshot_at(self, timeline: Timeline, fresh: bool = False) -> IndexedSnapshot:
        """The indexed snapshot of ``timeline`` (the one kept, if the table has not changed
        since it was made; a new one when ``fresh``)."""
        key = self._state_key(timeline)
        with _keeping:
            kept = self._slots.get(self._slot)
            if not fresh and kept is not None and kept[0] == key:
                self._used()
                return kept[1]
        snapshot = IndexedSnapshot(self.table, timeline)
        with _keeping:
            self._slots[self._slot] = (key, snapshot)
            self._used()
        return snapshot

    def _used(self) -> None:
        """This table's kept snapshot made the most recently used, and the least recently used
        ones let go past :data:`KEPT_TABLES` tables or :data:`KEPT_FILES` files listed in all
        (the newest is always kept); under ``_keeping``."""
        if self._slots is not _kept:
            return
        _kept.move_to_end(self._slot)
        while len(_kept) > 1 and (
            len(_kept) > KEPT_TABLES
            or sum(held.files_held for _, held in _kept.values()) > KEPT_FILES
        ):
            _kept.popitem(last=False)

    def _state_key(self, timeline: Timeline) -> StateKey:
        """What an indexed snapshot is made of: the data timeline, the index's state file, the
        index's own timeline and ``hoodie.properties`` as this table object read it (which of
        Apache Hudi's metadata partitions are there). A commit or deltacommit still pending is
        left out: until it completes no reader sees its files or its index records, so a
        writer's start (its requested and inflight files) does not make the snapshot again;
        every other pending instant counts (a pending compaction shapes file slices, a pending
        clean, rollback or restore is deleting files)."""
        try:
            state = self.table.storage.read(STATE_FILE)
        except StorageFileNotFoundError:
            state = b""
        index_timeline = MetadataTable(self.table).timeline.load()
        data = tuple(i for i in timeline if i.is_completed or i.action not in _UNSEEN_PENDING)
        return (data, state, tuple(index_timeline), self.table.table_config)

    def __repr__(self) -> str:
        return f"IndexedTable({self.table.base_uri!r})"

    def scan(
        self,
        row_filter: str | Expr = "",
        selected_fields: Sequence[str] = ALL_FIELDS,
        limit: int | None = None,
        as_of: str | None = None,
    ) -> TableScan:
        """A read of the latest snapshot, or of the table as of instant ``as_of``."""
        if as_of is not None:
            validate_timestamp(as_of)
        return TableScan(
            self.table, row_filter, tuple(selected_fields), limit, as_of=as_of, indexed=self
        )

    def changes(
        self,
        begin: str,
        end: str | None = None,
        row_filter: str | Expr = "",
        selected_fields: Sequence[str] = ALL_FIELDS,
        limit: int | None = None,
    ) -> TableScan:
        """The latest values of the rows written by commits after ``begin`` up to ``end`` (the
        newest completed one by default), by ``_hoodie_commit_time``, as Hudi's incremental
        query returns them."""
        window = (validate_timestamp(begin), validate_timestamp(end) if end else None)
        return TableScan(
            self.table, row_filter, tuple(selected_fields), limit, changes=window, indexed=self
        )


@dataclass(frozen=True)
class ScanPlan:
    """What a scan reads, and what each index dropped."""

    files: list[BaseFile]
    #: files of the snapshot (or of the commits of an incremental read) before any index
    total: int
    #: the instant the scan reads the table as of; for changes, the window (begin, end]
    snapshot: str
    begin: str | None
    #: per index used, in the order applied: the files it dropped beyond those before it;
    #: partition_stats also counts partitions
    dropped: dict[str, int] = field(default_factory=dict)
    partitions: int = 0
    partitions_dropped: int = 0
    #: per index: completed instants it does not reflect yet, whose files were kept
    unapplied: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: indexes not used, with why
    unused: dict[str, str] = field(default_factory=dict)
    #: why the plan holds no file though the table has some (a time before its first commit,
    #: changes after its newest), or None
    note: str | None = None

    @property
    def kept(self) -> int:
        return len(self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot,
            "begin": self.begin,
            "files_total": self.total,
            "files_kept": self.kept,
            "partitions": self.partitions,
            "partitions_dropped": self.partitions_dropped,
            "dropped": dict(self.dropped),
            "unapplied": {k: list(v) for k, v in self.unapplied.items()},
            "unused": dict(self.unused),
            "note": self.note,
            "files": [f.path for f in self.files],
        }


class TableScan:
    """One read of a table (see the module). Planned once, on first use; read as often as
    asked, each time from the same files."""

    def __init__(
        self,
        table: Table,
        row_filter: str | Expr,
        selected_fields: tuple[str, ...],
        limit: int | None,
        as_of: str | None = None,
        changes: tuple[str, str | None] | None = None,
        indexed: IndexedTable | None = None,
    ) -> None:
        if table.table_config.table_type is TableType.MERGE_ON_READ:
            raise TableConfigError(
                table.storage.uri(PROPERTIES_FILE),
                f"{TYPE}=MERGE_ON_READ: a scan reads base files only, and a merge-on-read "
                "table's log files would be left out",
            )
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be at least 0, not {limit}")
        self.table = table
        self.text = row_filter if isinstance(row_filter, str) else repr(row_filter)
        self.row_filter = (
            parse_filter(row_filter)
            if isinstance(row_filter, str) and row_filter.strip()
            else (row_filter if isinstance(row_filter, Expr) else None)
        )
        self.selected_fields = selected_fields
        self.limit = limit
        self.as_of = as_of
        self.window = changes
        self.timeline = table.timeline.load()
        self.indexed = indexed

    # --- planning --------------------------------------------------------------------------------

    @cached_property
    def snapshot(self) -> IndexedSnapshot:
        if self.indexed is None:
            return IndexedSnapshot(self.table, self.timeline)
        return self.indexed.snapshot_at(self.timeline)

    def plan(self) -> ScanPlan:
        """The files to read (planned once)."""
        return self._plan

    @cached_property
    def _plan(self) -> ScanPlan:
        try:
            return self._planned()
        except StorageFileNotFoundError:
            if self.indexed is None:
                raise
            # a file of the kept snapshot's was deleted behind the timeline's back (a folder
            # of the index removed by hand): plan once more on a snapshot read now
            self.__dict__["snapshot"] = self.indexed.snapshot_at(self.timeline, fresh=True)
            return self._planned()

    def _planned(self) -> ScanPlan:
        if self.window is not None:
            return self._plan_changes(*self.window)
        if self.as_of is not None:
            return self._plan_as_of(self.as_of)
        return self._plan_latest()

    def _latest_instant(self) -> str:
        last = self.timeline.write_timeline().completed().last()
        return last.timestamp if last else ""

    def _plan_latest(self) -> ScanPlan:
        snapshot = self.snapshot
        instant = self._latest_instant()
        bound = self.bound_filter
        if bound is None:
            files = snapshot.view.latest_base_files()
            return ScanPlan(files, len(files), instant, None, unused=self._no_filter())
        # the kept files alone made into objects (every file's was 0.39 s of a point lookup's
        # first plan at 100,000 files); on a copy-on-write table a slice is its base file
        pruned = snapshot.prune(bound)
        return ScanPlan(
            pruned.candidates,
            pruned.total,
            instant,
            None,
            pruned.dropped,
            pruned.partitions,
            pruned.partitions_pruned,
            pruned.unapplied,
            pruned.unused,
        )

    def _plan_as_of(self, as_of: str) -> ScanPlan:
        """The table as it was at ``as_of``: every committed write up to it, as Hudi's file
        system view sees them (archived ones included); refused when a clean (or a rollback,
        restore) since deleted a file that was live then."""
        listing = self.snapshot.view.all_base_files  # every committed version still stored
        view = FileSystemView(
            self.table.timeline,
            self.timeline,
            as_of=as_of,
            listing=lambda: [FileInfo(b.path, b.size, False) for b in listing],
        )
        files = view.latest_base_files()
        self._check_cleaned(as_of, listing)
        plan = self._plan_files(files, as_of, None, "the table as of an earlier instant")
        first = self._first_write()
        if first is not None and is_after(first, as_of):
            why = f"no commit had completed by {as_of}: the table's first is {first}"
            return dataclasses.replace(plan, note=why)
        return plan

    def _first_write(self) -> str | None:
        """The first completed write instant of the table, archived or active."""
        archived = [
            a.instant.timestamp
            for a in self.table.archive().instants()
            if a.instant.action in WRITE_ACTIONS
        ]
        active = self.timeline.write_timeline().completed().first()
        return min([*archived, *([active.timestamp] if active else [])], default=None)

    def _check_cleaned(self, as_of: str, listing: Sequence[BaseFile]) -> None:
        """Refuse (naming the clean) when a removal after ``as_of`` deleted a file that was one
        of the latest at ``as_of``."""
        reader = MetadataTable(self.table).reader(self.timeline)
        removals = [
            i
            for i in self._changes_after(as_of, reader)
            if i.action in REMOVAL_ACTIONS and i.is_completed
        ]
        if not removals:
            return
        gone: dict[str, Instant] = {}
        for removal in removals:
            for partition, names in reader.removal(removal).deleted.items():
                for name in names:
                    gone.setdefault(posixpath.join(partition, name) if partition else name, removal)
        stored = [FileInfo(b.path, b.size, False) for b in listing]
        stored += [FileInfo(p, 0, False) for p in gone]
        then = FileSystemView(
            self.table.timeline, self.timeline, as_of=as_of, listing=lambda: stored
        )
        for base in then.latest_base_files():
            if base.path in gone:
                raise SnapshotUnavailableError(
                    "the table as of",
                    as_of,
                    f"{gone[base.path].timestamp}.{gone[base.path].action} deleted {base.path}",
                    CLEANER_RETAINED,
                )

    def _changes_after(self, begin: str, reader: MetadataReader) -> list[Instant]:
        """Completed instants after ``begin`` that change data files, active or archived."""
        active = [
            i
            for i in self.timeline.completed()
            if (i.action in WRITE_ACTIONS or i.action in REMOVAL_ACTIONS)
            and is_after(i.timestamp, begin)
        ]
        known = {i.timestamp for i in self.timeline}
        archived = [
            a.instant
            for a in self.table.archive().instants(newer_than=begin)
            if a.instant.timestamp not in known
            and (a.instant.action in WRITE_ACTIONS or a.instant.action in REMOVAL_ACTIONS)
            and is_after(a.instant.timestamp, begin)
        ]
        return sorted([*active, *archived])

    def _plan_changes(self, begin: str, end: str | None) -> ScanPlan:
        """The files the commits in (begin, end] wrote, the newest version of each file group
        among them, as Hudi's incremental query reads them; refused when a clean deleted one or
        a commit's metadata is gone."""
        reader = MetadataTable(self.table).reader(self.timeline)
        if end is not None and is_after(begin, end):
            raise InvalidInstantError(end, f"the end of the changes is before their begin {begin}")
        latest = self._latest_instant()
        upto = end or latest or begin
        newest: dict[tuple[str, str], BaseFile] = {}
        for instant in self._changes_after(begin, reader):
            if instant.action in REMOVAL_ACTIONS or is_after(instant.timestamp, upto):
                continue
            try:
                metadata: CommitMetadata = reader.commit_metadata(instant)
            except CorruptInstantError as e:
                raise SnapshotUnavailableError(
                    "the changes since", begin, str(e), ARCHIVE_KEEP
                ) from e
            for stat in metadata.write_stats:
                base = BaseFile.parse(stat.partition_path, stat.file_name, stat.file_size_in_bytes)
                if base is None:
                    continue
                key = (base.partition_path, base.file_id)
                if key not in newest or is_after(base.instant_time, newest[key].instant_time):
                    newest[key] = base
        files = sorted(newest.values(), key=lambda b: b.path)
        stored = {b.path for b in self.snapshot.view.all_base_files}  # one listing for all
        for base in files:
            if base.path not in stored:
                raise SnapshotUnavailableError(
                    "the changes since",
                    begin,
                    f"{base.path}, written by {base.instant_time}, was deleted by a clean",
                    CLEANER_RETAINED,
                )
        plan = self._plan_files(files, upto, begin, "an incremental read")
        if not latest or not is_after(latest, begin):
            last = f"the newest is {latest}" if latest else "the table has none"
            return dataclasses.replace(plan, note=f"no commit completed after {begin}: {last}")
        return plan

    def _plan_files(
        self, files: list[BaseFile], instant: str, begin: str | None, what: str
    ) -> ScanPlan:
        """A plan over ``files`` that only ``column_stats`` may prune (``partition_stats``
        describe the latest files, and the key lookup the latest listing)."""
        bound = self.bound_filter
        if bound is None:
            return ScanPlan(files, len(files), instant, begin, unused=self._no_filter())
        pruned = self.snapshot.prune_files(bound, files)
        unused = {
            PARTITION_STATS: f"it describes the latest files, not {what}",
            **pruned.unused,
        }
        for index in (RECORD_INDEX, *self.snapshot.secondary_indexes, BLOOM_FILTERS):
            unused[index] = f"the key lookup serves the latest files, not {what}"
        return ScanPlan(
            pruned.candidates,
            len(files),
            instant,
            begin,
            pruned.dropped,
            unapplied=pruned.unapplied,
            unused=unused,
        )

    def _no_filter(self) -> dict[str, str]:
        names = (PARTITION_STATS, COLUMN_STATS, RECORD_INDEX, *self.snapshot.secondary_indexes)
        return {name: "no filter" for name in (*names, BLOOM_FILTERS)}

    def explain(self) -> str:
        """The plan in words: what is read, and what each index dropped or why it was not used."""
        plan = self.plan()
        if self.window is not None:
            head = f"changes of {self.table.base_uri} after {plan.begin} up to {plan.snapshot}"
        elif self.as_of is not None:
            head = f"scan of {self.table.base_uri} as of {plan.snapshot}"
        else:
            head = f"scan of {self.table.base_uri} at {plan.snapshot or '(no commit)'}"
        lines = [
            head,
            f"  filter: {self.text or '(none: every row)'}",
            f"  columns: {', '.join(self.output_schema.names)}",
            f"  files: {plan.kept} of {plan.total} read, {plan.total - plan.kept} skipped",
            f"  listed by: {self.snapshot.listed_by}",
        ]
        from_hudi = [p for p in HUDI_SERVED if self.snapshot.from_hudi(p)]
        if from_hudi:
            lines.append(f"  indexes from: {HUDI_SOURCE} ({', '.join(from_hudi)})")
        for index, count in plan.dropped.items():
            extra = ""
            if index == PARTITION_STATS:
                extra = f" ({plan.partitions_dropped} of {plan.partitions} partitions whole)"
            lines.append(f"  {index}: dropped {count} file(s){extra}")
        for index, instants in plan.unapplied.items():
            lines.append(
                f"  {index}: does not reflect {', '.join(instants)} yet; their files were kept"
            )
        for index, why in plan.unused.items():
            lines.append(f"  {index}: not used ({why})")
        if plan.files:
            engine, why = row_engine(self.row_read())
            lines.append(f"  rows read by: {engine} ({why})")
        if self.limit is not None:
            lines.append(f"  limit: {self.limit} row(s)")
        if plan.note:
            lines.append(f"  note: {plan.note}")
        return "\n".join(lines)

    # --- schema ----------------------------------------------------------------------------------

    @cached_property
    def table_schema(self) -> pa.Schema:
        """The table's schema: that of its newest data file (columns are only ever added and
        types only widened, so it holds every older file's columns)."""
        return self.snapshot.table_schema

    @cached_property
    def bound_filter(self) -> Expr | None:
        """The row filter checked against the table's schema, its literals read as their
        columns read them (a quoted date compared with a date column is a date): what the plan,
        the rows and Spark use."""
        return None if self.row_filter is None else self.snapshot.bind(self.row_filter)

    @cached_property
    def output_schema(self) -> pa.Schema:
        schema = self.table_schema
        if self.selected_fields == ALL_FIELDS or not len(schema):
            return schema
        for name in self.selected_fields:
            if schema.get_field_index(name) < 0:
                raise UnknownColumnError(name, schema.names)
        return pa.schema([schema.field(n) for n in self.selected_fields])

    # --- reading ---------------------------------------------------------------------------------

    def row_read(self) -> RowRead:
        """What :meth:`batches` reads: the kept files, the output's columns, the filter."""
        plan = self.plan()
        fs, root = self.table.storage.arrow_filesystem()
        return RowRead(
            fs,
            [posixpath.join(root, f.path) for f in plan.files],
            [f.size for f in plan.files],
            self.table_schema,
            self.output_schema,
            self.bound_filter,
            None if plan.begin is None else (plan.begin, plan.snapshot),
            self.limit,
        )

    def batches(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The rows, batch by batch, as they are read (``progress(files done, files)``), by
        DuckDB or pyarrow (see :mod:`metadata_table.read.rows`)."""
        return read_rows(self.row_read(), progress)

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """The rows as a stream: memory stays bounded by a batch and the reader's buffers,
        whatever the size of the result; ``limit`` stops the reading once enough rows came."""
        return pa.RecordBatchReader.from_batches(self.output_schema, self.batches())

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=self.output_schema)

    def to_pandas(self, **kwargs: Any) -> Any:
        """A pandas DataFrame (``kwargs`` go to ``pyarrow.Table.to_pandas``)."""
        return self.to_arrow().to_pandas(**kwargs)

    def to_duckdb(self, table_name: str, connection: Any = None) -> Any:
        """The rows registered as DuckDB table ``table_name`` in ``connection`` (a new in-memory
        database when None), which is returned."""
        import duckdb

        con = connection if connection is not None else duckdb.connect()
        con.register(table_name, self.to_arrow())
        return con

    def to_polars(self) -> Any:
        """A Polars DataFrame."""
        polars = _optional("polars", "polars")
        return polars.from_arrow(self.to_arrow())

    def to_spark(self, spark: Any) -> Any:
        """A Spark DataFrame over the kept files (``spark``: a SparkSession), the filter and the
        projection applied by Spark, for results too big for one process."""
        from pyspark.sql import functions

        plan = self.plan()
        paths = [self.table.storage.uri(f.path) for f in plan.files]
        if not paths:  # an empty frame of the output schema
            from pyspark.sql.pandas.types import from_arrow_schema

            return spark.createDataFrame([], from_arrow_schema(self.output_schema))
        frame = spark.read.option("mergeSchema", "true").parquet(*paths)
        bound = self.bound_filter
        condition = None if bound is None else spark_condition(bound, functions)
        if plan.begin is not None:
            column = functions.col(COMMIT_TIME)
            window = (column > plan.begin) & (column <= plan.snapshot)
            condition = window if condition is None else condition & window
        if condition is not None:
            frame = frame.filter(condition)
        frame = frame.select(*self.output_schema.names)
        return frame.limit(self.limit) if self.limit is not None else frame


def spark_condition(expr: Expr, functions: Any) -> Any:
    """A filter as a Spark column (``functions``: ``pyspark.sql.functions``), with SQL's null
    rules as Arrow applies them, timestamps as UTC instants."""
    if isinstance(expr, And):
        return spark_condition(expr.left, functions) & spark_condition(expr.right, functions)
    if isinstance(expr, Or):
        return spark_condition(expr.left, functions) | spark_condition(expr.right, functions)
    if isinstance(expr, IsNull):
        column = functions.col(f"`{expr.column}`")
        return column.isNotNull() if expr.negated else column.isNull()
    if isinstance(expr, In):
        column = functions.col(f"`{expr.column}`")
        found = column.isin([_spark_value(v) for v in expr.values])
        return (~found & column.isNotNull()) if expr.negated else found
    if isinstance(expr, Compare):
        column = functions.col(f"`{expr.column}`")
        value = functions.lit(_spark_value(expr.value))
        return {
            "=": column == value,
            "!=": column != value,
            "<": column < value,
            "<=": column <= value,
            ">": column > value,
            ">=": column >= value,
        }[expr.op]
    raise TypeError(f"not a filter: {expr!r}")


def _spark_value(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def _optional(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is not installed: pip install 'async-indexer[{extra}]'") from e


__all__ = ["IndexedTable", "ScanPlan", "TableScan", "load_table", "spark_condition"]
