"""hudi-rs's sample tables (Apache Hudi 0.14 wrote them at table version 6; vendored in
tests/data/hudi_rs, see its NOTICE.md): fast tests on tables Hudi itself wrote, without Hudi.

Each copy-on-write table opens with Hudi's defaults for the properties it leaves out, is indexed
with stats equal to pyarrow's over the live files hudi-rs lists, keeps every row's file when
pruning on any of its values, and reads the same in hudi-rs before and after; nothing of Hudi's
changes. The merge-on-read table is refused by name and left byte for byte as it was."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer
from metadata_table.layout import PARTITIONS
from metadata_table.read.snapshot import IndexedSnapshot
from timeline import Table
from timeline.config import Config
from timeline.errors import TableConfigError
from timeline.index_state import INDEX_FOLDER

from .oracle import assert_every_value_keeps_its_file, assert_stats_match_pyarrow
from .test_hudi_interop import _checksums
from .test_indexer import assert_exact

DATA = Path(__file__).resolve().parents[1] / "data" / "hudi_rs"
_OUR_INSTANT = re.compile(r"^\.hoodie/\d{17}\.indexing(\.requested|\.inflight)?$")
COW = sorted(p.stem for p in (DATA / "cow").glob("*.zip"))


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
    assert len(COW) == 7, COW
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


@pytest.mark.parametrize(
    ("sample", "reason"),
    [
        ("mor/v6_trips_8i1u", "MERGE_ON_READ: merge-on-read tables are not"),
        ("v8/v8_nonpartitioned", r"hoodie.table.version=8 \(Apache Hudi 1.x\) is not supported"),
    ],
)
def test_unsupported_samples_are_refused_by_name_and_left_as_they_were(
    tmp_path: Path, sample: str, reason: str
) -> None:
    base = unpack(DATA / f"{sample}.zip", tmp_path)
    before = _checksums(base)
    with pytest.raises(TableConfigError, match=reason):
        AsyncIndexer(_open(base, tmp_path)).run(list(PARTITIONS))
    assert _checksums(base) == before
