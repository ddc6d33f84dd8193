"""The table's newest base file (whose footer gives the table schema and the rows per byte a
record index is sized by) comes from the newest write's commit metadata, not from listing the
whole table; the listing only when that write's files were replaced since."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata_table.read import snapshot as snapshot_module
from metadata_table.read.snapshot import IndexedSnapshot
from timeline import Action, Table
from timeline.commit_metadata import CommitMetadata
from timeline.fs_view import BaseFile, FileSystemView
from writer.client import WriteClient

from .test_metadata_table import keys, make_table, rows


def by_listing(table: Table) -> BaseFile | None:
    """The rule on the whole listing: the latest base file with the newest (instant, path)."""
    view = FileSystemView(table.timeline, table.timeline.load())
    return max(view.latest_base_files(), key=lambda b: (b.instant_time, b.path), default=None)


def replace(table: Table, newest: BaseFile) -> None:
    """A completed replacecommit that replaces ``newest``'s file group and writes nothing (as
    Hudi's delete_partition does)."""
    requested = table.timeline.create_requested(Action.REPLACE_COMMIT)
    inflight = table.timeline.transition_to_inflight(requested)
    metadata = CommitMetadata(
        operation_type="DELETE_PARTITION",
        partition_to_replace_file_ids={newest.partition_path: (newest.file_id,)},
    )
    table.timeline.complete(inflight, metadata.to_json())


def test_the_newest_base_file_without_a_listing_and_after_a_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path / "t")
    assert IndexedSnapshot(table).newest_base_file is None  # no write yet
    with WriteClient(table) as client:
        client.insert(rows(keys(0, 30)))
        client.upsert(rows(keys(10, 40), ts=2))
    want = by_listing(table)
    assert want is not None

    def no_listing(*_: object) -> None:
        raise AssertionError("the whole table was listed")

    with monkeypatch.context() as patched:
        patched.setattr("timeline.fs_view.data_file_paths", no_listing)
        assert IndexedSnapshot(table).newest_base_file == want

    replace(table, want)
    after = IndexedSnapshot(table).newest_base_file
    assert after == by_listing(table)
    assert after is not None and after.file_id != want.file_id


def test_a_new_snapshot_reads_no_file_a_snapshot_before_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest write's commit metadata, the newest file's schema and whether its keys are made
    from the key fields are kept in the process: a new snapshot of an unchanged table (a query
    service's next query) reads none of them again; after a write it reads the new ones."""
    table = make_table(tmp_path / "t")
    with WriteClient(table) as client:
        client.insert(rows(keys(0, 30)))
    first = IndexedSnapshot(table)
    key_filter = "uuid = 'k0007'"
    assert first.asked_keys(first.bind(key_filter))[0] == ["k0007"]
    reads: list[str] = []
    for name in ("read_parquet_schema", "read_parquet_head"):
        real = getattr(snapshot_module, name)
        monkeypatch.setattr(
            snapshot_module,
            name,
            lambda *a, _real=real, _name=name, **k: reads.append(_name) or _real(*a, **k),
        )
    real_parse = CommitMetadata.from_bytes
    monkeypatch.setattr(
        CommitMetadata,
        "from_bytes",
        staticmethod(lambda *a, **k: reads.append("commit metadata") or real_parse(*a, **k)),
    )
    again = IndexedSnapshot(table)
    assert again.newest_base_file == first.newest_base_file
    assert again.table_schema == first.table_schema
    assert again.asked_keys(again.bind(key_filter))[0] == ["k0007"]
    assert reads == []
    with WriteClient(table) as client:
        client.insert(rows(keys(30, 40)))
    after = IndexedSnapshot(table)
    assert after.newest_base_file == by_listing(table) != first.newest_base_file
    after.asked_keys(after.bind(key_filter))
    assert sorted(set(reads)) == ["commit metadata", "read_parquet_head", "read_parquet_schema"]
