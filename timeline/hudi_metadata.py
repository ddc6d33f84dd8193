"""Apache Hudi's own metadata table (``.hoodie/metadata``) as the kernel sees it: whether a table
has one, whether this process keeps it (``indexer.write.hudi_metadata_table=maintain``, the
default: :mod:`metadata_table.hudi_table` writes our commits, cleans and rollbacks into it and
compacts it), its newest compaction (which bounds the data timeline's archival, as Hudi's), and
its removal by a writer set to ``drop``.

Hudi 0.15's readers, with its metadata table on, list a table's files from that table; so does
its writer when it tags an upsert. A commit that does not add its files there is invisible to
them: the harness shows Hudi's reader returning the rows as they were before our upsert, and
Hudi's next upsert merging into the older file version, which loses our update.

So a writer of ours does what Hudi's own writer does when its metadata setting is off
(``HoodieTableMetadataUtil.deleteMetadataTable``): it clears ``hoodie.table.metadata.partitions``
(and ``.inflight``) in ``hoodie.properties``, which Hudi's readers consult before using the
metadata table, and then deletes ``.hoodie/metadata``. Hudi's readers fall back to listing
storage, and Hudi's next writer with the metadata table on builds it again from storage. This
happens under the table lock before our instant completes, so no reader sees our commit while
Hudi's metadata table claims to be current.
"""

from __future__ import annotations

import logging

from timeline.config import HUDI_METADATA_TABLE
from timeline.errors import StorageFileNotFoundError
from timeline.locks import LockHandle
from timeline.table import Table
from timeline.table_config import METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT, TableConfig

logger = logging.getLogger(__name__)

HUDI_METADATA_FOLDER = ".hoodie/metadata"


def hudi_metadata_table_present(table: Table) -> bool:
    """Whether Hudi's readers may use a metadata table of Hudi's on this table."""
    config = table.reload_table_config()
    return bool(
        config.hudi_metadata_partitions
        or config.props.get(METADATA_PARTITIONS_INFLIGHT, "").strip()
        or table.storage.exists(f"{HUDI_METADATA_FOLDER}/.hoodie/hoodie.properties")
    )


def keeps_hudi_metadata_table(table: Table) -> bool:
    """Whether this process's writes and table services keep Hudi's metadata table current
    (``indexer.write.hudi_metadata_table=maintain``) rather than leave it to Hudi's writers."""
    return table.config.get(HUDI_METADATA_TABLE) == "maintain"


def latest_metadata_compaction(table: Table) -> str | None:
    """The instant of the newest completed compaction of Hudi's metadata table (its
    ``<t>001.commit``), or None. Hudi's archiver never archives a data instant at or after it:
    the metadata table's log blocks written after it name data instants its readers look for
    on the active timeline."""
    try:
        names = table.storage.file_names(f"{HUDI_METADATA_FOLDER}/.hoodie")
    except StorageFileNotFoundError:
        return None
    done = [n.removesuffix(".commit") for n in names if n.endswith(".commit")]
    return max((t for t in done if t.isdigit()), default=None)


def take_down_hudi_metadata_table(table: Table, lock: LockHandle, why: str) -> None:
    """Clear Hudi's metadata partitions in ``hoodie.properties``, then delete ``.hoodie/metadata``
    (the order of Hudi's own writer); for a table :func:`hudi_metadata_table_present` found."""

    def cleared(config: TableConfig) -> TableConfig:
        props = dict(config.props)
        for key in (METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT):
            if key in props:
                props[key] = ""
        return TableConfig(props)

    table.update_table_config(lock, cleared)
    lock.ensure_valid()
    table.storage.delete(HUDI_METADATA_FOLDER, recursive=True)
    logger.warning(
        "%s: took down Apache Hudi's metadata table (%s), which %s does not keep; Hudi's readers "
        "list storage until Hudi's next writer with the metadata table on rebuilds it",
        table.base_uri,
        HUDI_METADATA_FOLDER,
        why,
    )
