"""The lock API shared by every provider: leases, renewal, bounded acquisition.

A lock is a *lease*: it expires unless its holder renews it, so a holder that dies (SIGKILL)
releases the lock when the lease runs out. A :class:`LockHandle` renews from a background thread
every third of the lease, and tracks, on the holder's monotonic clock, the last moment it can prove
it still holds the lease (the start of the last successful acquire or renewal plus the lease).
:meth:`LockHandle.ensure_valid` raises :class:`LockLostError` past that moment or after a failed
renewal: callers call it right before each write they make under the lock. Each acquisition
carries a *fence*, a number that increases with every new holder, for stores that can check it.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType

from timeline.errors import LockLostError, LockTimeoutError

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_TIMEOUT_SECONDS = 60.0
_MAX_BACKOFF_SECONDS = 1.0


def default_owner(purpose: str = "") -> str:
    """``host:pid:thread[:purpose]``: enough to find the holder of a stuck lock."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
    return f"{owner}:{purpose}" if purpose else owner


@dataclass(frozen=True)
class Lease:
    """A granted lease: who, with which secret token, and its fence number."""

    name: str
    owner: str
    token: str
    fence: int


class LockProvider(ABC):
    """Grants leases on named locks. Subclasses implement the four primitives."""

    def __init__(self, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.lease_seconds = lease_seconds

    @abstractmethod
    def try_acquire(self, name: str, owner: str, token: str) -> Lease | None:
        """Take the lock if it is free or its lease expired; None if someone holds it."""

    @abstractmethod
    def renew(self, lease: Lease) -> bool:
        """Extend the lease; False if it is no longer ours."""

    @abstractmethod
    def release(self, lease: Lease) -> None:
        """Give the lock up (no-op if it is no longer ours)."""

    @abstractmethod
    def holder(self, name: str) -> str | None:
        """The current holder's owner string, None when free."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (connections)."""

    def acquire(
        self,
        name: str,
        owner: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        renew: bool = True,
    ) -> LockHandle:
        """Wait at most ``timeout`` seconds for the lock, with exponential backoff and jitter."""
        owner = owner or default_owner()
        token = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            started = time.monotonic()
            lease = self.try_acquire(name, owner, token)
            if lease is not None:
                handle = LockHandle(self, lease, valid_until=started + self.lease_seconds)
                if renew:
                    handle.start_renewing()
                logger.debug("lock %s acquired by %s (fence %d)", name, owner, lease.fence)
                return handle
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LockTimeoutError(name, timeout, self.holder(name))
            time.sleep(min(remaining, delay * random.uniform(0.5, 1.5)))
            delay = min(delay * 2, _MAX_BACKOFF_SECONDS)


class LockHandle:
    """A held lock. Use as a context manager; call :meth:`ensure_valid` before each write."""

    def __init__(self, provider: LockProvider, lease: Lease, valid_until: float) -> None:
        self.provider = provider
        self.lease = lease
        self._valid_until = valid_until
        self._lost_reason: str | None = None
        self._released = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def owner(self) -> str:
        return self.lease.owner

    @property
    def fence(self) -> int:
        return self.lease.fence

    def start_renewing(self) -> None:
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"lock-renew-{self.name}", daemon=True
        )
        self._thread.start()

    def _renew_loop(self) -> None:
        interval = self.provider.lease_seconds / 3
        while not self._stop.wait(interval):
            self.renew_once()
            if self._lost_reason is not None:
                return

    def renew_once(self) -> bool:
        """Renew now; returns whether the lease is still provably ours.

        A renewal the store refuses means another holder has it: lost at once. A renewal that
        fails (store unreachable) is retried until the lease we can prove runs out.
        """
        started = time.monotonic()
        try:
            refused = not self.provider.renew(self.lease)
            error: Exception | None = None
        except Exception as e:
            logger.warning("renewing lock %s failed: %s", self.name, e)
            refused, error = False, e
        with self._guard:
            if self._lost_reason is not None:
                return False
            if refused:
                self._lost_reason = "the lease was taken over by another holder"
            elif time.monotonic() >= self._valid_until:
                self._lost_reason = (
                    f"the lease expired before it could be renewed ({error})"
                    if error
                    else "the lease expired before it could be renewed"
                )
            elif error is None:
                self._valid_until = started + self.provider.lease_seconds
                return True
            return False

    @property
    def is_valid(self) -> bool:
        with self._guard:
            return (
                not self._released
                and self._lost_reason is None
                and time.monotonic() < self._valid_until
            )

    def ensure_valid(self) -> None:
        """Raise :class:`LockLostError` unless the lease is provably still ours right now."""
        with self._guard:
            if self._released:
                raise LockLostError(self.name, self.owner, "it was released")
            if self._lost_reason is not None:
                raise LockLostError(self.name, self.owner, self._lost_reason)
            if time.monotonic() >= self._valid_until:
                self._lost_reason = "the lease expired (renewal did not succeed in time)"
                raise LockLostError(self.name, self.owner, self._lost_reason)

    def release(self) -> None:
        if self._released:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.provider.lease_seconds)
        with self._guard:
            self._released = True
        try:
            self.provider.release(self.lease)
        except Exception as e:  # the lease will expire on its own
            logger.warning("releasing lock %s failed (it will expire): %s", self.name, e)
        logger.debug("lock %s released by %s", self.name, self.owner)

    def __enter__(self) -> LockHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
