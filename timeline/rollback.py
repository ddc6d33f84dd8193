"""Rolling back failed writes (docs/architecture.md §7.4), and the cleaner that finds them.

A pending write instant whose heartbeat expired is *failed*. Rolling it back, under the table
lock: plan the files to delete from its markers (every CREATE and MERGE data file; when it has no
marker folder, the data files whose name carries its instant time), write ``T2.rollback.requested``
with that plan, move to inflight, delete the files, delete the failed instant's own files
(inflight, then requested), complete ``T2.rollback`` listing what was deleted, then drop its
markers and heartbeat. Every step is idempotent, so a rollback interrupted by a crash is finished
by re-executing its plan (``clean`` does that first).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from timeline.errors import CorruptInstantError
from timeline.fs_view import FileSystemView
from timeline.heartbeat import heartbeat_path
from timeline.instant import Action, Instant, State
from timeline.locks import LockHandle
from timeline.markers import IOType, marker_folder, read_markers
from timeline.table import Table

logger = logging.getLogger(__name__)

#: Pending instants of these actions are rolled back when their writer's heartbeat expires.
ROLLBACK_ACTIONS = frozenset({Action.COMMIT, Action.DELTA_COMMIT})


@dataclass(frozen=True)
class RollbackPlan:
    instant: Instant  # the failed instant, in the state it was found
    files: tuple[str, ...]
    method: str  # "markers" or "listing"

    def to_bytes(self) -> bytes:
        body = {
            "instantToRollback": {
                "commitTime": self.instant.timestamp,
                "action": self.instant.action.value,
                "state": self.instant.state.value,
            },
            "filesToDelete": list(self.files),
            "method": self.method,
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> RollbackPlan:
        try:
            body = json.loads(data)
            target = body["instantToRollback"]
            instant = Instant(
                target["commitTime"], Action(target["action"]), State(target["state"])
            )
            return cls(instant, tuple(body["filesToDelete"]), str(body["method"]))
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
            raise CorruptInstantError(path, f"not a valid rollback plan ({e})") from e


def plan_rollback(table: Table, instant: Instant) -> RollbackPlan:
    markers = read_markers(table.storage, instant.timestamp)
    if markers:
        files = sorted(m.data_path for m in markers if m.io_type in (IOType.CREATE, IOType.MERGE))
        return RollbackPlan(instant, tuple(files), "markers")
    view = FileSystemView(table.timeline, table.timeline.load())
    files = sorted(b.path for b in view.all_base_files if b.instant_time == instant.timestamp)
    return RollbackPlan(instant, tuple(files), "listing")


def rollback(table: Table, instant: Instant, lock: LockHandle) -> Instant:
    """Roll back the pending ``instant``; the caller holds the table lock ``lock``."""
    if instant.is_completed:
        raise ValueError(
            f"{instant} is completed; rolling back completed instants is not supported"
        )
    plan = plan_rollback(table, instant)
    lock.ensure_valid()
    requested = table.timeline.create_requested(Action.ROLLBACK, plan.to_bytes())
    logger.info("rolling back %s (%d files, by %s)", instant, len(plan.files), plan.method)
    return execute_rollback(table, requested, lock)


def execute_rollback(table: Table, rollback_instant: Instant, lock: LockHandle) -> Instant:
    """Carry out (or finish) a requested or inflight rollback from its plan."""
    timeline = table.timeline
    requested = rollback_instant.with_state(State.REQUESTED)
    plan = RollbackPlan.from_bytes(timeline.read_content(requested), timeline.path(requested))
    inflight = rollback_instant
    if rollback_instant.is_requested:
        lock.ensure_valid()
        inflight = timeline.transition_to_inflight(rollback_instant)
    for path in plan.files:
        lock.ensure_valid()
        table.storage.delete(path)
    lock.ensure_valid()
    timeline.delete_pending(plan.instant)
    done = timeline.complete(
        inflight,
        {
            "rolledBackInstants": [plan.instant.timestamp],
            "rolledBackAction": plan.instant.action.value,
            "deletedFiles": list(plan.files),
            "method": plan.method,
        },
    )
    table.storage.delete(marker_folder(plan.instant.timestamp), recursive=True)
    table.storage.delete(heartbeat_path(plan.instant.timestamp))
    logger.info("rolled back %s as %s", plan.instant, done)
    return done


def clean_failed_writes(table: Table) -> list[Instant]:
    """Finish interrupted rollbacks, then roll back every pending write whose heartbeat expired,
    newest first. Each one is re-checked under the lock. Returns the rolled-back instants."""
    rolled_back: list[Instant] = []
    for pending in table.timeline.load().with_actions(Action.ROLLBACK).pending():
        with table.lock(f"finish rollback {pending.timestamp}") as lock:
            current = table.timeline.load().get(pending.timestamp, Action.ROLLBACK)
            if current is not None and not current.is_completed:
                execute_rollback(table, current, lock)
    failed = [
        i
        for i in table.timeline.load().pending()
        if i.action in ROLLBACK_ACTIONS and table.heartbeat_expired(i.timestamp)
    ]
    for instant in reversed(failed):
        with table.lock(f"rollback {instant.timestamp}") as lock:
            current = table.timeline.load().get(instant.timestamp, instant.action)
            if current is None or current.is_completed:
                continue  # finished or rolled back by someone else meanwhile
            if not table.heartbeat_expired(instant.timestamp):
                continue  # its writer came back
            rollback(table, current, lock)
            rolled_back.append(current)
    return rolled_back
