"""Heartbeats: how a writer shows it is alive (docs/architecture.md §7.4).

A writer of instant T touches ``.hoodie/.heartbeat/<T>`` every ``interval`` seconds, on a fixed
clock, from a background thread, without an fsync (a beat lost in an OS crash died with its
writer); liveness is the file's modification time. T's heartbeat is *expired* when the
file is missing or ``now - mtime > interval * tolerable_misses``: enough to stop waiting for T.
A writer checks its own heartbeat before it commits (:meth:`Heartbeat.ensure_alive`). Rolling T
back takes proof that its writer is dead, which a missing file is not where writers write none
(Apache Hudi's default): see :meth:`timeline.table.Table.writer_is_dead`. The file is deleted
after the commit or rollback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from timeline.errors import HeartbeatExpiredError, StorageFileNotFoundError
from timeline.storage import Storage

logger = logging.getLogger(__name__)

HEARTBEAT_FOLDER = ".hoodie/.heartbeat"
DEFAULT_INTERVAL_SECONDS = 60.0
DEFAULT_TOLERABLE_MISSES = 2
MIN_INTERVAL_SECONDS = 0.1


def heartbeat_path(instant_time: str) -> str:
    return f"{HEARTBEAT_FOLDER}/{instant_time}"


def heartbeat_age(
    storage: Storage, instant_time: str, clock: Callable[[], float] = time.time
) -> float | None:
    """Seconds since the last beat of ``instant_time``; None when there is no heartbeat file.

    On stores with coarse modification times (S3: whole seconds) the age is rounded down by that
    resolution, so a live writer is never taken for dead because of truncation.
    """
    try:
        return storage.age(heartbeat_path(instant_time), clock())
    except StorageFileNotFoundError:
        return None


def is_expired(
    storage: Storage,
    instant_time: str,
    interval: float = DEFAULT_INTERVAL_SECONDS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Whether the writer of ``instant_time`` counts as dead (a missing heartbeat counts)."""
    age = heartbeat_age(storage, instant_time, clock)
    return age is None or age > interval * tolerable_misses


class Heartbeat:
    """The heartbeat of one instant, beaten by a daemon thread between :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        storage: Storage,
        instant_time: str,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval < MIN_INTERVAL_SECONDS:
            raise ValueError(f"heartbeat interval must be at least {MIN_INTERVAL_SECONDS}s")
        if tolerable_misses < 1:
            raise ValueError("tolerable_misses must be at least 1")
        self.storage = storage
        self.instant_time = instant_time
        self.interval = interval
        self.tolerable_misses = tolerable_misses
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.beats = 0

    @property
    def path(self) -> str:
        return heartbeat_path(self.instant_time)

    def beat(self, periodic: bool = False) -> None:
        """Touch the heartbeat file now (``periodic``: from the background thread)."""
        self.storage.overwrite(
            self.path, str(int(self._clock() * 1000)).encode(), periodic=periodic, durable=False
        )
        self.beats += 1

    def _run(self, due: float) -> None:
        # Beats keep to a fixed clock: waiting a whole interval after each beat returned would
        # add every write's latency to the gap between two beats' mtimes.
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.beat(periodic=True)
            except Exception as e:  # keep beating; the writer learns of expiry in ensure_alive()
                logger.warning("heartbeat of %s failed: %s", self.instant_time, e)
            due = max(due + self.interval, time.monotonic())  # late: beat again at once

    def start(self) -> Heartbeat:
        if self._thread is not None:
            raise RuntimeError(f"heartbeat of {self.instant_time} already started")
        first = time.monotonic()
        self.beat()
        self._thread = threading.Thread(
            target=self._run,
            args=(first + self.interval,),
            name=f"heartbeat-{self.instant_time}",
            daemon=True,
        )
        self._thread.start()
        logger.debug("heartbeat of %s started (every %.1fs)", self.instant_time, self.interval)
        return self

    def pause(self) -> None:
        """Stop beating but keep the file (tests and graceful hand-over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def stop(self) -> None:
        """Stop beating and delete the heartbeat file."""
        self.pause()
        self.storage.delete(self.path)
        logger.debug("heartbeat of %s stopped", self.instant_time)

    def is_expired(self) -> bool:
        return is_expired(
            self.storage, self.instant_time, self.interval, self.tolerable_misses, self._clock
        )

    def ensure_alive(self) -> None:
        """Raise :class:`HeartbeatExpiredError` if our own heartbeat expired (do not commit)."""
        if self.is_expired():
            raise HeartbeatExpiredError(
                self.instant_time, heartbeat_age(self.storage, self.instant_time, self._clock)
            )

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
