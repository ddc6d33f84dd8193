"""Rolling back failed writes (docs/architecture.md §7.4), and the cleaner that finds them.

A pending write instant is *failed* only when that can be proved: its writer heartbeats (every
writer of this kernel does, and Apache Hudi's under ``hoodie.cleaner.policy.failed.writes=LAZY``)
and the heartbeat expired. Hudi's writers in their default single-writer setup (``EAGER``) write
no heartbeat at all and roll back their own failed writes when they next start, so a pending
instant without a heartbeat file is never touched here unless the table's writers are declared
``LAZY`` (:meth:`timeline.table.Table.writer_is_dead`).

Rolling a failed instant F back, under the table lock: plan the data files to delete from its
markers (every CREATE and MERGE file; with no marker folder, the data files whose name carries
its instant time), write ``T2.rollback.requested`` with that plan, move to inflight, delete the
files (and the metadata-table files F's markers name), delete F's own instant files (inflight,
then requested), let the caller's ``on_removal`` write the index's update for the rollback (inside
this critical section, as a commit does), complete ``T2.rollback``, then drop F's markers and
heartbeat. The plan and the completed instant are Hudi's Avro (``HoodieRollbackPlan``,
``HoodieRollbackMetadata``, see :mod:`timeline.hudi_avro`), so Hudi's archiver and cleaner read them
as they read Hudi's own. Every step is idempotent, so a rollback interrupted by a crash is finished
by re-executing its plan (``clean_failed_writes`` does that first).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from timeline.config import FAILED_WRITES_POLICY
from timeline.errors import CorruptInstantError, StorageFileNotFoundError
from timeline.fs_view import FileSystemView
from timeline.heartbeat import heartbeat_age, heartbeat_path
from timeline.hudi_avro import avro_file
from timeline.instant import Action, Instant, State
from timeline.locks import LockHandle
from timeline.markers import IOType, marker_folder, read_markers
from timeline.removals import AVRO_MAGIC, Removal, RemovalHook, read_avro_records
from timeline.storage import Storage
from timeline.table import Table
from timeline.table_config import TableType

logger = logging.getLogger(__name__)

#: Pending instants of these actions are rolled back when their writer is provably dead.
ROLLBACK_ACTIONS = frozenset({Action.COMMIT, Action.DELTA_COMMIT})


@dataclass(frozen=True)
class RollbackPlan:
    """The failed instant and the data files (paths relative to the base path) to delete."""

    instant: Instant
    files: tuple[str, ...]

    def to_bytes(self, storage: Storage) -> bytes:
        """Hudi's ``HoodieRollbackPlan``, with absolute paths as Hudi writes them."""
        by_partition: dict[str, list[str]] = defaultdict(list)
        for path in self.files:
            by_partition[posixpath.dirname(path)].append(storage.uri(path))
        requests: list[dict[str, Any]] = [
            {
                "partitionPath": partition,
                "fileId": None,
                "latestBaseInstant": None,
                "filesToBeDeleted": paths,
                "logBlocksToBeDeleted": {},
            }
            for partition, paths in sorted(by_partition.items())
        ]
        target = {"commitTime": self.instant.timestamp, "action": self.instant.action.value}
        record = {"instantToRollback": target, "RollbackRequests": requests, "version": 1}
        return avro_file("plan", record)

    @classmethod
    def from_bytes(cls, data: bytes, path: str, storage: Storage) -> RollbackPlan:
        """From Hudi's Avro plan, or the JSON plan earlier versions of this kernel wrote."""
        try:
            if data.startswith(AVRO_MAGIC):
                (record,) = read_avro_records(data)
                target = record["instantToRollback"]
                root = storage.uri("").rstrip("/") + "/"
                files = [
                    f.removeprefix(root)
                    for request in record.get("RollbackRequests") or []
                    for f in request["filesToBeDeleted"]
                ]
                instant = Instant(target["commitTime"], Action(target["action"]), State.INFLIGHT)
                return cls(instant, tuple(files))
            body = json.loads(data)
            target = body["instantToRollback"]
            instant = Instant(
                target["commitTime"], Action(target["action"]), State(target["state"])
            )
            return cls(instant, tuple(body["filesToDelete"]))
        except Exception as e:  # fastavro and json raise many types for bad content
            raise CorruptInstantError(path, f"not a valid rollback plan ({e})") from e

    def removal(self, rollback_instant: Instant) -> Removal:
        """What this rollback deletes from the data table, per partition."""
        deleted: dict[str, set[str]] = defaultdict(set)
        for path in self.files:
            deleted[posixpath.dirname(path)].add(posixpath.basename(path))
        files = {p: frozenset(n) for p, n in deleted.items()}
        return Removal(rollback_instant, files, rolled_back=frozenset({self.instant.timestamp}))


def plan_rollback(table: Table, instant: Instant) -> RollbackPlan:
    """The data files of ``instant`` to delete: those its markers name (metadata-table files are
    found from its markers again when the plan runs), else those whose name carries its time."""
    markers = read_markers(table.storage, instant.timestamp)
    if markers:
        files = sorted(
            m.data_path
            for m in markers
            if m.io_type in (IOType.CREATE, IOType.MERGE) and not m.is_metadata
        )
        return RollbackPlan(instant, tuple(files))
    view = FileSystemView(table.timeline, table.timeline.load())
    files = sorted(b.path for b in view.all_base_files if b.instant_time == instant.timestamp)
    return RollbackPlan(instant, tuple(files))


def rollback(
    table: Table, instant: Instant, lock: LockHandle, on_removal: RemovalHook | None = None
) -> Instant:
    """Roll back the pending ``instant``; the caller holds the table lock ``lock``."""
    if instant.is_completed:
        raise ValueError(
            f"{instant} is completed; rolling back completed instants is not supported"
        )
    plan = plan_rollback(table, instant)
    lock.ensure_valid()
    requested = table.timeline.create_requested(Action.ROLLBACK, plan.to_bytes(table.storage))
    logger.info("rolling back %s (%d data files)", instant, len(plan.files))
    return execute_rollback(table, requested, lock, on_removal)


def execute_rollback(
    table: Table, rollback_instant: Instant, lock: LockHandle, on_removal: RemovalHook | None = None
) -> Instant:
    """Carry out (or finish) a requested or inflight rollback from its plan."""
    started = time.monotonic()
    timeline = table.timeline
    requested = rollback_instant.with_state(State.REQUESTED)
    plan = RollbackPlan.from_bytes(
        timeline.read_content(requested), timeline.path(requested), table.storage
    )
    inflight = rollback_instant
    if rollback_instant.is_requested:
        lock.ensure_valid()
        inflight = timeline.transition_to_inflight(rollback_instant)
    metadata_files = [
        m.data_path
        for m in read_markers(table.storage, plan.instant.timestamp)
        if m.is_metadata and m.io_type in (IOType.CREATE, IOType.MERGE)
    ]
    for path in [*plan.files, *metadata_files]:
        lock.ensure_valid()
        table.storage.delete(path)
    lock.ensure_valid()
    timeline.delete_pending(plan.instant)
    if on_removal is not None:
        on_removal(lock, plan.removal(inflight))
    lock.ensure_valid()
    done = timeline.complete(inflight, _metadata(table.storage, plan, inflight, started))
    table.storage.delete(marker_folder(plan.instant.timestamp), recursive=True)
    table.storage.delete(heartbeat_path(plan.instant.timestamp))
    logger.info("rolled back %s as %s", plan.instant, done)
    return done


def _metadata(storage: Storage, plan: RollbackPlan, instant: Instant, started: float) -> bytes:
    """Hudi's ``HoodieRollbackMetadata`` of a finished rollback."""
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in plan.files:
        by_partition[posixpath.dirname(path)].append(storage.uri(path))
    partitions = {
        partition: {
            "partitionPath": partition,
            "successDeleteFiles": paths,
            "failedDeleteFiles": [],
            "rollbackLogFiles": {},
            "logFilesFromFailedCommit": {},
        }
        for partition, paths in sorted(by_partition.items())
    }
    target = plan.instant
    record = {
        "startRollbackTime": instant.timestamp,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(plan.files),
        "commitsRollback": [target.timestamp],
        "partitionMetadata": partitions,
        "version": 1,
        "instantsRollback": [{"commitTime": target.timestamp, "action": target.action.value}],
    }
    return avro_file("metadata", record)


def _rollback_target(table: Table, pending: Instant) -> str | None:
    """The instant a pending rollback rolls back (None, with a warning, when its plan cannot be
    read: such a rollback is not ours to finish)."""
    requested = pending.with_state(State.REQUESTED)
    path = table.timeline.path(requested)
    try:
        data = table.timeline.read_content(requested)
        return RollbackPlan.from_bytes(data, path, table.storage).instant.timestamp
    except (CorruptInstantError, StorageFileNotFoundError) as e:
        logger.warning("pending rollback %s left alone: %s", pending, e)
        return None


@dataclass(frozen=True)
class PendingWrite:
    """A pending write the cleaner leaves, and why (what ``indexer-table clean`` reports)."""

    instant: Instant
    #: seconds since its writer's last beat (None: no heartbeat file)
    heartbeat_age: float | None
    #: the age past which its writer counts as dead: interval x tolerable misses, as the
    #: cleaner's configuration says (the writer's own settings may differ)
    expires_after: float
    why: str

    @property
    def expires_in(self) -> float | None:
        if self.heartbeat_age is None:
            return None
        return max(0.0, self.expires_after - self.heartbeat_age)

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": self.instant.timestamp,
            "action": self.instant.action.value,
            "state": self.instant.state.value,
            "heartbeat_age_seconds": _rounded(self.heartbeat_age),
            "expires_in_seconds": _rounded(self.expires_in),
            "why": self.why,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def pending_writes(table: Table) -> list[PendingWrite]:
    """The pending writes :func:`clean_failed_writes` would leave now, and why: a writer alive
    or not yet provably dead (its heartbeat's age, and how long until it expires), no heartbeat
    file under the EAGER policy, a merge-on-read deltacommit left to Hudi, the NEVER policy."""
    policy = table.config.get(FAILED_WRITES_POLICY)
    limit = table.heartbeat_expiry_seconds
    out = []
    for instant in table.timeline.load().pending():
        if instant.action not in ROLLBACK_ACTIONS:
            continue
        age = heartbeat_age(table.storage, instant.timestamp)
        if policy == "NEVER":
            why = f"{FAILED_WRITES_POLICY.key}=NEVER: nothing is rolled back"
        elif _left_to_hudi(table, instant, warn=False):
            why = "a deltacommit of a merge-on-read table: left to Apache Hudi's rollback"
        elif age is None and policy != "LAZY":
            why = (
                "no heartbeat file: under EAGER (Apache Hudi's default) its writer rolls it back "
                f"when it next starts; {FAILED_WRITES_POLICY.key}=LAZY if every writer heartbeats"
            )
        elif age is not None and age <= limit:
            why = (
                f"its writer is alive or not yet provably dead: heartbeat {age:.1f} s old, "
                f"rolled back once older than {limit:g} s (in {limit - age:.1f} s)"
            )
        else:
            continue  # provably dead: the cleaner rolls it back
        out.append(PendingWrite(instant, age, limit, why))
    return out


def _left_to_hudi(table: Table, instant: Instant, warn: bool = True) -> bool:
    """A failed deltacommit of a merge-on-read table: rolling back its log appends takes rollback
    command blocks (without them, once the failed instant is older than the active timeline,
    Hudi's reader counts its blocks again), which this kernel does not write; Apache Hudi's own
    rollback of failed writes does."""
    if instant.action is not Action.DELTA_COMMIT:
        return False
    if table.table_config.table_type is not TableType.MERGE_ON_READ:
        return False
    if warn:
        logger.warning(
            "failed write %s of merge-on-read table %s left to Apache Hudi's rollback (its log "
            "appends need rollback command blocks)",
            instant,
            table.base_uri,
        )
    return True


def clean_failed_writes(table: Table, on_removal: RemovalHook | None = None) -> list[Instant]:
    """Finish interrupted rollbacks of writes whose writer is provably dead (a rollback is
    re-executed from its plan), then roll back every pending write whose writer is provably dead
    (:meth:`Table.writer_is_dead`), newest first. Each one is re-checked under the lock.
    ``on_removal`` writes the index's update of each rollback inside its critical section.
    On a merge-on-read table (only Apache Hudi writes one) failed deltacommits and interrupted
    rollbacks are left to Hudi, whose rollbacks append the command blocks log files need.
    Returns the rolled-back instants."""
    rolled_back: list[Instant] = []
    merge_on_read = table.table_config.table_type is TableType.MERGE_ON_READ
    for pending in table.timeline.load().with_actions(Action.ROLLBACK).pending():
        if merge_on_read:  # Hudi's, whose plan may append rollback command blocks
            continue
        target = _rollback_target(table, pending)
        if target is None or not table.writer_is_dead(target):
            continue  # a rollback in progress (Hudi's own writer rolling back its write)
        with table.lock(f"finish rollback {pending.timestamp}") as lock:
            current = table.timeline.load().get(pending.timestamp, Action.ROLLBACK)
            if current is not None and not current.is_completed:
                execute_rollback(table, current, lock, on_removal)
    failed = [
        i
        for i in table.timeline.load().pending()
        if i.action in ROLLBACK_ACTIONS
        and table.writer_is_dead(i.timestamp)
        and not _left_to_hudi(table, i)
    ]
    for instant in reversed(failed):
        with table.lock(f"rollback {instant.timestamp}") as lock:
            current = table.timeline.load().get(instant.timestamp, instant.action)
            if current is None or current.is_completed:
                continue  # finished or rolled back by someone else meanwhile
            if not table.writer_is_dead(instant.timestamp):
                continue  # its writer came back
            rollback(table, current, lock, on_removal)
            rolled_back.append(current)
    return rolled_back
