"""The file-system view works out the latest base files on Arrow arrays; this holds it to the
rule it replaced, written out file by file: a committed file of a group that no completed
replacecommit replaced, the newest by instant time (a legacy 14-digit time sorts after every
millisecond of its second), and on a tie the first in BaseFile's order; the latest files of some
partitions are worked out on theirs alone (from a listing of those partitions, where the
view has one, or of their folders); a listing already in file-group order gives the same
answer without a sort."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Barrier
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline.errors import NotParquetError, StorageFileNotFoundError
from timeline.fs_view import (
    BaseFile,
    FileSystemView,
    ParquetReaders,
    _order,
    base_files_of,
    by_partition,
    data_file_paths,
    list_data_files,
)
from timeline.instant import normalize_timestamp
from timeline.storage import FileInfo, Storage

INSTANTS = ["20240101000000000", "20240101000000500", "20240101000000", "20240101000001000"]
PARTITIONS = ["", "a", "a/b", "b"]
IDS = ["f1-0", "f2-0", "f3-0"]
TOKENS = ["0-1-2", "1-10-3"]


def _by_rule(files: list[BaseFile], committed: set[str], replaced: set[Any]) -> list[BaseFile]:
    latest: dict[tuple[str, str], BaseFile] = {}
    for base in sorted(files, key=_order):
        if base.instant_time not in committed or (base.partition_path, base.file_id) in replaced:
            continue
        key = (base.partition_path, base.file_id)
        current = latest.get(key)
        if current is None or normalize_timestamp(base.instant_time) > normalize_timestamp(
            current.instant_time
        ):
            latest[key] = base
    return sorted(latest.values(), key=_order)


def _view(
    listing: list[FileInfo], committed: set[str], replaced: set[Any], scoped: bool = False
) -> FileSystemView:
    """A view of ``listing``; ``scoped``: its whole listing must not be read, and a listing of
    some partitions gives theirs (and the base path's files, as a source may give more)."""

    def whole() -> list[FileInfo]:
        if scoped:
            raise AssertionError("the whole listing was read")
        return listing

    def of(partitions: list[str]) -> list[FileInfo]:
        return [e for e in listing if e.path.rpartition("/")[0] in {"", *partitions}]

    view = FileSystemView(
        SimpleNamespace(storage=None),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        listing=whole,
        partition_listing=of if scoped else None,
    )
    view.__dict__["_committed"] = committed  # what a timeline would say, set directly
    view.__dict__["_replaced"] = replaced
    return view


files = st.lists(
    st.tuples(
        st.sampled_from(PARTITIONS),
        st.sampled_from(IDS),
        st.sampled_from(TOKENS),
        st.sampled_from(INSTANTS),
        st.integers(0, 3),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    files,
    st.sets(st.sampled_from(INSTANTS)),
    st.sets(st.tuples(st.sampled_from(PARTITIONS), st.sampled_from(IDS)), max_size=3),
    st.booleans(),
    st.sampled_from(["any", "group", "group and tail"]),
    st.integers(0, 30),
)
def test_the_latest_base_files_follow_the_rule(
    listed: list[tuple[str, str, str, str, int]],
    committed: set[str],
    replaced: set[tuple[str, str]],
    noise: bool,
    order: str,
    tail: int,
) -> None:
    if order != "any":  # as the files index lists them: no sort needed, same answer
        listed = sorted(listed, key=lambda f: (f[0], f[1]))
    if order == "group and tail":  # and after a commit: its files after the others
        listed = listed[: max(0, len(listed) - tail)] + listed[max(0, len(listed) - tail) :][::-1]
    listing = []
    bases = []
    for partition, file_id, token, instant, size in listed:
        name = f"{file_id}_{token}_{instant}.parquet"
        path = f"{partition}/{name}" if partition else name
        listing.append(FileInfo(path, size, False))
        bases.append(BaseFile(partition, file_id, instant, token, name, size))
    if noise:  # files that are no base files are left out
        listing += [
            FileInfo("a/.hoodie_partition_metadata", 9, False),
            FileInfo("a/.f1-0_20240101000000000.log.1_0-1-2", 5, False),
            FileInfo("notes.txt", 1, False),
        ]
    want = _by_rule(bases, committed, replaced)
    # one partition's files alone (a writer's plan) come without objects for the others
    some = _view(listing, committed, replaced)
    assert some.latest_base_files(["a", "a/b"]) == [
        b for b in want if b.partition_path in ("a", "a/b")
    ]
    assert "_latest" not in some.__dict__ and "latest_base_table" not in some.__dict__
    # from a listing of those partitions alone (the files index's records of their prefixes)
    scoped = _view(listing, committed, replaced, scoped=True)
    for asked in (["a", "a/b"], ["b"], [""]):
        assert scoped.latest_base_files(asked) == [b for b in want if b.partition_path in asked]
    view = _view(listing, committed, replaced)
    assert view.latest_base_files() == want
    assert view.latest_base_table.column("path").to_pylist() == [b.path for b in want]
    assert view.all_base_files == sorted(bases, key=_order)
    assert view.latest_base_files(["a"]) == [b for b in want if b.partition_path == "a"]
    # cut by partition in one pass, as a writer of several partitions does
    cut = by_partition(view.latest_base_table)
    assert list(cut) == sorted({b.partition_path for b in want})
    for partition, rows in cut.items():
        assert base_files_of(rows) == [b for b in want if b.partition_path == partition]
    # rows not in partition order (a partition in several runs) are cut too
    mixed = by_partition(view.latest_base_table.sort_by([("file_id", "ascending")]))
    assert {p: sorted(base_files_of(r), key=_order) for p, r in mixed.items()} == {
        p: base_files_of(r) for p, r in cut.items()
    }
    assert scoped.latest_base_files([]) == [] and "_listed" not in scoped.__dict__
    # what a build reads: committed base files up to an instant, from columns, in file order
    for upto in INSTANTS:
        limit = normalize_timestamp(upto)
        assert view.committed_base_files(upto) == [
            (b.partition_path, b.file_name, b.size, b.instant_time)
            for b in sorted(bases, key=_order)
            if b.instant_time in committed and normalize_timestamp(b.instant_time) <= limit
        ]
    # the latest slices' files counted (on Arrow arrays when no slice has a log file)
    counted = _view(listing, committed, replaced)
    counted.__dict__["pending_compactions"] = set()
    view.__dict__["pending_compactions"] = set()
    assert counted.latest_file_count() == len(view.latest_paths())


def test_many_partitions_are_read_from_the_whole_listing_once() -> None:
    """A listing of a few partitions is theirs alone; of more than a few, the whole table's
    (a prefix read of the files index per partition would cost more than one read of it)."""
    from timeline import fs_view

    listing = [
        FileInfo(f"p{n}/f{n}-0_0-1-2_20240101000000000.parquet", 1, False)
        for n in range(fs_view._FEW_PARTITIONS + 2)
    ]
    calls: list[str] = []

    def whole() -> list[FileInfo]:
        calls.append("whole")
        return listing

    def of(partitions: list[str]) -> list[FileInfo]:
        calls.append(",".join(partitions))
        return [e for e in listing if e.path.rpartition("/")[0] in partitions]

    def view() -> FileSystemView:
        made = FileSystemView(
            SimpleNamespace(storage=None), None, listing=whole, partition_listing=of
        )  # type: ignore[arg-type]
        made.__dict__["_committed"] = {"20240101000000000"}
        made.__dict__["_replaced"] = set()
        return made

    few = [f"p{n}" for n in range(fs_view._FEW_PARTITIONS)]
    assert len(view().latest_base_files(few)) == len(few) and calls == [",".join(sorted(few))]
    calls.clear()
    many = [f"p{n}" for n in range(fs_view._FEW_PARTITIONS + 2)]
    assert len(view().latest_base_files(many)) == len(many) and calls == ["whole"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=6),
    st.data(),
    st.integers(1, 4),
)
def test_rows_are_taken_as_arrow_takes_them(lengths: list[int], data: Any, runs_most: int) -> None:
    """take_rows (chunk by chunk) and _rows_of (runs cut as slices, or a take past
    ``_RUNS_MOST`` runs) give what Arrow's take gives, for tables and columns of any chunks."""
    import numpy as np
    import pyarrow as pa

    from timeline import fs_view

    count = sum(lengths)
    strings = [f"path-{i}" for i in range(count)]
    starts = np.cumsum([0, *lengths])
    column = pa.chunked_array(
        [pa.array(strings[a:b], pa.string()) for a, b in itertools.pairwise(starts)],
        pa.string(),
    )
    table = pa.table({"path": column, "n": pa.array(range(count), pa.int64())})
    rows = data.draw(st.lists(st.integers(0, max(0, count - 1)), max_size=12 if count else 0))
    if data.draw(st.booleans()):
        rows = sorted(rows)
    for values in (column, table, pa.array(strings, pa.string())):
        assert (
            fs_view.take_rows(values, rows).to_pylist()
            == values.take(pa.array(rows, pa.int64())).to_pylist()
        )
    old = fs_view._RUNS_MOST
    fs_view._RUNS_MOST = runs_most
    try:
        at = np.asarray(rows, dtype=np.int64)
        assert fs_view._rows_of(table, at).to_pylist() == table.take(pa.array(at)).to_pylist()
    finally:
        fs_view._RUNS_MOST = old


def test_a_view_of_the_storage_lists_the_asked_partitions_folders_alone(tmp_path: Path) -> None:
    """Without an index, the latest files of a partition come from a listing of its folder:
    not of the other partitions' (a writer touching one partition of a big table), nor of
    the partitions nested in it, nor ``.hoodie/``."""
    names = {
        "": "f0-0_0-1-2_20240101000000000.parquet",
        "a": "f1-0_0-1-2_20240101000000000.parquet",
        "a/b": "f2-0_0-1-2_20240101000000000.parquet",
        "ab": "f3-0_0-1-2_20240101000000000.parquet",
    }
    for partition, name in names.items():
        folder = tmp_path / partition
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")
    (tmp_path / ".hoodie").mkdir()
    (tmp_path / ".hoodie" / "f9-0_0-1-2_20240101000000000.parquet").write_bytes(b"x")
    storage = Storage(str(tmp_path))
    view = FileSystemView(SimpleNamespace(storage=storage), None)  # type: ignore[arg-type]
    view.__dict__["_committed"] = {"20240101000000000"}
    view.__dict__["_replaced"] = set()
    listed: list[str] = []
    real = storage.list

    def counted(path: str = "", recursive: bool = False) -> list[FileInfo]:
        listed.append(path)
        return real(path, recursive)

    storage.list = counted  # type: ignore[method-assign]
    for partition, name in names.items():
        assert [b.path for b in view.latest_base_files([partition])] == [
            f"{partition}/{name}" if partition else name
        ]
    assert listed == list(names) and "_listed" not in view.__dict__
    assert [b.file_name for b in view.latest_base_files()] == sorted(names.values())


def test_a_listing_with_sizes_gives_what_a_listing_of_file_objects_gives(tmp_path: Path) -> None:
    """The data folders listed with their sizes as columns (:func:`data_file_paths` with
    ``sizes``: no object, time or relative path worked out a file) give the paths and sizes
    :func:`list_data_files` gives, in its order: on local storage and on an fsspec store,
    nested partitions and the base path's files in, ``.hoodie/`` and temporary files out."""
    files = {
        "f0-0_0-1-2_20240101000000000.parquet": 5,
        "a/f1-0_0-1-2_20240101000000000.parquet": 7,
        "a/.f1-0_20240101000000500.log.1_0-1-2": 11,
        "a/b/f2-0_0-1-2_20240101000000000.parquet": 13,
        "a-b/f3-0_0-1-2_20240101000000000.parquet": 17,
        "ab/f4-0_0-1-2_20240101000000000.parquet": 19,
    }
    hoodie = ".hoodie/f9-0_0-1-2_20240101000000000.parquet"
    local = Storage(str(tmp_path))
    memory = Storage(f"memory://sizes-{tmp_path.name}")
    # (a temporary file of a local write; an fsspec store's writes leave none)
    for storage, left_out in ((local, [hoodie, "a/.tmp-aix-x"]), (memory, [hoodie])):
        for path, size in [*files.items(), *((p, 3) for p in left_out)]:
            storage.create(path, b"x" * size)
        listed = data_file_paths(storage, sizes=True)
        rows = list(
            zip(listed.column("path").to_pylist(), listed.column("size").to_pylist(), strict=True)
        )
        assert rows == [(e.path, e.size) for e in list_data_files(storage)]
        assert dict(rows) == files
        assert listed.column("partition_path").to_pylist() == [
            p.rpartition("/")[0] for p, _ in rows
        ]
    memory.delete("", recursive=True)


def test_a_listing_by_name_counts_what_a_listing_with_sizes_does(tmp_path: Path) -> None:
    """The data folders listed by name alone (no stat a file, sizes 0) name the files a listing
    with sizes names: nested partitions and the base path's files in, ``.hoodie/`` and
    temporary files out; so a view of it counts the same latest files."""
    files = [
        "f0-0_0-1-2_20240101000000000.parquet",
        "a/f1-0_0-1-2_20240101000000000.parquet",
        "a/f1-0_0-1-2_20240101000000500.parquet",
        "a/.f1-0_20240101000000500.log.1_0-1-2",
        "a/b/f2-0_0-1-2_20240101000000000.parquet",
        "a/b/.hoodie_partition_metadata",
        "ab/f3-0_0-1-2_20240101000000000.parquet",
    ]
    for path in [*files, ".hoodie/f9-0_0-1-2_20240101000000000.parquet", "a/.tmp-aix-x"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"xyz")
    storage = Storage(str(tmp_path))
    assert storage.file_paths("a") == sorted(p for p in files if p.startswith("a/"))
    assert storage.file_paths("a/b") == sorted(p for p in files if p.startswith("a/b/"))
    hoodie = ".hoodie/f9-0_0-1-2_20240101000000000.parquet"
    assert storage.file_paths() == sorted([*files, hoodie])  # from the root: no leading "/"
    assert Storage(str(tmp_path) + "/").file_paths("a") == storage.file_paths("a")
    named = data_file_paths(storage)
    assert sorted(named.column("path").to_pylist()) == sorted(files)
    assert set(named.column("size").to_pylist()) == {0}
    counts = []
    for listing in (None, lambda: named):
        view = FileSystemView(SimpleNamespace(storage=storage), None, listing=listing)  # type: ignore[arg-type]
        view.__dict__["_committed"] = {"20240101000000000", "20240101000000500"}
        view.__dict__["_replaced"] = set()
        view.__dict__["pending_compactions"] = set()
        counts.append((view.latest_file_count(), sorted(view.latest_paths())))
    assert counts[0] == counts[1] and counts[0][0] == 5


def test_parquet_readers_give_each_thread_a_reader_of_one_parsed_footer(tmp_path: Path) -> None:
    """A file read from several threads: each has a reader of its own (one reader's ranged
    reads share a cache, which two threads cannot), given the footer the first one parsed; a
    file of another store is read into memory once. Missing and unreadable files raise ours."""
    table = pa.table({"n": pa.array(range(1000), pa.int64())})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=100)
    for storage in (Storage(str(tmp_path)), Storage(f"memory://readers-{tmp_path.name}")):
        storage.create("f.parquet", sink.getvalue().to_pybytes())
        storage.create("not.parquet", b"PAR1 and no more")
        readers = ParquetReaders(storage, "f.parquet")
        with ThreadPoolExecutor(4) as threads:
            got = list(threads.map(_read_together, [readers] * 4, range(4), [Barrier(4)] * 4))
        files = [file for file, _ in got] + [readers.file()]
        assert len({id(file) for file in files}) == 5
        assert all(file.metadata.equals(readers.metadata) for file in files)
        assert pa.concat_tables([rows for _, rows in got]).equals(table.slice(0, 400))
        with pytest.raises(StorageFileNotFoundError):
            ParquetReaders(storage, "gone.parquet")
        with pytest.raises(NotParquetError, match=r"not\.parquet"):
            ParquetReaders(storage, "not.parquet")


def _read_together(readers: ParquetReaders, rg: int, together: Barrier) -> tuple[Any, pa.Table]:
    together.wait()  # (the threads at once)
    return readers.file(), readers.read_row_groups([rg])
