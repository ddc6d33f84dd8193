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

With ``hoodie.write.lock.provider`` set to one of Apache Hudi's class names, the lock is taken by
that provider's protocol instead, shared with Hudi's writers: its lock file
(:mod:`timeline.locks.hudi_filesystem`) or its DynamoDB item (:mod:`timeline.locks.hudi_dynamodb`).

Without a URL: a local table uses the SQLite file at :func:`default_sqlite_url`; a table on any
other storage uses ``storage`` (SQLite on one host cannot coordinate writers on several hosts).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from timeline.config import (
    HUDI_AWS_ACCESS_KEY,
    HUDI_AWS_SECRET_KEY,
    HUDI_AWS_SESSION_TOKEN,
    HUDI_LOCK_DYNAMODB_BILLING,
    HUDI_LOCK_DYNAMODB_CREATION_TIMEOUT_MS,
    HUDI_LOCK_DYNAMODB_ENDPOINT,
    HUDI_LOCK_DYNAMODB_PARTITION_KEY,
    HUDI_LOCK_DYNAMODB_READ_CAPACITY,
    HUDI_LOCK_DYNAMODB_REGION,
    HUDI_LOCK_DYNAMODB_TABLE,
    HUDI_LOCK_DYNAMODB_WRITE_CAPACITY,
    HUDI_LOCK_FILESYSTEM_EXPIRE,
    HUDI_LOCK_FILESYSTEM_PATH,
    Config,
)
from timeline.errors import ConfigError
from timeline.locks.base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    Lease,
    LockHandle,
    LockProvider,
    default_owner,
)
from timeline.locks.hudi_dynamodb import (
    HUDI_DYNAMODB_PROVIDER_CLASS,
    DynamoDBLockSettings,
    HudiDynamoDBLockProvider,
)
from timeline.locks.hudi_filesystem import HUDI_PROVIDER_CLASS, HudiFileSystemLockProvider
from timeline.locks.inprocess import InProcessLockProvider
from timeline.locks.storage_lock import StorageLockProvider
from timeline.storage import Storage

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "HudiDynamoDBLockProvider",
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

if TYPE_CHECKING:
    from timeline.locks.sql import SqlLockProvider, default_sqlite_url


def __getattr__(name: str) -> Any:
    """The SQL lock provider, imported when first named: SQLAlchemy takes a quarter of a
    second to import, which a process that takes no SQL lock (a reader, a build's workers)
    does not pay."""
    if name in ("SqlLockProvider", "default_sqlite_url"):
        from timeline.locks import sql

        return getattr(sql, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lock_provider_for(
    url: str | None,
    table_storage: Storage,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> LockProvider:
    """The provider a lock URL names (see the module docstring), for the table at ``table_storage``."""
    if not url and table_storage.is_local:
        from timeline.locks.sql import default_sqlite_url

        url = default_sqlite_url()
    url = url or "storage"
    if url.startswith(_SQL_PREFIXES):
        from timeline.locks.sql import SqlLockProvider

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
    config: Config,
    table_name: str,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> LockProvider:
    """The provider that takes the lock as Apache Hudi's ``class_name`` does
    (``hoodie.write.lock.provider``), from Hudi's own keys in ``config``: a lock file in
    ``hoodie.write.lock.filesystem.path`` (empty: the table's ``.hoodie``), or the item
    ``hoodie.write.lock.dynamodb.partition_key`` (empty: ``table_name``) of a DynamoDB table."""
    if class_name == HUDI_PROVIDER_CLASS:
        folder = config.get(HUDI_LOCK_FILESYSTEM_PATH)
        expire = config.get(HUDI_LOCK_FILESYSTEM_EXPIRE)
        if not folder:
            return HudiFileSystemLockProvider(table_storage, ".hoodie", expire, lease_seconds)
        storage = Storage(folder, table_storage.options)
        return HudiFileSystemLockProvider(storage, "", expire, lease_seconds)
    if class_name == HUDI_DYNAMODB_PROVIDER_CLASS:
        settings = DynamoDBLockSettings(
            table=config.get(HUDI_LOCK_DYNAMODB_TABLE),
            partition_key=config.get(HUDI_LOCK_DYNAMODB_PARTITION_KEY) or table_name,
            region=config.get(HUDI_LOCK_DYNAMODB_REGION)
            or os.environ.get("AWS_REGION")
            or "us-east-1",
            endpoint_url=config.get(HUDI_LOCK_DYNAMODB_ENDPOINT),
            billing_mode=config.get(HUDI_LOCK_DYNAMODB_BILLING),
            read_capacity=config.get(HUDI_LOCK_DYNAMODB_READ_CAPACITY),
            write_capacity=config.get(HUDI_LOCK_DYNAMODB_WRITE_CAPACITY),
            table_creation_timeout_seconds=config.get(HUDI_LOCK_DYNAMODB_CREATION_TIMEOUT_MS)
            / 1000,
            access_key=config.get(HUDI_AWS_ACCESS_KEY),
            secret_key=config.get(HUDI_AWS_SECRET_KEY),
            session_token=config.get(HUDI_AWS_SESSION_TOKEN),
        )
        return HudiDynamoDBLockProvider(settings, lease_seconds)
    raise ConfigError(
        "hoodie.write.lock.provider",
        f"{class_name!r} is not a lock provider this kernel can share with Apache Hudi's "
        f"writers; supported: {HUDI_PROVIDER_CLASS}, {HUDI_DYNAMODB_PROVIDER_CLASS} (or leave "
        "it empty and set indexer.lock.url)",
    )
