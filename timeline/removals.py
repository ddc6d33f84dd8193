"""What a completed clean, rollback or restore removed from the table's data files.

Apache Hudi's table services delete data files outside any commit: a **clean** deletes file slices
older than its retention (and the file groups an insert_overwrite or clustering replaced), a
**rollback** deletes the files of a failed or undone write, a **restore** rolls back every write
after a savepoint. Their completed instants say which files went, in Avro
(``HoodieCleanMetadata``, ``HoodieRollbackMetadata``, ``HoodieRestoreMetadata``, each an Avro
object container file with its schema inside); this kernel's own rollbacks write Hudi's Avro too
(:mod:`timeline.hudi_avro`), and earlier versions wrote JSON with a ``deletedFiles`` list, which
is still read. An index that listed those files must drop them, or its listing and validation go
stale once Hudi archives the instants that made them invisible.

The Avro container format is read with ``fastavro`` (a maintained, widely used Avro
implementation) rather than a hand-written decoder.
"""

from __future__ import annotations

import io
import json
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import fastavro

from timeline.errors import CorruptInstantError
from timeline.instant import Action, Instant
from timeline.locks import LockHandle

if TYPE_CHECKING:
    from timeline.table import Table

#: Actions that delete data files without writing any.
REMOVAL_ACTIONS = frozenset({Action.CLEAN, Action.ROLLBACK, Action.RESTORE})

AVRO_MAGIC = b"Obj\x01"


@dataclass(frozen=True)
class Removal:
    """The data files one completed removal instant deleted, per partition path ('' when the
    table is not partitioned), and the partitions it deleted whole. A merge-on-read rollback's
    log files of its target count as deleted: they stay on storage, holding nothing that counts."""

    instant: Instant
    deleted: Mapping[str, frozenset[str]] = field(default_factory=dict)
    whole_partitions: frozenset[str] = frozenset()
    #: the instants a rollback or restore undid (``commitsRollback``), when its metadata says
    rolled_back: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.whole_partitions) or any(self.deleted.values())

    def removes(self, partition: str, file_name: str) -> bool:
        return partition in self.whole_partitions or file_name in self.deleted.get(
            partition, frozenset()
        )


#: Called under the table lock with what a clean or rollback deleted, before it completes: the
#: index's update (the metadata table is above this kernel, so it comes in as a callback).
RemovalHook = Callable[[LockHandle, Removal], None]

#: the entry-point group through which a package above the kernel offers the index's update of a
#: removal (``metadata_table`` registers its own): the kernel names no package above it
HOOK_GROUP = "async_indexer.removal_hooks"


def index_removal_hook(table: Table) -> RemovalHook | None:
    """The index's update of a clean or rollback of ``table``, from the installed packages that
    offer one (None when none does, or the table has no index)."""
    for point in entry_points(group=HOOK_GROUP):
        hook = point.load()(table)
        if hook is not None:
            return hook  # type: ignore[no-any-return]
    return None


def read_avro_records(data: bytes) -> list[dict[str, Any]]:
    """Every record of an Avro object container file."""
    return [r for r in fastavro.reader(io.BytesIO(data)) if isinstance(r, dict)]


def parse_removal(instant: Instant, data: bytes, path: str) -> Removal:
    """The files a completed clean, rollback or restore instant deleted. An empty file (one its
    writer left empty: ``ActiveTimeline.read_content`` waits for one still being written)
    deleted nothing; content that is neither Hudi's Avro nor our JSON raises
    CorruptInstantError."""
    if instant.action not in REMOVAL_ACTIONS:
        raise ValueError(f"{instant} is not a clean, rollback or restore")
    if not data.strip():
        return Removal(instant)
    if data.startswith(AVRO_MAGIC):
        try:
            records = read_avro_records(data)
        except Exception as e:  # fastavro raises several types for truncated or bad files
            raise CorruptInstantError(path, f"unreadable Avro: {e}") from e
        if len(records) != 1:
            raise CorruptInstantError(path, f"expected one Avro record, found {len(records)}")
        return removal_from_record(instant, records[0])
    try:
        content = json.loads(data)
    except ValueError as e:
        raise CorruptInstantError(path, f"neither Avro nor JSON: {e}") from e
    deleted: dict[str, set[str]] = {}
    for file_path in content.get("deletedFiles") or []:
        partition, _, name = str(file_path).rpartition("/")
        deleted.setdefault(partition, set()).add(name)
    return Removal(instant, {p: frozenset(n) for p, n in deleted.items()})


def removal_from_record(instant: Instant, record: Mapping[str, Any]) -> Removal:
    """The files deleted, from Hudi's clean, rollback or restore metadata record (as found in a
    completed instant file or in the archived timeline)."""
    if instant.action is Action.RESTORE:
        batches = (record.get("hoodieRestoreMetadata") or {}).values()
        return _from_partition_metadata(instant, [r for batch in batches for r in batch])
    return _from_partition_metadata(instant, [record])


def _from_partition_metadata(instant: Instant, records: Iterable[Mapping[str, Any]]) -> Removal:
    deleted: dict[str, set[str]] = {}
    whole: set[str] = set()
    undone: set[str] = set()
    for record in records:
        undone.update(str(t) for t in record.get("commitsRollback") or [])
        for key, meta in (record.get("partitionMetadata") or {}).items():
            partition = meta.get("partitionPath", key) or ""
            names = deleted.setdefault(partition, set())
            # a clean names files; a rollback gives full paths
            names.update(posixpath.basename(p) for p in meta.get("successDeleteFiles") or [])
            # a merge-on-read rollback leaves the log files its target wrote in place, their
            # blocks no longer counting (a rollback command block follows them): gone from the
            # index as if deleted
            names.update(posixpath.basename(p) for p in meta.get("logFilesFromFailedCommit") or {})
            if meta.get("isPartitionDeleted"):
                whole.add(partition)
    deleted_files = {p: frozenset(n) for p, n in deleted.items()}
    return Removal(instant, deleted_files, frozenset(whole), frozenset(undone))


__all__ = [
    "HOOK_GROUP",
    "REMOVAL_ACTIONS",
    "Removal",
    "RemovalHook",
    "index_removal_hook",
    "parse_removal",
    "read_avro_records",
    "removal_from_record",
]
