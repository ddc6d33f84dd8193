"""Early conflict detection, the part every marker type shares (docs/architecture.md §7.6).

Which other writers a write must look at before (or while) it creates markers: instants older than
its own, still pending, not a planned table service (compaction, clustering), whose heartbeat is
alive. Their markers say which file groups they are writing right now. Optionally, commits
completed since this write started are checked too, comparing (partition, file id) on both sides.
"""

from __future__ import annotations

from collections.abc import Iterable

from timeline.conflict.operation import TxnStart, operation_of
from timeline.conflict.strategies import SimpleStrategy
from timeline.errors import WriteConflictError
from timeline.instant import Action, Instant, normalize_timestamp
from timeline.markers import MARKER_ROOT, read_markers
from timeline.table import Table
from timeline.timeline import Timeline

_TABLE_SERVICES = frozenset({Action.COMPACTION, Action.LOG_COMPACTION, Action.REPLACE_COMMIT})


def live_older_writers(table: Table, own: str, timeline: Timeline) -> list[Instant]:
    """Pending write instants older than ``own`` that have marker folders and a live heartbeat."""
    own_key = normalize_timestamp(own)
    found = []
    for folder in table.storage.list(MARKER_ROOT):
        other = folder.name
        if not folder.is_dir or other == own or not other.isdigit():
            continue
        if normalize_timestamp(other) > own_key:
            continue
        instant = timeline.get(other)
        if instant is None or instant.is_completed or instant.action in _TABLE_SERVICES:
            continue  # rolled back, committed (see the commit check), or a planned service
        if table.heartbeat_expired(other):
            continue  # a dead writer: the cleaner rolls it back
        found.append(instant)
    return found


def _label(partition: str, file_id: str) -> str:
    return f"{partition}/{file_id}" if partition else file_id


def check_markers(
    table: Table,
    start: TxnStart,
    groups: Iterable[tuple[str, str]],
    check_commits: bool = False,
) -> None:
    """Raise :class:`WriteConflictError` if a live older writer has markers for any of ``groups``
    ((partition, file id) pairs), or, with ``check_commits``, a commit since ``start`` wrote one."""
    wanted = set(groups)
    if not wanted:
        return
    own = start.instant
    timeline = table.timeline.load()
    for other in live_older_writers(table, own.timestamp, timeline):
        theirs = {
            (m.partition_path, m.file_id) for m in read_markers(table.storage, other.timestamp)
        }
        overlap = wanted & theirs
        if overlap:
            raise WriteConflictError(own, other, sorted(_label(p, f) for p, f in overlap))
    if check_commits:
        strategy = SimpleStrategy()
        for candidate in strategy.candidates(timeline, start, table.timeline.completion_time):
            if not candidate.is_completed:
                continue
            overlap = wanted & operation_of(table.timeline, candidate).mutated
            if overlap:
                raise WriteConflictError(own, candidate, sorted(_label(p, f) for p, f in overlap))
