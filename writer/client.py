"""The write client: insert, upsert and delete on a copy-on-write table, committed with OCC.

One :class:`WriteTransaction` is one instant T (DESIGN.md, "Commit"):

1. start: a new instant time, its heartbeat, then ``T.commit.requested`` (a requested instant
   without a heartbeat file is therefore always a dead writer's);
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
import io
import json
import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata_table.reads import IndexedSnapshot
from metadata_table.records import DataFileInfo, info_from_bytes
from metadata_table.table import MetadataTable
from timeline.commit_metadata import NULL_COMMIT, CommitMetadata, WriteStat
from timeline.config import (
    ASYNC_CONFLICT_PERIOD_MS,
    BLOOM_FILTER_FPP,
    BUCKET_COUNT,
    CONFLICT_STRATEGY,
    EARLY_CONFLICT_CHECK_COMMITS,
    EARLY_CONFLICT_DETECTION,
    EARLY_CONFLICT_TRANSACTIONAL,
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
    FileAlreadyExistsError,
    IndexerError,
)
from timeline.fs_view import (
    PARTITION_METADATA_FILE,
    BaseFile,
    FileSystemView,
    base_file_name,
    read_parquet,
)
from timeline.hashing import buckets_of_keys
from timeline.instant import Action, Instant, State
from timeline.locks import LockHandle
from timeline.markers import DirectMarkers, IOType, Marker, MarkerWriter
from timeline.markers.client import MarkerServerError, TimelineServerMarkers
from timeline.markers.server import MarkerServer, MarkerServerConfig
from timeline.rollback import rollback
from timeline.table import Table
from writer.avro import avro_schema
from writer.early_conflict import EarlyConflictDetector
from writer.keys import BadRecordsError, partition_paths, record_keys

logger = logging.getLogger(__name__)

COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
META_COLUMNS = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)


class Operation(enum.StrEnum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"


class CommitStateUnknownError(IndexerError):
    """Completing the instant failed midway: it may or may not have landed. Nothing was deleted;
    the cleaner resolves it once the heartbeat expires."""

    def __init__(self, instant: Instant, cause: BaseException) -> None:
        super().__init__(f"outcome of {instant} is unknown after {type(cause).__name__}: {cause}")
        self.instant = instant


@dataclass(frozen=True)
class WriteOptions:
    conflict_strategy: str = "simple"
    early_conflict_detection: bool = False
    early_conflict_check_commits: bool = False
    early_conflict_transactional: bool = False
    max_file_size: int = MAX_FILE_SIZE.default
    max_records_per_file: int = MAX_RECORDS_PER_FILE.default
    bucket_count: int = 0
    bloom_filter_fpp: float = BLOOM_FILTER_FPP.default
    markers: str = "direct"  # or "timeline_server_based"
    marker_server_url: str = ""  # empty: embed a server in this client
    marker_batch_interval_ms: int = MARKER_BATCH_INTERVAL_MS.default
    marker_threads: int = MARKER_THREADS.default
    async_conflict_period_ms: int = ASYNC_CONFLICT_PERIOD_MS.default

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
            bloom_filter_fpp=config.get(BLOOM_FILTER_FPP),
            markers=config.get(MARKERS_TYPE),
            marker_server_url=config.get(MARKER_SERVER_URL),
            marker_batch_interval_ms=config.get(MARKER_BATCH_INTERVAL_MS),
            marker_threads=config.get(MARKER_THREADS),
            async_conflict_period_ms=config.get(ASYNC_CONFLICT_PERIOD_MS),
        )


def bucket_file_id(bucket: int) -> str:
    """The file id of bucket ``bucket``: the same in every commit, so writers of one bucket meet."""
    return f"{bucket:08d}-0000-0000-0000-000000000000-0"


def new_file_id() -> str:
    import uuid

    return f"{uuid.uuid4()}-0"


@dataclass
class _Target:
    """One file group this write produces a new base file for."""

    partition: str
    file_id: str
    io_type: IOType
    base: BaseFile | None = None
    incoming: pa.Table | None = None  # rows to insert or update
    incoming_keys: list[str] = field(default_factory=list)
    delete_keys: set[str] = field(default_factory=set)


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

    def marker_server_url(self) -> str:
        """The marker server to use: the configured one, or one embedded in this client."""
        if self.options.marker_server_url:
            return self.options.marker_server_url
        if self._server is None:
            period = self.options.async_conflict_period_ms / 1000
            self._server = MarkerServer(
                self.table,
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

    def start(self, operation: Operation) -> WriteTransaction:
        return WriteTransaction(self, Operation(operation))

    def write(self, operation: Operation, data: pa.Table) -> Instant:
        """Start, write ``data`` and commit; on any failure the write is aborted (or left to the
        cleaner when its outcome is unknown) and the error raised."""
        txn = self.start(operation)
        try:
            txn.write(data)
            return txn.commit()
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
        snapshot = timeline.load()
        newest = snapshot.last()
        instant_time = timeline.generator.next(after=newest.timestamp if newest else None)
        self.heartbeat = self.table.heartbeat(instant_time).start()
        try:
            self.instant = timeline.create_requested(Action.COMMIT, timestamp=instant_time)
        except BaseException:
            self.heartbeat.stop()
            raise
        self.start_state = TxnStart.capture(self.instant, snapshot)
        # completed metadata partitions serve listings (files) and upsert tagging (bloom_filters)
        self.index = IndexedSnapshot(self.table, snapshot)
        self.view: FileSystemView = self.index.view
        self._infos: dict[str, DataFileInfo] = {}
        self.markers: MarkerWriter = self._choose_markers(instant_time)
        self.stats: list[WriteStat] = []
        self._schema: pa.Schema | None = None
        self._written = False
        self._state = _TxnState.OPEN
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
            raise IndexerError(f"write {self.instant} is {self._state.value}")

    # --- write -----------------------------------------------------------------------------------

    def write(self, data: pa.Table) -> list[WriteStat]:
        """Write all of ``data`` (one call per transaction); returns the write stats."""
        self._check_open()
        if self._written:
            raise IndexerError(f"write {self.instant} already wrote its data; start a new one")
        self._written = True
        targets = self._plan(data)
        for index, target in enumerate(targets):
            self.stats.append(self._write_file(index, target))
        return list(self.stats)

    def _plan(self, data: pa.Table) -> list[_Target]:
        cfg = self.table.table_config
        clash = [c for c in data.column_names if c in META_COLUMNS]
        if clash:
            raise BadRecordsError(clash[0], "input may not carry Hudi meta columns")
        if data.num_rows == 0:
            return []
        keys = record_keys(data, cfg.record_key_fields)
        parts = partition_paths(data, cfg.partition_fields)
        if self.operation is not Operation.DELETE:
            self._schema = self._check_schema(data.schema)
        chosen = self._dedupe(data, keys, parts)
        if len(chosen) != data.num_rows:
            data = data.take(pa.array(chosen, pa.int64()))
            keys = [keys[i] for i in chosen]
            parts = [parts[i] for i in chosen]
        by_partition: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(parts):
            by_partition[p].append(i)
        targets: list[_Target] = []
        for partition, rows in sorted(by_partition.items()):
            sub = data.take(pa.array(rows, pa.int64()))
            sub_keys = [keys[i] for i in rows]
            targets.extend(self._plan_partition(partition, sub, sub_keys))
        return targets

    def _check_schema(self, incoming: pa.Schema) -> pa.Schema:
        existing = self._table_schema()
        if existing is None:
            return incoming
        want = {f.name: f.type for f in existing}
        have = {f.name: f.type for f in incoming}
        if want != have:
            missing = sorted(set(want) - set(have))
            extra = sorted(set(have) - set(want))
            changed = sorted(n for n in set(want) & set(have) if want[n] != have[n])
            raise BadRecordsError(
                None,
                "schema differs from the table's: "
                + "; ".join(
                    part
                    for part in (
                        f"missing {missing}" if missing else "",
                        f"unexpected {extra}" if extra else "",
                        f"type changed {[(n, str(have[n]), str(want[n])) for n in changed]}"
                        if changed
                        else "",
                    )
                    if part
                ),
            )
        return existing

    def _table_schema(self) -> pa.Schema | None:
        latest = self.view.latest_base_files()
        if not latest:
            return None
        sample = latest[-1]
        schema = pq.read_schema(io.BytesIO(self.table.storage.read(sample.path)))
        return pa.schema([f for f in schema if f.name not in META_COLUMNS])

    def _dedupe(self, data: pa.Table, keys: list[str], parts: list[str]) -> list[int]:
        """Row indices to keep: one per (partition, key), the largest precombine value (the last
        one on ties)."""
        precombine = self.table.table_config.precombine_field
        values: list[object] | None = None
        if precombine and self.operation is not Operation.DELETE:
            if precombine not in data.column_names:
                raise BadRecordsError(precombine, "the precombine field is missing")
            values = data.column(precombine).to_pylist()
        best: dict[tuple[str, str], int] = {}
        for i, key in enumerate(zip(parts, keys, strict=True)):
            j = best.get(key)
            if j is None or values is None or _not_less(values[i], values[j]):
                best[key] = i
        return sorted(best.values())

    def _plan_partition(self, partition: str, rows: pa.Table, keys: list[str]) -> list[_Target]:
        latest = {b.file_id: b for b in self.view.latest_base_files([partition])}
        deleting = self.operation is Operation.DELETE
        if self.options.bucket_count > 0:
            groups: dict[int, list[int]] = defaultdict(list)
            for i, b in enumerate(buckets_of_keys(keys, self.options.bucket_count)):
                groups[b].append(i)
            targets = []
            for bucket, idx in sorted(groups.items()):
                file_id = bucket_file_id(bucket)
                base = latest.get(file_id)
                if deleting and base is None:
                    continue
                target = _Target(partition, file_id, IOType.MERGE if base else IOType.CREATE, base)
                self._assign(target, rows, keys, idx, deleting)
                targets.append(target)
            return targets

        by_file: dict[str, list[int]] = defaultdict(list)
        inserts: list[int] = []
        if self.operation is Operation.INSERT:
            inserts = list(range(rows.num_rows))
        else:
            owner = self._tag(partition, list(latest.values()), set(keys))
            for i, key in enumerate(keys):
                found = owner.get(key)
                if found is not None:
                    by_file[found].append(i)
                elif not deleting:
                    inserts.append(i)
        targets = []
        for file_id, idx in sorted(by_file.items()):
            target = _Target(partition, file_id, IOType.MERGE, latest[file_id])
            self._assign(target, rows, keys, idx, deleting)
            targets.append(target)
        per_file = self._records_per_file(rows)
        for start in range(0, len(inserts), per_file):
            chunk = inserts[start : start + per_file]
            target = _Target(partition, new_file_id(), IOType.CREATE)
            self._assign(target, rows, keys, chunk, deleting=False)
            targets.append(target)
        return targets

    def _assign(
        self, target: _Target, rows: pa.Table, keys: list[str], idx: list[int], deleting: bool
    ) -> None:
        if deleting:
            target.delete_keys = {keys[i] for i in idx}
        else:
            target.incoming = rows.take(pa.array(idx, pa.int64()))
            target.incoming_keys = [keys[i] for i in idx]

    def _tag(self, partition: str, bases: list[BaseFile], keys: set[str]) -> dict[str, str]:
        """Record key -> file id, for the incoming keys found in the partition's base files; only
        files whose bloom filter may hold a key are read (when ``bloom_filters`` is completed)."""
        owner: dict[str, str] = {}
        wanted = pa.array(sorted(keys), pa.string())
        for base in self.index.candidate_files(partition, keys, bases):
            existing = read_parquet(self.table.storage, base.path, [RECORD_KEY]).column(RECORD_KEY)
            found = existing.filter(pc.is_in(existing, value_set=wanted))
            for key in found.to_pylist():
                owner[key] = base.file_id
        return owner

    def _records_per_file(self, rows: pa.Table) -> int:
        num_rows: int = rows.num_rows
        row_bytes = max(1, int(rows.nbytes) // max(1, num_rows))
        by_size = self.options.max_file_size // row_bytes
        return max(1, min(self.options.max_records_per_file, by_size))

    # --- one data file ---------------------------------------------------------------------------

    def _ensure_partition_metadata(self, partition: str) -> None:
        path = f"{partition}/{PARTITION_METADATA_FILE}" if partition else PARTITION_METADATA_FILE
        depth = len(partition.split("/")) if partition else 0
        body = f"#partition metadata\ncommitTime={self.instant_time}\npartitionDepth={depth}\n"
        with contextlib.suppress(FileAlreadyExistsError):
            self.table.storage.create(path, body.encode())

    def _write_file(self, index: int, target: _Target) -> WriteStat:
        token = f"{index}-0-0"
        name = base_file_name(target.file_id, token, self.instant_time)
        marker = Marker(target.partition, name, target.io_type)
        with self._guard(target.partition, target.file_id):
            self.markers.create(marker)
        self._ensure_partition_metadata(target.partition)
        rows, counts = self._merged_rows(index, target)
        rows = rows.set_column(
            rows.schema.get_field_index(FILE_NAME),
            FILE_NAME,
            pa.array([name] * rows.num_rows, pa.string()),
        )
        rows = rows.sort_by(RECORD_KEY)
        sink = pa.BufferOutputStream()
        pq.write_table(
            rows,
            sink,
            compression="snappy",
            bloom_filter_options={
                RECORD_KEY: {"ndv": max(1, rows.num_rows), "fpp": self.options.bloom_filter_fpp}
            },
        )
        data = sink.getvalue().to_pybytes()
        stat = WriteStat(
            file_id=target.file_id,
            path=marker.data_path,
            partition_path=target.partition,
            prev_commit=target.base.instant_time if target.base else NULL_COMMIT,
            num_writes=rows.num_rows,
            num_deletes=counts["deletes"],
            num_update_writes=counts["updates"],
            num_inserts=counts["inserts"],
            total_write_bytes=len(data),
            file_size_in_bytes=len(data),
        )
        self.table.storage.create(marker.data_path, data)
        self._infos[marker.data_path] = info_from_bytes(
            target.partition, name, self.instant_time, data
        )
        logger.debug("wrote %s (%d records)", marker.data_path, rows.num_rows)
        return stat

    @contextlib.contextmanager
    def _guard(self, partition: str, file_id: str) -> Iterator[None]:
        if self._detector is None:
            yield
            return
        with self._detector.guard(partition, file_id):
            yield

    def _with_meta(
        self, rows: pa.Table, keys: Sequence[str], partition: str, index: int
    ) -> pa.Table:
        n = rows.num_rows
        t = self.instant_time
        meta = [
            pa.array([t] * n, pa.string()),
            pa.array([f"{t}_{index}_{i}" for i in range(n)], pa.string()),
            pa.array(list(keys), pa.string()),
            pa.array([partition] * n, pa.string()),
            pa.array([""] * n, pa.string()),
        ]
        return pa.Table.from_arrays(
            meta + list(rows.columns), names=[*META_COLUMNS, *rows.column_names]
        )

    def _merged_rows(self, index: int, target: _Target) -> tuple[pa.Table, dict[str, int]]:
        counts = {"inserts": 0, "updates": 0, "deletes": 0}
        incoming = None
        if target.incoming is not None:
            incoming = self._with_meta(
                target.incoming, target.incoming_keys, target.partition, index
            )
        if target.base is None:
            assert incoming is not None
            counts["inserts"] = incoming.num_rows
            return incoming, counts
        existing = read_parquet(self.table.storage, target.base.path)
        existing_keys = existing.column(RECORD_KEY)
        if target.delete_keys:
            doomed = pa.array(sorted(target.delete_keys), pa.string())
            hit = pc.is_in(existing_keys, value_set=doomed)
            counts["deletes"] = pc.sum(hit).as_py() or 0
            return existing.filter(pc.invert(hit)), counts
        assert incoming is not None
        incoming = self._drop_stale(existing, incoming)
        replaced = pc.is_in(existing_keys, value_set=incoming.column(RECORD_KEY))
        counts["updates"] = pc.sum(replaced).as_py() or 0
        counts["inserts"] = incoming.num_rows - counts["updates"]
        kept = existing.filter(pc.invert(replaced))
        try:
            merged = pa.concat_tables([kept, incoming.cast(kept.schema)])
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
            raise BadRecordsError(None, f"records do not fit {target.base.path}: {e}") from e
        return merged, counts

    def _drop_stale(self, existing: pa.Table, incoming: pa.Table) -> pa.Table:
        """Drop incoming rows whose stored version has a larger precombine value."""
        precombine = self.table.table_config.precombine_field
        if not precombine or precombine not in existing.column_names:
            return incoming
        stored = dict(
            zip(
                existing.column(RECORD_KEY).to_pylist(),
                existing.column(precombine).to_pylist(),
                strict=True,
            )
        )
        keep = [
            key not in stored or _not_less(value, stored[key])
            for key, value in zip(
                incoming.column(RECORD_KEY).to_pylist(),
                incoming.column(precombine).to_pylist(),
                strict=True,
            )
        ]
        return incoming.filter(pa.array(keep, pa.bool_()))

    # --- commit and abort ------------------------------------------------------------------------

    def commit(self) -> Instant:
        """Commit under the table lock. On a failure before the instant completes (a conflict,
        an expired heartbeat, a lock timeout) the write is rolled back and the error raised; a
        failure while completing raises :class:`CommitStateUnknownError` and deletes nothing."""
        self._check_open()
        try:
            return self._commit()
        except CommitStateUnknownError:
            raise
        except BaseException:
            if self._state is _TxnState.OPEN:
                self.abort()
            raise

    def _commit(self) -> Instant:
        schema = avro_schema(self._schema, self.table.table_config.name) if self._schema else ""
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
            self.heartbeat.ensure_alive()
            fresh = timeline.load()
            for candidate in strategy.candidates(fresh, self.start_state, timeline.completion_time):
                strategy.resolve(this, operation_of(timeline, candidate))
            self._finalize()
            self._update_metadata_table(lock)
            lock.ensure_valid()
            self._state = _TxnState.UNKNOWN
            try:
                done = timeline.complete(inflight, metadata.to_json())
            except BaseException as e:
                self.heartbeat.pause()
                raise CommitStateUnknownError(inflight, e) from e
        self._state = _TxnState.COMMITTED
        self.instant = done
        self.markers.delete_all()
        self.heartbeat.stop()
        logger.info("write %s committed (%d files)", done, len(self.stats))
        return done

    def _update_metadata_table(self, lock: LockHandle) -> None:
        """Write this commit's metadata deltacommit to every completed and inflight metadata
        partition (read now, under the lock, so an index being built is never missed)."""
        config = self.table.reload_table_config()
        partitions = [*config.metadata_partitions, *config.metadata_partitions_inflight]
        if not partitions:
            return
        infos = [self._infos[s.path] for s in self.stats]
        mdt = MetadataTable(self.table)
        mdt.write_deltacommit(
            self.instant_time, mdt.records_of(partitions, infos, config), self.markers, lock
        )

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
                    rollback(self.table, current, lock)
        finally:
            self.heartbeat.stop()
        logger.info("write %s aborted", self.instant)


def _not_less(a: object, b: object) -> bool:
    """a >= b for precombine values; None sorts first."""
    if b is None:
        return True
    if a is None:
        return False
    try:
        return not (a < b)  # type: ignore[operator]
    except TypeError:
        return True
