"""``indexer serve``: the daemon that runs next to ingestion (APScheduler 3.x).

Per table, one job (never overlapping itself) runs every ``reconcile_interval``:

1. hold the table's *daemon lease* in the SQL store (``daemon:<base>``, renewed in the background):
   with several daemons on one table only the holder works; when it dies, another takes over
   within the lease and re-queues the requests the dead one left running;
2. every ``clean_interval``: roll back failed writes whose writer is provably dead, clean old file
   versions and archive the oldest instants (when the daemon's config turns those on), writing
   each rollback's and clean's index update inside its critical section;
3. sync: apply the completed instants the index lacks (other writers' commits and table
   services, active or archived by Hudi), rebuilding in place any partition that cannot be
   brought up to date that way or was lost;
4. turn desired index types that are missing into requests, and pending indexing plans left by a
   crash into requests, so everything goes through one retry path;
5. run the oldest due request: ``schedule`` + ``execute`` (resuming a pending plan first); an
   aborted build goes back to pending with exponential backoff, and is marked failed with its
   last error after ``max_attempts``;
6. every ``compaction_interval``: the index's own upkeep (compaction of the partitions due by
   ``hoodie.metadata.compact.max.delta.commits``, then the deletion of the files compactions
   replaced once the readers' grace period has passed, and the trim of the index's timeline).

SIGTERM/SIGINT: no new work; a build in progress is cancelled at its next safe point (its Spark
jobs are cancelled) and aborted cleanly, unless it is already completing; leases are released. A
restarted daemon resumes from the request store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from indexer.hudi_format import HudiFormatIndexer
from indexer.indexer import AsyncIndexer, IndexerOptions
from indexer.requests_store import ACTIVE, IndexRequest, RequestStore
from indexer.service_config import ServiceConfig, TableSpec
from metadata_table.layout import expand_index_types
from metadata_table.partition_writer import HudiPartitionWriter
from timeline.errors import BuildCancelledError, LockTimeoutError, TableError
from timeline.locks import LockHandle, SqlLockProvider, default_owner
from timeline.storage import normalize_base_uri
from timeline.table import Table

logger = logging.getLogger(__name__)


BUILD_SECONDS_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass
class Metrics:
    builds_started: int = 0
    builds_completed: int = 0
    builds_aborted: int = 0
    build_seconds: float = 0.0
    catch_up_instants: float = 0.0
    lock_wait_seconds: float = 0.0
    rollbacks: int = 0
    cleans: int = 0
    cleaned_files: int = 0
    archived_instants: int = 0
    compactions: int = 0
    index_cleaned_files: int = 0
    synced_instants: int = 0
    resyncs: int = 0
    lost_partitions: int = 0
    builds_retried: int = 0
    #: build durations: counts per upper bound (seconds), cumulative as Prometheus wants them
    build_buckets: dict[float, int] = field(
        default_factory=lambda: dict.fromkeys(BUILD_SECONDS_BUCKETS, 0)
    )
    build_count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **deltas: float) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def observe_build(self, seconds: float) -> None:
        with self.lock:
            self.build_count += 1
            self.build_seconds += seconds
            for bound in self.build_buckets:
                if seconds <= bound:
                    self.build_buckets[bound] += 1

    def prometheus(self) -> str:
        rows = [
            ("builds_started_total", "counter", "Index builds started", self.builds_started),
            ("builds_completed_total", "counter", "Index builds completed", self.builds_completed),
            (
                "builds_aborted_total",
                "counter",
                "Index builds aborted (and cleaned up)",
                self.builds_aborted,
            ),
            (
                "builds_retried_total",
                "counter",
                "Index build attempts that retried an aborted one",
                self.builds_retried,
            ),
            (
                "catch_up_instants_total",
                "counter",
                "Instants caught up after t",
                self.catch_up_instants,
            ),
            (
                "lock_wait_seconds_total",
                "counter",
                "Seconds waited for the table lock",
                self.lock_wait_seconds,
            ),
            (
                "failed_writes_rolled_back_total",
                "counter",
                "Failed writes rolled back",
                self.rollbacks,
            ),
            ("cleans_total", "counter", "Cleans of old file versions completed", self.cleans),
            (
                "cleaned_files_total",
                "counter",
                "Old data file versions deleted by cleans",
                self.cleaned_files,
            ),
            (
                "archived_instants_total",
                "counter",
                "Instants moved from the active timeline to the archive",
                self.archived_instants,
            ),
            ("compactions_total", "counter", "Metadata table compactions", self.compactions),
            (
                "index_cleaned_files_total",
                "counter",
                "Index files deleted after a compaction replaced them",
                self.index_cleaned_files,
            ),
            (
                "synced_instants_total",
                "counter",
                "Completed instants of other writers (e.g. Apache Hudi's) applied to the index",
                self.synced_instants,
            ),
            (
                "resyncs_total",
                "counter",
                "Metadata partitions rebuilt in place from storage because a sync could not "
                "apply what they lacked (or they were lost)",
                self.resyncs,
            ),
            (
                "lost_partitions_total",
                "counter",
                "Metadata partitions found lost (their files deleted or replaced, or their lag "
                "unknowable) and rebuilt",
                self.lost_partitions,
            ),
        ]
        out = []
        for name, kind, doc, value in rows:
            out += [
                f"# HELP async_indexer_{name} {doc}",
                f"# TYPE async_indexer_{name} {kind}",
                f"async_indexer_{name} {value}",
            ]
        name = "async_indexer_build_duration_seconds"
        out += [f"# HELP {name} Duration of index builds", f"# TYPE {name} histogram"]
        for bound, count in self.build_buckets.items():
            out.append(f'{name}_bucket{{le="{bound:g}"}} {count}')
        out += [
            f'{name}_bucket{{le="+Inf"}} {self.build_count}',
            f"{name}_sum {self.build_seconds}",
            f"{name}_count {self.build_count}",
        ]
        return "\n".join(out) + "\n"


@dataclass
class _TableState:
    spec: TableSpec
    table: Table
    lease: LockHandle | None = None
    indexer: AsyncIndexer | None = None  # the build in progress
    request: IndexRequest | None = None
    progress: tuple[int, int] = (0, 0)
    last_clean: float = 0.0
    last_compaction: float = 0.0
    #: storage and the last table services (:meth:`AsyncIndexer.footprint`), every clean interval
    footprint: dict[str, Any] | None = None


class IndexerService:
    def __init__(self, config: ServiceConfig, owner: str | None = None, spark: Any = None) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        self.config = config
        self.owner = owner or default_owner("indexer-daemon")
        self.store = RequestStore(config.request_store)
        self.leases = SqlLockProvider(config.request_store, lease_seconds=config.lease_seconds)
        self.metrics = Metrics()
        #: the last builds (newest last): table, request, index types, outcome, seconds
        self.builds: deque[dict[str, Any]] = deque(maxlen=20)
        self.tables = {
            normalize_base_uri(spec.base): _TableState(spec, Table.open(spec.base, spec.config()))
            for spec in config.tables
        }
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self.stopping = threading.Event()
        self._spark = spark
        self._spark_lock = threading.Lock()

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        from datetime import UTC, datetime

        for base in self.tables:
            self.scheduler.add_job(
                self.tick,
                "interval",
                seconds=self.config.reconcile_interval,
                args=[base],
                id=f"tick:{base}",
                max_instances=1,
                coalesce=True,
                next_run_time=datetime.now(UTC),
            )
        self.scheduler.start()
        logger.info("daemon %s started for %d tables", self.owner, len(self.tables))

    def stop(self) -> None:
        """Graceful: no new work, cancel a build that is not completing, release the leases."""
        self.stopping.set()
        for state in self.tables.values():
            if state.indexer is not None and state.indexer.phase != "completing":
                state.indexer.cancel.set()
        if self._spark is not None:
            try:
                self._spark.sparkContext.cancelAllJobs()
            except Exception as e:
                logger.warning("could not cancel Spark jobs: %s", e)
        self.scheduler.shutdown(wait=True)
        for state in self.tables.values():
            if state.lease is not None:
                state.lease.release()
                state.lease = None
            state.table.close()
        self.store.close()
        logger.info("daemon %s stopped", self.owner)

    def spark(self) -> Any:
        with self._spark_lock:
            if self._spark is None:
                from timeline.spark import spark_session

                self._spark = spark_session(self.config.spark_master, self.config.spark_conf)
            return self._spark

    # --- the per-table job -----------------------------------------------------------------------

    def _hold_lease(self, state: _TableState, base: str) -> bool:
        if state.lease is not None and state.lease.is_valid:
            return True
        try:
            state.lease = self.leases.acquire(f"daemon:{base}", self.owner, timeout=0.01)
        except LockTimeoutError:
            return False
        requeued = self.store.requeue_running(base)
        logger.info(
            "daemon %s leads %s%s",
            self.owner,
            base,
            f"; re-queued {requeued} requests" if requeued else "",
        )
        return True

    def tick(self, base: str) -> None:
        if self.stopping.is_set():
            return
        state = self.tables[base]
        try:
            if not self._hold_lease(state, base):
                return
            now = time.monotonic()
            indexer = self._indexer(state, self._options(state), spark=self._spark)
            if now - state.last_clean >= self.config.clean_interval:
                state.last_clean = now
                rolled = indexer.clean_failed_writes()
                cleaned, archived = indexer.table_services()
                self.metrics.add(
                    rollbacks=len(rolled),
                    cleans=len(cleaned),
                    cleaned_files=sum(c.files_deleted for c in cleaned),
                    archived_instants=len(archived.instants) if archived else 0,
                )
                state.footprint = indexer.footprint()
            synced = indexer.sync()
            self.metrics.add(
                synced_instants=len(synced.applied),
                resyncs=len(synced.resynced),
                lost_partitions=len(synced.lost),
            )
            self._reconcile(state, base)
            if not self.stopping.is_set():
                self._run_one(state, base)
            if (
                not self.stopping.is_set()
                and now - state.last_compaction >= self.config.compaction_interval
            ):
                state.last_compaction = now
                upkept = indexer.upkeep()
                self.metrics.add(
                    compactions=len(upkept.compacted), index_cleaned_files=upkept.removed_files
                )
        except Exception:
            logger.exception(
                "daemon job for %s failed; it runs again in %.0fs",
                base,
                self.config.reconcile_interval,
            )

    def _indexer(
        self, state: _TableState, options: IndexerOptions | None = None, spark: Any = None
    ) -> AsyncIndexer:
        """The table's indexer: of this project's index, or of Apache Hudi's metadata table
        (``format = "hudi"`` in its entry)."""
        if state.spec.format == "hudi":
            return HudiFormatIndexer(state.table, options, spark=spark)
        return AsyncIndexer(state.table, options, spark=spark)

    def _options(self, state: _TableState) -> IndexerOptions:
        """How this daemon's builds and resyncs run (its Spark, its timeout, progress shown in
        /status)."""
        return IndexerOptions(
            spark_master=self.config.spark_master,
            spark_conf=self.config.spark_conf,
            timeout=self.config.timeout_seconds,
            progress=lambda step, done, total: setattr(state, "progress", (done, total)),
        )

    def _reconcile(self, state: _TableState, base: str) -> None:
        """Desired-but-missing indexes and plans left by a crash become requests."""
        indexer = self._indexer(state)
        if isinstance(indexer, HudiFormatIndexer):
            present = set(indexer.hudi.states())
            for partition in indexer.hudi.deleted_by_writers():
                logger.warning(
                    "%s: %s, built in Apache Hudi's metadata table, was deleted by a Hudi writer "
                    "without %s%s",
                    base,
                    partition,
                    " ".join(HudiPartitionWriter.writer_configs([partition])),
                    "; it is built again" if partition in state.spec.index_types else "",
                )
        else:
            present = set(state.table.reload_index_state().partitions)
        active = self.store.list(base, ACTIVE)
        covered = {t for r in active for t in r.index_types}
        desired = expand_index_types(state.spec.index_types, state.spec.columns)
        covered = set(expand_index_types(covered, state.spec.columns, present))
        missing = [t for t in desired if t not in present and t not in covered]
        if missing:
            self.store.create(base, missing, list(state.spec.columns), source="desired")
        for pending in indexer.pending():
            names = indexer.plan_of(pending).names
            if not set(names) & covered:
                self.store.create(base, names, [], source="resume")
                covered |= set(names)

    def _run_one(self, state: _TableState, base: str) -> None:
        request = self.store.claim(base)
        if request is None:
            return
        indexer = self._indexer(state, self._options(state), spark=self.spark())
        state.indexer, state.request, state.progress = indexer, request, (0, 0)
        started = time.monotonic()
        self.metrics.add(builds_started=1, builds_retried=1 if request.attempts > 1 else 0)
        outcome = "aborted"
        try:
            done = indexer.run(request.index_types, request.columns)
        except (TableError, OSError) as e:
            self.metrics.add(builds_aborted=1)
            if isinstance(e.__cause__, BuildCancelledError) or isinstance(e, BuildCancelledError):
                outcome = "interrupted"
                self.store.requeue_running(base)  # shutdown: not the build's fault, no attempt used
                logger.info(
                    "request %s interrupted by shutdown; it resumes after a restart", request.id
                )
            else:
                after = self.store.aborted(
                    request, str(e), self.config.max_attempts, self.config.backoff_seconds
                )
                logger.warning(
                    "request %s attempt %d aborted: %s (now %s)",
                    request.id,
                    request.attempts,
                    e,
                    after.state,
                )
        else:
            outcome = "completed"
            self.metrics.add(builds_completed=1)
            self.store.completed(request.id, done.timestamp if done else None)
            logger.info("request %s completed (%s)", request.id, done)
        finally:
            self.builds.append(
                {
                    "table": base,
                    "request": request.id,
                    "index_types": list(request.index_types),
                    "outcome": outcome,
                    "seconds": round(time.monotonic() - started, 2),
                    "finished_at": time.time(),
                }
            )
            self.metrics.observe_build(time.monotonic() - started)
            self.metrics.add(
                catch_up_instants=indexer.stats["catch_up_instants"],
                lock_wait_seconds=indexer.stats["lock_wait_seconds"],
            )
            state.indexer = state.request = None

    # --- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        tables = {}
        for base, state in self.tables.items():
            indexer = self._indexer(state)
            status = indexer.status()
            running = None
            if state.request is not None and state.indexer is not None:
                done, total = state.progress
                running = {
                    "request": state.request.id,
                    "index_types": state.request.index_types,
                    "phase": state.indexer.phase,
                    "tasks_done": done,
                    "tasks_total": total,
                }
            tables[base] = {
                "partitions": status["partitions"],
                "lag": status["lag"],
                "pending_instants": [i for i in status["indexing"] if i["state"] != "completed"],
                "leader": state.lease is not None and state.lease.is_valid,
                "footprint": state.footprint,
                "running": running,
                "requests": [r.to_json() for r in self.store.list(base, ACTIVE)],
            }
        return {"daemon": self.owner, "tables": tables, "builds": list(self.builds)}

    def lag_metrics(self) -> str:
        """Per table and metadata partition, how far the index is behind the data (gauges)."""
        gauges = {
            "partition_unapplied_instants": "Completed data instants a partition does not reflect",
            "partition_oldest_unapplied_age_seconds": "Age of the oldest of those instants",
            "partition_files": "Files of a metadata partition",
            "partition_bytes": "Bytes of a metadata partition",
        }
        values: dict[str, list[str]] = {name: [] for name in gauges}
        deleted: dict[str, int] = {}
        for base, state in self.tables.items():
            try:
                found = self._indexer(state).status()
                lag = found["lag"]
                deleted[base] = len(found["hudi_deleted_by_writers"])
            except Exception:  # a table that cannot be read now: no gauges for it
                logger.exception("lag of %s not available", base)
                continue
            for partition, row in lag.items():
                labels = f'{{table="{base}",partition="{partition}"}}'
                for name in gauges:
                    value = row[name.removeprefix("partition_")]
                    values[name].append(f"async_indexer_{name}{labels} {value or 0}")
        out = []
        for name, doc in gauges.items():
            out += [f"# HELP async_indexer_{name} {doc}", f"# TYPE async_indexer_{name} gauge"]
            out += values[name]
        name = "hudi_partitions_deleted_by_writers"
        out += [
            f"# HELP async_indexer_{name} Partitions built in Apache Hudi's metadata table that a "
            "Hudi writer without their flag deleted",
            f"# TYPE async_indexer_{name} gauge",
            *(f'async_indexer_{name}{{table="{b}"}} {n}' for b, n in deleted.items()),
        ]
        return "\n".join(out) + "\n"
