"""hudi-rs's sample tables (Apache Hudi 0.14 wrote them at table version 6; vendored in
tests/data/hudi_rs, see its NOTICE.md): fast tests on tables Hudi itself wrote, without Hudi.

Each copy-on-write table opens with Hudi's defaults for the properties it leaves out, is indexed
with stats equal to pyarrow's over the live files hudi-rs lists, keeps every row's file when
pruning on any of its values, and reads the same in hudi-rs before and after; nothing of Hudi's
changes. Each merge-on-read table (updates and deletes in log files) is indexed with its log
files: every row hudi-rs reads keeps its file slice when pruning on any of its values or looking
up its key, the index equals a rebuild, and nothing of Hudi's changes."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import PARTITIONS
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.validate import validate
from timeline import Table
from timeline.config import Config
from timeline.errors import TableConfigError
from timeline.index_state import INDEX_FOLDER

from .oracle import (
    assert_every_row_keeps_its_slice,
    assert_every_value_keeps_its_file,
    assert_stats_match_pyarrow,
    slice_of_row,
)
from .test_daemon import Daemon, _completed, _wait
from .test_foreign_commits import indexer_cli
from .test_hudi_catch_up import _daemon_config
from .test_hudi_interop import _checksums
from .test_indexer import assert_exact

DATA = Path(__file__).resolve().parents[1] / "data" / "hudi_rs"
_OUR_INSTANT = re.compile(r"^\.hoodie/\d{17}\.indexing(\.requested|\.inflight)?$")
COW = sorted(p.stem for p in (DATA / "cow").glob("*.zip"))
MOR = sorted(p.stem for p in (DATA / "mor").glob("*.zip"))


def unpack(archive: Path, into: Path) -> Path:
    """Extract a sample table (leaving out macOS resource forks); returns its base path."""
    with zipfile.ZipFile(archive) as zipped:
        members = [m for m in zipped.namelist() if not m.startswith("__MACOSX")]
        zipped.extractall(into, members)
    return into / archive.stem


def _open(base: Path, tmp_path: Path) -> Table:
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}"})
    return Table.open(str(base), config)


def _rows(base: Path) -> list[dict[str, Any]]:
    """hudi-rs's snapshot read, in a stable order (some samples have no meta fields)."""
    import hudi
    import pyarrow as pa

    batches = hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return sorted(rows, key=repr)


def _live_files(base: Path) -> set[str]:
    """The base files of the latest file slices, as hudi-rs lists them."""
    import hudi

    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    return {s.base_file_relative_path() for s in table.get_file_slices()}


def assert_only_ours_added(before: dict[str, str], after: dict[str, str]) -> None:
    """Every file that was there is byte for byte the same; what is new is our index folder, our
    indexing instants (the one thing we add to Hudi's timeline) and the instant times this kernel
    reserves (``.hoodie/.aux/.instant-times/``, which Hudi does not read)."""
    assert {p: after.get(p) for p in before} == before
    added = set(after) - set(before)
    ours = (INDEX_FOLDER, ".hoodie/.aux/.instant-times/")
    assert all(p.startswith(ours) or _OUR_INSTANT.match(p) for p in added), added


def test_every_sample_is_vendored() -> None:
    assert len(COW) == 7 and len(MOR) == 2, (COW, MOR)
    assert (DATA / "LICENSE").is_file() and (DATA / "NOTICE.md").is_file()


@pytest.mark.parametrize("name", COW)
def test_hudi_rs_sample_tables_are_indexed_exactly(name: str, tmp_path: Path, spark: Any) -> None:
    base = unpack(DATA / "cow" / f"{name}.zip", tmp_path)
    before = _checksums(base)
    rows_before = _rows(base)
    live = _live_files(base)

    table = _open(base, tmp_path)
    AsyncIndexer(table, spark=spark).run(list(PARTITIONS))
    assert_exact(table)

    snapshot = IndexedSnapshot(table)
    assert {f.path for f in snapshot.view.latest_base_files()} == live
    assert_stats_match_pyarrow(snapshot, base, live)
    checks = assert_every_value_keeps_its_file(snapshot, base, live)
    assert checks >= (len(rows_before) if live else 0)

    assert _rows(base) == rows_before
    assert_only_ours_added(before, _checksums(base))


@pytest.mark.parametrize(("name", "engine"), [(MOR[0], "spark"), (MOR[1], "local")])
def test_merge_on_read_samples_are_indexed_with_their_log_files(
    name: str, engine: str, tmp_path: Path, spark: Any
) -> None:
    """Updates and deletes that Hudi wrote to log files: the index lists them and holds their
    stats, every row keeps its slice, and a value an update moved outside its base file's range
    still finds the slice. Both build engines (Spark tasks read the log files too)."""
    base = unpack(DATA / "mor" / f"{name}.zip", tmp_path)
    before = _checksums(base)
    rows_before = _rows(base)

    table = _open(base, tmp_path)
    options = IndexerOptions(engine=engine)
    AsyncIndexer(table, options, spark=spark if engine == "spark" else None).run(list(PARTITIONS))
    assert_exact(table)

    snapshot = IndexedSnapshot(table)
    import hudi

    slices = hudi.HudiTableBuilder.from_base_uri(str(base)).build().get_file_slices()
    ours = snapshot.view.latest_file_slices()
    assert {(s.partition_path, s.file_id) for s in ours} == {
        (s.partition_path, s.file_id) for s in slices
    }
    assert any(s.log_files for s in ours), "the sample's updates and deletes are in log files"
    indexed = {r["file_name"] for r in snapshot.column_stats(["uuid"]).to_pylist()}
    assert {log.file_name for s in ours for log in s.log_files} <= indexed
    assert {slice_of_row(r) for r in rows_before} <= {(s.partition_path, s.file_id) for s in ours}
    assert assert_every_row_keeps_its_slice(snapshot, rows_before) >= len(rows_before) * 6

    for command in ("status", "validate"):
        ran = indexer_cli(table, command)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)

    assert _rows(base) == rows_before
    assert_only_ours_added(before, _checksums(base))


def test_the_daemon_builds_and_keeps_a_merge_on_read_sample(tmp_path: Path) -> None:
    """The daemon, told to keep every index of a merge-on-read table, builds them (log files
    included) and stops cleanly; the table reads the same."""
    base = unpack(DATA / "mor" / "v6_trips_8i1u.zip", tmp_path)
    before, rows_before = _checksums(base), _rows(base)
    table = _open(base, tmp_path)
    daemon = Daemon(_daemon_config(tmp_path, table))
    try:
        _wait(_completed(table, list(PARTITIONS)), 120, "the daemon to build every index")
        _wait(lambda: all(r.ok for r in validate(table)), 60, "a valid index")
        assert daemon.get("/status"), "the daemon reports its table"
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
    indexed = {r["file_name"] for r in IndexedSnapshot(table).column_stats(["uuid"]).to_pylist()}
    assert any(name.startswith(".") for name in indexed), "log files are indexed"
    assert _rows(base) == rows_before
    assert_only_ours_added(before, _checksums(base))


def test_unsupported_samples_are_refused_by_name_and_left_as_they_were(tmp_path: Path) -> None:
    base = unpack(DATA / "v8" / "v8_nonpartitioned.zip", tmp_path)
    before = _checksums(base)
    reason = r"hoodie.table.version=8 \(Apache Hudi 1.x\) is not supported"
    with pytest.raises(TableConfigError, match=reason):
        AsyncIndexer(_open(base, tmp_path)).run(list(PARTITIONS))
    assert _checksums(base) == before
