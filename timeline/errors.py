"""The exception hierarchy shared by every package.

One root, :class:`TableError`; leaves carry the context a caller needs as attributes, so code can
react without parsing messages. Third-party errors are translated at the boundary with
``raise ... from e``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from timeline.instant import Instant


class TableError(Exception):
    """Root of every error raised by async-indexer.

    Errors cross process boundaries (worker processes, Spark executors) by pickling; the default
    pickling re-calls ``__init__`` with the message only, which the leaves' signatures do not
    take, so the message and the context attributes are restored as they are instead.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[TableError], args: tuple[Any, ...], state: dict[str, Any]) -> TableError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# --- storage -------------------------------------------------------------------------------------


class StorageError(TableError):
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


class NotParquetError(TableError):
    """A data or metadata file that should be Parquet cannot be read as Parquet (truncated,
    zero bytes, another format)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} is not a readable Parquet file: {reason}")
        self.path = path
        self.reason = reason


class InvalidInstantError(TableError, ValueError):
    """A string is not a well-formed instant file name or instant time."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"invalid instant {value!r}: {reason}")
        self.value = value
        self.reason = reason


class CorruptInstantError(TableError):
    """An instant file exists but its content cannot be parsed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt instant file {path}: {reason}")
        self.path = path
        self.reason = reason


class InstantAlreadyExistsError(TableError):
    """The state file of an instant already exists (instant files are written once)."""

    def __init__(self, instant: Instant, path: str) -> None:
        super().__init__(f"instant {instant} already exists at {path}")
        self.instant = instant
        self.path = path


class InvalidTransitionError(TableError):
    """A state transition whose previous state is missing, or that goes backwards."""

    def __init__(self, instant: Instant, reason: str) -> None:
        super().__init__(f"cannot transition {instant}: {reason}")
        self.instant = instant
        self.reason = reason


# --- table ---------------------------------------------------------------------------------------


class TableNotFoundError(TableError):
    """No ``.hoodie/hoodie.properties`` at the base path."""

    def __init__(self, base_uri: str) -> None:
        super().__init__(f"no Hudi table at {base_uri} (missing .hoodie/hoodie.properties)")
        self.base_uri = base_uri


class TableAlreadyExistsError(TableError):
    """A table already exists where one is being created."""

    def __init__(self, base_uri: str) -> None:
        super().__init__(f"a table already exists at {base_uri}")
        self.base_uri = base_uri


class TableConfigError(TableError):
    """``hoodie.properties`` is missing keys, has wrong values, or fails its checksum.
    ``damaged``: the file is not what a writer wrote (unparseable, keys missing, a checksum that
    does not match), rather than a table of a kind this release does not take."""

    def __init__(self, path: str, reason: str, damaged: bool = False) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.damaged = damaged


class IndexStateError(TableError):
    """Our index's state file (``.hoodie/.async-indexer/partitions.json``) is unreadable or
    inconsistent, or the index is in a layout this version must migrate first."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DuplicateRecordKeyError(TableError):
    """Record keys live in more than one file group (written while keys were not global: an
    upsert that moved a key to another partition, or a writer whose index is not global): the
    record index is global, one location per key, so it cannot describe the table until the
    extra copies are deleted. ``count`` keys are; ``record_key`` is one, at ``locations``;
    with ``base``, the message names the commands that resolve them."""

    def __init__(
        self, count: int, record_key: str, locations: Sequence[str], base: str | None = None
    ) -> None:
        how = (
            f"list them with `indexer-metadata duplicates {base}`, keep the newest copy of each "
            f"with `indexer-metadata duplicates {base} --output stale.parquet` then "
            f"`indexer-write {base} --input stale.parquet --operation delete`, and build again"
            if base
            else "delete the extra copies, then build it"
        )
        super().__init__(
            f"{count} record key(s) are in more than one file group, e.g. {record_key!r} in "
            f"{' and '.join(locations)}: the record index keeps one location per key; {how}"
        )
        self.count = count
        self.record_key = record_key
        self.locations = tuple(locations)


class RebuildRequiredError(TableError):
    """A completed instant cannot be applied to a metadata partition record by record (a
    rollback of a commit its base files hold): the partition is rebuilt from storage."""

    def __init__(self, partition: str, reason: str) -> None:
        super().__init__(f"metadata partition {partition} must be rebuilt: {reason}")
        self.partition = partition
        self.reason = reason


class ConfigError(TableError, ValueError):
    """A configuration value is unknown or invalid; ``key`` names it."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"config {key}: {reason}")
        self.key = key
        self.reason = reason


# --- locks and heartbeats ------------------------------------------------------------------------


class LockError(TableError):
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


class HeartbeatExpiredError(TableError):
    """An instant's heartbeat expired: its writer is considered dead and must not commit."""

    def __init__(self, instant_time: str, age_seconds: float | None) -> None:
        age = "missing" if age_seconds is None else f"{age_seconds:.1f}s old"
        super().__init__(f"heartbeat of instant {instant_time} expired ({age})")
        self.instant_time = instant_time
        self.age_seconds = age_seconds


# --- writes --------------------------------------------------------------------------------------


class WriteConflictError(TableError):
    """Two writes touched the same file groups; this one was not committed (retry it)."""

    def __init__(self, instant: Instant, other_instant: Instant, file_ids: list[str]) -> None:
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


class RecordKeyConflictError(WriteConflictError):
    """Two writes placed the same record key (each inserted it, or moved it to a partition), or
    one deleted a key it found nowhere while the other placed it, on a table whose record index
    keeps one location per key; this one was not committed (retry it: it then finds the key
    where the other put it)."""

    def __init__(
        self,
        instant: Instant,
        other_instant: Instant | None,
        keys: list[str],
        deleted: bool = False,
    ) -> None:
        shown = ", ".join(repr(k) for k in keys[:5]) + (
            f" and {len(keys) - 5} more" if len(keys) > 5 else ""
        )
        done = "deleted (found nowhere)" if deleted else "placed"
        TableError.__init__(
            self,
            f"record key conflict: keys [{shown}] were {done} by {instant} and "
            + (
                f"placed by {other_instant}"
                if other_instant is not None
                else "placed before the record index was scheduled, while this write ran"
            )
            + f": the record index keeps one location per key; {instant} was not committed, "
            "retry it",
        )
        self.instant = instant
        self.other_instant = other_instant  # type: ignore[assignment]
        self.file_ids = []
        self.keys = keys


class MarkerAlreadyExistsError(TableError):
    """A marker for this data file exists already: the file is being, or was, written."""

    def __init__(self, marker_name: str, instant_time: str) -> None:
        super().__init__(f"marker {marker_name} of instant {instant_time} already exists")
        self.marker_name = marker_name
        self.instant_time = instant_time


class MarkerServerError(TableError):
    """The marker server answered with an error, or could not be reached."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"marker server {url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


class BadRecordsError(TableError):
    """Incoming records cannot be written; ``column`` names the field at fault."""

    def __init__(self, column: str | None, reason: str) -> None:
        where = f"column {column!r}: " if column else ""
        super().__init__(f"bad input: {where}{reason}")
        self.column = column
        self.reason = reason


class UnsupportedTypeError(TableError):
    """A column's type is one the writer cannot write."""

    def __init__(self, column: str, arrow_type: pa.DataType) -> None:
        super().__init__(
            f"column {column!r} has type {arrow_type}, which the writer does not support"
        )
        self.column = column
        self.arrow_type = arrow_type


class InputFileError(TableError):
    """A file given to a command (records to ``indexer-write``, keys to ``lookup``) cannot be
    read."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot read input {path}: {reason}")
        self.path = path
        self.reason = reason


class CommitStateUnknownError(TableError):
    """Completing the instant failed midway: it may or may not have landed. Nothing was deleted;
    the cleaner resolves it once the heartbeat expires."""

    def __init__(self, instant: Instant, cause: BaseException) -> None:
        super().__init__(f"outcome of {instant} is unknown after {type(cause).__name__}: {cause}")
        self.instant = instant
        self.cause = cause


class SparkWriteError(TableError):
    """The Spark job of a write failed; ``reason`` is the error raised in the failing task."""

    def __init__(self, instant_time: str, reason: str) -> None:
        super().__init__(f"spark write {instant_time} failed: {reason}")
        self.instant_time = instant_time
        self.reason = reason


# --- the metadata table --------------------------------------------------------------------------


class UnknownPartitionError(TableError, ValueError):
    """A metadata partition (index type) name this version does not know."""

    def __init__(self, name: str, known: Sequence[str], reason: str | None = None) -> None:
        super().__init__(
            reason or f"unknown metadata partition {name!r}; known: {', '.join(known)}"
        )
        self.name = name
        self.known = tuple(known)


class LogFormatError(TableError):
    """A Hudi log file's block that cannot be read as its type says (a schema missing, an Avro
    type with no Arrow counterpart, a delete block of a format before Hudi 0.14)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"Hudi log block: {reason}")
        self.reason = reason


class BloomFilterFormatError(TableError):
    """Bytes that should be a Parquet split-block bloom filter are not one."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not a Parquet bloom filter: {reason}")
        self.reason = reason


class FilterSyntaxError(TableError, ValueError):
    """A data-skipping filter that does not parse; ``position`` is where in ``text``."""

    def __init__(self, text: str, position: int, reason: str) -> None:
        super().__init__(f"filter {text!r}, at {position}: {reason}")
        self.text = text
        self.position = position
        self.reason = reason


class UnknownColumnError(TableError, ValueError):
    """A filter or a projection names a column the table does not have."""

    def __init__(self, column: str, columns: Sequence[str]) -> None:
        super().__init__(f"no column {column!r} in the table; its columns: {', '.join(columns)}")
        self.column = column
        self.columns = list(columns)


class FilterTypeError(TableError, ValueError):
    """A filter compares a column with a value its type cannot hold (a string with a number)."""

    def __init__(
        self, column: str, column_type: str, value: object, syntax: str | None = None
    ) -> None:
        super().__init__(
            f"filter compares column {column!r} ({column_type}) with {value!r}, "
            f"which is not a {column_type}" + (f"; write {syntax}" if syntax else "")
        )
        self.column = column
        self.column_type = column_type
        self.value = value


class SnapshotUnavailableError(TableError):
    """A read of the table as of an instant, or of the changes since one, that the table can
    no longer serve: a clean deleted files it needs, or what it needs was archived and trimmed.
    ``instant`` is the instant asked for, ``cause`` what went (an instant, a file), ``keep`` the
    setting that keeps more of the table's history."""

    def __init__(self, what: str, instant: str, cause: str, keep: str) -> None:
        super().__init__(f"{what} {instant} cannot be read: {cause}; {keep} keeps more")
        self.instant = instant
        self.cause = cause
        self.keep = keep


# --- indexing ------------------------------------------------------------------------------------


class IndexBuildAbortedError(TableError):
    """An index build was aborted (and cleaned up); ``reason`` says why. It may be retried."""

    def __init__(self, instant: Instant, reason: str) -> None:
        super().__init__(f"index build {instant} aborted: {reason}")
        self.instant = instant
        self.reason = reason


class CatchUpTimeoutError(TableError):
    """Catch-up waited past its deadline for instants that did not complete."""

    def __init__(self, waiting: list[str], timeout: float) -> None:
        shown = ", ".join(waiting[:5]) + ("..." if len(waiting) > 5 else "")
        super().__init__(f"catch-up timed out after {timeout:.0f}s waiting for {shown}")
        self.waiting = waiting
        self.timeout = timeout


class BuildCancelledError(TableError):
    """The build was asked to stop (daemon shutdown); it is aborted cleanly."""

    def __init__(self) -> None:
        super().__init__("cancelled by shutdown")


# --- tests ---------------------------------------------------------------------------------------


class InjectedFailure(TableError):
    """A failpoint (``AIX_FAILPOINT``) raised here on purpose."""

    def __init__(self, point: str) -> None:
        super().__init__(f"injected failure at {point}")
        self.point = point


class HFileFormatError(TableError):
    """Bytes that should be an HFile (Apache Hudi's metadata table) are not one this kernel
    reads: a damaged block or trailer, a checksum that disagrees, an unsupported codec."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: not a readable HFile: {reason}")
        self.path = path
        self.reason = reason
