"""An index built by an earlier version (in ``.hoodie/metadata``, states in Hudi's
``hoodie.table.metadata.*`` keys) is moved to ``.hoodie/.async-indexer`` by ``indexer migrate`` or
by the next build, even after a crash half-way; writers refuse the old layout until then."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer
from metadata_table import migrate as migration
from metadata_table.layout import COLUMN_STATS, FILES
from metadata_table.maintenance import build_records, initialize
from metadata_table.table import MetadataTable
from timeline import Table, properties
from timeline.config import LOCK_URL
from timeline.errors import IndexStateError
from timeline.index_state import INDEX_FOLDER, STATE_FILE
from timeline.table_config import PROPERTIES_FILE
from writer.client import WriteClient

from ..metadata_table.test_metadata_table import keys, rows
from .test_indexer import make_table


def _legacy_table(tmp_path: Path) -> Table:
    """A table whose index sits where earlier versions put it, as they left it."""
    table = make_table(tmp_path / "t")
    initialize(table, [FILES, COLUMN_STATS], columns=["fare", "ts"])
    base = Path(table.base_uri)
    (base / STATE_FILE).unlink()
    shutil.move(base / INDEX_FOLDER, base / migration.LEGACY_FOLDER)
    props = properties.loads((base / PROPERTIES_FILE).read_text("latin-1"))
    props["hoodie.table.metadata.partitions"] = "column_stats,files"
    props["hoodie.table.metadata.partitions.inflight"] = ""
    props[migration.LEGACY_COLUMNS_PROPERTY] = "fare,ts"
    (base / PROPERTIES_FILE).write_text(properties.dumps(props), "latin-1")
    reopened = Table.open(table.base_uri, table.config)
    assert migration.has_legacy_index(reopened)
    return reopened


def _assert_migrated(table: Table) -> None:
    base = Path(table.base_uri)
    assert not (base / migration.LEGACY_FOLDER).exists()
    assert not migration.has_legacy_index(table)
    props = properties.loads((base / PROPERTIES_FILE).read_text("latin-1"))
    assert not [k for k in props if "table.metadata" in k or k.startswith("indexer.")], props
    state = table.reload_index_state()
    assert state.completed == (COLUMN_STATS, FILES)
    assert state.column_stats_columns == ("fare", "ts")
    timeline = table.timeline.load()
    reader = MetadataTable(table).reader(timeline)
    for partition, columns in ((FILES, None), (COLUMN_STATS, ["fare", "ts"])):
        oracle = build_records(table, timeline, partition, columns)
        assert reader.read(partition).to_pylist() == oracle.to_pylist(), partition


def test_indexer_migrate_moves_the_legacy_index(tmp_path: Path) -> None:
    table = _legacy_table(tmp_path)
    with pytest.raises(IndexStateError, match="run `indexer migrate"):
        WriteClient(table).insert(rows(keys(900, 905)))

    lock_url = table.config.get(LOCK_URL)
    cli = [sys.executable, "-m", "indexer", "migrate", table.base_uri, "--lock-url", lock_url]
    done = subprocess.run(cli, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "migrated the index to .hoodie/.async-indexer" in done.stdout
    _assert_migrated(table)
    again = subprocess.run(cli, capture_output=True, text=True)
    assert "nothing to migrate" in again.stdout

    WriteClient(table).insert(rows(keys(900, 905)))  # writes again, and keeps the index exact
    _assert_migrated(table)


def test_a_migration_interrupted_half_way_is_finished_by_the_next_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    table = _legacy_table(tmp_path)

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("killed after the copy and the state file")

    with monkeypatch.context() as patch:
        patch.setattr(Table, "update_table_config", crash)
        with pytest.raises(RuntimeError, match="killed"):
            migration.migrate(table)
    assert migration.has_legacy_index(table)
    assert (Path(table.base_uri) / STATE_FILE).is_file()

    AsyncIndexer(table, spark=spark).run([FILES])  # migrates first; FILES is already completed
    _assert_migrated(table)
