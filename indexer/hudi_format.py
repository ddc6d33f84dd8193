"""``indexer run --format hudi``: Apache Hudi's own metadata-table indexes (column_stats,
bloom_filters, record_index in ``.hoodie/metadata``; files with the metadata table itself on a
table that has none), built by the protocol of RFC-45 as Hudi 0.15's ``HoodieIndexer`` runs
it, so that Hudi's readers and writers use them.

``schedule``, under the lock Hudi's writers take (``hoodie.write.lock.provider``): t = the last
settled write; a claim of the build (so this project tells it from HoodieIndexer's), then
``Ti.indexing.requested`` with Hudi's Avro plan. ``execute``: ``Ti.indexing.inflight``; every
data file up to t read once for all the partitions, their base files at ``<t>004`` written
(no lock; on the native build's engine, :meth:`~indexer.indexer.AsyncIndexer.engine`),
``<t>004.deltacommit`` completed on the metadata table (lock); catch-up: every data
instant completed after t, Hudi's and ours, applied per partition (each under the lock), a write
still running waited for (with the deadline of ``--timeout``); then, under the lock, what
completed since applied too, the partitions added to ``hoodie.table.metadata.partitions``, and
``Ti.indexing`` completed with Hudi's Avro commit metadata.

Until that last step no writer writes to the new partitions and no reader reads them; an abort
(any failure, or a kill and the next run's resume) deletes their folders, the metadata instants
the build wrote and ``Ti``'s files, and leaves ``hoodie.properties`` as it was. The catch-up and
the retry loop are :class:`~indexer.indexer.AsyncIndexer`'s; what is made and written is
:class:`~metadata_table.partition_writer.HudiPartitionWriter`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from indexer.indexer import AsyncIndexer, IndexerOptions, ScheduleResult, SyncResult
from indexer.plan import IndexPlan, PartitionPlan
from metadata_table.partition_writer import HudiPartitionWriter
from timeline.config import HUDI_LOCK_PROVIDER, LOCAL_BUILD_WORKERS
from timeline.errors import ConfigError, TableError
from timeline.failpoints import failpoint
from timeline.instant import Action, Instant
from timeline.locks import LockHandle
from timeline.table import Table

logger = logging.getLogger(__name__)

FORMATS = ("native", "hudi")


class HudiFormatIndexer(AsyncIndexer):
    """The asynchronous indexer, building into Apache Hudi's metadata table."""

    def __init__(
        self, table: Table, options: IndexerOptions | None = None, spark: object = None
    ) -> None:
        super().__init__(table, options, spark)
        self.hudi = HudiPartitionWriter(table)
        #: the indexing instant whose build runs in this process (its catch-up applies to it)
        self._building: str | None = None

    def validate(self, index_types: Sequence[str], columns: Sequence[str]) -> list[str]:
        if columns:
            raise ConfigError(
                "--columns",
                "--format hudi indexes every column of the table, as Apache Hudi's column_stats "
                "does without a column list",
            )
        if not index_types:
            raise ConfigError(
                "--index-types", "name at least one of " + ", ".join(HudiPartitionWriter.BUILDABLE)
            )
        types = list(dict.fromkeys(index_types))
        refusal = self.hudi.refusal(types)
        if refusal is not None:
            raise ConfigError("--format", refusal)
        self.table.lock_provider  # noqa: B018 - a misconfigured lock fails here, before anything
        return types

    # --- schedule --------------------------------------------------------------------------------

    def schedule(self, index_types: Sequence[str], columns: Sequence[str] = ()) -> ScheduleResult:
        types = self.validate(index_types, columns)
        with self._lock("schedule indexing of Apache Hudi's metadata table") as lock:
            started = time.monotonic()
            states = self.hudi.states()
            skipped = {
                p: f"already {states[p]} in Apache Hudi's metadata table"
                for p in types
                if p in states
            }
            todo = [p for p in types if p not in skipped]
            if not todo:
                return ScheduleResult(None, [], skipped, time.monotonic() - started)
            timeline = self.table.timeline.load().require_valid()
            last = timeline.last_settled_write()
            if last is None:
                raise TableError(f"{self.table.base_uri} has no completed write to index")
            newest = timeline.last()
            instant_time = self.table.timeline.generator.next(
                after=newest.timestamp if newest else None
            )
            plan = self.hudi.plan(instant_time, todo, last.timestamp)
            failpoint("schedule.before_plan")
            lock.ensure_valid()
            requested = self.table.timeline.create_requested(
                Action.INDEXING, plan, timestamp=instant_time
            )
            seconds = time.monotonic() - started
        logger.info(
            "scheduled %s for %s in Apache Hudi's metadata table up to %s (lock held %.3fs)",
            requested,
            ",".join(todo),
            last.timestamp,
            seconds,
        )
        return ScheduleResult(requested, todo, skipped, seconds)

    # --- execute ---------------------------------------------------------------------------------

    def pending(self) -> list[Instant]:
        """Pending indexing instants this project claimed (HoodieIndexer's are left to it)."""
        claimed = {c.instant for c in self.hudi.claims()}
        timeline = self.table.timeline.load()
        return [
            i for i in timeline.with_actions(Action.INDEXING).pending() if i.timestamp in claimed
        ]

    def plan_of(self, instant: Instant) -> IndexPlan:
        claim = self.hudi.require(instant.timestamp)
        return IndexPlan(tuple(PartitionPlan(p, claim.upto) for p in claim.partitions))

    def _resume(self, lock: LockHandle, instant: Instant, plan: IndexPlan) -> Instant | None:
        """A build whose partitions are all completed in Hudi's metadata table published them
        and crashed before completing its instant: completed now. One with some completed was
        overtaken (a Hudi writer built them): it fails, and its abort leaves those alone. The
        folder of a completed partition is never built again."""
        claim = self.hudi.require(instant.timestamp)
        states = self.hudi.states()
        done = [p for p in claim.partitions if states.get(p) == "completed"]
        if done and len(done) == len(claim.partitions):
            self.hudi.remember(claim.partitions)
            return self._complete(lock, instant, plan, claim.upto)
        if done:
            raise TableError(
                f"{', '.join(done)} completed in Apache Hudi's metadata table while build "
                f"{instant.timestamp} was pending (a Hudi writer with the index enabled and "
                "hoodie.metadata.index.async=false builds it itself)"
            )
        return None

    def _build(self, instant: Instant, plan: IndexPlan) -> None:
        """Every data file up to t read once, the partitions' files at ``<t>004`` (what an
        earlier attempt left deleted first), then ``<t>004.deltacommit`` under the lock."""
        if not self.table.config.get(HUDI_LOCK_PROVIDER):
            logger.warning(
                "%s: %s is not set, so the lock this build takes is not the one Apache Hudi's "
                "writers take: a Hudi commit may race its changes to the metadata table and "
                "hoodie.properties (docs/operations.md, Sharing the lock with Apache Hudi's "
                "writers)",
                self.table.base_uri,
                HUDI_LOCK_PROVIDER.key,
            )
        with self._lock(f"start build {instant.timestamp}"):  # a Hudi writer may be creating
            claim = self.hudi.restart(instant.timestamp)  # the metadata table, under the lock
        self._building = instant.timestamp
        workers = self.table.config.get(LOCAL_BUILD_WORKERS)
        stamp, stats = self.hudi.build(
            claim.partitions,
            claim.upto,
            workers,
            self._reporter("build"),
            lambda files: None if self.engine(files) == "local" else self.spark,
        )
        failpoint("build.mid")
        with self._lock(f"initialize {','.join(claim.partitions)}") as lock:
            self.hudi.complete_initialization(lock, stamp, stats)

    def _check_unchanged(self, instant: Instant, plan: IndexPlan) -> None:
        """Before publishing: fail if a Hudi writer built or started one of the partitions
        meanwhile."""
        states = self.hudi.states()
        taken = [p for p in plan.names if p in states]
        if taken:
            raise TableError(
                f"{', '.join(taken)} became {states[taken[0]]} in Apache Hudi's metadata table "
                "while this build ran (a Hudi writer with the index enabled and "
                "hoodie.metadata.index.async=false builds it itself)"
            )

    def _publish(self, lock: LockHandle, instant: Instant, plan: IndexPlan, caught: str) -> Instant:
        self.hudi.publish(lock, plan.names)
        failpoint("complete.after_partitions")
        return self._complete(lock, instant, plan, caught)

    def _finished(self, instant: Instant, plan: IndexPlan) -> None:
        self._building = None
        logger.warning(
            "every Apache Hudi writer of %s must now carry %s, or its next commit deletes %s",
            self.table.base_uri,
            " ".join(self.hudi.writer_configs(plan.names)),
            ",".join(plan.names),
        )

    def _complete(self, lock: LockHandle, instant: Instant, plan: IndexPlan, upto: str) -> Instant:
        if instant.is_requested:
            instant = self.table.timeline.transition_to_inflight(instant)
        lock.ensure_valid()
        metadata = self.hudi.commit_metadata(instant.timestamp, upto)
        done = self.table.timeline.complete(instant, metadata)
        self.hudi.release(instant.timestamp)
        logger.info("index build %s completed: %s", done, ",".join(plan.names))
        return done

    def _ensure_applied(self, lock: LockHandle, plan: IndexPlan, instant: Instant) -> None:
        assert self._building is not None, "catch-up runs inside _execute"
        self.hudi.catch_up(lock, self._building, instant)

    # --- abort -----------------------------------------------------------------------------------

    def abort(self, instant: Instant, reason: str, quiet: bool = False) -> None:
        """Undo a pending build: the partitions' folders and the metadata instants it wrote,
        then its indexing instant and claim; ``hoodie.properties`` is untouched."""
        logger.log(logging.INFO if quiet else logging.WARNING, "aborting %s: %s", instant, reason)
        with self._lock(f"abort indexing {instant.timestamp}") as lock:
            current = self.table.timeline.load().get(instant.timestamp, Action.INDEXING)
            if current is None or current.is_completed:
                return
            self.hudi.abandon(instant.timestamp)
            failpoint("abort.mid")
            lock.ensure_valid()
            self.table.timeline.delete_pending(current)
        self.hudi.release(instant.timestamp)
        self._building = None

    def status(self) -> dict[str, Any]:
        """:meth:`AsyncIndexer.status`, its partitions those of Apache Hudi's metadata table
        (their lag is ``hudi_metadata_table``'s: the completed instants it does not reflect)."""
        found = super().status()
        found["partitions"] = self.hudi.states()
        found["lag"] = {}
        return found

    # --- drop, sync, validate --------------------------------------------------------------------

    def drop(self, index_types: Sequence[str]) -> list[str]:
        """Remove partitions from Hudi's metadata table while writers run (a pending build of
        ours for them is aborted first). Hudi's writers that carry a partition's flag and
        hoodie.metadata.index.async=false build it again on their next commit."""
        types = list(dict.fromkeys(index_types))
        buildable = HudiPartitionWriter.DROPPABLE
        wrong = [t for t in types if t not in buildable]
        if wrong:
            raise ConfigError(
                "--index-types",
                f"--format hudi drops {', '.join(buildable)}, not {', '.join(wrong)} (Apache "
                "Hudi's files partition goes with its whole metadata table: a Hudi writer with "
                "hoodie.metadata.enable=false deletes it)",
            )
        for pending in self.pending():
            if set(self.plan_of(pending).names) & set(types):
                self.abort(pending, f"dropped: {', '.join(types)}")
        with self._lock("drop Apache Hudi's metadata partitions") as lock:
            dropped = self.hudi.drop(lock, types)
        logger.info("dropped %s", ",".join(dropped) or "nothing")
        return dropped

    def sync(self) -> SyncResult:
        """Bring Apache Hudi's metadata table up to date: first roll back failed writes whose
        writers are dead, then write, each under the table lock, the deltacommit Hudi's writer
        would have written for every completed data instant it does not reflect (a writer with
        the metadata table off for a while, a tool that does not keep it)."""
        result = SyncResult()
        result.rolled_back = [i.timestamp for i in self.clean_failed_writes()]
        behind = self.hudi.unapplied()
        for number, instant in enumerate(behind):
            self._report("sync", number, len(behind))
            with self._lock(f"sync {instant.timestamp}") as lock:
                if instant.timestamp in {i.timestamp for i in self.hudi.unapplied()}:
                    result.applied[instant.timestamp] = self.hudi.apply(lock, instant)
        self._report("sync", len(behind), len(behind))
        self.stats["synced_instants"] += len(result.applied)
        return result


__all__ = ["FORMATS", "HudiFormatIndexer"]
