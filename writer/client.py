"""The write client: insert, upsert and delete on a copy-on-write table, committed with OCC.

One :class:`WriteTransaction` is one instant T (docs/architecture.md §4):

1. start: a new instant time, its heartbeat, then ``T.commit.requested`` (so every pending
   instant of this writer has a heartbeat file until it commits or is rolled back, and a dead
   writer's expires: the cleaner rolls back only writes whose heartbeat file expired);
2. write: plan the file groups (new ones for inserts; tagged existing ones for updates and
   deletes; ``hash(key) mod N`` buckets in the bucket layout); for each data file create its
   marker (after the early conflict check, when enabled), then write the file;
3. ``T.inflight`` carrying the write stats;
4. commit under the table lock: reload the timeline, check every candidate instant with the
   conflict resolution strategy, delete files that have markers but are not in the write stats
   (finalize), complete ``T.commit``; after the lock, delete markers and the heartbeat.

Anything that fails before step 4 completes the instant has *definitely not landed*: the
transaction rolls its own files back. A failure while completing leaves the outcome *unknown*:
nothing is deleted, the heartbeat stops, and the cleaner decides once it expires.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata_table.bloom import BloomSizing
from metadata_table.hudi_table import (
    HudiMetadataTable,
    HudiUpkeep,
    apply_commit,
    hudi_metadata_upkeep,
)
from metadata_table.layout import BLOOM_FILTERS, RECORD_INDEX
from metadata_table.maintenance import UpkeepResult, upkeep
from metadata_table.migrate import LEGACY_FOLDER, has_legacy_index
from metadata_table.read.kept import KeptFilters
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.records import DataFileInfo, key_changes, placed_keys, read_record_keys
from metadata_table.table import MetadataTable
from timeline.archiver import ArchiveResult, archive
from timeline.arrow_types import as_stored
from timeline.clean import CleanPlanner, CleanResult, clean
from timeline.commit_metadata import CommitMetadata, WriteStat
from timeline.config import (
    ARCHIVE_AUTOMATIC,
    ASYNC_CONFLICT_PERIOD_MS,
    BUCKET_COUNT,
    CLEAN_AUTOMATIC,
    CONFLICT_STRATEGY,
    EARLY_CONFLICT_CHECK_COMMITS,
    EARLY_CONFLICT_DETECTION,
    EARLY_CONFLICT_TRANSACTIONAL,
    HUDI_METADATA_TABLE,
    INDEX_UPKEEP_AUTOMATIC,
    MARKER_BATCH_INTERVAL_MS,
    MARKER_SERVER_URL,
    MARKER_THREADS,
    MARKERS_TYPE,
    MAX_FILE_SIZE,
    MAX_RECORDS_PER_FILE,
    Config,
    marker_type,
)
from timeline.conflict import ConcurrentOperation, TxnStart, operation_of, strategy_for
from timeline.errors import (
    BadRecordsError,
    CommitStateUnknownError,
    IndexStateError,
    MarkerServerError,
    RecordKeyConflictError,
    TableConfigError,
    TableError,
)
from timeline.failpoints import failpoint
from timeline.formats.hudi_bloom import FOOTER_KEY as HUDI_BLOOM_FOOTER
from timeline.fs_view import (
    BaseFile,
    FileSystemView,
    KeptBaseFiles,
    base_files_of,
    by_partition,
    parquet_footer,
    read_parquet,
    read_parquet_schema_bytes,
)
from timeline.hashing import buckets_of_keys
from timeline.hudi_metadata import hudi_metadata_table_present, take_down_hudi_metadata_table
from timeline.index_state import IndexState
from timeline.instant import Action, Instant, State
from timeline.keys import META_COLUMNS, PARTITION_PATH, RECORD_KEY, KeyGenerator
from timeline.locks import LockHandle
from timeline.markers import DirectMarkers, IOType, MarkerWriter
from timeline.markers.client import TimelineServerMarkers
from timeline.markers.server import MarkerServer, MarkerServerConfig
from timeline.rollback import rollback
from timeline.table import Table
from timeline.table_config import PROPERTIES_FILE, TYPE, TableType
from timeline.timeline import Timeline
from writer.avro import avro_schema
from writer.early_conflict import EarlyConflictDetector
from writer.files import (
    FileGroupWrite,
    FileLayout,
    encode_file_group,
    ensure_partition_metadata,
    not_less,
)
from writer.parquet_layout import footer_keys, footer_schema
from writer.planner import bucket_file_id, new_file_id, plan_group, records_per_file
from writer.schema import conform, evolve

logger = logging.getLogger(__name__)

#: record keys read from data files before one membership test of a batch's keys (memory bound)
PROBE_ROWS = 4_000_000


class Operation(enum.StrEnum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"


@dataclass(frozen=True)
class WriteOptions:
    conflict_strategy: str = "simple"
    early_conflict_detection: bool = False
    early_conflict_check_commits: bool = False
    early_conflict_transactional: bool = False
    max_file_size: int = MAX_FILE_SIZE.default
    max_records_per_file: int = MAX_RECORDS_PER_FILE.default
    bucket_count: int = 0
    bloom: BloomSizing = field(default_factory=BloomSizing)  # hoodie.index.bloom.*
    markers: str = "direct"  # or "timeline_server_based"
    marker_server_url: str = ""  # empty: embed a server in this client
    marker_server_host: str = "127.0.0.1"  # where an embedded server listens (Spark: the driver)
    marker_batch_interval_ms: int = MARKER_BATCH_INTERVAL_MS.default
    marker_threads: int = MARKER_THREADS.default
    async_conflict_period_ms: int = ASYNC_CONFLICT_PERIOD_MS.default
    hudi_metadata_table: str = HUDI_METADATA_TABLE.default  # drop, refuse or maintain

    def __post_init__(self) -> None:
        object.__setattr__(self, "markers", marker_type(self.markers))

    @property
    def timeline_server_markers(self) -> bool:
        return self.markers == "timeline_server_based"

    @classmethod
    def from_config(cls, config: Config) -> WriteOptions:
        return cls(
            conflict_strategy=config.get(CONFLICT_STRATEGY),
            early_conflict_detection=config.get(EARLY_CONFLICT_DETECTION),
            early_conflict_check_commits=config.get(EARLY_CONFLICT_CHECK_COMMITS),
            early_conflict_transactional=config.get(EARLY_CONFLICT_TRANSACTIONAL),
            max_file_size=config.get(MAX_FILE_SIZE),
            max_records_per_file=config.get(MAX_RECORDS_PER_FILE),
            bucket_count=config.get(BUCKET_COUNT),
            bloom=BloomSizing.from_config(config),
            markers=config.get(MARKERS_TYPE),
            marker_server_url=config.get(MARKER_SERVER_URL),
            marker_batch_interval_ms=config.get(MARKER_BATCH_INTERVAL_MS),
            marker_threads=config.get(MARKER_THREADS),
            async_conflict_period_ms=config.get(ASYNC_CONFLICT_PERIOD_MS),
            hudi_metadata_table=config.get(HUDI_METADATA_TABLE),
        )


class _TxnState(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"


class WriteClient:
    """Writes to ``table``. Thread-compatible: use one client (or transaction) per thread."""

    def __init__(self, table: Table, options: WriteOptions | None = None) -> None:
        self.table = table
        self.options = options or WriteOptions.from_config(table.config)
        self.strategy = strategy_for(self.options.conflict_strategy)
        self._server: MarkerServer | None = None
        self._lock_checked = False
        self.keygen: KeyGenerator | None = None  # read from hoodie.properties by the first write
        #: the key generator of a table without meta fields, whose files store no record key
        self.virtual: KeyGenerator | None = None
        self.verified_files: set[str] = set()  # files the key generator was checked against
        #: how the last write found its keys' file groups (see WriteTransaction.tagged_by)
        self.last_tagged_by: list[str] = []
        #: what one write leaves to the next: the latest base files of the partitions it wrote
        #: (brought forward from the commits completed since) and their bloom filters (with
        #: those its commits wrote), so a warm client's upsert into a partition of 10,000
        #: files neither lists the partition nor reads its filters again
        self.kept_bases = KeptBaseFiles()
        self.kept_filters = KeptFilters()
        self._cleaner: CleanPlanner | None = None
        #: what the table services after the last commit did
        self.last_cleans: list[CleanResult] = []
        self.last_archive: ArchiveResult | None = None
        self.last_upkeep: UpkeepResult | None = None
        #: what the upkeep of Hudi's metadata table did after the last commit
        self.last_hudi_upkeep = HudiUpkeep()

    def marker_server_url(self) -> str:
        """The marker server to use: the configured one, or one embedded in this client."""
        if self.options.marker_server_url:
            return self.options.marker_server_url
        if self._server is None:
            period = self.options.async_conflict_period_ms / 1000
            self._server = MarkerServer(
                self.table,
                host=self.options.marker_server_host,
                config=MarkerServerConfig(
                    batch_interval=self.options.marker_batch_interval_ms / 1000,
                    threads=self.options.marker_threads,
                    conflict_check_interval=period
                    if self.options.early_conflict_detection
                    else None,
                    check_commits=self.options.early_conflict_check_commits,
                ),
            ).start()
        return self._server.url

    def close(self) -> None:
        """Stop the embedded marker server, if one was started."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> WriteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _key_generator(self) -> KeyGenerator:
        """The table's key generator; tables this writer must not write are refused here, by
        name, before anything is written."""
        config = self.table.table_config
        where = self.table.storage.uri(PROPERTIES_FILE)
        if config.table_type is TableType.MERGE_ON_READ:
            raise TableConfigError(
                where,
                f"{TYPE}=MERGE_ON_READ: this writer writes copy-on-write tables only; it reads "
                "base files, and rewriting one would drop the updates its log files hold (write "
                "with Apache Hudi)",
            )
        try:
            keygen = KeyGenerator.of(config, self.table.config.extra)
        except TableConfigError as e:
            raise TableConfigError(where, e.reason) from e
        # a table without meta fields (Hudi's virtual keys): its files hold no record key, which
        # this writer makes from the key fields wherever it needs one, as Hudi does
        self.virtual = None if config.populate_meta_fields else keygen
        return keygen

    def start(self, operation: Operation) -> WriteTransaction:
        if not self._lock_checked:
            # a misconfigured or unreachable lock fails the first write before it writes anything
            self.table.lock_provider.holder(self.table.lock_name)
            self.keygen = self._key_generator()
            if has_legacy_index(self.table):
                raise IndexStateError(
                    self.table.storage.uri(LEGACY_FOLDER),
                    "this table's index was built by an earlier version in Hudi's metadata folder; "
                    "run `indexer migrate <base>` before writing (a write now would leave it stale)",
                )
            self._lock_checked = True
        if self.options.hudi_metadata_table == "refuse":
            self.hudi_metadata_table(None, "")  # fail before writing anything
        return WriteTransaction(self, Operation(operation))

    def after_commit(self) -> None:
        """The table services Apache Hudi's writers run inline after each commit: a clean of old
        file versions (``hoodie.clean.automatic``), its index update written in its critical
        section, then an archival of the oldest instants (``hoodie.archive.automatic``), never
        of one the index has not applied, then the index's own upkeep
        (``indexer.metadata.upkeep.automatic``: compaction by count, replaced files deleted).
        On a table whose Apache Hudi metadata table this writer keeps, the clean goes into that
        table too, and that table is compacted, cleaned and its own timeline archived when due
        (``<t>001``, ``<t>002``; before the data timeline's archival, which its compaction
        bounds). A failure is logged, not raised: the commit stands, and the next commit's
        services finish or retry it."""
        self.last_cleans, self.last_archive, self.last_upkeep = [], None, None
        self.last_hudi_upkeep = HudiUpkeep()
        config, mdt = self.table.config, MetadataTable(self.table)
        try:
            if config.get(CLEAN_AUTOMATIC):
                if self._cleaner is None:
                    self._cleaner = CleanPlanner(self.table)
                self.last_cleans = clean(self.table, mdt.apply_removal, self._cleaner)
            if self.maintains_hudi_metadata_table():
                self.last_hudi_upkeep = hudi_metadata_upkeep(self.table)
            if config.get(ARCHIVE_AUTOMATIC):
                self.last_archive = archive(self.table, unapplied=mdt.oldest_unapplied)
            if config.get(INDEX_UPKEEP_AUTOMATIC):
                self.last_upkeep = upkeep(self.table)
        except Exception as e:  # the commit is done; the next one retries
            logger.warning(
                "table services after a commit to %s failed (retried after the next commit): %s",
                self.table.base_uri,
                e,
            )

    def maintains_hudi_metadata_table(self) -> bool:
        """Whether this writer's commits go into Apache Hudi's own metadata table
        (``indexer.write.hudi_metadata_table=maintain``, the default, on a table Hudi's readers
        read it on)."""
        return (
            self.options.hudi_metadata_table == "maintain" and HudiMetadataTable(self.table).present
        )

    def hudi_metadata_table(self, lock: LockHandle | None, why: str) -> None:
        """Apache Hudi's own metadata table, if the table has one: refused (with
        ``indexer.write.hudi_metadata_table=refuse``), else taken down under ``lock`` (at a
        commit; a write's start only checks)."""
        if not hudi_metadata_table_present(self.table):
            return
        if self.options.hudi_metadata_table == "refuse":
            raise TableConfigError(
                self.table.storage.uri(PROPERTIES_FILE),
                "the table has Apache Hudi's own metadata table, which this writer does not keep "
                "with this setting (Hudi's readers would miss the commit); set "
                f"{HUDI_METADATA_TABLE.key}=drop to take it down as a Hudi writer with the "
                f"metadata table off does, {HUDI_METADATA_TABLE.key}=maintain to write our "
                "commits into it, or write with Hudi",
            )
        if lock is not None:
            take_down_hudi_metadata_table(self.table, lock, why)

    def write(self, operation: Operation, data: pa.Table) -> Instant:
        """Start, write ``data`` and commit; on any failure the write is aborted (or left to the
        cleaner when its outcome is unknown) and the error raised."""
        txn = self.start(operation)
        try:
            txn.write(data)
            done = txn.commit()
            self.last_tagged_by = txn.tagged_by
            return done
        except BaseException:
            txn.abort()
            raise

    def insert(self, data: pa.Table) -> Instant:
        return self.write(Operation.INSERT, data)

    def upsert(self, data: pa.Table) -> Instant:
        return self.write(Operation.UPSERT, data)

    def delete(self, data: pa.Table) -> Instant:
        return self.write(Operation.DELETE, data)


class WriteTransaction:
    """One commit. Call :meth:`write` once, then :meth:`commit` (or :meth:`abort`)."""

    def __init__(self, client: WriteClient, operation: Operation) -> None:
        self.client = client
        self.table = client.table
        self.options = client.options
        self.operation = operation
        timeline = self.table.timeline
        snapshot = timeline.load().require_valid()
        newest = snapshot.last()
        instant_time = timeline.generator.next(after=newest.timestamp if newest else None)
        self.heartbeat = self.table.heartbeat(instant_time).start()
        try:
            self.instant = timeline.create_requested(Action.COMMIT, timestamp=instant_time)
        except BaseException:
            requested = Instant(instant_time, Action.COMMIT, State.REQUESTED)
            if self.table.storage.exists(timeline.path(requested)):
                # it landed after all: its heartbeat expires and the cleaner rolls it back
                self.heartbeat.pause()
            else:
                self.heartbeat.stop()
            raise
        self.start_state = TxnStart.capture(self.instant, snapshot)
        # completed metadata partitions serve listings (files) and upsert tagging (bloom_filters,
        # record_index)
        self.index = IndexedSnapshot(self.table, snapshot)
        self.view: FileSystemView = self.index.view
        #: with a record index (being built or completed) keys are global: one location per key
        #: in the whole table, which tagging looks for in every partition (see :meth:`locate`)
        self.global_keys = RECORD_INDEX in self._index_partitions()
        #: how tagging found the keys' file groups: record_index, bloom_filters, files read
        self.tagged_by: list[str] = []
        #: keys a delete with global keys asked for and found nowhere: a write completed since
        #: this one started that placed one of them conflicts with it (the delete read the key
        #: as absent; committed after that write, it would leave the key alive)
        self.missed_deletes: set[str] = set()
        self._infos: dict[str, DataFileInfo] = {}
        self.markers: MarkerWriter = self._choose_markers(instant_time)
        self.stats: list[WriteStat] = []
        self._schema: pa.Schema | None = None
        self._commit_schema: pa.Schema | None = None
        self.layout = FileLayout()
        self._written = False
        self._state = _TxnState.OPEN
        #: the bloom_filters records this write's commit wrote (kept by the client once it
        #: completes)
        self._bloom_records: pa.Table | None = None
        self._detector = (
            EarlyConflictDetector(
                self.table,
                self.start_state,
                check_commits=self.options.early_conflict_check_commits,
                transactional=self.options.early_conflict_transactional,
            )
            if self.options.early_conflict_detection and isinstance(self.markers, DirectMarkers)
            else None  # timeline-server markers: the server checks periodically
        )
        logger.info("write %s started (%s)", self.instant, operation.value)

    def _index_partitions(self) -> tuple[str, ...]:
        try:
            return self.table.reload_index_state().partitions
        except IndexStateError:
            return ()

    def _choose_markers(self, instant_time: str) -> MarkerWriter:
        """Timeline-server markers when asked for and the server answers now; otherwise direct
        markers, with a warning. Never switched later: a server lost mid-write fails the write."""
        storage = self.table.storage
        if not self.options.timeline_server_markers:
            return DirectMarkers(storage, instant_time)
        try:
            url = self.client.marker_server_url()
            markers = TimelineServerMarkers(url, storage, instant_time, timeout=10.0, retries=2)
            markers.ping()
            return markers
        except (MarkerServerError, OSError) as e:
            logger.warning(
                "write %s: marker server unavailable (%s); using direct markers for this write",
                instant_time,
                e,
            )
            return DirectMarkers(storage, instant_time)

    @property
    def instant_time(self) -> str:
        return self.instant.timestamp

    def _check_open(self) -> None:
        if self._state is not _TxnState.OPEN:
            raise TableError(f"write {self.instant} is {self._state.value}")

    # --- write -----------------------------------------------------------------------------------

    def write(self, data: pa.Table) -> list[WriteStat]:
        """Write all of ``data`` (one call per transaction); returns the write stats."""
        self._check_open()
        if self._written:
            raise TableError(f"write {self.instant} already wrote its data; start a new one")
        self._written = True
        targets = self._plan(data)
        for index, target in enumerate(targets):
            self._write_file(index, target)
        return list(self.stats)

    def _plan(self, data: pa.Table) -> list[FileGroupWrite]:
        clash = [c for c in data.column_names if c in META_COLUMNS]
        if clash:
            raise BadRecordsError(clash[0], "input may not carry Hudi meta columns")
        if data.num_rows == 0:
            return []
        data = as_stored(data)  # string_view, dictionaries, large types: as the table stores them
        keygen = self.client.keygen
        assert keygen is not None, "the client checked the table when the write started"
        keys = keygen.record_keys(data)
        parts = keygen.partition_paths(data)
        deleting = self.operation is Operation.DELETE
        layout = self.prepare(None if deleting else data.schema)
        if layout.schema is not None:
            data = conform(data, layout.schema)
        located = self.locate(set(keys)) if self.global_keys else None
        if located is not None and deleting:
            return self._plan_global_deletes(keys, located)
        if located is not None:
            data, keys, parts = self._drop_stale_moves(data, keys, parts, located)
        partitions: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(parts):
            partitions[p].append(i)
        # the partitions' latest base files as Arrow rows: those the client kept from its last
        # write, brought forward, or else read once for all of them (from their own listings
        # when they are few); objects only for the groups this write touches
        listed = self.client.kept_bases.latest_base_table_of(self.view, partitions)
        latest = by_partition(listed)
        targets: list[FileGroupWrite] = []
        for partition, rows in sorted(partitions.items()):
            sub = data.take(pa.array(rows, pa.int64()))
            sub_keys = [keys[i] for i in rows]
            bases = latest.get(partition, listed.slice(0, 0))
            targets.extend(self._plan_partition(partition, bases, sub, sub_keys, located))
        if located is not None:
            targets = self._add_moves(targets, keys, parts, located)
        return targets

    # --- global keys (a record index) ------------------------------------------------------------

    def locate(
        self, keys: set[str], index: IndexedSnapshot | None = None
    ) -> dict[str, tuple[str, str]]:
        """Record key -> (partition, file id) of every key of ``keys`` the table holds
        (:meth:`locate_table`)."""
        found = self.locate_table(pa.array(sorted(keys), pa.string()), index)
        return {
            k: (p, f)
            for k, p, f in zip(
                found.column("record_key").to_pylist(),
                found.column("partition_path").to_pylist(),
                found.column("file_id").to_pylist(),
                strict=True,
            )
        }

    def locate_table(self, keys: pa.Array, index: IndexedSnapshot | None = None) -> pa.Table:
        """Where each of ``keys`` lives in the table, in any partition, as ``index`` (by default
        the snapshot this write started from) sees it: a table of ``record_key``,
        ``partition_path``, ``file_id``. From ``record_index`` when it is completed (exact, no
        data file read), except where instants it does not reflect wrote, and without it, from
        the files whose bloom filter (or key range) may hold a key, whose keys are read."""
        index = index if index is not None else self.index
        unsure: set[str]  # partitions whose files must be read
        parts = []
        if index.uses(RECORD_INDEX):
            touched = index.record_index_touched()
            found = index.locate_keys(keys)
            if touched:
                names = pa.array(sorted(touched), pa.string())
                found = found.filter(pc.invert(pc.is_in(found.column("partition_path"), names)))
            parts.append(found)
            unsure = touched
            self.tagged_by.append(RECORD_INDEX)
        else:
            unsure = set(index.view.partitions())
        if unsure:
            rest = set(keys.to_pylist())
            if parts:
                rest -= set(parts[0].column("record_key").to_pylist())
            bases = index.view.latest_base_files(sorted(unsure))
            candidates = index.lookup_keys(rest) if index.key_indexes() else None
            if candidates is not None:
                wanted = {p for paths in candidates.values() for p in paths}
                bases = [b for b in bases if b.path in wanted]
                self.tagged_by.extend(i for i in index.key_indexes() if i != RECORD_INDEX)
            self.tagged_by.append(f"{len(bases)} files read")
            owners = self._owners(bases, rest)
            parts.append(
                pa.table(
                    {
                        "record_key": pa.array(list(owners), pa.string()),
                        "partition_path": pa.array([p for p, _ in owners.values()], pa.string()),
                        "file_id": pa.array([f for _, f in owners.values()], pa.string()),
                    }
                )
            )
        schema = pa.schema([(c, pa.string()) for c in ("record_key", "partition_path", "file_id")])
        return pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()

    def _owners(self, bases: list[BaseFile], keys: set[str]) -> dict[str, tuple[str, str]]:
        """Record key -> (partition, file id) of the keys found in ``bases`` (their key column
        read)."""
        owner: dict[str, tuple[str, str]] = {}
        if not keys or not bases:
            return owner
        wanted = pa.array(sorted(keys), pa.string())
        read: list[tuple[BaseFile, pa.ChunkedArray]] = []

        def probe() -> None:
            # one membership test over many files' keys: the asked keys are hashed once per
            # test, not once per file (a batch of 1M keys against 1,000 files: seconds, not
            # minutes)
            column = pa.chunked_array(
                [c.cast(pa.string()) for _, held in read for c in held.chunks], pa.string()
            )
            hits = np.flatnonzero(pc.is_in(column, value_set=wanted).to_numpy())
            of_file = np.repeat(np.arange(len(read)), [len(held) for _, held in read])[hits]
            found = column.take(pa.array(hits, pa.int64())).to_pylist()
            for key, at in zip(found, of_file.tolist(), strict=True):
                owner[key] = (read[at][0].partition_path, read[at][0].file_id)
            read.clear()

        rows = 0
        for base in bases:
            stored = read_record_keys(self.table.storage, base.path, self.client.virtual)
            read.append((base, stored.column(RECORD_KEY)))
            rows += stored.num_rows
            if rows >= PROBE_ROWS:
                probe()
                rows = 0
        if read:
            probe()
        return owner

    def _plan_global_deletes(
        self, keys: list[str], located: dict[str, tuple[str, str]]
    ) -> list[FileGroupWrite]:
        """A delete with global keys: each key is deleted where it lives, whatever partition
        the incoming row names."""
        latest = {(b.partition_path, b.file_id): b for b in self.view.latest_base_files()}
        doomed: dict[tuple[str, str], set[str]] = defaultdict(set)
        for key in keys:
            if key in located:
                doomed[located[key]].add(key)
            else:
                self.missed_deletes.add(key)
        return [
            FileGroupWrite(p, f, IOType.MERGE, latest[(p, f)], delete_keys=ks)
            for (p, f), ks in sorted(doomed.items())
            if (p, f) in latest
        ]

    def _drop_stale_moves(
        self,
        data: pa.Table,
        keys: list[str],
        parts: list[str],
        located: dict[str, tuple[str, str]],
    ) -> tuple[pa.Table, list[str], list[str]]:
        """Incoming records that would move a key to another partition but carry a smaller
        precombine value than the stored copy: dropped (:meth:`stale_moves`)."""
        precombine = self.table.table_config.precombine_field
        moving = [i for i, k in enumerate(keys) if k in located and located[k][0] != parts[i]]
        if not moving or not precombine or precombine not in data.column_names:
            return data, keys, parts
        values = data.column(precombine).to_pylist()
        stale_keys = self.stale_moves({keys[i]: (located[keys[i]], values[i]) for i in moving})
        keep = [i for i in range(len(keys)) if not (i in moving and keys[i] in stale_keys)]
        if len(keep) == len(keys):
            return data, keys, parts
        return (
            data.take(pa.array(keep, pa.int64())),
            [keys[i] for i in keep],
            [parts[i] for i in keep],
        )

    def stale_moves(self, moving: dict[str, tuple[tuple[str, str], Any]]) -> set[str]:
        """Of keys an upsert moves to another partition (key -> (the group holding it, the
        incoming precombine value)), those whose stored copy has a larger precombine value:
        the stored copy stays where it is, as Hudi's global index decides when it merges a
        partition update. Both engines ask this (on the writing process)."""
        precombine = self.table.table_config.precombine_field
        if not moving or not precombine:
            return set()
        latest = {(b.partition_path, b.file_id): b for b in self.view.latest_base_files()}
        stored: dict[str, object] = {}
        for group in sorted({group for group, _ in moving.values()}):
            base = latest.get(group)
            if base is None:
                continue
            table = read_record_keys(
                self.table.storage, base.path, self.client.virtual, [precombine]
            )
            stored.update(
                zip(
                    table.column(RECORD_KEY).to_pylist(),
                    table.column(precombine).to_pylist(),
                    strict=True,
                )
            )
        return {
            key
            for key, (_, value) in moving.items()
            if key in stored and not not_less(value, stored[key])
        }

    def _add_moves(
        self,
        targets: list[FileGroupWrite],
        keys: list[str],
        parts: list[str],
        located: dict[str, tuple[str, str]],
    ) -> list[FileGroupWrite]:
        """Drop the keys that move to another partition from the groups that held them (a
        group this write rewrites anyway, or one more target)."""
        moving: dict[tuple[str, str], set[str]] = defaultdict(set)
        for key, partition in zip(keys, parts, strict=True):
            where = located.get(key)
            if where is not None and where[0] != partition:
                moving[where].add(key)
        if not moving:
            return targets
        by_group = {(t.partition, t.file_id): t for t in targets if t.base is not None}
        latest = {(b.partition_path, b.file_id): b for b in self.view.latest_base_files()}
        for group, moved in sorted(moving.items()):
            if group in by_group:
                by_group[group].move_keys |= moved
            elif group in latest:
                targets.append(
                    FileGroupWrite(group[0], group[1], IOType.MERGE, latest[group], move_keys=moved)
                )
        return targets

    def prepare(self, incoming: pa.Schema | None) -> FileLayout:
        """The layout of this commit's files, from the table's newest base file: the schema an
        ``incoming`` batch evolves the table's to (:mod:`writer.schema`; None for a delete) and
        the Parquet layout of nested columns. The key generator is checked against that file's
        rows the first time the client meets the file. Engines that plan elsewhere call this
        before writing."""
        if incoming is not None:
            _check_parquet_types(incoming)
        newest = self.index.newest_base_file
        table_schema = template = stored = None
        hudi_bloom = False
        if newest is not None:
            footer = parquet_footer(self.table.storage, newest.path)
            stored = read_parquet_schema_bytes(footer, newest.path)
            table_schema = pa.schema([f for f in stored if f.name not in META_COLUMNS])
            template = footer_schema(footer)
            hudi_bloom = HUDI_BLOOM_FOOTER in footer_keys(footer)
            self._verify_keys(newest, stored)
        schema = evolve(table_schema, incoming) if incoming is not None else None
        self._schema = schema
        # what the commit names (extraMetadata.schema): a delete keeps the table's, as Hudi's
        self._commit_schema = schema if schema is not None else table_schema
        meta = stored is None or RECORD_KEY in stored.names
        self.layout = FileLayout(schema, template, meta, hudi_bloom)
        return self.layout

    def _verify_keys(self, newest: BaseFile, stored: pa.Schema) -> None:
        keygen = self.client.keygen
        if keygen is None or newest.path in self.client.verified_files:
            return
        wanted = [RECORD_KEY, PARTITION_PATH, *keygen.fields()]
        if all(c in stored.names for c in wanted):
            rows = read_parquet(self.table.storage, newest.path, wanted).slice(0, 1000)
            keygen.verify(rows, self.table.storage.uri(newest.path))
        self.client.verified_files.add(newest.path)

    def _plan_partition(
        self,
        partition: str,
        latest_rows: pa.Table,
        rows: pa.Table,
        keys: list[str],
        located: dict[str, tuple[str, str]] | None = None,
    ) -> list[FileGroupWrite]:
        """Tag each record with the file group holding its key (or its bucket's) among the
        partition's latest base files (``latest_rows``, rows of the view's base-file table), the
        others going to one new group, and let the shared planner say what each group becomes:
        existing groups first, in file-id order, then the new one. With ``located`` (global
        keys), a key held in this partition is tagged with its group, and one held elsewhere
        is an insert here (:meth:`_add_moves` drops it there)."""
        deleting = self.operation is Operation.DELETE
        groups: dict[str, list[int]] = defaultdict(list)
        inserts: list[int] = []
        if self.options.bucket_count > 0:
            for i, bucket in enumerate(buckets_of_keys(keys, self.options.bucket_count)):
                groups[bucket_file_id(bucket)].append(i)
        else:
            if located is not None:
                held = ((k, located.get(k)) for k in keys)
                owner = {k: w[1] for k, w in held if w is not None and w[0] == partition}
            elif self.operation is Operation.INSERT:
                owner = {}
            else:
                owner = self._tag(partition, latest_rows, set(keys))
            for i, key in enumerate(keys):
                found = owner.get(key)
                if found is not None:
                    groups[found].append(i)
                elif not deleting:
                    inserts.append(i)
        planned = sorted(groups.items())
        per_file = None
        if inserts:
            planned.append((new_file_id(), inserts))
            row_bytes = int(rows.nbytes) // max(1, rows.num_rows)
            per_file = records_per_file(
                row_bytes, self.options.max_records_per_file, self.options.max_file_size
            )
        ids = pa.array([file_id for file_id, _ in planned], pa.string())
        touched = latest_rows.filter(pc.is_in(latest_rows.column("file_id"), ids))
        latest = {b.file_id: b for b in base_files_of(touched)}
        targets = []
        for file_id, idx in planned:
            targets += plan_group(
                partition,
                file_id,
                latest.get(file_id),
                rows.take(pa.array(idx, pa.int64())),
                [keys[i] for i in idx],
                deleting=deleting,
                precombine=self.table.table_config.precombine_field,
                per_file=per_file,
            )
        return targets

    def _tag(self, partition: str, bases: pa.Table, keys: set[str]) -> dict[str, str]:
        """Record key -> file id, for the incoming keys found in the partition's base files (rows
        of the view's base-file table); only files whose bloom filter may hold a key are read
        (when ``bloom_filters`` is completed)."""
        candidates = self.index.candidate_files(partition, keys, bases, self.client.kept_filters)
        found = self._owners(base_files_of(candidates), keys)
        return {key: file_id for key, (_, file_id) in found.items()}

    # --- one data file ---------------------------------------------------------------------------

    def _write_file(self, index: int, target: FileGroupWrite) -> WriteStat:
        marker = target.marker(f"{index}-0-0", self.instant_time)
        with self._guard(target.partition, target.file_id):
            self.markers.create(marker)
        ensure_partition_metadata(self.table.storage, target.partition, self.instant_time)
        encoded = encode_file_group(
            self.table.storage,
            self.instant_time,
            target,
            marker,
            self.table.table_config.precombine_field,
            self.options.bloom,
            seq_prefix=index,
            layout=self.layout,
            virtual=self.client.virtual,
        )
        failpoint("writer.before_data")
        self.table.storage.create(encoded.path, encoded.data)
        failpoint("writer.after_data")
        self.add_written(encoded.stat, encoded.info)
        logger.debug("wrote %s (%d records)", encoded.path, encoded.stat.num_writes)
        return encoded.stat

    def add_written(self, stat: WriteStat, info: DataFileInfo) -> None:
        """Record a data file this write stored (its marker created first): it is committed, and
        finalize keeps it. Used by engines that write files elsewhere (Spark executors)."""
        self._check_open()
        self._written = True
        self.stats.append(stat)
        self._infos[stat.path] = info

    @contextlib.contextmanager
    def _guard(self, partition: str, file_id: str) -> Iterator[None]:
        if self._detector is None:
            yield
            return
        with self._detector.guard(partition, file_id):
            yield

    # --- commit and abort ------------------------------------------------------------------------

    def commit(self) -> Instant:
        """Commit under the table lock. On a failure before the instant completes (a conflict,
        an expired heartbeat, a lock timeout) the write is rolled back and the error raised; a
        failure while completing raises :class:`CommitStateUnknownError` and deletes nothing."""
        self._check_open()
        try:
            done = self._commit()
        except CommitStateUnknownError:
            raise
        except BaseException:
            if self._state is _TxnState.OPEN:
                self.abort()
            raise
        self.client.after_commit()
        return done

    def _commit(self) -> Instant:
        named = self._commit_schema
        schema = avro_schema(named, self.table.table_config.name) if named else ""
        metadata = CommitMetadata.of(
            self.stats, self.operation.value.upper(), {"schema": schema} if schema else {}
        )
        timeline = self.table.timeline
        inflight = timeline.transition_to_inflight(
            self.instant, json.dumps(metadata.to_json(), sort_keys=True).encode()
        )
        self.instant = inflight
        this = ConcurrentOperation(inflight, frozenset(metadata.mutated_file_groups()))
        strategy = self.client.strategy
        with self.table.lock(f"commit {self.instant_time}") as lock:
            failpoint("writer.commit.locked")
            self.heartbeat.ensure_alive()
            fresh = timeline.load()
            candidates = strategy.candidates(fresh, self.start_state, timeline.completion_time)
            for candidate in candidates:
                strategy.resolve(this, operation_of(timeline, candidate))
            self._check_placed_keys(self.table.reload_index_state(), candidates, fresh)
            self._finalize()
            self._update_metadata_table(lock)
            if self.client.maintains_hudi_metadata_table():
                placed, deleted = key_changes(self._infos[s.path] for s in self.stats)
                apply_commit(self.table, self.instant_time, metadata, placed, deleted, lock)
                failpoint("writer.commit.hudi_metadata")
            else:
                self.client.hudi_metadata_table(lock, f"commit {self.instant_time}")
            lock.ensure_valid()
            self._state = _TxnState.UNKNOWN
            try:
                done = timeline.complete(inflight, metadata.to_json())
            except BaseException as e:
                self.heartbeat.pause()
                raise CommitStateUnknownError(inflight, e) from e
        self._state = _TxnState.COMMITTED
        self.instant = done
        if self._bloom_records is not None:
            self.client.kept_filters.add_records(self._bloom_records)
        self.markers.delete_all()
        self.heartbeat.stop()
        logger.info("write %s committed (%d files)", done, len(self.stats))
        return done

    def _check_placed_keys(
        self, state: IndexState, candidates: list[Instant], timeline: Timeline
    ) -> None:
        """With a record index, a key lives in one place: a write that put keys somewhere new
        (inserted them, or moved them to another partition), or deleted keys it found nowhere,
        conflicts with a write completed since it started that placed one of the same keys; a
        write that did not look for its keys globally (it started before the record index was
        scheduled) looks now, in the table as of ``timeline``, and conflicts if one of them is
        somewhere already."""
        if RECORD_INDEX not in state.partitions:
            return
        placed = placed_keys(self._infos.values())
        if not placed and not self.missed_deletes:
            return
        if not self.global_keys:
            found = self.locate(placed, IndexedSnapshot(self.table, timeline)) if placed else {}
            if found:
                raise RecordKeyConflictError(self.instant, None, sorted(found))
            return
        mdt = MetadataTable(self.table)
        for other in candidates:
            if other.is_completed:
                theirs = mdt.placed_keys(other)
                clash = placed & theirs
                if clash:
                    raise RecordKeyConflictError(self.instant, other, sorted(clash))
                missed = self.missed_deletes & theirs
                if missed:
                    raise RecordKeyConflictError(self.instant, other, sorted(missed), deleted=True)

    def _update_metadata_table(self, lock: LockHandle) -> None:
        """Write this commit's metadata deltacommit to every completed and inflight metadata
        partition (read now, under the lock, so an index being built is never missed)."""
        state = self.table.reload_index_state()
        if not state.partitions:
            return
        infos = [self._infos[s.path] for s in self.stats]
        mdt = MetadataTable(self.table)
        records = mdt.records_of(state.partitions, infos, state)
        mdt.write_deltacommit(self.instant_time, records, self.markers, state, lock)
        self._bloom_records = records.get(BLOOM_FILTERS)

    def _finalize(self) -> None:
        """Delete data files that have markers but are not in the write stats (partial files of
        failed attempts, duplicates of retried ones)."""
        committed = {s.path for s in self.stats}
        for marker in self.markers.all():
            if (
                marker.io_type in (IOType.CREATE, IOType.MERGE)
                and marker.data_path not in committed
            ):
                logger.info(
                    "finalize %s: deleting %s (not in the write stats)",
                    self.instant,
                    marker.data_path,
                )
                self.table.storage.delete(marker.data_path)

    def abort(self) -> None:
        """Roll back what this write wrote, unless it committed or its outcome is unknown."""
        if self._state is not _TxnState.OPEN:
            return
        self._state = _TxnState.ABORTED
        try:
            with self.table.lock(f"abort {self.instant_time}") as lock:
                current = self.table.timeline.load().get(self.instant_time, Action.COMMIT)
                if current is not None and current.state is not State.COMPLETED:
                    rollback(self.table, current, lock, MetadataTable(self.table).apply_removal)
        except BaseException:
            # not rolled back: the heartbeat file stays, so that once it expires the cleaner
            # knows this write is dead and rolls it back (a write without one is never touched)
            self.heartbeat.pause()
            raise
        self.heartbeat.stop()
        logger.info("write %s aborted", self.instant)


def _check_parquet_types(schema: pa.Schema) -> None:
    """:class:`BadRecordsError` naming the first column Parquet cannot store."""
    try:
        pq.write_table(schema.empty_table(), pa.BufferOutputStream())
        return
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        pass
    for f in schema:
        try:
            pq.write_table(pa.schema([f]).empty_table(), pa.BufferOutputStream())
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as e:
            raise BadRecordsError(f.name, f"type {f.type} cannot be stored in Parquet: {e}") from e
