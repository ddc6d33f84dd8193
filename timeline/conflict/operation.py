"""What an instant did (or will do) to file groups, for conflict checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from timeline.commit_metadata import CommitMetadata, FileGroupPlan
from timeline.instant import Action, Instant, State
from timeline.markers import read_markers
from timeline.timeline import ActiveTimeline, Timeline

TABLE_SERVICE_ACTIONS = frozenset({Action.COMPACTION, Action.LOG_COMPACTION, Action.REPLACE_COMMIT})


@dataclass(frozen=True)
class ConcurrentOperation:
    """An instant and the (partition path, file id) pairs it mutates."""

    instant: Instant
    mutated: frozenset[tuple[str, str]]
    completion_time: str | None = None
    is_table_service: bool = False

    @property
    def is_compaction(self) -> bool:
        return self.instant.action is Action.COMPACTION

    @property
    def is_log_compaction(self) -> bool:
        return self.instant.action is Action.LOG_COMPACTION


@dataclass(frozen=True)
class TxnStart:
    """What a write saw when it started: the base of its optimistic check."""

    instant: Instant
    last_completed: str | None  # the newest completed write instant then
    pending: frozenset[str] = field(default_factory=frozenset)  # write instants pending then

    @classmethod
    def capture(cls, instant: Instant, timeline: Timeline) -> TxnStart:
        writes = timeline.write_timeline()
        last = writes.completed().last()
        pending = frozenset(
            i.timestamp for i in writes.pending() if i.timestamp != instant.timestamp
        )
        return cls(instant, last.timestamp if last else None, pending)


def operation_of(active: ActiveTimeline, instant: Instant) -> ConcurrentOperation:
    """Read what ``instant`` mutates: commit metadata when completed, its plan when it is a pending
    compaction or clustering, its inflight metadata or markers when it is a pending write."""
    is_service = instant.action in TABLE_SERVICE_ACTIONS
    path = active.storage.uri(active.path(instant))
    if instant.is_completed:
        metadata = CommitMetadata.from_bytes(active.read_content(instant), path)
        return ConcurrentOperation(
            instant,
            frozenset(metadata.mutated_file_groups()),
            active.completion_time(instant),
            is_service,
        )
    if instant.action in (Action.COMPACTION, Action.LOG_COMPACTION, Action.REPLACE_COMMIT):
        requested = instant.with_state(State.REQUESTED)
        plan = FileGroupPlan.from_bytes(active.read_content(requested), path)
        return ConcurrentOperation(instant, plan.file_groups, None, is_service)
    if instant.is_inflight:
        raw = active.read_content(instant)
        if raw.strip():
            metadata = CommitMetadata.from_bytes(raw, path)
            return ConcurrentOperation(instant, frozenset(metadata.mutated_file_groups()))
    markers = read_markers(active.storage, instant.timestamp)
    return ConcurrentOperation(
        instant, frozenset((m.partition_path, m.file_id) for m in markers if not m.is_metadata)
    )
