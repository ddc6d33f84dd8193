"""The storage facade: every verb on local files, memory and S3 (moto over HTTP), and races."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time
import uuid
from typing import Any

import pytest

from timeline.errors import (
    FileAlreadyExistsError,
    InvalidPathError,
    StorageError,
    StorageFileNotFoundError,
    UnsupportedStorageError,
)
from timeline.storage import Storage, normalize_base_uri


def test_create_writes_once(storage: Storage) -> None:
    storage.create(".hoodie/a.commit", b"first")
    with pytest.raises(FileAlreadyExistsError) as err:
        storage.create(".hoodie/a.commit", b"second")
    assert err.value.path == ".hoodie/a.commit"
    assert storage.read(".hoodie/a.commit") == b"first"


def test_overwrite_replaces_content(storage: Storage) -> None:
    storage.overwrite("x/y.json", b"1")
    storage.overwrite("x/y.json", b"22")
    assert storage.read("x/y.json") == b"22"
    assert storage.info("x/y.json").size == 2


def test_read_missing_raises_not_found(storage: Storage) -> None:
    with pytest.raises(StorageFileNotFoundError) as err:
        storage.read("nope/missing")
    assert err.value.path == "nope/missing"


def test_exists(storage: Storage) -> None:
    assert not storage.exists("a/b")
    storage.create("a/b", b"")
    assert storage.exists("a/b")


def test_list_flat_and_recursive(storage: Storage) -> None:
    for path in ["p/1.parquet", "p/2.parquet", "p/sub/3.parquet", "q/4.parquet"]:
        storage.create(path, b"data")
    flat = storage.list("p")
    assert [(f.path, f.is_dir) for f in flat] == [
        ("p/1.parquet", False),
        ("p/2.parquet", False),
        ("p/sub", True),
    ]
    assert [f.size for f in flat if not f.is_dir] == [4, 4]
    assert [f.path for f in storage.list("p", recursive=True)] == [
        "p/1.parquet",
        "p/2.parquet",
        "p/sub/3.parquet",
    ]
    assert [f.path for f in storage.list(recursive=True)] == [
        "p/1.parquet",
        "p/2.parquet",
        "p/sub/3.parquet",
        "q/4.parquet",
    ]
    assert storage.list("missing") == []
    assert storage.list("missing", recursive=True) == []
    # the names alone: files only, sorted, as list gives them
    assert storage.file_names("p") == ["1.parquet", "2.parquet"]
    assert storage.file_names("p") == [f.name for f in flat if not f.is_dir]
    assert storage.file_names("missing") == []


def test_delete_file_and_folder(storage: Storage) -> None:
    storage.create("d/1", b"")
    storage.create("d/e/2", b"")
    storage.delete("d/1")
    assert not storage.exists("d/1")
    storage.delete("d/1")  # deleting what is not there is no error
    storage.delete("d", recursive=True)
    assert storage.list("d", recursive=True) == []


def test_mtime_is_recent_and_moves_on_overwrite(storage: Storage) -> None:
    storage.overwrite("h/beat", b"1")
    first = storage.mtime("h/beat")
    assert abs(first - time.time()) < 60
    time.sleep(1.1)  # S3 LastModified has a resolution of one second
    storage.overwrite("h/beat", b"2")
    assert storage.mtime("h/beat") > first


def test_paths_are_confined_to_the_root(storage: Storage) -> None:
    for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", "s3://other/x", "a\\b"]:
        with pytest.raises(InvalidPathError):
            storage.create(bad, b"")
    with pytest.raises(InvalidPathError):
        storage.read("x\x00y")


def test_pickle_round_trip_keeps_access(storage: Storage) -> None:
    storage.create("p/f", b"abc")
    clone = pickle.loads(pickle.dumps(storage))
    assert clone == storage
    assert clone.read("p/f") == b"abc"


def test_child_storage_is_rooted_below(storage: Storage) -> None:
    child = storage.child(".hoodie/metadata")
    child.create("files/x", b"1")
    assert storage.read(".hoodie/metadata/files/x") == b"1"
    assert [f.path for f in child.list("files")] == ["files/x"]


def test_local_files_are_readable_by_others(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    storage.create("a", b"")
    storage.overwrite("b", b"")
    assert (tmp_path / "a").stat().st_mode & 0o044 == 0o044
    assert (tmp_path / "b").stat().st_mode & 0o044 == 0o044


def test_local_listing_hides_temp_files_and_base_uri_forms(tmp_path: Any) -> None:
    storage = Storage(f"file://{tmp_path}")
    assert storage.base_uri == str(tmp_path)
    (tmp_path / ".tmp-aix-leftover").write_bytes(b"")
    storage.create("real", b"")
    assert [f.path for f in storage.list()] == ["real"]
    assert storage.file_names() == ["real"]
    assert normalize_base_uri("s3://b/p/") == "s3://b/p"


def test_scheme_without_atomic_create_is_refused(tmp_path: Any) -> None:
    storage = Storage("ftp://example.invalid/table")
    with pytest.raises(UnsupportedStorageError):
        storage.create("x", b"")


# --- races: 8 contenders create the same path, exactly one wins ----------------------------------


def _contend(storage: Storage, path: str, start_at: float, me: int) -> str:
    while time.time() < start_at:
        time.sleep(0.001)
    try:
        storage.create(path, f"winner {me}".encode())
    except FileAlreadyExistsError:
        return "lost"
    return "won"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_eight_processes_create_same_path_one_wins(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    if backend == "local":
        storage = Storage(str(tmp_path / "race"))
    else:
        storage = request.getfixturevalue("s3_storage")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(8) as pool:
        for round_ in range(5):
            path = f".hoodie/{round_}.commit"
            # Every process is up and waiting before the start (the first round spawns them).
            start_at = time.time() + (4.0 if round_ == 0 else 0.5)
            outcomes = pool.starmap(
                _contend, [(storage, path, start_at, i) for i in range(8)], chunksize=1
            )
            assert sorted(outcomes) == ["lost"] * 7 + ["won"], outcomes
            winner = outcomes.index("won")
            assert storage.read(path) == f"winner {winner}".encode()


def test_test_s3_servers_conditional_create_is_atomic(
    s3_storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The S3 server the tests run (moto) must not let two creates of one key both win, however
    slow its write: with each write held 50 ms after its existence check, all eight racing
    threads won before conftest made conditional writes atomic (CI's eight-process race once
    saw two winners)."""
    from moto.s3.models import S3Backend

    original = S3Backend.put_object

    def slow_put(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", slow_put)
    for round_ in range(3):
        outcomes: list[str] = []
        start_at = time.time() + 0.2

        def contender(i: int, path: str, start_at: float, out: list[str]) -> None:
            out.append(_contend(s3_storage, path, start_at, i))

        threads = [
            threading.Thread(target=contender, args=(i, f"slow/{round_}", start_at, outcomes))
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["lost"] * 7 + ["won"], outcomes


def test_eight_threads_create_same_path_on_memory() -> None:
    # memory:// lives inside one process, so its contenders are threads.
    storage = Storage(f"memory://{uuid.uuid4().hex}")
    for round_ in range(20):
        outcomes: list[str] = []
        start_at = time.time() + 0.05

        def contender(
            i: int, path: str, start_at: float = start_at, out: list[str] = outcomes
        ) -> None:
            out.append(_contend(storage, path, start_at, i))

        threads = [threading.Thread(target=contender, args=(i, f"r{round_}")) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["lost"] * 7 + ["won"]


def test_read_range(storage: Storage) -> None:
    storage.create("r/f", b"0123456789")
    assert storage.read_range("r/f", 2, 5) == b"234"
    assert storage.read_range("r/f", 7) == b"789"
    assert storage.read_range("r/f", -3) == b"789"
    assert storage.read_range("r/f", -100) == b"0123456789"
    assert storage.read_range("r/f", 8, 100) == b"89"  # an end past the file: up to its end
    assert storage.read_range("r/f", 5, 5) == b"" and storage.read_range("r/f", 20) == b""
    storage.create("r/empty", b"")
    assert storage.read_range("r/empty", -8) == b"" and storage.read("r/empty") == b""
    with pytest.raises(StorageFileNotFoundError):
        storage.read_range("r/missing", -8)


def test_a_colon_is_a_name_and_a_scheme_is_refused(storage: Storage) -> None:
    storage.create("p/a:b.parquet", b"x")  # a name with a colon is no URI
    assert storage.read("p/a:b.parquet") == b"x"
    for bad in ("file:x", "s3:/x", "hdfs://h/x"):
        with pytest.raises(InvalidPathError):
            storage.read(bad)


def test_reading_a_folder_is_an_error_naming_it(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path / "t"))
    storage.create("d/f", b"x")
    for read in (storage.read, lambda p: storage.read_range(p, -8)):
        with pytest.raises(StorageError, match="d") as err:
            read("d")
        assert err.value.path == "d"


def test_hadoop_checksums_of_files_we_rewrite_are_dropped(tmp_path: Any) -> None:
    """Apache Hudi writes local tables through Hadoop's checksummed file system, which keeps a
    ``.<name>.crc`` beside each file and checks it on read: after we rewrite hoodie.properties,
    a stale one made Hudi fail with "Could not load Hoodie properties"."""
    storage = Storage(str(tmp_path))
    for name, act in (
        ("hoodie.properties", lambda: storage.overwrite("hoodie.properties", b"new")),
        ("gone", lambda: storage.delete("gone")),
        ("fresh", lambda: storage.create("fresh", b"x")),
    ):
        if name != "fresh":
            (tmp_path / name).write_bytes(b"old")
        (tmp_path / f".{name}.crc").write_bytes(b"crc of the old bytes")
        act()
        assert not (tmp_path / f".{name}.crc").exists(), name
    assert (tmp_path / "hoodie.properties").read_bytes() == b"new"


def test_a_folder_is_deleted_whole_while_another_process_deletes_some_of_its_files(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recursive delete goes on past a file someone else deleted meanwhile (a writer's index
    upkeep removing a replaced file while a drop deletes the partition): it used to stop there,
    silently, leaving the rest."""
    import os

    storage = Storage(str(tmp_path))
    for name in ("a", "b", "c", "d"):
        storage.create(f"part/{name}", b"x")
    real = os.unlink
    taken: list[str] = []

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if not taken:  # the first unlink: another process deletes the rest of the files first
            for other in ("a", "b", "c", "d"):
                if other != os.path.basename(str(path)):
                    taken.append(other)
                    real(tmp_path / "part" / other)
        real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    storage.delete("part", recursive=True)
    monkeypatch.setattr(os, "unlink", real)
    assert taken and not storage.exists("part")


def test_a_folder_is_deleted_whole_while_another_process_writes_into_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recursive delete goes on past a file someone else wrote meanwhile (a metadata
    compaction writing a base file into a partition a drop deletes): it failed, "Directory not
    empty", and the drop with it."""
    import os

    storage = Storage(str(tmp_path))
    storage.create("part/a", b"x")
    real = os.rmdir
    late: list[str] = []

    def rmdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if not late and str(path).endswith("part"):  # written after the folder was listed
            late.append("b")
            (tmp_path / "part" / "b").write_bytes(b"y")
        real(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir)
    storage.delete("part", recursive=True)
    monkeypatch.setattr(os, "rmdir", real)
    assert late and not storage.exists("part")
