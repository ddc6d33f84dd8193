"""Moving an index built by an earlier version of this project out of Apache Hudi's namespace.

Earlier versions kept the metadata table in ``.hoodie/metadata`` (Hudi's own metadata table's
folder) and the partitions' states in Hudi's ``hoodie.table.metadata.*`` keys. Such a table is
recognised by ``.hoodie/metadata/.hoodie/hoodie.properties`` naming PARQUET base files: Hudi's own
metadata table always uses HFile.

:func:`migrate` moves it, under the table lock, in an order that a crash at any point leaves
resumable (the next call finishes it) and never leaves Hudi reading our files as its own:

1. copy every file of the old folder into ``.hoodie/.async-indexer`` (create-if-absent, so a
   resumed run skips what it copied);
2. write the state file from the old keys, unless a resumed run already wrote it;
3. remove our keys from ``hoodie.properties`` (Hudi's backup-then-rewrite);
4. delete the old folder, its ``hoodie.properties`` last, since it is what marks the old layout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from timeline import properties
from timeline.errors import FileAlreadyExistsError, StorageFileNotFoundError
from timeline.index_state import INDEX_FOLDER, STATE_FILE, IndexState
from timeline.table import Table
from timeline.table_config import (
    BASE_FILE_FORMAT,
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    PROPERTIES_FILE,
    TableConfig,
)

logger = logging.getLogger(__name__)

LEGACY_FOLDER = ".hoodie/metadata"
#: The hoodie.properties key earlier versions kept the column_stats columns in.
LEGACY_COLUMNS_PROPERTY = "indexer.metadata.column_stats.columns"
_LEGACY_KEYS = (METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT, LEGACY_COLUMNS_PROPERTY)


@dataclass(frozen=True)
class MigrationResult:
    migrated: bool
    files_copied: int = 0
    state: IndexState | None = None


def has_legacy_index(table: Table) -> bool:
    """Whether ``.hoodie/metadata`` holds a metadata table of ours (not Hudi's)."""
    try:
        data = table.storage.child(LEGACY_FOLDER).read(PROPERTIES_FILE)
    except StorageFileNotFoundError:
        return False
    try:
        props = properties.loads(data.decode("latin-1"))
    except ValueError:
        return False
    return props.get(BASE_FILE_FORMAT, "").upper() == "PARQUET"


def migrate(table: Table) -> MigrationResult:
    """Move a legacy index to ``.hoodie/.async-indexer``; does nothing on any other table."""
    if not has_legacy_index(table):
        return MigrationResult(False)
    old, new = table.storage.child(LEGACY_FOLDER), table.storage.child(INDEX_FOLDER)
    with table.lock("migrate the index out of .hoodie/metadata") as lock:
        if not has_legacy_index(table):  # another process finished it meanwhile
            return MigrationResult(False)
        entries = [e for e in old.list("", recursive=True) if not e.is_dir]
        copied = 0
        for entry in entries:
            if entry.path == PROPERTIES_FILE and new.exists(PROPERTIES_FILE):
                continue
            lock.ensure_valid()
            try:
                new.create(entry.path, old.read(entry.path))
                copied += 1
            except FileAlreadyExistsError:
                pass  # copied by an earlier, interrupted run
        if not table.storage.exists(STATE_FILE):
            config = table.reload_table_config()
            columns = config.props.get(LEGACY_COLUMNS_PROPERTY, "")
            state = IndexState(
                completed=tuple(sorted(config.hudi_metadata_partitions)),
                inflight=tuple(
                    sorted(
                        p
                        for p in config.props.get(METADATA_PARTITIONS_INFLIGHT, "").split(",")
                        if p
                    )
                ),
                column_stats_columns=tuple(c for c in columns.split(",") if c),
            )
            table.update_index_state(lock, lambda _: state)
        table.update_table_config(
            lock,
            lambda c: TableConfig({k: v for k, v in c.props.items() if k not in _LEGACY_KEYS}),
        )
        for entry in entries:
            if entry.path != PROPERTIES_FILE:
                lock.ensure_valid()
                old.delete(entry.path)
        old.delete("", recursive=True)
        state = table.reload_index_state()
    logger.info(
        "migrated the index of %s from %s to %s (%d files; completed=%s inflight=%s)",
        table.base_uri,
        LEGACY_FOLDER,
        INDEX_FOLDER,
        copied,
        ",".join(state.completed) or "-",
        ",".join(state.inflight) or "-",
    )
    return MigrationResult(True, copied, state)
