"""The files of a ``--format hudi`` build (metadata_table/hudi_build.py), without Apache Hudi
(tests/indexer/test_hudi_format_build.py checks them against Hudi's own build): a record index
whose keys worker processes read is the same bytes as one read here, Hudi's file-group counts, and
a key in two files fails the build naming it; the Spark engine writes the same bytes as this
process."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import metadata_table.hudi_build as hudi_build
from metadata_table.hudi_build import HudiPartitionWriter
from timeline import Table
from timeline.errors import TableError
from timeline.formats import metadata_records as records
from timeline.formats.hfile import HFileReader
from timeline.fs_view import FileSystemView
from timeline.storage import Storage
from writer.client import WriteClient

from .test_metadata_table import keys, make_table, rows


def written_table(tmp_path: Path) -> Table:
    """A table of 2,000 rows our writer wrote: four inserts into three partitions."""
    table = make_table(tmp_path / "t")
    with WriteClient(table) as client:
        for batch in range(4):
            client.insert(rows(keys(batch * 500, batch * 500 + 500)))
    return table


def _files(table: Table, partition: str) -> dict[str, bytes]:
    folder = Path(table.storage.uri(f".hoodie/metadata/{partition}").removeprefix("file://"))
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_keys_read_by_worker_processes_make_the_same_record_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = written_table(tmp_path)
    writer = HudiPartitionWriter(table)
    upto = table.timeline.load().completed().last()
    assert upto is not None
    writer.build(["record_index", "column_stats"], upto.timestamp)
    here = {p: _files(table, p) for p in ("record_index", "column_stats")}
    monkeypatch.setattr(hudi_build, "_PROCESS_MIN_KEYS", 1)
    writer.build(["record_index", "column_stats"], upto.timestamp, workers=2)
    assert {p: _files(table, p) for p in here} == here
    hfiles = [n for n in here["record_index"] if n.endswith(".hfile")]
    assert len([n for n in here["record_index"] if ".log." in n]) == 10  # Hudi's fewest groups
    found = sum(len(HFileReader(here["record_index"][n])) for n in hfiles)
    assert found == 2000


def test_a_key_in_two_files_fails_the_record_index_naming_it(tmp_path: Path) -> None:
    table = written_table(tmp_path)
    with WriteClient(table) as client:  # the same key in another partition: two files hold it
        client.insert(rows(["k0007"], city="zz"))
    upto = table.timeline.load().completed().last()
    assert upto is not None
    with pytest.raises(TableError, match="k0007"):
        HudiPartitionWriter(table).build(["record_index"], upto.timestamp)


def _group_write(tmp_path: Path, partition: str, cells: list[tuple[bytes, bytes]]) -> bytes:
    """The base HFile :func:`hudi_build._write_group` writes of one file group's ``cells``
    (given as two pieces: two chunks of data files read)."""
    storage = Storage(str(tmp_path / partition))
    work = hudi_build._GroupWrite(storage, partition, "20261202000000000004", "t")
    pieces = [hudi_build._as_cells(cells[:2]), hudi_build._as_cells(cells[2:])]
    stats = hudi_build._write_group(work, (0, pieces))
    base = next(s.path for s in stats if s.path.endswith(".hfile"))
    return storage.read(f".hoodie/metadata/{base}")


@pytest.mark.parametrize("partition", ["column_stats", "bloom_filters"])
def test_a_group_is_written_in_key_order_as_the_loop_writes_it(
    tmp_path: Path, partition: str
) -> None:
    # rows compared as unsigned bytes, as HBase compares them: "\xc3" sorts after "z"
    cells = [(k.encode(), f"v{n}".encode()) for n, k in enumerate(["b", "é", "a", "z", "ab"])]
    data = _group_write(tmp_path, partition, cells)
    assert list(HFileReader(data)) == sorted(cells)
    dense = partition == "bloom_filters"
    assert data == records.base_file_of_cells(sorted(cells), dense=dense)


@pytest.mark.parametrize("partition", ["column_stats", "bloom_filters"])
def test_two_cells_of_one_key_fail_the_group_naming_it(tmp_path: Path, partition: str) -> None:
    cells = [(b"k1", b"x"), (b"k2", b"y"), (b"k1", b"z")]
    with pytest.raises(TableError, match=f"{partition} of t: two records of key 'k1'"):
        _group_write(tmp_path, partition, cells)


def test_hudis_file_group_counts(tmp_path: Path) -> None:
    writer = HudiPartitionWriter(make_table(tmp_path / "t"))
    assert writer.group_count("column_stats", 0) == 2
    assert writer.group_count("bloom_filters", 0) == 4
    assert writer.group_count("record_index", 1000) == 10  # the fewest
    # 2x growth, 48 bytes a key, 1 GiB a group: 22,369,621 keys a group
    assert writer.group_count("record_index", 200_000_000) == 17
    assert writer.group_count("record_index", 10**13) == 10000  # the most


def test_the_spark_engine_writes_the_same_files(tmp_path: Path, spark: Any) -> None:
    table = written_table(tmp_path)
    partitions = ["files", "column_stats", "bloom_filters", "record_index"]
    writer = HudiPartitionWriter(table)
    upto = table.timeline.load().completed().last()
    assert upto is not None
    mdt = Path(table.storage.uri(".hoodie/metadata").removeprefix("file://"))
    here_stamp, here_stats = writer.build(partitions, upto.timestamp)
    here = {p: _files(table, p) for p in partitions}
    shutil.rmtree(mdt)
    jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    stamp, stats = writer.build(partitions, upto.timestamp, spark_for=lambda files: spark)
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) - jobs  # it ran there
    assert {p: _files(table, p) for p in partitions} == here
    assert stamp == here_stamp
    key = lambda s: s.path  # noqa: E731
    assert sorted(stats, key=key) == sorted(here_stats, key=key)
    assert len([n for n in here["record_index"] if ".log." in n]) == 10  # every group written


def test_chunks_hold_at_most_so_many_files_and_about_so_many_keys() -> None:
    files = [
        hudi_build.SourceFile(f"p{n % 3}", f"f{n}.parquet", "20261204000000000", n % 2 == 0)
        for n in range(3000)
    ]
    by_files = hudi_build._chunks(files, 2, 0)
    assert max(len(c) for c in by_files) <= hudi_build._CHUNK_FILES
    assert len(by_files) % 2 == 0  # as many for each worker
    # 1,500 latest files of 10,000 keys: 100 files make the chunk's million keys
    by_keys = hudi_build._chunks(files, 2, 15_000_000)
    assert max(len(c) for c in by_keys) <= 200 and len(by_keys) >= 15
    for chunks in (by_files, by_keys):
        assert [row for c in chunks for row in c] == hudi_build._rows(files)


def test_keys_are_ordered_by_their_bytes_unsigned_as_arrow_orders_them() -> None:
    import random

    import pyarrow as pa
    import pyarrow.compute as pc

    rng = random.Random(7)
    for width in (1, 7, 8, 13, 48):  # of one length: by words; a width of 8k or not
        keys = [
            bytes(rng.choice(b"az\x00\x7f\x80\xc3\xff") for _ in range(width)) for _ in range(3000)
        ]
        for array in (pa.array(keys, pa.binary()), pa.array(keys, pa.large_binary())):
            for part in (array, array.slice(1000)):
                expected = pc.sort_indices(part).to_pylist()
                assert hudi_build._key_order(part).tolist() == expected  # stable: ties alike
    mixed = pa.array(["b", "é", "a", "z", "ab", ""])  # of several lengths: by Arrow
    assert hudi_build._key_order(mixed).tolist() == [5, 2, 4, 0, 3, 1]


def test_the_source_files_of_a_build_are_the_committed_files_each_marked_latest_or_not(
    tmp_path: Path,
) -> None:
    """Up to ``upto``: every committed base file, older versions of a file group too (their
    column stats are Hudi's, as its listing of storage finds them), and only the latest of
    each group marked (its keys go in the record index); a file committed after ``upto`` is
    not a source."""
    table = written_table(tmp_path)
    with WriteClient(table) as client:
        client.upsert(rows(keys(0, 10), ts=9))  # new versions of the groups holding those keys
        upto = table.timeline.load().completed().last()
        assert upto is not None
        client.insert(rows(keys(5000, 5010)))
    view = FileSystemView(table.timeline, table.timeline.load(), as_of=upto.timestamp)
    latest = {b.path for b in view.latest_base_files()}
    committed = {f"{p}/{n}" for p, n, _, _ in view.committed_base_files(upto.timestamp)}
    sources = HudiPartitionWriter(table).source_files(upto.timestamp)
    assert {s.path for s in sources} == committed and len(sources) == len(committed)
    assert {s.path for s in sources if s.latest} == latest
    assert len(latest) < len(committed)  # older versions are there, not marked
    assert all(s.instant <= upto.timestamp for s in sources)
