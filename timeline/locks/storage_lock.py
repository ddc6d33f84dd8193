"""A lock provider made of lock files on the table's storage (local files, S3, memory).

It needs only the storage facade's atomic create-if-absent (on S3: conditional PUT), so it works
where Hudi's filesystem lock provider refuses to (S3). A lock is a folder of *generations*,
``<folder>/<name>/<generation:020d>.lock``, each a small JSON document
``{owner, token, expires_at, released}``:

* acquire: list the folder; if the newest generation is released, or expired by more than the
  allowed clock skew, create generation + 1 with create-if-absent. Only one contender can create a
  given generation, so taking over an expired lock is race-free without compare-and-swap. Then
  list again: the lock is ours only if our generation is still the newest (a contender that judged
  a since-deleted generation free may otherwise re-create a number below the newest); older
  generations are then deleted. The generation is the fence number, increasing per holder.
* renew: check we are still the newest generation, then overwrite our file with a new expiry. The
  holder's :class:`~timeline.locks.base.LockHandle` counts the lease from *before* each renewal,
  and a contender judges expiry with a clock read taken *before* it reads the file, so a renewal
  that completes in time is always seen.
* release: mark our generation released.

Expiry compares wall clocks of different hosts: ``max_clock_skew`` (default 2 s) is added before a
lease counts as expired.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

from timeline.errors import FileAlreadyExistsError, StorageFileNotFoundError
from timeline.locks.base import DEFAULT_LEASE_SECONDS, Lease, LockProvider
from timeline.storage import Storage

DEFAULT_FOLDER = ".hoodie/.aux/locks"
DEFAULT_MAX_CLOCK_SKEW_SECONDS = 2.0
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_GENERATION = re.compile(r"^(\d{20})\.lock$")


class StorageLockProvider(LockProvider):
    def __init__(
        self,
        storage: Storage,
        folder: str = DEFAULT_FOLDER,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(lease_seconds)
        self.storage = storage
        self.folder = folder.strip("/")
        self.max_clock_skew = max_clock_skew
        self._clock = clock

    def __repr__(self) -> str:
        return f"StorageLockProvider({self.storage.uri(self.folder)})"

    def _lock_dir(self, name: str) -> str:
        if not _SAFE_NAME.match(name):
            # Readable and unique: the name with unsafe characters replaced, plus a hash of it.
            digest = hashlib.sha1(name.encode()).hexdigest()[:12]
            name = f"{_UNSAFE.sub('_', name)[:80]}-{digest}"
        return f"{self.folder}/{name}"

    def _path(self, name: str, generation: int) -> str:
        return f"{self._lock_dir(name)}/{generation:020d}.lock"

    def _generations(self, name: str) -> list[int]:
        found = []
        for entry in self.storage.list(self._lock_dir(name)):
            match = _GENERATION.match(entry.name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def _read(self, name: str, generation: int) -> dict[str, Any] | None:
        """The generation's state; None if it vanished. Unreadable content counts as released."""
        try:
            raw = self.storage.read(self._path(name, generation))
        except StorageFileNotFoundError:
            return None
        try:
            state = json.loads(raw)
            if isinstance(state, dict) and isinstance(state.get("expires_at"), int | float):
                return state
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
        return {"owner": "", "token": "", "expires_at": 0.0, "released": True}

    def _body(self, owner: str, token: str, expires_at: float, released: bool = False) -> bytes:
        return json.dumps(
            {"owner": owner, "token": token, "expires_at": expires_at, "released": released}
        ).encode()

    def _is_free(self, state: dict[str, Any], now: float) -> bool:
        return bool(state.get("released")) or float(state["expires_at"]) + self.max_clock_skew < now

    def try_acquire(self, name: str, owner: str, token: str) -> Lease | None:
        now = self._clock()  # read before the file, see the module docstring
        generations = self._generations(name)
        generation = 1
        if generations:
            newest = generations[-1]
            state = self._read(name, newest)
            if state is None or not self._is_free(state, now):
                return None
            generation = newest + 1
        expires_at = self._clock() + self.lease_seconds
        path = self._path(name, generation)
        try:
            self.storage.create(path, self._body(owner, token, expires_at))
        except FileAlreadyExistsError:
            return None
        # Old generations are deleted, so a contender that judged a now-deleted generation free
        # can re-create a number below the newest (ABA). Holding requires being the newest.
        if self._generations(name)[-1] != generation:
            self.storage.delete(path)
            return None
        for old in generations:
            self.storage.delete(self._path(name, old))
        return Lease(name, owner, token, generation)

    def _is_current(self, lease: Lease) -> bool:
        generations = self._generations(lease.name)
        if not generations or generations[-1] != lease.fence:
            return False
        state = self._read(lease.name, lease.fence)
        return state is not None and state.get("token") == lease.token and not state.get("released")

    def renew(self, lease: Lease) -> bool:
        if not self._is_current(lease):
            return False
        expires_at = self._clock() + self.lease_seconds
        self.storage.overwrite(
            self._path(lease.name, lease.fence),
            self._body(lease.owner, lease.token, expires_at),
            periodic=True,
        )
        return True

    def release(self, lease: Lease) -> None:
        if self._is_current(lease):
            self.storage.overwrite(
                self._path(lease.name, lease.fence),
                self._body(lease.owner, lease.token, 0.0, released=True),
            )

    def holder(self, name: str) -> str | None:
        generations = self._generations(name)
        if not generations:
            return None
        state = self._read(name, generations[-1])
        if state is None or self._is_free(state, self._clock()):
            return None
        return str(state.get("owner") or "") or None
