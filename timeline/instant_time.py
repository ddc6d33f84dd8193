"""Instant times that are unique per table across processes and hosts.

A time is ``yyyyMMddHHmmssSSS`` in UTC (hosts in different time zones agree). Within a process the
generator is monotonic: each time is ``max(now, last + 1 ms)``. Across processes and hosts a time is
unique because it is *claimed* with the storage's atomic create-if-absent of
``.hoodie/.aux/.instant-times/<T>`` (one empty object per instant); a lost race bumps the time by
one millisecond and claims again. Claims older than :data:`CLAIM_RETENTION` are pruned when the
timeline is archived (one file per instant would otherwise pile up for the table's whole life); a
host whose clock lags by more than that window could then reuse a time, so keep clocks
synchronised.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from timeline.errors import FileAlreadyExistsError, TableError
from timeline.instant import format_instant_time, parse_instant_time
from timeline.storage import Storage

logger = logging.getLogger(__name__)

CLAIM_FOLDER = ".hoodie/.aux/.instant-times"
#: how long a claim stays: longer than any clock skew between hosts writing one table can be
#: (writers' heartbeats, 2 minutes by default, assume clocks within that already)
CLAIM_RETENTION = dt.timedelta(minutes=2)
_MAX_CLAIM_ATTEMPTS = 1000

_local_lock = threading.Lock()
_last_issued_ms: dict[str, int] = {}


def _millis_to_time(ms: int) -> str:
    return format_instant_time(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC))


def _time_to_millis(timestamp: str) -> int:
    return int(parse_instant_time(timestamp).timestamp() * 1000)


class InstantTimeGenerator:
    """Issues instant times for the table at ``storage``."""

    def __init__(self, storage: Storage, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self._clock = clock

    def _next_local(self, at_least_ms: int = 0) -> int:
        key = self.storage.base_uri
        with _local_lock:
            now_ms = int(self._clock() * 1000)
            ms = max(now_ms, _last_issued_ms.get(key, 0) + 1, at_least_ms)
            _last_issued_ms[key] = ms
            return ms

    def peek_now(self) -> str:
        """A time that is >= every time this process issued for the table, without claiming it.

        Used for completion times, which need order, not uniqueness.
        """
        return _millis_to_time(self._next_local())

    def unclaimed_after(self, floor: str | None = None) -> str:
        """A time later than ``floor`` and >= every time this process issued, not claimed: for
        ordering records computed one after another under the table lock, whatever the
        clocks of the processes that compute them."""
        return _millis_to_time(self._next_local(_time_to_millis(floor) + 1 if floor else 0))

    def next(self, after: str | None = None) -> str:
        """A new instant time, claimed for this table, later than ``after`` when given (a writer
        passes the newest instant it has seen, so a lagging clock cannot go behind the timeline)."""
        floor = _time_to_millis(after) + 1 if after else 0
        ms = self._next_local(at_least_ms=floor)
        for _ in range(_MAX_CLAIM_ATTEMPTS):
            timestamp = _millis_to_time(ms)
            try:
                # who claimed it, for whoever looks at the folder
                self.storage.create(f"{CLAIM_FOLDER}/{timestamp}", _claim_body())
            except FileAlreadyExistsError:
                ms = self._next_local(at_least_ms=ms + 1)
                continue
            return timestamp
        raise TableError(
            f"could not claim a unique instant time after {_MAX_CLAIM_ATTEMPTS} attempts "
            f"under {self.storage.uri(CLAIM_FOLDER)}"
        )

    def prune(self, older_than: dt.timedelta) -> int:
        """Delete claims older than ``older_than``; returns how many were deleted."""
        cutoff = _millis_to_time(int((self._clock() - older_than.total_seconds()) * 1000))
        deleted = 0
        for entry in self.storage.list(CLAIM_FOLDER):
            if entry.name < cutoff:
                self.storage.delete(entry.path)
                deleted += 1
        if deleted:
            logger.info("pruned %d instant-time claims older than %s", deleted, cutoff)
        return deleted


def _claim_body() -> bytes:
    return f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex}\n".encode()
