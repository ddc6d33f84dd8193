"""Conflict resolution strategies: Simple, Bucket, PreferWriter (docs/architecture.md §7.5).

Each strategy answers two questions: which instants are *candidates* for a committing write
(``candidates``), and whether this write conflicts with one of them (``has_conflict``). The
resolution rules are shared (``resolve``): a compaction scheduled before this write is compatible
with it, a log compaction never conflicts, and anything else that overlaps aborts this write with
:class:`WriteConflictError`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from timeline.conflict.operation import ConcurrentOperation, TxnStart
from timeline.errors import ConfigError, WriteConflictError
from timeline.instant import Action, Instant, is_after
from timeline.timeline import Timeline

_PLANNED_SERVICES = (Action.COMPACTION, Action.REPLACE_COMMIT)
_INGESTION = (Action.COMMIT, Action.DELTA_COMMIT)


def _after(a: str, b: str | None) -> bool:
    return b is None or is_after(a, b)


class ConflictResolutionStrategy(ABC):
    name: str

    def candidates(
        self,
        timeline: Timeline,
        start: TxnStart,
        completion_time: Callable[[Instant], str],
        is_table_service: bool = False,
    ) -> list[Instant]:
        """Instants this write must be checked against (the timeline freshly reloaded): completed
        writes chosen by :meth:`_completed_since_start`, and compactions or clusterings planned
        after this write started."""
        own = start.instant.timestamp
        writes = timeline.write_timeline().filter(lambda i: i.timestamp != own)
        chosen = set(self._completed_since_start(writes.completed(), start, completion_time))
        for pending in writes.pending():
            if (pending.action in _PLANNED_SERVICES and _after(pending.timestamp, own)) or (
                is_table_service and self.services_yield and pending.action in _INGESTION
            ):
                chosen.add(pending)
        return sorted(chosen)

    #: Whether a table service also checks pending ingestion (and so yields to it).
    services_yield = False

    def _completed_since_start(
        self, completed: Timeline, start: TxnStart, completion_time: Callable[[Instant], str]
    ) -> list[Instant]:
        """Completed after the last completion this write knew of, or pending when it started."""
        return [
            i
            for i in completed
            if _after(i.timestamp, start.last_completed) or i.timestamp in start.pending
        ]

    @abstractmethod
    def conflicting(self, this: ConcurrentOperation, other: ConcurrentOperation) -> list[str]:
        """The overlapping file groups as ``partition/fileId`` (empty: no conflict)."""

    def has_conflict(self, this: ConcurrentOperation, other: ConcurrentOperation) -> bool:
        return bool(self.conflicting(this, other))

    def resolve(self, this: ConcurrentOperation, other: ConcurrentOperation) -> None:
        """Return if this write may commit beside ``other``; raise otherwise."""
        overlap = self.conflicting(this, other)
        if not overlap:
            return
        if other.is_compaction and _after(this.instant.timestamp, other.instant.timestamp):
            return  # a compaction planned before this write rewrites what this write saw
        if this.is_log_compaction:
            return
        raise WriteConflictError(this.instant, other.instant, overlap)


def _pairs(overlap: set[tuple[str, str]]) -> list[str]:
    return sorted(f"{p}/{f}" if p else f for p, f in overlap)


class SimpleStrategy(ConflictResolutionStrategy):
    """Conflict when both write the same file group (partition path and file id)."""

    name = "simple"

    def conflicting(self, this: ConcurrentOperation, other: ConcurrentOperation) -> list[str]:
        return _pairs(set(this.mutated) & set(other.mutated))


def bucket_of(file_id: str) -> str:
    """A bucket-layout file id starts with the 8-digit bucket number; other ids are their own."""
    head = file_id[:8]
    return str(int(head)) if len(head) == 8 and head.isdigit() else file_id


class BucketStrategy(ConflictResolutionStrategy):
    """Conflict when both write the same bucket of a partition (file ids may differ)."""

    name = "bucket"

    def conflicting(self, this: ConcurrentOperation, other: ConcurrentOperation) -> list[str]:
        mine = {(p, bucket_of(f)): f for p, f in this.mutated}
        theirs = {(p, bucket_of(f)) for p, f in other.mutated}
        return _pairs({(p, mine[(p, b)]) for p, b in mine.keys() & theirs})


class PreferWriterStrategy(SimpleStrategy):
    """Table services yield to ingestion.

    Candidates are the write instants that *completed* after this write started (by completion
    time, whatever their instant time), and for a table service also every pending ingestion
    instant, so a compaction or clustering aborts rather than an ingestion write.
    """

    name = "prefer_writer"
    services_yield = True

    def _completed_since_start(
        self, completed: Timeline, start: TxnStart, completion_time: Callable[[Instant], str]
    ) -> list[Instant]:
        return [i for i in completed if _after(completion_time(i), start.instant.timestamp)]


STRATEGIES: dict[str, type[ConflictResolutionStrategy]] = {
    s.name: s for s in (SimpleStrategy, BucketStrategy, PreferWriterStrategy)
}


def strategy_for(name: str) -> ConflictResolutionStrategy:
    try:
        return STRATEGIES[name.lower()]()
    except KeyError:
        raise ConfigError(
            "hoodie.write.lock.conflict.resolution.strategy",
            f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}",
        ) from None
