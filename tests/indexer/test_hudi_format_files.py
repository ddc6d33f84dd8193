"""``indexer run --format hudi`` with ``files`` on a table without Apache Hudi's metadata table
(tests/indexer/test_hudi_format_build.py checks the result against Hudi's own build): what
the build creates, what an abort leaves, and the refusals, on tables our writer made."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from indexer.hudi_format import HudiFormatIndexer
from indexer.indexer import IndexerOptions
from metadata_table.hudi_table import HudiMetadataTable
from timeline import Table
from timeline.errors import ConfigError, IndexBuildAbortedError, TableError
from timeline.formats import metadata_records as records
from writer.client import WriteClient

from ..metadata_table.test_hudi_build import written_table
from ..metadata_table.test_metadata_table import keys, make_table, rows

PARTITIONS = ["files", "column_stats", "record_index"]


def _indexer(table: Table) -> HudiFormatIndexer:
    return HudiFormatIndexer(Table.open(table.base_uri, table.config), IndexerOptions())


def test_files_creates_the_metadata_table_and_our_writers_keep_it(tmp_path: Path) -> None:
    table = written_table(tmp_path)
    done = _indexer(table).run(PARTITIONS)
    assert done is not None and done.is_completed
    hudi = HudiMetadataTable(Table.open(table.base_uri, table.config))
    assert sorted(hudi.partitions) == sorted(PARTITIONS)
    listed = hudi.records("files")
    assert sorted(listed[records.ALL_PARTITIONS_KEY]["filesystemMetadata"]) == ["la", "ny", "sf"]
    assert sum(len(listed[p]["filesystemMetadata"]) for p in ("la", "ny", "sf")) == 12
    with WriteClient(Table.open(table.base_uri, table.config)) as client:
        client.upsert(rows(keys(0, 10), ts=2))
    reports = _indexer(table).hudi.validate()
    assert [r.partition for r in reports if r.ok] == PARTITIONS, reports


@pytest.mark.parametrize("point", ["build.mid", "execute.after_build", "complete.before"])
def test_an_aborted_files_build_leaves_no_metadata_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    table = written_table(tmp_path)
    properties = Path(table.base_uri.removeprefix("file://"), ".hoodie/hoodie.properties")
    before = properties.read_bytes()
    monkeypatch.setenv("AIX_FAILPOINT", point)
    with pytest.raises(IndexBuildAbortedError):
        _indexer(table).run(PARTITIONS)
    assert not Path(table.base_uri.removeprefix("file://"), ".hoodie/metadata").exists()
    assert properties.read_bytes() == before
    monkeypatch.delenv("AIX_FAILPOINT")
    assert _indexer(table).run(PARTITIONS) is not None


def test_a_leftover_metadata_folder_without_files_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Hudi writer's initialization that failed leaves a folder Hudi's writers start again:
    so does the build, saying so."""
    table = written_table(tmp_path)
    leftover = Path(table.base_uri.removeprefix("file://"), ".hoodie/metadata/files/stale.hfile")
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half")
    caplog.set_level(logging.INFO, "metadata_table.hudi_build")
    assert _indexer(table).run(PARTITIONS) is not None
    assert not leftover.exists()
    assert "a metadata table without a completed files partition" in caplog.text


def test_without_files_a_table_without_a_metadata_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="add files to --index-types"):
        _indexer(written_table(tmp_path)).run(["column_stats"])


def test_a_partition_completed_after_scheduling_fails_the_build_before_writing(
    tmp_path: Path,
) -> None:
    """A Hudi writer that made the metadata table between our schedule and our build: the build
    fails and leaves the metadata table it made alone."""
    table = written_table(tmp_path)
    indexer = _indexer(table)
    scheduled = indexer.schedule(PARTITIONS)
    assert scheduled.instant is not None
    other = make_table(tmp_path / "other")
    with WriteClient(other) as client:
        client.insert(rows(keys(0, 10)))
    assert _indexer(other).run(["files"]) is not None
    theirs = Path(table.base_uri.removeprefix("file://"), ".hoodie/metadata")
    with table.lock("a Hudi writer") as lock:  # theirs: a files partition, listed as completed
        folder = Path(other.base_uri.removeprefix("file://"), ".hoodie/metadata")
        shutil.copytree(folder, theirs)
        table.update_table_config(
            lock,
            lambda c: type(c)({**c.props, "hoodie.table.metadata.partitions": "files"}),
        )
    marker = sorted(theirs.glob("files/*.hfile"))
    upto = table.timeline.load().completed().last()
    assert upto is not None
    with pytest.raises(TableError, match="files became completed"):  # the build's own check
        indexer.hudi.build(PARTITIONS, upto.timestamp)
    assert sorted(theirs.glob("files/*.hfile")) == marker
    with pytest.raises(IndexBuildAbortedError, match="files completed in Apache Hudi"):
        indexer.execute(scheduled.instant.timestamp)  # (found on resuming, under the lock)
    assert sorted(theirs.glob("files/*.hfile")) == marker


def test_the_spark_engine_builds_through_the_same_protocol(tmp_path: Path, spark: Any) -> None:
    table = written_table(tmp_path)
    indexer = HudiFormatIndexer(
        Table.open(table.base_uri, table.config), IndexerOptions(engine="spark"), spark
    )
    jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    assert indexer.run([*PARTITIONS, "bloom_filters"]) is not None
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) - jobs
    reports = _indexer(table).hudi.validate()
    assert [r.partition for r in reports if r.ok] == [
        *PARTITIONS[:2],
        "bloom_filters",
        PARTITIONS[2],
    ]
