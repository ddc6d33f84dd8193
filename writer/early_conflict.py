"""Early conflict detection with direct markers (REFERENCE §6).

Before a writer creates the marker for file group F in partition P, it looks at the marker folders
of *other live writers*: instants older than its own, not a pending compaction or clustering, whose
heartbeat has not expired. If one of them has a marker for a file of F in P, this writer stops now
(:class:`WriteConflictError`) instead of writing for hours and failing at commit. Optionally it also
checks commits completed since it started (comparing partition and file id on both sides), and
optionally holds a lock per (P, F) around check and create, so two writers cannot both pass the
check before either creates its marker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from timeline.conflict import SimpleStrategy, TxnStart, operation_of
from timeline.errors import WriteConflictError
from timeline.instant import Action, normalize_timestamp
from timeline.markers import MARKER_ROOT
from timeline.table import Table

_TABLE_SERVICES = frozenset({Action.COMPACTION, Action.LOG_COMPACTION, Action.REPLACE_COMMIT})


class EarlyConflictDetector:
    def __init__(
        self,
        table: Table,
        start: TxnStart,
        check_commits: bool = False,
        transactional: bool = False,
    ) -> None:
        self.table = table
        self.start = start
        self.check_commits = check_commits
        self.transactional = transactional

    @contextlib.contextmanager
    def guard(self, partition: str, file_id: str) -> Iterator[None]:
        """Check for a conflict on (partition, file id); the marker is created inside."""
        if not self.transactional:
            self.check(partition, file_id)
            yield
            return
        name = f"marker:{self.table.base_uri}:{partition}/{file_id}"
        with self.table.lock_provider.acquire(name, timeout=self.table.config.lock_timeout_seconds):
            self.check(partition, file_id)
            yield

    def check(self, partition: str, file_id: str) -> None:
        own = self.start.instant
        own_key = normalize_timestamp(own.timestamp)
        storage = self.table.storage
        timeline = self.table.timeline.load()
        prefix = f"{file_id}_"
        for folder in storage.list(MARKER_ROOT):
            other_time = folder.name
            if not folder.is_dir or other_time == own.timestamp:
                continue
            if not other_time.isdigit() or normalize_timestamp(other_time) > own_key:
                continue
            other = timeline.get(other_time)
            if other is None or other.is_completed or other.action in _TABLE_SERVICES:
                continue  # rolled back, committed (see the commit check), or a planned service
            if self.table.heartbeat_expired(other_time):
                continue  # a dead writer: the cleaner rolls it back
            marker_dir = f"{MARKER_ROOT}/{other_time}/{partition}" if partition else folder.path
            if any(m.name.startswith(prefix) for m in storage.list(marker_dir)):
                raise WriteConflictError(
                    own, other, [f"{partition}/{file_id}" if partition else file_id]
                )
        if self.check_commits:
            strategy = SimpleStrategy()
            for candidate in strategy.candidates(
                timeline, self.start, self.table.timeline.completion_time
            ):
                if not candidate.is_completed:
                    continue
                if (partition, file_id) in operation_of(self.table.timeline, candidate).mutated:
                    raise WriteConflictError(
                        own, candidate, [f"{partition}/{file_id}" if partition else file_id]
                    )
