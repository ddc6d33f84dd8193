"""The table's newest base file (whose footer gives the table schema and the rows per byte a
record index is sized by) comes from the newest write's commit metadata, not from listing the
whole table; the listing only when that write's files were replaced since."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        patched.setattr("timeline.fs_view.list_data_files", no_listing)
        assert IndexedSnapshot(table).newest_base_file == want

    replace(table, want)
    after = IndexedSnapshot(table).newest_base_file
    assert after == by_listing(table)
    assert after is not None and after.file_id != want.file_id
