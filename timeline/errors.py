"""The exception hierarchy shared by every package.

One root, :class:`IndexerError`; leaves carry the context a caller needs as attributes, so code can
react without parsing messages. Third-party errors are translated at the boundary with
``raise ... from e``.
"""

from __future__ import annotations

from typing import Any


class IndexerError(Exception):
    """Root of every error raised by async-indexer.

    Errors cross process boundaries (worker processes, Spark executors) by pickling; the default
    pickling re-calls ``__init__`` with the message only, which the leaves' signatures do not
    take, so the message and the context attributes are restored as they are instead.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[IndexerError], args: tuple[Any, ...], state: dict[str, Any]) -> IndexerError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# --- storage -------------------------------------------------------------------------------------


class StorageError(IndexerError):
    """A storage operation failed; ``path`` is the path it was acting on."""

    def __init__(self, message: str, *, path: str, operation: str) -> None:
        super().__init__(f"{operation} {path}: {message}")
        self.path = path
        self.operation = operation


class StorageFileNotFoundError(StorageError):
    """The path does not exist."""

    def __init__(self, path: str, operation: str = "read") -> None:
        super().__init__("no such file", path=path, operation=operation)


class FileAlreadyExistsError(StorageError):
    """A create-if-absent found the path already present; nothing was written."""

    def __init__(self, path: str) -> None:
        super().__init__("already exists", path=path, operation="create")


class InvalidPathError(StorageError, ValueError):
    """A path tried to leave the storage root (``..``, an absolute path) or is malformed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(reason, path=path, operation="resolve")
        self.reason = reason


class UnsupportedStorageError(StorageError):
    """The URI scheme has no atomic create-if-absent, so the kernel refuses to write to it."""


# --- timeline ------------------------------------------------------------------------------------


class NotParquetError(IndexerError):
    """A data or metadata file that should be Parquet cannot be read as Parquet (truncated,
    zero bytes, another format)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} is not a readable Parquet file: {reason}")
        self.path = path
        self.reason = reason


class InvalidInstantError(IndexerError, ValueError):
    """A string is not a well-formed instant file name or instant time."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"invalid instant {value!r}: {reason}")
        self.value = value
        self.reason = reason


class CorruptInstantError(IndexerError):
    """An instant file exists but its content cannot be parsed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt instant file {path}: {reason}")
        self.path = path
        self.reason = reason


class InstantAlreadyExistsError(IndexerError):
    """The state file of an instant already exists (instant files are written once)."""

    def __init__(self, instant: object, path: str) -> None:
        super().__init__(f"instant {instant} already exists at {path}")
        self.instant = instant
        self.path = path


class InvalidTransitionError(IndexerError):
    """A state transition whose previous state is missing, or that goes backwards."""

    def __init__(self, instant: object, reason: str) -> None:
        super().__init__(f"cannot transition {instant}: {reason}")
        self.instant = instant
        self.reason = reason


# --- table ---------------------------------------------------------------------------------------


class TableNotFoundError(IndexerError):
    """No ``.hoodie/hoodie.properties`` at the base path."""

    def __init__(self, base_uri: str) -> None:
        super().__init__(f"no Hudi table at {base_uri} (missing .hoodie/hoodie.properties)")
        self.base_uri = base_uri


class TableAlreadyExistsError(IndexerError):
    """A table already exists where one is being created."""

    def __init__(self, base_uri: str) -> None:
        super().__init__(f"a table already exists at {base_uri}")
        self.base_uri = base_uri


class TableConfigError(IndexerError):
    """``hoodie.properties`` is missing keys, has wrong values, or fails its checksum."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class IndexStateError(IndexerError):
    """Our index's state file (``.hoodie/.async-indexer/partitions.json``) is unreadable or
    inconsistent, or the index is in a layout this version must migrate first."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ConfigError(IndexerError, ValueError):
    """A configuration value is unknown or invalid; ``key`` names it."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"config {key}: {reason}")
        self.key = key
        self.reason = reason


# --- locks and heartbeats ------------------------------------------------------------------------


class LockError(IndexerError):
    """A lock provider failed."""


class LockTimeoutError(LockError):
    """The lock could not be acquired in time; ``holder`` is whoever held it when we gave up."""

    def __init__(self, lock_name: str, timeout: float, holder: str | None) -> None:
        who = holder if holder else "unknown holder"
        super().__init__(
            f"timed out after {timeout:.1f}s waiting for lock {lock_name!r} (held by {who})"
        )
        self.lock_name = lock_name
        self.timeout = timeout
        self.holder = holder


class LockLostError(LockError):
    """The lease of a held lock expired or was taken over; nothing may be written under it."""

    def __init__(self, lock_name: str, owner: str, reason: str) -> None:
        super().__init__(f"lock {lock_name!r} held by {owner} was lost: {reason}")
        self.lock_name = lock_name
        self.owner = owner
        self.reason = reason


class HeartbeatExpiredError(IndexerError):
    """An instant's heartbeat expired: its writer is considered dead and must not commit."""

    def __init__(self, instant_time: str, age_seconds: float | None) -> None:
        age = "missing" if age_seconds is None else f"{age_seconds:.1f}s old"
        super().__init__(f"heartbeat of instant {instant_time} expired ({age})")
        self.instant_time = instant_time
        self.age_seconds = age_seconds


# --- writes --------------------------------------------------------------------------------------


class WriteConflictError(IndexerError):
    """Two writes touched the same file groups; this one was not committed (retry it)."""

    def __init__(self, instant: object, other_instant: object, file_ids: list[str]) -> None:
        shown = ", ".join(file_ids[:5]) + (
            f" and {len(file_ids) - 5} more" if len(file_ids) > 5 else ""
        )
        super().__init__(
            f"cannot resolve conflicts for overlapping writes: {instant} and {other_instant} both "
            f"modify file groups [{shown}]; {instant} was not committed, retry it"
        )
        self.instant = instant
        self.other_instant = other_instant
        self.file_ids = file_ids


class MarkerAlreadyExistsError(IndexerError):
    """A marker for this data file exists already: the file is being, or was, written."""

    def __init__(self, marker_name: str, instant_time: str) -> None:
        super().__init__(f"marker {marker_name} of instant {instant_time} already exists")
        self.marker_name = marker_name
        self.instant_time = instant_time


# --- indexing ------------------------------------------------------------------------------------


class IndexBuildAbortedError(IndexerError):
    """An index build was aborted (and cleaned up); ``reason`` says why. It may be retried."""

    def __init__(self, instant: object, reason: str) -> None:
        super().__init__(f"index build {instant} aborted: {reason}")
        self.instant = instant
        self.reason = reason


class CatchUpTimeoutError(IndexerError):
    """Catch-up waited past its deadline for instants that did not complete."""

    def __init__(self, waiting: list[str], timeout: float) -> None:
        shown = ", ".join(waiting[:5]) + ("..." if len(waiting) > 5 else "")
        super().__init__(f"catch-up timed out after {timeout:.0f}s waiting for {shown}")
        self.waiting = waiting
        self.timeout = timeout
