"""The asynchronous indexer (docs/architecture.md §5 and §7.7), beating Hudi's known defects.

``schedule`` (under the table lock, for milliseconds): validate; t = the last settled write (the
last completed write before the earliest pending write, clean or rollback); create every file
group of the requested partitions (empty base files); write ``Ti.indexing.requested`` with the
plan; mark the partitions inflight in the index's state file, so from then on every commit
writes its updates to them (writers read that file under the lock).

``execute`` (no lock while building): ``Ti.indexing.inflight``; a PySpark job (or, for a small
table and no Spark master named, this process: :meth:`AsyncIndexer.engine`) builds base files
for every data file committed up to t; catch-up: every instant after t that changes data files
(writes, and other writers' cleans, rollbacks and restores, active or archived by Hudi meanwhile)
is waited for, with a deadline (a write whose writer is not known to be alive is skipped: if it
ever completes, it is unapplied and synced), and each completed one is checked *per partition*
and applied where missing, under the lock; complete, under the lock: re-check instants completed
since, move the partitions to completed, write ``Ti.indexing``.

Any failure or timeout aborts gracefully, under the lock: the plan's partitions leave the
index's state file, their files and the instant's files are deleted, so the table is as if the
build never ran; ``run`` retries with exponential backoff. A process killed midway leaves a
pending plan that the next ``execute`` (or ``run``) resumes. ``drop`` works while writers run.

``sync`` closes any lag of completed partitions, however it arose (another writer's commits,
cleans Hudi archived, an outage): it applies what it can read and rebuilds in place
(:meth:`AsyncIndexer.resync`) what it cannot.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from indexer.plan import IndexPlan, PartitionPlan, is_hudi_plan
from metadata_table.layout import dropped_partitions, expand_index_types, requested_partitions
from metadata_table.partition_writer import (
    DataFile,
    HudiPartitionWriter,
    MigrationResult,
    PartitionBuild,
    PartitionWriter,
    UpkeepResult,
)
from timeline.archiver import ArchiveResult, archive
from timeline.clean import CleanResult, clean
from timeline.config import (
    ARCHIVE_AUTOMATIC,
    CLEAN_AUTOMATIC,
    FILES_WITH_OTHERS,
    LOCAL_BUILD_MAX_FILES,
)
from timeline.errors import (
    BuildCancelledError,
    CatchUpTimeoutError,
    ConfigError,
    CorruptInstantError,
    DuplicateRecordKeyError,
    IndexBuildAbortedError,
    NotParquetError,
    RebuildRequiredError,
    StorageFileNotFoundError,
    TableError,
)
from timeline.failpoints import failpoint
from timeline.footprint import last_services, storage_usage
from timeline.health import QUICK_CHECK_INSTANTS, TimelineProblem, timeline_problems
from timeline.index_state import IndexState
from timeline.instant import (
    WRITE_ACTIONS,
    Action,
    Instant,
    State,
    is_after,
    normalize_timestamp,
    parse_instant_time,
)
from timeline.locks import LockHandle
from timeline.removals import REMOVAL_ACTIONS
from timeline.rollback import clean_failed_writes
from timeline.spark import spark_session, under_spark_submit
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

_TRACEBACK = "Traceback (most recent call last):"


def abort_reason(error: BaseException) -> str:
    """One line naming why a build failed. An error raised in a Spark task arrives carrying the
    task's whole Python traceback (PySpark's ``PythonException``): the reason keeps its last line,
    the error the task raised, so the log, the daemon's request and ``indexer status`` say what
    failed in one line (the whole error is logged at debug)."""
    message = str(error)
    if _TRACEBACK in message:
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        message = lines[-1] if lines else message
    return f"{type(error).__name__}: {message}"


DEFAULT_TIMEOUT_SECONDS = 900.0
ENGINES = ("auto", "local", "spark")
#: a sync rebuilds what it cannot apply, then applies what came after; bounded passes
SYNC_PASSES = 3
#: what makes an instant impossible to apply (its metadata or a data file's footer cannot be
#: read): the partitions it lacks are rebuilt from storage instead
_UNREADABLE = (
    CorruptInstantError,
    StorageFileNotFoundError,
    NotParquetError,
    RebuildRequiredError,
)


@dataclass
class SyncResult:
    """What a sync did: the failed writes it rolled back (their writers dead); each instant
    applied, with its partitions; each partition rebuilt from storage, with why (what applying
    would have needed); the lost partitions among those."""

    applied: dict[str, list[str]] = field(default_factory=dict)
    resynced: dict[str, str] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.applied or self.resynced or self.rolled_back)


@dataclass
class IndexerOptions:
    spark_master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    parallelism: int | None = None
    #: where the build runs: "spark", "local" (this process) or "auto" (:meth:`AsyncIndexer.engine`)
    engine: str = "auto"
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    retries: int = 0
    backoff: float = 2.0
    poll_interval: float = 0.2
    #: called as progress(step, done, total) for "build" (tasks), "catch-up" and "sync"
    #: (instants) and "compact" (file groups)
    progress: Callable[[str, int, int], None] | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            reason = f"unknown build engine {self.engine!r}: use {', '.join(ENGINES)}"
            raise ConfigError("engine", reason)


@dataclass(frozen=True)
class ScheduleResult:
    instant: Instant | None
    scheduled: list[str]
    skipped: dict[str, str]  # partition -> why
    lock_seconds: float
    #: the latest file slices' files the new partitions were laid out for (None: not counted)
    data_files: int | None = None


class AsyncIndexer:
    def __init__(
        self, table: Table, options: IndexerOptions | None = None, spark: Any = None
    ) -> None:
        self.table = table
        self.options = options or IndexerOptions()
        self._spark = spark
        #: the metadata table's files are written through this, and only this
        self.writer = PartitionWriter(table)
        self.stats: dict[str, float] = {
            "catch_up_instants": 0,
            "synced_instants": 0,
            "resyncs": 0,
            "lock_wait_seconds": 0.0,
        }
        #: set by a daemon shutting down: the build stops at its next safe point and aborts;
        #: once completion has started it finishes instead.
        self.cancel = threading.Event()
        self.phase = "idle"

    def _checkpoint(self, phase: str) -> None:
        if self.cancel.is_set():
            raise BuildCancelledError()
        self.phase = phase

    def engine(self, data_files: int) -> str:
        """Where a build over ``data_files`` runs. ``auto`` is Spark when a session was handed in
        or a master named (``--spark-master``, the config file, spark-submit); otherwise without
        Spark for at most ``indexer.build.local.max.files`` data files (no JVM to start, and worker
        processes read the files: at 100,000 files twice as fast as Spark on the same cores; past
        its memory budget the build spills records to local disk, so it does not run out of
        memory on a large table), and Spark beyond."""
        engine = self.options.engine
        if engine != "auto":
            return engine
        if self._spark is not None or self.options.spark_master or under_spark_submit():
            return "spark"
        limit = self.table.config.get(LOCAL_BUILD_MAX_FILES)
        return "local" if data_files <= limit else "spark"

    @property
    def spark(self) -> Any:
        if self._spark is None:
            self._spark = spark_session(self.options.spark_master, self.options.spark_conf)
        return self._spark

    def _lock(self, purpose: str) -> LockHandle:
        started = time.monotonic()
        handle = self.table.lock(purpose)
        self.stats["lock_wait_seconds"] += time.monotonic() - started
        return handle

    # --- schedule --------------------------------------------------------------------------------

    def validate(self, index_types: Sequence[str], columns: Sequence[str]) -> list[str]:
        """The partitions ``index_types`` name (``secondary_index``: one per column), checked:
        known names, columns of the table, a secondary index on a column of a type it takes, and
        with ``record_index`` (a secondary index finds records through it, as in Hudi)."""
        state = self.table.reload_index_state()
        with_files = bool(self.table.config.get(FILES_WITH_OTHERS))
        types = requested_partitions(index_types, columns, state.partitions, with_files=with_files)
        self.writer.check_buildable(types, columns)
        self.table.lock_provider  # noqa: B018 - a misconfigured lock URL fails here, before anything
        return types

    def migrate(self) -> MigrationResult:
        """Move an index an earlier version built in ``.hoodie/metadata`` to its own folder (every
        command that writes the index does this first; nothing happens on other tables)."""
        return self.writer.migrate()

    def schedule(self, index_types: Sequence[str], columns: Sequence[str] = ()) -> ScheduleResult:
        types = self.validate(index_types, columns)
        self.migrate()
        # the table's size new partitions are laid out for, worked out before the lock
        size = self.writer.layout_size(types)
        with self._lock("schedule indexing") as lock:
            started = time.monotonic()
            state = self.table.reload_index_state()
            skipped = {p: "already completed" for p in types if p in state.completed}
            skipped.update({p: "already being built" for p in types if p in state.inflight})
            todo = [p for p in types if p not in skipped]
            chosen = self._columns(state, types, columns)  # columns asked of one built: refused
            if not todo:
                return ScheduleResult(None, [], skipped, time.monotonic() - started)
            timeline = self.table.timeline.load().require_valid()
            last = timeline.last_settled_write()
            upto = last.timestamp if last else self.writer.NOTHING
            newest = timeline.last()
            instant_time = self.table.timeline.generator.next(
                after=newest.timestamp if newest else None
            )
            plans = []
            for partition in todo:
                groups = self.writer.configured_groups(partition, size)
                self.writer.create_partition(partition, groups, lock)
                cols = chosen if self.writer.takes_columns(partition) else ()
                plans.append(PartitionPlan(partition, upto, cols, groups))
            plan = IndexPlan(tuple(plans))
            failpoint("schedule.before_plan")
            lock.ensure_valid()
            requested = self.table.timeline.create_requested(
                Action.INDEXING, plan.to_bytes(), timestamp=instant_time
            )
            failpoint("schedule.after_plan")
            self._mark_inflight(lock, plan)
            seconds = time.monotonic() - started
        logger.info(
            "scheduled %s for %s up to %s (lock held %.3fs)",
            requested,
            ",".join(todo),
            upto,
            seconds,
        )
        return ScheduleResult(
            requested, todo, skipped, seconds, size.data_files if size is not None else None
        )

    def _columns(
        self, state: IndexState, asked: Sequence[str], columns: Sequence[str]
    ) -> tuple[str, ...]:
        """The columns the partitions that take columns (column_stats, partition_stats) index:
        one choice for all of them, so a new one takes the choice of those that exist; asking
        one that exists (or is being built) for a column it does not index is refused, saying
        how to rebuild it, rather than answered "nothing to build"."""
        existing = [p for p in state.partitions if self.writer.takes_columns(p)]
        if not existing or not any(self.writer.takes_columns(p) for p in asked):
            return tuple(columns)
        current = state.column_stats_columns
        missing = [c for c in columns if current and c not in current]
        if missing:
            names = ",".join(existing)
            raise ConfigError(
                "--columns",
                f"{names} already index{'es' if len(existing) == 1 else ''} "
                f"{', '.join(current)}, not {', '.join(missing)} (every index of columns "
                f"indexes the same ones): to index them too, `indexer drop "
                f"{self.table.base_uri} --index-types {names}`, then build again with "
                f"--columns {','.join(dict.fromkeys([*current, *missing]))}",
            )
        return current

    def _mark_inflight(self, lock: LockHandle, plan: IndexPlan) -> None:
        """The plan's partitions become inflight; the columns of those that take columns are
        recorded for writers (all of a plan's such partitions index the same columns)."""
        with_columns = [p for p in plan.partitions if self.writer.takes_columns(p.partition)]

        def change(state: IndexState) -> IndexState:
            updated = state.with_partitions(add_inflight=plan.names)
            if with_columns:
                updated = replace(updated, column_stats_columns=tuple(with_columns[0].columns))
            return updated

        self.table.update_index_state(lock, change)

    # --- execute ---------------------------------------------------------------------------------

    def pending(self) -> list[Instant]:
        return [
            i
            for i in self.table.timeline.load().with_actions(Action.INDEXING).pending()
            if self._is_ours(i)
        ]

    def _is_ours(self, instant: Instant) -> bool:
        """Whether an indexing instant is one of ours, not Apache Hudi's own (HoodieIndexer's),
        which this indexer never executes, aborts or reads as a plan."""
        try:
            content = self.table.timeline.read_content(instant.with_state(State.REQUESTED))
        except StorageFileNotFoundError:
            return True  # no plan to tell by: treated as ours, and reported unreadable if so
        if is_hudi_plan(content):
            logger.debug("%s is Apache Hudi's own indexing instant: left to Hudi", instant)
            return False
        return True

    def plan_of(self, instant: Instant) -> IndexPlan:
        requested = instant.with_state(State.REQUESTED)
        path = self.table.storage.uri(self.table.timeline.path(requested))
        return IndexPlan.from_bytes(self.table.timeline.read_content(requested), path)

    def execute(self, instant_time: str | None = None) -> Instant:
        """Execute (or resume) a pending plan: the given one, else the earliest pending."""
        self.migrate()
        self.table.timeline.load().require_valid()
        pending = self.pending()
        if instant_time is not None:
            pending = [i for i in pending if i.timestamp == instant_time]
        if not pending:
            which = f"indexing instant {instant_time}" if instant_time else "indexing plan"
            raise TableError(f"no pending {which} on {self.table.base_uri}")
        instant = pending[0]
        plan = self.plan_of(instant)
        deadline = time.monotonic() + self.options.timeout
        try:
            return self._execute(instant, plan, deadline)
        except BaseException as e:
            reason = abort_reason(e)
            logger.debug("build %s failed", instant, exc_info=True)
            # a key in two file groups is the data's fault, not the build's: not retried (a
            # Spark task's error arrives as Spark's, naming it)
            duplicated = isinstance(e, DuplicateRecordKeyError) or (
                DuplicateRecordKeyError.__name__ in str(e)
            )
            try:
                self.abort(instant, reason, quiet=duplicated)
            except BaseException as abort_error:  # a resumable state is left; say so
                logger.error(
                    "abort of %s failed (%s); the next execute resumes it", instant, abort_error
                )
                raise
            found = self.writer.duplicate_keys_error() if duplicated else None
            if found is not None:
                raise found from e
            raise IndexBuildAbortedError(instant, reason) from e

    def _execute(self, instant: Instant, plan: IndexPlan, deadline: float) -> Instant:
        """The protocol of a build, for either format: under the lock, resume what completed
        (:meth:`_resume`) or start; the base files (:meth:`_build`, no lock); the catch-up; under
        the lock, the last instants applied and the partitions published (:meth:`_publish`)."""
        with self._lock(f"start indexing {instant.timestamp}") as lock:
            done = self._resume(lock, instant, plan)
            if done is not None:
                return done
            if instant.is_requested:
                instant = self.table.timeline.transition_to_inflight(instant)
        failpoint("execute.after_inflight")
        self._checkpoint("building")
        self._build(instant, plan)
        failpoint("execute.after_build")
        self._checkpoint("catching up")
        caught = self._catch_up(instant, plan, deadline)
        failpoint("complete.before")
        self._checkpoint("completing")
        with self._lock(f"complete indexing {instant.timestamp}") as lock:
            current = self.table.timeline.load().get(instant.timestamp, Action.INDEXING)
            if current is None or current.is_completed:
                raise TableError(f"{instant} was aborted or dropped while it ran")
            self._check_unchanged(instant, plan)
            caught = max(
                [caught, *self._apply_missing(lock, plan, caught_since=caught)],
                key=normalize_timestamp,
            )
            done = self._publish(lock, instant, plan, caught)
        self._finished(instant, plan)
        return done

    def _resume(self, lock: LockHandle, instant: Instant, plan: IndexPlan) -> Instant | None:
        """At the start, under the lock: the instant completed when its partitions already are
        (a crash after they moved), else None; the plan's partitions marked inflight."""
        state = self.table.reload_index_state()
        if all(p in state.completed for p in plan.names):
            return self._complete_instant(lock, instant, plan)  # crashed after the move
        self._mark_inflight(lock, plan)
        return None

    def _check_unchanged(self, instant: Instant, plan: IndexPlan) -> None:
        """Before publishing: fail if the plan's partitions were dropped meanwhile."""
        state = self.table.reload_index_state()
        dropped = [p for p in plan.names if p not in state.partitions]
        if dropped:
            raise TableError(f"partitions {dropped} were dropped while {instant} ran")

    def _publish(self, lock: LockHandle, instant: Instant, plan: IndexPlan, caught: str) -> Instant:
        """Under the lock: the partitions completed, then the instant."""
        self.table.update_metadata_partitions(lock, complete=plan.names)
        failpoint("complete.after_partitions")
        return self._complete_instant(lock, instant, plan.with_index_upto(caught))

    def _finished(self, instant: Instant, plan: IndexPlan) -> None:
        self.writer.delete_markers(instant.timestamp)

    def _complete_instant(self, lock: LockHandle, instant: Instant, plan: IndexPlan) -> Instant:
        if instant.is_requested:
            instant = self.table.timeline.transition_to_inflight(instant)
        lock.ensure_valid()
        done = self.table.timeline.complete(instant, plan.to_json())
        logger.info("index build %s completed: %s", done, ",".join(plan.names))
        return done

    def _build(self, instant: Instant, plan: IndexPlan) -> None:
        """The base files of the plan's partitions up to its t (what a failed attempt left
        deleted first)."""
        self.writer.discard_failed_builds(plan.names, marker_instant=instant.timestamp)
        state = self.table.reload_index_state()
        builds = [
            self.writer.begin_build(
                p.partition, p.index_upto, p.file_groups, p.columns, state.layout(p.partition)
            )
            for p in plan.partitions
        ]
        failpoint("build.mid")
        files = self.writer.visible_files(self.table.timeline.load(), plan.index_upto, state)
        sizes = self._run_builds(files, builds, instant.timestamp, "build")
        for build in builds:
            self.writer.complete_build(build, sizes[build.partition])

    def _run_builds(
        self, files: list[DataFile], builds: list[PartitionBuild], marker_instant: str, step: str
    ) -> dict[str, dict[str, int]]:
        """Base files of ``builds`` over ``files``, without Spark or on Spark
        (:meth:`engine`), behind markers of ``marker_instant``; their sizes per partition."""
        spark = None if self.engine(len(files)) == "local" else self.spark
        return self.writer.run_builds(
            files, builds, marker_instant, self._reporter(step), spark, self.options.parallelism
        )

    def _reporter(self, step: str) -> Callable[[int, int], None] | None:
        report = self.options.progress
        if report is None:
            return None
        return lambda done, total: report(step, done, total)

    def _report(self, step: str, done: int, total: int) -> None:
        if self.options.progress is not None:
            self.options.progress(step, done, total)

    # --- catch-up --------------------------------------------------------------------------------

    def _changes_after(self, t: str, timeline: Timeline | None = None) -> list[Instant]:
        """Instants after ``t`` that change data files (writes, cleans, rollbacks, restores),
        from the active timeline and from Hudi's archive (Hudi may archive them while a build
        runs), oldest first."""
        timeline = timeline if timeline is not None else self.table.timeline.load()
        archived = [a.instant for a in self.table.archive().instants(newer_than=t)]
        found: dict[str, Instant] = {}
        for i in [*timeline, *archived]:  # active first: an instant in both is still active
            changes = i.action in WRITE_ACTIONS or i.action in REMOVAL_ACTIONS
            if changes and is_after(i.timestamp, t) and i.timestamp not in found:
                found[i.timestamp] = i
        return sorted(found.values())

    def _catch_up(self, instant: Instant, plan: IndexPlan, deadline: float) -> str:
        """Wait for the instants after t that exist now (and pending cleans/rollbacks before t),
        and make sure every completed one reached every partition: commits and the cleans,
        rollbacks and restores of other writers, whether still active or archived by Hudi
        meanwhile. Returns the newest instant caught up."""
        t = plan.index_upto
        timeline = self.table.timeline.load()
        watch = {i.timestamp for i in self._changes_after(t, timeline)}
        watch |= {i.timestamp for i in timeline.pending() if i.action in REMOVAL_ACTIONS}
        done: set[str] = set()
        newest = t
        while True:
            timeline = self.table.timeline.load()
            archived: dict[str, Instant] | None = None
            waiting = []
            for ts in sorted(watch - done, key=normalize_timestamp):
                current = timeline.get(ts)
                if current is None:  # archived meanwhile, or rolled back
                    if archived is None:
                        archived = {i.timestamp: i for i in self._changes_after(t, timeline)}
                    current = archived.get(ts)
                if current is None:
                    done.add(ts)  # rolled back
                elif current.is_completed:
                    with self._lock(f"catch up {ts} for {instant.timestamp}") as lock:
                        self._ensure_applied(lock, plan, current)
                    failpoint("catchup.mid")
                    done.add(ts)
                    self.stats["catch_up_instants"] += 1
                    newest = max(newest, ts, key=normalize_timestamp)
                elif current.action not in REMOVAL_ACTIONS and self.table.heartbeat_expired(ts):
                    # not known to be alive: if it ever completes, it is unapplied and synced
                    done.add(ts)
                else:
                    waiting.append(ts)
            self._report("catch-up", len(done), len(watch))
            if not waiting:
                return newest
            if self.cancel.is_set():
                raise BuildCancelledError()
            if time.monotonic() > deadline:
                raise CatchUpTimeoutError(waiting, self.options.timeout)
            time.sleep(self.options.poll_interval)

    def _apply_missing(self, lock: LockHandle, plan: IndexPlan, caught_since: str) -> list[str]:
        """Under the completion lock: instants completed since the catch-up's last look."""
        applied = []
        for current in self._changes_after(
            max(plan.index_upto, caught_since, key=normalize_timestamp)
        ):
            if current.is_completed:
                self._ensure_applied(lock, plan, current)
                applied.append(current.timestamp)
        return applied

    def _ensure_applied(self, lock: LockHandle, plan: IndexPlan, instant: Instant) -> None:
        """Make sure completed instant ``instant`` reached every partition of the plan, per
        partition (Hudi checked only that a deltacommit with the timestamp existed)."""
        logged = self.writer.logged_partitions(instant.timestamp)
        missing = [p for p in plan.names if p not in logged]
        if missing:
            self.writer.apply(lock, instant, missing, self.table.reload_index_state())

    # --- sync ------------------------------------------------------------------------------------

    def sync(self) -> SyncResult:
        """Bring every completed partition up to date with the table, whatever the lag: apply,
        each under the table lock, the completed instants it does not reflect (commits and
        table services that did not go through this kernel: Apache Hudi's own writer and
        cleaner, hudi-rs, a backfill tool), read from the active timeline or from Hudi's
        archive. A partition that cannot be brought up to date that way (an instant that
        neither holds, a data file whose footer cannot be read, a lag that cannot be known, or
        its files lost) is rebuilt from storage at one snapshot (:meth:`resync`), and the
        instants after that snapshot are applied. Until then readers treat those instants'
        files as not pruned, or do not use a lost partition. Never stops at a read error.

        First, what crashed writes of ours left: every write whose writer is provably dead is
        rolled back (:meth:`clean_failed_writes`, as ``indexer-table clean`` and the daemon do),
        its updates to our index and to Apache Hudi's metadata table taken out with it."""
        self.migrate()
        result = SyncResult()
        result.rolled_back = [i.timestamp for i in self.clean_failed_writes()]
        # rebuilds and compactions of completed partitions that crashed midway
        self.writer.discard_failed_builds(self.table.reload_index_state().completed, only_dead=True)
        for _ in range(SYNC_PASSES):
            completed = self.table.reload_index_state().completed
            behind, lost = self.writer.lag(completed)
            if lost:
                result.lost.extend(p for p in lost if p not in result.lost)
                result.resynced.update(self.resync(lost))
                continue
            if not behind:
                break
            failed: dict[str, str] = {}
            for number, (instant, partitions) in enumerate(behind.values()):
                self._report("sync", number, len(behind))
                todo = [p for p in partitions if p not in failed]
                if todo:
                    self._apply_or_fail(instant, todo, result, failed)
            self._report("sync", len(behind), len(behind))
            if not failed:
                break
            result.resynced.update(self.resync(failed))
        self.stats["synced_instants"] += len(result.applied)
        self.stats["resyncs"] += len(result.resynced)
        return result

    def _apply_or_fail(
        self, instant: Instant, partitions: list[str], result: SyncResult, failed: dict[str, str]
    ) -> None:
        """Apply one instant under the lock; if what it needs cannot be read, say what and mark
        its partitions for a rebuild."""
        try:
            with self._lock(f"sync {instant.timestamp}") as lock:
                state = self.table.reload_index_state()
                todo = [p for p in partitions if p in state.completed]
                while todo:
                    try:
                        self.writer.apply(lock, instant, todo, state)
                        break
                    except RebuildRequiredError as e:  # that partition only: the others apply
                        reason = f"{instant.timestamp}.{instant.action}: {e}"
                        logger.warning("sync: %s; rebuilding it from storage", reason)
                        failed[e.partition] = reason
                        todo = [p for p in todo if p != e.partition]
        except _UNREADABLE as e:
            reason = f"{instant.timestamp}.{instant.action} could not be applied: {e}"
            logger.warning("sync: %s; rebuilding %s from storage", reason, ",".join(partitions))
            failed.update(dict.fromkeys(partitions, reason))
            return
        if todo:
            result.applied[instant.timestamp] = todo
            logger.info("sync applied %s to %s", instant.timestamp, ",".join(todo))

    def resync(self, partitions: Mapping[str, str]) -> dict[str, str]:
        """Rebuild completed ``partitions`` (partition -> why) in place, from storage, at one
        snapshot: t = the last settled write, under the lock for milliseconds; the base files of
        every data file committed up to t built without the lock (without Spark or on Spark,
        as a build); completed under the lock. A lost partition gets its file groups again
        first, so writers keep writing to it meanwhile; readers keep using the old base files
        (or, for a lost one, the data) until the new ones complete, and the instants after t
        are then applied by :meth:`sync`. Returns the partitions rebuilt, with why."""
        names = sorted(partitions)
        for name in names:
            logger.warning("resync %s of %s: %s", name, self.table.base_uri, partitions[name])
        builds: list[PartitionBuild] = []
        try:
            with self._lock("resync index") as lock:
                state = self.table.reload_index_state()
                names = [p for p in names if p in state.completed]
                if not names:
                    return {}
                timeline = self.table.timeline.load().require_valid()
                last = timeline.last_settled_write()
                upto = last.timestamp if last else self.writer.NOTHING
                for name in names:
                    groups = self.writer.ensure_file_groups(name, lock)
                    columns = state.column_stats_columns if self.writer.takes_columns(name) else ()
                    layout = state.layout(name)
                    builds.append(self.writer.begin_build(name, upto, groups, columns, layout))
                failpoint("resync.mid")
            files = self.writer.visible_files(timeline, upto, state, use_index=False)
            sizes = self._run_builds(files, builds, builds[0].instant, "resync")
            with self._lock("complete resync") as lock:
                state = self.table.reload_index_state()
                dropped = [b for b in builds if b.partition not in state.completed]
                for build in builds:
                    if build not in dropped:
                        self.writer.complete_build(build, sizes[build.partition], lock)
        except BaseException:
            if builds:
                self.writer.abandon(builds, builds[0].instant)
            raise
        if dropped:  # dropped while it was rebuilt
            self.writer.abandon(dropped, builds[0].instant)
            names = [n for n in names if n not in {b.partition for b in dropped}]
        self.writer.delete_markers(builds[0].instant)
        logger.info("resynced %s of %s up to %s", ",".join(names), self.table.base_uri, upto)
        return {name: partitions[name] for name in names}

    def clean_failed_writes(self) -> list[Instant]:
        """Roll back the pending writes whose writer is provably dead (see
        :func:`timeline.rollback.clean_failed_writes`), each with its index update written in
        its critical section, so a rollback never leaves the index behind."""
        return clean_failed_writes(self.table, self.writer.apply_removal)

    def table_services(self) -> tuple[list[CleanResult], ArchiveResult | None]:
        """Clean old file versions (when ``hoodie.clean.automatic`` and its trigger say so) and
        archive the oldest instants (``hoodie.archive.automatic``), as writers do after their
        commits: what the daemon runs for tables whose writers do not (Apache Hudi's with its
        services off, or ours with them off). Each clean's index update is written in its
        critical section (and, when this process keeps Apache Hudi's own metadata table, that
        table's too); archival stops at the oldest instant the index has not applied (and at
        that metadata table's newest compaction). That metadata table's own compaction and
        clean are its writers' (ours run them after their commits, Hudi's too)."""
        config = self.table.config
        cleaned = (
            clean(self.table, self.writer.apply_removal) if config.get(CLEAN_AUTOMATIC) else []
        )
        archived = None
        if config.get(ARCHIVE_AUTOMATIC):
            archived = archive(self.table, unapplied=self.writer.oldest_unapplied)
        return cleaned, archived

    def lost(self) -> dict[str, str]:
        """Completed partitions whose files vanished or were replaced, with the reason."""
        return self.writer.lost(self.table.reload_index_state().completed)

    def unapplied(self) -> dict[str, tuple[Instant, list[str]]]:
        """Completed data instants that completed partitions do not reflect, oldest first, each
        with those partitions."""
        return self.writer.unapplied(self.table.reload_index_state().completed)

    # --- abort, drop, run ------------------------------------------------------------------------

    def abort(self, instant: Instant, reason: str, quiet: bool = False) -> None:
        """Undo a pending build: partitions out of the state file, its files and instant gone
        (``quiet``: logged at info, for a cause the caller reports itself)."""
        logger.log(logging.INFO if quiet else logging.WARNING, "aborting %s: %s", instant, reason)
        plan = self._readable_plan(instant)
        with self._lock(f"abort indexing {instant.timestamp}") as lock:
            current = self.table.timeline.load().get(instant.timestamp, Action.INDEXING)
            if current is None or current.is_completed:
                return
            state = self.table.reload_index_state()
            names = plan.names if plan is not None else []
            doomed = [p for p in names if p not in state.completed]
            self.table.update_metadata_partitions(lock, remove=doomed)
            failpoint("abort.mid")
            self.writer.drop(doomed, marker_instant=instant.timestamp)
            lock.ensure_valid()
            self.table.timeline.delete_pending(current)

    def _readable_plan(self, instant: Instant) -> IndexPlan | None:
        """The plan, or None when its file cannot be read (such a plan can never execute; it is
        aborted by deleting the instant, and no partition is touched)."""
        try:
            return self.plan_of(instant)
        except CorruptInstantError as e:
            logger.error("%s", e)
            return None

    def drop(self, index_types: Sequence[str]) -> list[str]:
        """Remove indexes while writers run: pending plans for them are aborted; writers that
        commit afterwards do not write to them. ``record_index`` is dropped only with the
        secondary indexes that need it. Returns the partitions dropped."""
        self.migrate()
        state = self.table.reload_index_state()
        types = dropped_partitions(index_types, state.partitions)
        present = [p for p in types if p in state.partitions]
        for pending in self.pending():
            plan = self._readable_plan(pending)
            if plan is None or set(plan.names) & set(types):
                self.abort(pending, f"dropped: {', '.join(types)}" if plan else "unreadable plan")
        with self._lock("drop index") as lock:
            self.table.update_metadata_partitions(lock, remove=types)
            self.writer.drop(types)
        logger.info("dropped %s", ",".join(present) or "nothing")
        return present

    def compact(
        self, partitions: Sequence[str] | None = None
    ) -> tuple[dict[str, Instant], list[str]]:
        """Merge the log files of each completed partition (default: all of them) into new base
        files. Returns the compaction instant of each partition compacted, and the partitions
        that had nothing to merge or must be synced first."""
        self.migrate()
        completed = self.table.reload_index_state().completed
        names = (
            expand_index_types(partitions, existing=completed) if partitions else list(completed)
        )
        todo = [p for p in names if p in completed]
        groups = {p: self.writer.file_group_count(p) for p in todo}
        total, done = sum(groups.values()), 0
        compacted: dict[str, Instant] = {}
        for partition in todo:

            def report(written: int, _groups: int, offset: int = done) -> None:
                self._report("compact", offset + written, total)

            instant = self.writer.compact(partition, report)
            done += groups[partition]
            self._report("compact", done, total)
            if instant is not None:
                compacted[partition] = instant
                logger.info("compacted %s at %s", partition, instant.timestamp)
        return compacted, [p for p in names if p not in compacted]

    def upkeep(self) -> UpkeepResult:
        """The index's own upkeep, as writers run it after their commits: compaction of the
        partitions due by count (``hoodie.metadata.compact.max.delta.commits``), then the
        deletion of what compactions replaced once no reader can need it."""
        self.migrate()
        return self.writer.upkeep()

    def footprint(self) -> dict[str, Any]:
        """The table's storage by kind (data, index, timeline, archive, ...: files and bytes)
        and what its table services last did (clean, archival, the index's compaction)."""
        services = last_services(self.table)
        services["compaction"] = self.writer.last_compaction()
        usage = storage_usage(self.table)
        return {"storage": {k: u.to_json() for k, u in usage.items()}, "services": services}

    def clean_index(self) -> UpkeepResult:
        """Delete the index files compactions replaced that no reader can need (after
        :meth:`compact`), and trim the index's own timeline."""
        return self.writer.clean_index()

    def run(self, index_types: Sequence[str], columns: Sequence[str] = ()) -> Instant | None:
        """Schedule and execute, retrying an aborted build up to ``options.retries`` times with
        exponential backoff. Resumes a pending plan for these partitions first."""
        attempt = 0
        names = expand_index_types(index_types, columns)
        while True:
            try:
                resumable = [i for i in self.pending() if set(self.plan_of(i).names) & set(names)]
                if resumable:
                    return self.execute(resumable[0].timestamp)
                scheduled = self.schedule(index_types, columns)
                if scheduled.instant is None:
                    return None
                files = scheduled.data_files
                if files is not None and self.engine(files) == "local":
                    # the build's worker processes start while it lists the table
                    self.writer.start_workers(files)
                return self.execute(scheduled.instant.timestamp)
            except IndexBuildAbortedError as e:
                if attempt >= self.options.retries:
                    raise
                attempt += 1
                delay = self.options.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                logger.warning(
                    "build aborted (%s); retry %d of %d in %.1fs",
                    e.reason,
                    attempt,
                    self.options.retries,
                    delay,
                )
                time.sleep(delay)

    # --- status ----------------------------------------------------------------------------------

    def _lag(
        self,
        partitions: dict[str, str],
        behind: dict[str, tuple[Instant, list[str]]],
        described: dict[str, dict[str, Any]],
        index_state: IndexState,
    ) -> dict[str, dict[str, Any]]:
        """Per partition: its state, the newest data instant it reflects, the completed data
        instants it does not reflect yet (count, and age in seconds of the oldest, from its
        completion time), its size on storage and its layout."""
        now = time.time()
        out = {}
        for partition, state in sorted(partitions.items()):
            missing = [i for i, ps in behind.values() if partition in ps]
            oldest = None
            if missing:
                oldest = round(now - self._completed_at(missing[0]), 1)
            found = described[partition]
            out[partition] = {
                "state": state,
                "reflects_upto": found["reflects_upto"],
                "unapplied_instants": len(missing),
                "oldest_unapplied_age_seconds": oldest,
                "files": found["files"],
                "bytes": found["bytes"],
                "layout": index_state.layout(partition),
            }
        return out

    def _completed_at(self, instant: Instant) -> float:
        """When a completed data instant completed (its start time when that is unknown, as
        for an archived one), in seconds since the epoch."""
        try:
            completed = self.table.timeline.completion_time(instant)
        except TableError:
            completed = instant.timestamp
        return parse_instant_time(completed).timestamp()

    def problems(self, newest: int | None = QUICK_CHECK_INSTANTS) -> list[TimelineProblem]:
        """What is wrong in the table's timeline and index state file (:mod:`timeline.health`),
        reading the newest ``newest`` completed instants (None: all of them)."""
        return timeline_problems(self.table, newest)

    def status(self) -> dict[str, Any]:
        state = self.table.reload_index_state()
        survey = self.writer.survey(state)
        behind, lost = survey.unapplied, survey.lost
        partitions = {p: "lost" if p in lost else "completed" for p in state.completed}
        partitions.update({p: "inflight" for p in state.inflight})
        indexing: list[dict[str, Any]] = []
        hudi = HudiPartitionWriter(self.table)
        for instant in self.table.timeline.load().with_actions(Action.INDEXING):
            claim = hudi.claimed(instant.timestamp) if not instant.is_completed else None
            if claim is not None:
                indexing.append(
                    {
                        "timestamp": instant.timestamp,
                        "state": instant.state.value,
                        "partitions": list(claim.partitions),
                        "index_upto_instant": claim.upto,
                        "owner": "async-indexer (format hudi)",
                    }
                )
                continue
            if not self._is_ours(instant):
                indexing.append(
                    {
                        "timestamp": instant.timestamp,
                        "state": instant.state.value,
                        "partitions": [],
                        "index_upto_instant": None,
                        "owner": "apache-hudi",
                    }
                )
                continue
            try:
                plan = (
                    IndexPlan.from_json(
                        self.table.timeline.read_json(instant), self.table.timeline.path(instant)
                    )
                    if instant.is_completed
                    else self.plan_of(instant)
                )
                names, upto = plan.names, plan.index_upto
            except TableError as e:
                names, upto = [], f"unreadable plan: {e}"
            indexing.append(
                {
                    "timestamp": instant.timestamp,
                    "state": instant.state.value,
                    "partitions": names,
                    "index_upto_instant": upto,
                    "owner": "async-indexer",
                }
            )
        return {
            "table": self.table.base_uri,
            "partitions": partitions,
            "columns": survey.columns,
            "lag": self._lag(partitions, behind, survey.described, state),
            "indexing": indexing,
            "legacy_index": self.writer.has_legacy_index(),
            "hudi_metadata_table": self.writer.hudi_status(),
            "hudi_deleted_by_writers": hudi.deleted_by_writers(),
            "lost": lost,
            "unapplied": {
                p: [t for t, (_, ps) in behind.items() if p in ps]
                for p in state.completed
                if any(p in ps for _, ps in behind.values())
            },
        }
