"""An in-process lock provider: for one process with several threads (tests, embedded use).

It keeps the lease semantics of the other providers (expiry, fence), so code behaves the same.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from timeline.locks.base import DEFAULT_LEASE_SECONDS, Lease, LockProvider


@dataclass
class _Row:
    owner: str
    token: str
    fence: int
    expires_at: float


_registry_lock = threading.Lock()
_registry: dict[str, _Row] = {}


class InProcessLockProvider(LockProvider):
    def __init__(self, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        super().__init__(lease_seconds)

    def __repr__(self) -> str:
        return "InProcessLockProvider()"

    def try_acquire(self, name: str, owner: str, token: str) -> Lease | None:
        with _registry_lock:
            now = time.monotonic()
            row = _registry.get(name)
            if row is not None and row.expires_at >= now:
                return None
            fence = (row.fence if row else 0) + 1
            _registry[name] = _Row(owner, token, fence, now + self.lease_seconds)
            return Lease(name, owner, token, fence)

    def renew(self, lease: Lease) -> bool:
        with _registry_lock:
            row = _registry.get(lease.name)
            if row is None or row.token != lease.token:
                return False
            row.expires_at = time.monotonic() + self.lease_seconds
            return True

    def release(self, lease: Lease) -> None:
        with _registry_lock:
            row = _registry.get(lease.name)
            if row is not None and row.token == lease.token:
                row.expires_at = float("-inf")
                row.owner = ""

    def holder(self, name: str) -> str | None:
        with _registry_lock:
            row = _registry.get(name)
            if row is None or row.expires_at < time.monotonic():
                return None
            return row.owner or None
