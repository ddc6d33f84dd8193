"""A write of ours on a table with Apache Hudi's own metadata table, set not to keep it
(``indexer.write.hudi_metadata_table=drop``; ``maintain``, the default, is in
test_hudi_metadata_maintained.py): it takes it down as Hudi's writer
does with its metadata table off (partitions cleared in hoodie.properties, then
``.hoodie/metadata`` deleted), before its commit completes; with
``indexer.write.hudi_metadata_table=refuse`` it fails before writing anything. What Hudi 0.15 does
either way is in test_hudi_writes.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timeline import Table
from timeline.config import Config
from timeline.errors import TableConfigError
from timeline.hudi_metadata import HUDI_METADATA_FOLDER
from timeline.table_config import (
    BACKUP_FILE,
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    TableConfig,
)
from timeline.timeline import ActiveTimeline
from writer.client import WriteClient

from .test_client import make_table, rows, snapshot

DROP = Config.resolve(
    explicit={"indexer.lock.url": "inprocess", "indexer.write.hudi_metadata_table": "drop"}
)


def _with_hudi_metadata(base: Path) -> Table:
    table = make_table(str(base))
    WriteClient(table).insert(rows(("a", "sf", 1, 1.0)))
    with table.lock("test") as lock:
        table.update_table_config(
            lock,
            lambda c: TableConfig(
                {
                    **c.props,
                    METADATA_PARTITIONS: "files,column_stats",
                    METADATA_PARTITIONS_INFLIGHT: "",
                }
            ),
        )
    folder = base / HUDI_METADATA_FOLDER / ".hoodie"
    folder.mkdir(parents=True)
    (folder / "hoodie.properties").write_text("hoodie.table.name=hudi_metadata\n")
    (base / HUDI_METADATA_FOLDER / "files").mkdir()
    (base / HUDI_METADATA_FOLDER / "files" / ".files-0000_0.log.1_0-0-0").write_bytes(b"hfile")
    return Table.open(str(base), DROP)


def test_a_commit_takes_hudis_metadata_table_down_before_it_completes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    table = _with_hudi_metadata(tmp_path)
    seen: list[bool] = []
    complete = ActiveTimeline.complete

    def checked(self: ActiveTimeline, *args: Any, **kwargs: Any) -> Any:
        seen.append((tmp_path / HUDI_METADATA_FOLDER).exists())
        return complete(self, *args, **kwargs)

    monkeypatch.setattr(ActiveTimeline, "complete", checked)
    WriteClient(table).upsert(rows(("a", "sf", 2, 5.0)))
    assert seen == [False], "Hudi's metadata table was gone when our commit completed"
    config = table.reload_table_config()
    assert config.props[METADATA_PARTITIONS] == "" and not config.hudi_metadata_partitions
    assert not (tmp_path / BACKUP_FILE).exists()
    assert snapshot(table)["a"]["fare"] == 5.0
    # nothing left to take down: the next commit does not touch hoodie.properties
    properties = (tmp_path / ".hoodie" / "hoodie.properties").read_bytes()
    WriteClient(table).upsert(rows(("a", "sf", 3, 6.0)))
    assert (tmp_path / ".hoodie" / "hoodie.properties").read_bytes() == properties


def test_refuse_fails_the_write_before_it_writes_anything(tmp_path: Path) -> None:
    table = _with_hudi_metadata(tmp_path)
    config = Config.resolve(
        explicit={"indexer.lock.url": "inprocess", "indexer.write.hudi_metadata_table": "refuse"}
    )
    table = Table.open(str(tmp_path), config)
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    with pytest.raises(TableConfigError, match=r"indexer\.write\.hudi_metadata_table=drop"):
        WriteClient(table).upsert(rows(("a", "sf", 2, 5.0)))
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before
    assert table.reload_table_config().hudi_metadata_partitions == ("files", "column_stats")
