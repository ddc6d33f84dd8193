"""Cleaning old file versions: Apache Hudi's ``clean`` action, as Hudi 0.15 plans and writes it.

Every update of a file group writes a new file slice (a new base file, or log files after one)
and leaves the old slice on storage, where only time travel and snapshots opened before the
update still read it. A clean deletes the slices no reader can need any more, by one of Hudi's
policies (``hoodie.cleaner.policy``):

* ``KEEP_LATEST_COMMITS`` (the default): an *earliest commit to retain* E is the
  ``hoodie.cleaner.commits.retained``-th newest completed write; a file group keeps every slice
  written at or after E and the newest slice before it (the one a query at E reads);
* ``KEEP_LATEST_BY_HOURS``: the same, E being the first completed write of the last
  ``hoodie.cleaner.hours.retained`` hours;
* ``KEEP_LATEST_FILE_VERSIONS``: each file group keeps its ``hoodie.cleaner.fileversions.retained``
  newest slices.

Whatever the policy, nothing is deleted that a pending write, compaction or clustering, a
savepoint, or a snapshot opened within ``indexer.clean.grace.seconds`` can still read: a *guard*
G is the newest completed write that is both older than the earliest pending write and completed
before the grace period, and every slice at or after G, and the newest one before it, stays.
File groups a completed replacecommit replaced before E (or G) are deleted whole. The latest
slice of a file group is never deleted.

A clean is three instant files, as Hudi writes them: ``T.clean.requested`` and
``T.clean.inflight`` hold the plan (Avro ``HoodieCleanerPlan``: absolute paths per partition),
``T.clean`` the result (Avro ``HoodieCleanMetadata``), so Hudi's cleaner, archiver and
incremental reads, and hudi-rs, read ours as their own. Scheduling takes the table lock briefly
(one pending clean at a time); the deletes run outside it; the index's update and the completed
instant are written under it, as a commit's are, so a clean is never an instant the index has
not applied. Every step is idempotent: an interrupted clean is finished from its plan by the
next :func:`clean` (a file already gone counts as deleted). A clean Apache Hudi scheduled is
finished here only once abandoned (``indexer.clean.adopt.seconds``): Hudi's writer carries out its
own clean right after planning it, without our lock, and fails if another process moves it on.

Planning is incremental by default (``hoodie.cleaner.incremental.mode``): only partitions
written since the last clean's earliest retained commit are listed, so a clean after every
commit lists the partitions that commit's predecessors wrote, not the table. An empty plan
writes no instant unless it had to list the whole table (no clean yet to count from, or the
commits since the last one archived): that one is completed as a clean that deletes nothing, so
that the next plan is incremental. Hudi 0.15 writes no empty clean, and so lists a table that
only ever receives new files whole at every commit (apache/hudi#6953, HUDI-5053).
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from timeline.commit_metadata import CommitMetadata
from timeline.config import (
    CLEAN_ADOPT_SECONDS,
    CLEAN_GRACE_SECONDS,
    CLEAN_MAX_COMMITS,
    CLEANER_COMMITS_RETAINED,
    CLEANER_FILE_VERSIONS_RETAINED,
    CLEANER_HOURS_RETAINED,
    CLEANER_INCREMENTAL,
    CLEANER_POLICY,
    Config,
)
from timeline.errors import CorruptInstantError, InstantAlreadyExistsError
from timeline.fs_view import file_id_of, list_data_files, list_partitions, slice_instant
from timeline.hudi_avro import avro_file
from timeline.hudi_metadata import hudi_metadata_table_present, keeps_hudi_metadata_table
from timeline.instant import Action, Instant, State, format_instant_time
from timeline.instant import normalize_timestamp as _norm
from timeline.removals import AVRO_MAGIC, Removal, RemovalHook, read_avro_records
from timeline.storage import FileInfo, Storage
from timeline.table import Table
from timeline.timeline import CommittedWrites, Timeline

logger = logging.getLogger(__name__)

#: Hudi 0.15's clean plan and clean metadata versions (``CleanPlanner.LATEST_CLEAN_PLAN_VERSION``,
#: ``CleanerUtils.LATEST_CLEAN_METADATA_VERSION``)
PLAN_VERSION = 2
METADATA_VERSION = 2

_BY_COMMITS = ("KEEP_LATEST_COMMITS", "KEEP_LATEST_BY_HOURS")

#: the key of a clean plan's ``extraMetadata`` naming the engine that scheduled it; a plan
#: without it is another engine's (Apache Hudi writes none)
SCHEDULER_KEY = "async-indexer.scheduler"
SCHEDULER = "async-indexer"


@dataclass(frozen=True)
class CleanPolicy:
    """What a clean keeps: Hudi's policy and its retention, and the readers' grace period."""

    name: str = CLEANER_POLICY.default
    commits_retained: int = CLEANER_COMMITS_RETAINED.default
    versions_retained: int = CLEANER_FILE_VERSIONS_RETAINED.default
    hours_retained: int = CLEANER_HOURS_RETAINED.default
    grace_seconds: float = CLEAN_GRACE_SECONDS.default
    incremental: bool = CLEANER_INCREMENTAL.default
    max_commits: int = CLEAN_MAX_COMMITS.default

    @classmethod
    def from_config(cls, config: Config) -> CleanPolicy:
        return cls(
            name=config.get(CLEANER_POLICY),
            commits_retained=config.get(CLEANER_COMMITS_RETAINED),
            versions_retained=config.get(CLEANER_FILE_VERSIONS_RETAINED),
            hours_retained=config.get(CLEANER_HOURS_RETAINED),
            grace_seconds=config.get(CLEAN_GRACE_SECONDS),
            incremental=config.get(CLEANER_INCREMENTAL),
            max_commits=config.get(CLEAN_MAX_COMMITS),
        )

    def describe(self) -> str:
        kept = {
            "KEEP_LATEST_COMMITS": f"{CLEANER_COMMITS_RETAINED.key}={self.commits_retained}",
            "KEEP_LATEST_FILE_VERSIONS": (
                f"{CLEANER_FILE_VERSIONS_RETAINED.key}={self.versions_retained}"
            ),
            "KEEP_LATEST_BY_HOURS": f"{CLEANER_HOURS_RETAINED.key}={self.hours_retained}",
        }[self.name]
        return f"{self.name} ({kept}, {CLEAN_GRACE_SECONDS.key}={self.grace_seconds:g})"


@dataclass(frozen=True)
class CleanPlan:
    """The files (paths relative to the base path) one clean deletes, per partition path."""

    policy: str
    #: the earliest commit a query can still read at (None: the policy keeps versions by count)
    earliest_to_retain: Instant | None
    #: the newest completed write when the plan was made (the next trigger counts from it)
    last_completed_commit: str
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: the engine that scheduled the plan ("" for another engine's, e.g. Apache Hudi's)
    scheduler: str = SCHEDULER
    #: made from a listing of every partition where an incremental plan was asked for (no clean
    #: to count from yet, or the commits since it archived): worth recording even when empty
    listed_table: bool = field(default=False, compare=False)

    @property
    def is_ours(self) -> bool:
        return self.scheduler == SCHEDULER

    def __bool__(self) -> bool:
        return any(self.files.values())

    @property
    def paths(self) -> list[str]:
        return [p for partition in sorted(self.files) for p in self.files[partition]]

    def to_bytes(self, storage: Storage) -> bytes:
        """Hudi's ``HoodieCleanerPlan`` (version 2: absolute paths per partition)."""
        earliest = self.earliest_to_retain
        record: dict[str, Any] = {
            "earliestInstantToRetain": None
            if earliest is None
            else {
                "timestamp": earliest.timestamp,
                "action": earliest.action.value,
                "state": earliest.state.name,
            },
            "lastCompletedCommitTimestamp": self.last_completed_commit,
            "policy": self.policy,
            "filesToBeDeletedPerPartition": {},
            "version": PLAN_VERSION,
            "filePathsToBeDeletedPerPartition": {
                partition: [
                    {"filePath": storage.uri(path), "isBootstrapBaseFile": False} for path in paths
                ]
                for partition, paths in sorted(self.files.items())
            },
            "partitionsToBeDeleted": [],
            "extraMetadata": {SCHEDULER_KEY: self.scheduler} if self.scheduler else None,
        }
        return avro_file("clean_plan", record)

    @classmethod
    def from_bytes(cls, data: bytes, path: str, storage: Storage) -> CleanPlan:
        """From a clean plan file (ours or Apache Hudi's, version 1 or 2)."""
        try:
            if not data.startswith(AVRO_MAGIC):
                raise ValueError("not an Avro file")
            (record,) = read_avro_records(data)
            root = storage.uri("").rstrip("/") + "/"
            files: dict[str, tuple[str, ...]] = {}
            for partition, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items():
                files[partition] = tuple(
                    _relative(str(i["filePath"]), root) for i in infos if i.get("filePath")
                )
            for partition, names in (record.get("filesToBeDeletedPerPartition") or {}).items():
                # version 1 named files within their partition
                files.setdefault(partition, tuple(posixpath.join(partition, n) for n in names))
            earliest = record.get("earliestInstantToRetain")
            kept = None
            if earliest:
                kept = Instant(
                    earliest["timestamp"], Action(earliest["action"]), State[earliest["state"]]
                )
            return cls(
                str(record.get("policy") or ""),
                kept,
                str(record.get("lastCompletedCommitTimestamp") or ""),
                files,
                str((record.get("extraMetadata") or {}).get(SCHEDULER_KEY) or ""),
            )
        except Exception as e:  # fastavro raises many types for bad content
            raise CorruptInstantError(path, f"not a valid clean plan ({e})") from e

    def removal(self, instant: Instant) -> Removal:
        """What this clean deletes from the data table, per partition."""
        deleted = {
            partition: frozenset(posixpath.basename(p) for p in paths)
            for partition, paths in self.files.items()
        }
        return Removal(instant, deleted)


def _relative(uri: str, root: str) -> str:
    """A path of the plan relative to the base path (Hudi writes a local file as ``file:/x``,
    this kernel as ``/x``: both name the same file)."""
    for path in (uri, _local(uri)):
        for prefix in (root, _local(root)):
            if path.startswith(prefix):
                return path[len(prefix) :]
    raise ValueError(f"{uri} is not under the table's base path {root}")


def _local(uri: str) -> str:
    """``file:/x`` and ``file:///x`` as ``/x``; anything else as it is."""
    if uri.startswith("file:"):
        return "/" + uri.removeprefix("file:").lstrip("/")
    return uri


@dataclass(frozen=True)
class CleanResult:
    """A completed clean: its instant and what it deleted."""

    instant: Instant
    plan: CleanPlan
    seconds: float

    @property
    def files_deleted(self) -> int:
        return len(self.plan.paths)


def clean_metadata(table: Table, instant: Instant) -> Mapping[str, Any]:
    """A completed clean's ``HoodieCleanMetadata`` record (empty for a file that is not Avro: an
    empty one, or JSON written by a tool other than Hudi)."""
    path = table.timeline.path(instant)
    data = table.timeline.read_content(instant)
    if not data.startswith(AVRO_MAGIC):
        return {}
    try:
        (record,) = read_avro_records(data)
    except Exception as e:  # fastavro raises many types for bad content
        raise CorruptInstantError(path, f"not valid clean metadata ({e})") from e
    return record


def time_ago(seconds: float, now: float | None = None) -> str:
    """The instant time (normalized, 17 digits) ``seconds`` before ``now`` (default: now)."""
    moment = (time.time() if now is None else now) - seconds
    return _norm(format_instant_time(dt.datetime.fromtimestamp(moment, tz=dt.UTC)))


def newest_completed_before(
    table: Table, completed: Timeline, seconds: float, now: float | None = None
) -> Instant | None:
    """The newest of ``completed`` that completed at least ``seconds`` before ``now``: the
    readers' guard of a clean (what a snapshot opened within the grace period reads is measured
    by it), which archival therefore keeps active. Only the instants that started before the
    cutoff have their completion time read."""
    if seconds <= 0:
        return completed.last()
    cutoff = time_ago(seconds, now)
    for instant in reversed(list(completed)):
        if _norm(instant.timestamp) > cutoff:
            continue  # started within the grace period: completed within it too
        if _norm(table.timeline.completion_time(instant)) <= cutoff:
            return instant
    return None


# --- planning ------------------------------------------------------------------------------------


class CleanPlanner:
    """Plans cleans of one table; keeps what it read of immutable instant files, so a writer that
    cleans after each of its commits does not read the same commit metadata again."""

    def __init__(self, table: Table, policy: CleanPolicy | None = None) -> None:
        self.table = table
        self.policy = policy or CleanPolicy.from_config(table.config)
        self._partitions_of: dict[str, frozenset[str]] = {}
        self._last_clean: tuple[str, Mapping[str, Any]] | None = None

    # what completed instants say (each read once) ------------------------------------------------

    def _written_partitions(self, instant: Instant) -> frozenset[str]:
        cached = self._partitions_of.get(instant.timestamp)
        if cached is None:
            timeline = self.table.timeline
            metadata = CommitMetadata.from_bytes(
                timeline.read_content(instant), timeline.path(instant)
            )
            cached = frozenset(metadata.partition_to_write_stats) | frozenset(
                metadata.partition_to_replace_file_ids
            )
            self._partitions_of[instant.timestamp] = cached
        return cached

    def _clean_metadata(self, instant: Instant) -> Mapping[str, Any]:
        if self._last_clean is None or self._last_clean[0] != instant.timestamp:
            self._last_clean = (instant.timestamp, clean_metadata(self.table, instant))
        return self._last_clean[1]

    # the trigger ------------------------------------------------------------------------------------

    def needs_cleaning(self, timeline: Timeline) -> bool:
        """Hudi's NUM_COMMITS trigger: ``hoodie.clean.max.commits`` completed writes since the
        last clean's newest completed commit."""
        writes = timeline.write_timeline().completed()
        last = timeline.with_actions(Action.CLEAN).completed().last()
        if last is not None:
            since = str(self._clean_metadata(last).get("lastCompletedCommitTimestamp") or "")
            if since:
                writes = writes.after(since)
        return len(writes) >= self.policy.max_commits

    # the plan -----------------------------------------------------------------------------------------

    def plan(self, timeline: Timeline | None = None, now: float | None = None) -> CleanPlan:
        """What a clean at this moment deletes (an empty plan when nothing can go)."""
        timeline = timeline or self.table.timeline.load()
        now = time.time() if now is None else now
        writes = timeline.write_timeline().completed()
        last = writes.last()
        policy = self.policy
        empty = CleanPlan(policy.name, None, last.timestamp if last else "")
        guard = self._guard(timeline, now)
        if guard is None:
            return empty
        earliest: Instant | None = None
        if policy.name in _BY_COMMITS:
            earliest = self._earliest_to_retain(writes, now)
            if earliest is None:
                return empty
            if _norm(guard.timestamp) < _norm(earliest.timestamp):
                earliest = guard
        bound = earliest or guard
        partitions = self._partitions(timeline, earliest)
        if partitions is not None and not partitions:
            return CleanPlan(policy.name, earliest, empty.last_completed_commit)
        listed = (
            list_data_files(self.table.storage)
            if partitions is None
            else list_partitions(self.table.storage, sorted(partitions))
        )
        files = self._deletable(timeline, listed, bound)
        full = partitions is None and policy.incremental and earliest is not None
        return CleanPlan(
            policy.name, earliest, empty.last_completed_commit, files, listed_table=full
        )

    def _guard(self, timeline: Timeline, now: float) -> Instant | None:
        """The newest completed write that no pending write, compaction or clustering started
        before and that completed at least the grace period ago (None: none yet)."""
        writes = timeline.write_timeline()
        completed = writes.completed()
        pending = writes.pending().first()
        if pending is not None:
            completed = completed.before(pending.timestamp)
        return newest_completed_before(self.table, completed, self.policy.grace_seconds, now)

    def _earliest_to_retain(self, writes: Timeline, now: float) -> Instant | None:
        policy = self.policy
        if policy.name == "KEEP_LATEST_COMMITS":
            if len(writes) <= policy.commits_retained:
                return None
            return list(writes)[len(writes) - policy.commits_retained]
        cutoff = time_ago(policy.hours_retained * 3600, now)
        return next((i for i in writes if _norm(i.timestamp) >= cutoff), None)

    def _partitions(self, timeline: Timeline, earliest: Instant | None) -> set[str] | None:
        """The partitions to look at: those written between the last clean's earliest retained
        commit and ``earliest`` (incremental mode), else None (every partition)."""
        if not (self.policy.incremental and earliest is not None):
            return None
        last = timeline.with_actions(Action.CLEAN).completed().last()
        if last is None:
            return None
        since = str(self._clean_metadata(last).get("earliestCommitToRetain") or "")
        if not since:
            return None
        writes = timeline.write_timeline().completed()
        first = writes.first()
        if first is None or _norm(since) < _norm(first.timestamp):
            return None  # commits since then were archived: their partitions are not at hand
        written: set[str] = set()
        for instant in writes:
            t = _norm(instant.timestamp)
            if _norm(since) <= t < _norm(earliest.timestamp):
                written.update(self._written_partitions(instant))
        return written

    def _deletable(
        self, timeline: Timeline, listed: Iterable[FileInfo], bound: Instant
    ) -> dict[str, tuple[str, ...]]:
        committed = CommittedWrites(timeline)
        compacting = {i.timestamp for i in timeline.with_actions(Action.COMPACTION).pending()}
        saved = self._savepointed(timeline)
        replaced = self._replaced(timeline, bound)
        # (partition, file id) -> slice key -> paths
        groups: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for entry in listed:
            key, file_id = slice_instant(entry.name), file_id_of(entry.name)
            if key is None or file_id is None or entry.name.endswith(".cdc"):
                continue
            if key not in committed and key not in compacting:
                continue  # a pending or failed write's: not a clean's to delete
            partition = posixpath.dirname(entry.path)
            groups[(partition, file_id)][key].append(entry.path)
        out: dict[str, list[str]] = defaultdict(list)
        limit = _norm(bound.timestamp)
        for (partition, file_id), slices in groups.items():
            order = sorted(slices, key=_norm, reverse=True)  # newest first
            if (partition, file_id) in replaced:
                doomed = [
                    k for k in order if not any(posixpath.basename(p) in saved for p in slices[k])
                ]
            else:
                before = next((k for k in order if _norm(k) < limit), None)
                doomed = []
                kept_versions = 0
                for position, key in enumerate(order):
                    if any(posixpath.basename(p) in saved for p in slices[key]):
                        continue
                    if position == 0 or _norm(key) >= limit or key == before:
                        kept_versions += 1
                        continue
                    if self.policy.name == "KEEP_LATEST_FILE_VERSIONS" and (
                        kept_versions < self.policy.versions_retained
                    ):
                        kept_versions += 1
                        continue
                    doomed.append(key)
            for key in doomed:
                out[partition].extend(sorted(slices[key]))
        return {p: tuple(sorted(paths)) for p, paths in sorted(out.items()) if paths}

    def _savepointed(self, timeline: Timeline) -> set[str]:
        """Names of the data files every completed savepoint pins."""
        names: set[str] = set()
        for instant in timeline.with_actions(Action.SAVEPOINT).completed():
            path = self.table.timeline.path(instant)
            try:
                records = read_avro_records(self.table.timeline.read_content(instant))
            except Exception as e:  # fastavro raises many types for bad content
                raise CorruptInstantError(path, f"unreadable savepoint metadata ({e})") from e
            for record in records:
                for meta in (record.get("partitionMetadata") or {}).values():
                    names.update(
                        posixpath.basename(str(f)) for f in meta.get("savepointDataFile") or []
                    )
        return names

    def _replaced(self, timeline: Timeline, bound: Instant) -> set[tuple[str, str]]:
        """File groups a completed replacecommit before ``bound`` replaced."""
        out: set[tuple[str, str]] = set()
        for instant in timeline.with_actions(Action.REPLACE_COMMIT).completed():
            if _norm(instant.timestamp) >= _norm(bound.timestamp):
                continue
            metadata = CommitMetadata.from_bytes(
                self.table.timeline.read_content(instant), self.table.timeline.path(instant)
            )
            for partition, file_ids in metadata.partition_to_replace_file_ids.items():
                out.update((partition, f) for f in file_ids)
        return out


# --- executing -----------------------------------------------------------------------------------


def schedule_clean(table: Table, plan: CleanPlan) -> Instant | None:
    """Write ``T.clean.requested`` with ``plan``, under the table lock, unless another clean is
    pending (then None: that one is finished first)."""
    with table.lock("schedule clean") as lock:
        if table.timeline.load().with_actions(Action.CLEAN).pending():
            return None
        lock.ensure_valid()
        return table.timeline.create_requested(Action.CLEAN, plan.to_bytes(table.storage))


def read_plan(table: Table, instant: Instant) -> tuple[CleanPlan, bytes]:
    """The plan of a pending or completed clean, and the plan file's bytes."""
    requested = instant.with_state(State.REQUESTED)
    data = table.timeline.read_content(requested)
    return CleanPlan.from_bytes(data, table.timeline.path(requested), table.storage), data


def left_to_its_engine(table: Table, instant: Instant) -> str | None:
    """Why this process leaves the pending clean ``instant`` to the engine that scheduled it,
    or None when it may carry it out now. Its own engine's cleans it may: every process of it
    takes the table lock to complete one and tolerates another having moved it on. Another
    engine's (Apache Hudi's writer plans and carries out its clean in one call, under no lock
    shared with this process, and fails when its clean moves on without it) only once the
    newest state file is ``indexer.clean.adopt.seconds`` old: then it was abandoned."""
    if read_plan(table, instant)[0].is_ours:
        return None
    limit = table.config.get(CLEAN_ADOPT_SECONDS)
    age = table.storage.age(table.timeline.path(instant), time.time())
    if age >= limit:
        return None
    return (
        f"another engine (Apache Hudi) scheduled it and may be carrying it out: its "
        f"{instant.state.value} file is {age:.0f} s old, finished here once {limit:g} s old "
        f"({CLEAN_ADOPT_SECONDS.key})"
    )


def cleans_left(table: Table) -> list[tuple[Instant, str]]:
    """The pending cleans :func:`clean` leaves now, each with why (what ``indexer-table clean``
    reports)."""
    pending = table.timeline.load().with_actions(Action.CLEAN).pending()
    left = ((i, left_to_its_engine(table, i)) for i in pending)
    return [(i, why) for i, why in left if why is not None]


def execute_clean(
    table: Table, instant: Instant, on_removal: RemovalHook | None = None
) -> CleanResult:
    """Carry out (or finish) a requested or inflight clean from its plan: the deletes outside the
    lock, then under it the index's update (``on_removal``) and the completed instant."""
    started = time.monotonic()
    timeline = table.timeline
    plan, data = read_plan(table, instant)
    if not plan.is_ours:
        logger.warning(
            "finishing clean %s, which another engine scheduled and left (%s)",
            instant,
            CLEAN_ADOPT_SECONDS.key,
        )
    inflight = instant
    if instant.is_requested:
        try:
            inflight = timeline.transition_to_inflight(instant, data)
        except InstantAlreadyExistsError:  # another process (a writer, the daemon) executes it too
            inflight = instant.with_state(State.INFLIGHT)
    paths = plan.paths
    for done, path in enumerate(paths, 1):
        table.storage.delete(path)
        if done % 1000 == 0:
            logger.info("clean %s: %d of %d files deleted", instant.timestamp, done, len(paths))
    with table.lock(f"clean {instant.timestamp}") as lock:
        current = timeline.load().get(instant.timestamp, Action.CLEAN)
        if current is not None and current.is_completed:  # finished by another process
            return CleanResult(current, plan, time.monotonic() - started)
        if on_removal is not None:
            on_removal(lock, plan.removal(inflight))
        lock.ensure_valid()
        try:
            completed = timeline.complete(
                inflight, metadata_bytes(plan, inflight.timestamp, started)
            )
        except InstantAlreadyExistsError:  # Hudi's writer finished it meanwhile, without our lock
            completed = inflight.with_state(State.COMPLETED)
    seconds = time.monotonic() - started
    logger.info(
        "clean %s deleted %d files in %d partitions (%.2f s)",
        completed.timestamp,
        len(paths),
        len(plan.files),
        seconds,
    )
    return CleanResult(completed, plan, seconds)


def metadata_bytes(plan: CleanPlan, start_time: str, started: float) -> bytes:
    """Hudi's ``HoodieCleanMetadata`` of a finished clean at ``start_time`` (its instant time)
    begun at ``started`` (``time.monotonic()``)."""
    partitions = {
        partition: {
            "partitionPath": partition,
            "policy": plan.policy,
            "deletePathPatterns": [posixpath.basename(p) for p in paths],
            "successDeleteFiles": [posixpath.basename(p) for p in paths],
            "failedDeleteFiles": [],
            "isPartitionDeleted": False,
        }
        for partition, paths in sorted(plan.files.items())
    }
    earliest = plan.earliest_to_retain
    record = {
        "startCleanTime": start_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(plan.paths),
        "earliestCommitToRetain": earliest.timestamp if earliest is not None else "",
        "lastCompletedCommitTimestamp": plan.last_completed_commit,
        "partitionMetadata": partitions,
        "version": METADATA_VERSION,
        "bootstrapPartitionMetadata": {},
        "extraMetadata": None,
    }
    return avro_file("clean_metadata", record)


def clean(
    table: Table,
    on_removal: RemovalHook | None = None,
    planner: CleanPlanner | None = None,
    force: bool = False,
) -> list[CleanResult]:
    """Finish every pending clean this process may finish (:func:`left_to_its_engine`), then,
    when the trigger says so (or ``force``), plan one and carry it out (unless another is still
    pending). Returns the cleans completed. A table with Apache Hudi's own metadata table is
    cleaned only when this process keeps that table and ``on_removal`` writes the clean into it
    (``metadata_table``'s removal hook does); otherwise it is left to Hudi's cleaner (a clean
    that metadata table did not record would leave it listing deleted files)."""
    if hudi_metadata_table_present(table) and (
        on_removal is None or not keeps_hudi_metadata_table(table)
    ):
        logger.info(
            "%s has Apache Hudi's metadata table: old file versions are left to Hudi's cleaner",
            table.base_uri,
        )
        return []
    planner = planner or CleanPlanner(table)
    results = []
    timeline = table.timeline.load()
    for pending in timeline.with_actions(Action.CLEAN).pending():
        why = left_to_its_engine(table, pending)
        if why is None:
            results.append(execute_clean(table, pending, on_removal))
        else:
            logger.info("clean %s left: %s", pending, why)
    if results:
        timeline = table.timeline.load()
    if not force and not planner.needs_cleaning(timeline):
        return results
    plan = planner.plan(timeline)
    if not plan and not plan.listed_table:
        return results
    # an empty plan that listed the whole table is carried out too: its instant records the
    # earliest commit retained, from which the next plan lists only the partitions written since
    # (without it, a table no commit rewrites, appends only, was listed whole at every commit)
    requested = schedule_clean(table, plan)
    if requested is not None:
        results.append(execute_clean(table, requested, on_removal))
    return results


__all__ = [
    "METADATA_VERSION",
    "PLAN_VERSION",
    "CleanPlan",
    "CleanPlanner",
    "CleanPolicy",
    "CleanResult",
    "clean",
    "clean_metadata",
    "cleans_left",
    "execute_clean",
    "left_to_its_engine",
    "metadata_bytes",
    "read_plan",
    "schedule_clean",
]
