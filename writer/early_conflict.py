"""Early conflict detection with direct markers (docs/architecture.md §7.6).

Before a writer creates the marker for file group F in partition P, it checks the markers of
other live, older writers (:func:`timeline.conflict.early.check_markers`); if one of them is
writing F in P, this writer stops now (:class:`WriteConflictError`) instead of writing for hours
and failing at commit. Optionally it also checks commits completed since it started, and
optionally holds a lock per (P, F) around check and create, so two writers cannot both pass the
check before either creates its marker. (With timeline-server markers the server runs the same
check periodically instead.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from timeline.conflict import TxnStart
from timeline.conflict.early import check_markers
from timeline.table import Table


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
        check_markers(self.table, self.start, [(partition, file_id)], self.check_commits)
