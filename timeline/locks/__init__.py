"""Table locks: one API over several providers, chosen by a lock URL.

================================= ============================================================
lock URL                          provider
================================= ============================================================
``sqlite:///path/locks.sqlite``   :class:`SqlLockProvider` on SQLite (one machine, many processes)
``postgresql://user@host/db``     :class:`SqlLockProvider` on PostgreSQL (many hosts)
``storage``                       :class:`StorageLockProvider`: lock files in the table's own
                                  ``.hoodie/.aux/locks/`` (local files, S3 conditional writes)
``file:///dir``, ``s3://b/prefix`` :class:`StorageLockProvider` with lock files under that URI
``inprocess``                     :class:`InProcessLockProvider` (threads of one process)
================================= ============================================================

With ``hoodie.write.lock.provider`` set to Apache Hudi's class name, the lock is taken by that
provider's protocol instead, shared with Hudi's writers (:mod:`timeline.locks.hudi_filesystem`).

Without a URL: a local table uses the SQLite file at :func:`default_sqlite_url`; a table on any
other storage uses ``storage`` (SQLite on one host cannot coordinate writers on several hosts).
"""

from __future__ import annotations

from timeline.errors import ConfigError
from timeline.locks.base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    Lease,
    LockHandle,
    LockProvider,
    default_owner,
)
from timeline.locks.hudi_filesystem import HUDI_PROVIDER_CLASS, HudiFileSystemLockProvider
from timeline.locks.inprocess import InProcessLockProvider
from timeline.locks.sql import SqlLockProvider, default_sqlite_url
from timeline.locks.storage_lock import StorageLockProvider
from timeline.storage import Storage

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "HudiFileSystemLockProvider",
    "InProcessLockProvider",
    "Lease",
    "LockHandle",
    "LockProvider",
    "SqlLockProvider",
    "StorageLockProvider",
    "default_owner",
    "default_sqlite_url",
    "hudi_lock_provider",
    "lock_provider_for",
]

_SQL_PREFIXES = ("sqlite:", "postgresql:", "postgresql+", "postgres:")


def lock_provider_for(
    url: str | None,
    table_storage: Storage,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> LockProvider:
    """The provider a lock URL names (see the module docstring), for the table at ``table_storage``."""
    if not url:
        url = default_sqlite_url() if table_storage.is_local else "storage"
    if url.startswith(_SQL_PREFIXES):
        return SqlLockProvider(url, lease_seconds=lease_seconds)
    if url == "storage":
        return StorageLockProvider(table_storage, lease_seconds=lease_seconds)
    if url == "inprocess":
        return InProcessLockProvider(lease_seconds=lease_seconds)
    if url.startswith(("file://", "s3://", "s3a://", "memory://", "/")):
        return StorageLockProvider(
            Storage(url, table_storage.options), folder="locks", lease_seconds=lease_seconds
        )
    raise ConfigError(
        "indexer.lock.url",
        f"unknown lock URL {url!r}: use sqlite:///..., postgresql://..., storage, "
        "file:///..., s3://... or inprocess",
    )


def hudi_lock_provider(
    class_name: str,
    table_storage: Storage,
    folder: str = "",
    expire_minutes: int = 0,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> LockProvider:
    """The provider that takes the lock as Apache Hudi's ``class_name`` does
    (``hoodie.write.lock.provider``), lock files in ``folder`` (a URI or path; empty: the
    table's ``.hoodie``)."""
    if class_name == HUDI_PROVIDER_CLASS:
        if not folder:
            return HudiFileSystemLockProvider(
                table_storage, ".hoodie", expire_minutes, lease_seconds
            )
        storage = Storage(folder, table_storage.options)
        return HudiFileSystemLockProvider(storage, "", expire_minutes, lease_seconds)
    raise ConfigError(
        "hoodie.write.lock.provider",
        f"{class_name!r} is not a lock provider this kernel can share with Apache Hudi's "
        f"writers; supported: {HUDI_PROVIDER_CLASS} (or leave it empty and set indexer.lock.url)",
    )
