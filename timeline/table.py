"""A table: its storage, ``hoodie.properties``, timeline, lock and heartbeats, in one handle."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable

from timeline.archived import ArchivedInstant, ArchivedTimeline
from timeline.config import (
    FAILED_WRITES_POLICY,
    HEARTBEAT_TOLERABLE_MISSES,
    HUDI_LOCK_PROVIDER,
    LOCK_URL,
    Config,
)
from timeline.errors import (
    ConfigError,
    FileAlreadyExistsError,
    StorageFileNotFoundError,
    TableAlreadyExistsError,
    TableConfigError,
    TableNotFoundError,
)
from timeline.heartbeat import Heartbeat, heartbeat_age, is_expired
from timeline.index_state import STATE_FILE, IndexState
from timeline.locks import (
    LockHandle,
    LockProvider,
    default_owner,
    hudi_lock_provider,
    lock_provider_for,
)
from timeline.storage import Storage
from timeline.table_config import (
    ARCHIVELOG_FOLDER,
    BACKUP_FILE,
    PROPERTIES_FILE,
    TableConfig,
    TableType,
)
from timeline.timeline import META_FOLDER, ActiveTimeline

logger = logging.getLogger(__name__)


def read_table_config(storage: Storage) -> TableConfig:
    """Read ``hoodie.properties``, falling back to its backup when it is missing or invalid."""
    try:
        return _parsed(storage.read(PROPERTIES_FILE), storage.uri(PROPERTIES_FILE))
    except StorageFileNotFoundError as e:
        primary_error: Exception = e
    except TableConfigError as e:
        primary_error = e
    try:
        config = TableConfig.parse(storage.read(BACKUP_FILE), storage.uri(BACKUP_FILE))
    except StorageFileNotFoundError:
        if isinstance(primary_error, StorageFileNotFoundError):
            raise TableNotFoundError(storage.base_uri) from primary_error
        assert isinstance(primary_error, TableConfigError)
        if not primary_error.damaged:  # a table of a kind this release does not take
            raise primary_error from None
        raise TableConfigError(
            primary_error.path,
            f"{primary_error.reason}; every reader and writer needs it: restore it from a copy "
            f"(there is no {BACKUP_FILE} to fall back on)",
        ) from None
    logger.warning("%s unusable (%s); using %s", PROPERTIES_FILE, primary_error, BACKUP_FILE)
    return config


@functools.lru_cache(maxsize=64)
def _parsed(data: bytes, path: str) -> TableConfig:
    """``hoodie.properties`` parsed, kept by its bytes (a TableConfig is immutable): opening a
    table again, as a query service does per request, reads the file but parses it once
    (about half of a warm open)."""
    return TableConfig.parse(data, path)


class Table:
    """Open with :meth:`open` or :meth:`create`; cheap to construct, does no I/O until used."""

    def __init__(self, storage: Storage, table_config: TableConfig, config: Config | None = None):
        self.storage = storage
        self.config = config or Config.resolve()
        self._table_config = table_config
        self.timeline = ActiveTimeline(storage)
        self._lock_provider: LockProvider | None = None

    def __repr__(self) -> str:
        return f"Table({self.base_uri!r}, name={self._table_config.name!r})"

    @property
    def base_uri(self) -> str:
        return self.storage.base_uri

    # --- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def open(cls, base_uri: str, config: Config | None = None) -> Table:
        config = config or Config.resolve()
        storage = Storage(base_uri, config.storage_options)
        return cls(storage, read_table_config(storage), config)

    @classmethod
    def create(
        cls,
        base_uri: str,
        name: str,
        record_key_fields: Iterable[str],
        partition_fields: Iterable[str] = (),
        precombine_field: str | None = None,
        table_type: TableType = TableType.COPY_ON_WRITE,
        database: str = "",
        config: Config | None = None,
    ) -> Table:
        """Create ``hoodie.properties`` (create-if-absent: an existing table is never replaced)."""
        config = config or Config.resolve()
        storage = Storage(base_uri, config.storage_options)
        table_config = TableConfig.new(
            name, record_key_fields, partition_fields, precombine_field, table_type, database
        )
        try:
            storage.create(PROPERTIES_FILE, table_config.to_bytes())
        except FileAlreadyExistsError as e:
            raise TableAlreadyExistsError(storage.base_uri) from e
        logger.info("created table %s at %s", name, storage.base_uri)
        return cls(storage, table_config, config)

    def close(self) -> None:
        if self._lock_provider is not None:
            self._lock_provider.close()
            self._lock_provider = None

    # --- table config ----------------------------------------------------------------------------

    @property
    def table_config(self) -> TableConfig:
        """``hoodie.properties`` as last read (see :meth:`reload_index_state` for our index's
        state)."""
        return self._table_config

    def reload_table_config(self) -> TableConfig:
        self._table_config = read_table_config(self.storage)
        return self._table_config

    def update_table_config(
        self, lock: LockHandle, change: Callable[[TableConfig], TableConfig]
    ) -> TableConfig:
        """Read, change and rewrite ``hoodie.properties`` under the table lock ``lock``, as Hudi
        does (backup first). Only the migration of an old index layout and a writer taking down Hudi's
        own metadata table (:mod:`timeline.hudi_metadata`) rewrite it."""
        current = self.reload_table_config()
        updated = change(current)
        if updated == current:
            return current
        lock.ensure_valid()
        self.storage.overwrite(BACKUP_FILE, current.to_bytes())
        self.storage.overwrite(PROPERTIES_FILE, updated.to_bytes())
        self.storage.delete(BACKUP_FILE)
        self._table_config = updated
        return updated

    def archive(self) -> ArchivedTimeline:
        """Apache Hudi's archived timeline (``hoodie.archivelog.folder`` under ``.hoodie/``),
        listed on first use and read file by file on demand, as it may be large."""
        folder = self._table_config.get(ARCHIVELOG_FOLDER).strip("/") or "archived"
        return ArchivedTimeline(self.storage, f"{META_FOLDER}/{folder}")

    def archived_timeline(self) -> list[ArchivedInstant]:
        """Every completed instant Apache Hudi archived, oldest first."""
        return self.archive().instants()

    # --- our index's state -----------------------------------------------------------------------

    def reload_index_state(self) -> IndexState:
        """The state of our index's partitions, read now (read it under the lock before acting
        on it); a table without the file has no index."""
        try:
            data = self.storage.read(STATE_FILE)
        except StorageFileNotFoundError:
            return IndexState()
        return IndexState.parse(data, self.storage.uri(STATE_FILE))

    def update_index_state(
        self, lock: LockHandle, change: Callable[[IndexState], IndexState]
    ) -> IndexState:
        """Read, change and rewrite the index's state file (one atomic overwrite) under ``lock``."""
        current = self.reload_index_state()
        updated = change(current)
        if updated == current:
            return current
        lock.ensure_valid()
        self.storage.overwrite(STATE_FILE, updated.to_bytes())
        return updated

    def update_metadata_partitions(
        self,
        lock: LockHandle,
        *,
        add_inflight: Iterable[str] = (),
        complete: Iterable[str] = (),
        remove: Iterable[str] = (),
    ) -> IndexState:
        """Move metadata partitions between inflight / completed / absent, atomically."""
        add, done, drop = list(add_inflight), list(complete), list(remove)
        updated = self.update_index_state(
            lock, lambda s: s.with_partitions(add_inflight=add, complete=done, remove=drop)
        )
        logger.info(
            "metadata partitions of %s: completed=%s inflight=%s",
            self.base_uri,
            ",".join(updated.completed) or "-",
            ",".join(updated.inflight) or "-",
        )
        return updated

    # --- locks and heartbeats --------------------------------------------------------------------

    @property
    def lock_provider(self) -> LockProvider:
        if self._lock_provider is None:
            config, lease = self.config, self.config.lock_lease_seconds
            hudi = config.get(HUDI_LOCK_PROVIDER)
            if hudi and config.get(LOCK_URL):
                raise ConfigError(
                    HUDI_LOCK_PROVIDER.key,
                    f"set either it (the lock Apache Hudi's writers take) or {LOCK_URL.key} "
                    "(a lock only this project takes), not both",
                )
            self._lock_provider = (
                hudi_lock_provider(hudi, self.storage, config, self._table_config.name, lease)
                if hudi
                else lock_provider_for(config.get(LOCK_URL), self.storage, lease_seconds=lease)
            )
        return self._lock_provider

    @property
    def lock_name(self) -> str:
        return f"table:{self.base_uri}"

    def lock(self, purpose: str = "", timeout: float | None = None) -> LockHandle:
        """Acquire the table lock (use as ``with table.lock("commit 2026..."):``)."""
        wait = self.config.lock_timeout_seconds if timeout is None else timeout
        return self.lock_provider.acquire(self.lock_name, default_owner(purpose), timeout=wait)

    def heartbeat(self, instant_time: str) -> Heartbeat:
        return Heartbeat(
            self.storage,
            instant_time,
            interval=self.config.heartbeat_interval_seconds,
            tolerable_misses=self.config.get(HEARTBEAT_TOLERABLE_MISSES),
        )

    def heartbeat_expired(self, instant_time: str) -> bool:
        """Whether the writer of ``instant_time`` is not known to be alive: its heartbeat expired
        or there is none. Enough to stop waiting for it or to skip it as a conflict candidate,
        never to roll it back (see :meth:`writer_is_dead`)."""
        return is_expired(
            self.storage,
            instant_time,
            self.config.heartbeat_interval_seconds,
            self.config.get(HEARTBEAT_TOLERABLE_MISSES),
        )

    def writer_is_dead(self, instant_time: str) -> bool:
        """Whether the writer of pending ``instant_time`` is provably dead, so that its write may
        be rolled back: its heartbeat file exists and expired. A missing heartbeat file proves
        nothing where the table's writers clean up eagerly (Apache Hudi's default: no heartbeat,
        the writer rolls its own failed write back when it next starts); it counts as expired
        only with ``hoodie.cleaner.policy.failed.writes=LAZY``, and with ``NEVER`` nothing is."""
        policy = self.config.get(FAILED_WRITES_POLICY)
        if policy == "NEVER":
            return False
        age = heartbeat_age(self.storage, instant_time)
        if age is None:
            return policy == "LAZY"
        return age > self.heartbeat_expiry_seconds

    @property
    def heartbeat_expiry_seconds(self) -> float:
        """The heartbeat age past which a writer counts as dead: the interval times the misses
        tolerated, as this table's configuration says (a writer's own settings may differ)."""
        return self.config.heartbeat_interval_seconds * self.config.get(HEARTBEAT_TOLERABLE_MISSES)
