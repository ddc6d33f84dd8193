"""Apache Hudi's filesystem lock (``FileSystemBasedLockProvider``), taken by its protocol so that
our commits and Hudi's writers exclude each other on one table.

Hudi 0.15's provider holds the lock while one file exists: ``<dir>/lock``, where ``<dir>`` is
``hoodie.write.lock.filesystem.path`` or the table's ``.hoodie``. A writer that finds the file
fails this attempt (Hudi's lock manager retries), unless the file's modification time is
``hoodie.write.lock.filesystem.expire`` minutes old (0, the default: never), in which case it
deletes it first. A writer that finds none creates it (Hudi writes its lock info, JSON: the
creation time, thread and stack) and holds the lock until it deletes it. Hudi's Hadoop
filesystem may leave a checksum ``.lock.crc`` beside it, deleted with it.

Taking it here: the file is created with this kernel's atomic create-if-absent (so two of our
processes never both take it; Hudi's own create is a check then a write, which it documents as
safe only where creation is atomic), with Hudi's lock-info fields plus the holder and a token of
ours. Renewal rewrites it after checking the token, which also keeps its modification time fresh,
so a Hudi writer with an expiry never takes over a lock we still hold. Release deletes it (and
its checksum) if it is still ours. Hudi's lock never expires on its own: a Hudi writer that dies
holding it leaves the file until someone deletes it (Hudi documents the same), and our
acquisitions wait for it like Hudi's do, naming the holder in the timeout error.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from typing import Any

from timeline.errors import FileAlreadyExistsError, StorageFileNotFoundError
from timeline.locks.base import DEFAULT_LEASE_SECONDS, Lease, LockProvider
from timeline.storage import Storage

#: Hudi's class name in ``hoodie.write.lock.provider`` for this protocol
HUDI_PROVIDER_CLASS = "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"
LOCK_FILE_NAME = "lock"


class HudiFileSystemLockProvider(LockProvider):
    """One lock file shared with Apache Hudi's writers; every lock name maps to it (Hudi has one
    lock per table)."""

    def __init__(
        self,
        storage: Storage,
        folder: str = ".hoodie",
        expire_minutes: int = 0,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        super().__init__(lease_seconds)
        if expire_minutes < 0:
            raise ValueError("hoodie.write.lock.filesystem.expire must be 0 or more minutes")
        self.storage = storage
        self.path = f"{folder.strip('/')}/{LOCK_FILE_NAME}" if folder.strip("/") else LOCK_FILE_NAME
        self.expire_minutes = expire_minutes

    def __repr__(self) -> str:
        return f"HudiFileSystemLockProvider({self.storage.uri(self.path)})"

    def _read(self) -> dict[str, Any] | None:
        """The lock file's content; None when there is no lock file. A file Hudi wrote has no
        token of ours (it is someone else's)."""
        try:
            raw = self.storage.read(self.path)
        except StorageFileNotFoundError:
            return None
        try:
            parsed = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            parsed = None
        return parsed if isinstance(parsed, dict) else {}

    def _expired(self) -> bool:
        if self.expire_minutes == 0:
            return False
        try:
            modified = self.storage.mtime(self.path)
        except StorageFileNotFoundError:
            return False
        return time.time() - modified > self.expire_minutes * 60

    def _body(self, owner: str, token: str) -> bytes:
        now = datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        return json.dumps(
            {
                "lockCreateTime": now,
                "lockThreadName": threading.current_thread().name,
                "lockStacksInfo": [],
                "owner": owner,
                "token": token,
            },
            indent=2,
        ).encode()

    def try_acquire(self, name: str, owner: str, token: str) -> Lease | None:
        if self.storage.exists(self.path):
            if not self._expired():
                return None
            self.storage.delete(self.path)  # as Hudi does with a lock older than its expiry
        try:
            self.storage.create(self.path, self._body(owner, token))
        except FileAlreadyExistsError:
            return None
        return Lease(name, owner, token, time.time_ns())

    def _is_ours(self, lease: Lease) -> bool:
        state = self._read()
        return state is not None and state.get("token") == lease.token

    def renew(self, lease: Lease) -> bool:
        if not self._is_ours(lease):
            return False
        self.storage.overwrite(self.path, self._body(lease.owner, lease.token), periodic=True)
        return True

    def release(self, lease: Lease) -> None:
        if self._is_ours(lease):
            self.storage.delete(self.path)  # Hadoop's checksum beside it goes too

    def holder(self, name: str) -> str | None:
        state = self._read()
        if state is None:
            return None
        owner = state.get("owner")
        if owner:
            return str(owner)
        return f"an Apache Hudi writer (thread {state.get('lockThreadName', '?')}, since " + (
            f"{state.get('lockCreateTime', '?')}; {self.storage.uri(self.path)})"
        )
