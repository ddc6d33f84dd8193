"""File slices of merge-on-read tables in the file-system view: equal to hudi-rs's on the tables
Apache Hudi wrote, and Hudi's rules on timelines made to order (log files of a slice in order,
slices of log files alone, failed writes, pending and completed compactions, time travel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeline.fs_view import FileSlice, FileSystemView
from timeline.instant import Action, Instant, State
from timeline.storage import FileInfo, Storage
from timeline.timeline import ActiveTimeline, Timeline

from .test_log_format import _unpack


@pytest.mark.parametrize("name", ["v6_trips_8i1u", "v6_trips_8i3d"])
def test_slices_equal_hudi_rs_on_tables_hudi_wrote(name: str, tmp_path: Path) -> None:
    import hudi

    base = _unpack(name, tmp_path)
    active = ActiveTimeline(Storage(str(base)))
    ours = FileSystemView(active, active.load()).latest_file_slices()
    theirs = hudi.HudiTableBuilder.from_base_uri(str(base)).build().get_file_slices()

    def mine(s: FileSlice) -> tuple[str, str, str, list[str]]:
        base_name = s.base_file.file_name if s.base_file else ""
        return s.partition_path, s.file_id, base_name, [log.file_name for log in s.log_files]

    assert sorted(map(mine, ours)) == sorted(
        (s.partition_path, s.file_id, s.base_file_name, list(s.log_file_names)) for s in theirs
    )
    assert any(s.log_files for s in ours)


def _t(n: int) -> str:
    return f"202611250100{n:05d}"


def _base(part: str, fid: str, n: int, token: str = "0-1-1") -> FileInfo:
    return FileInfo(f"{part}/{fid}_{token}_{_t(n)}.parquet", 100, False)


def _log(
    part: str, fid: str, n: int, version: int, token: str = "0-1-1", cdc: str = ""
) -> FileInfo:
    return FileInfo(f"{part}/.{fid}_{_t(n)}.log.{version}_{token}{cdc}", 10, False)


def _view(
    tmp_path: Path, spec: list[tuple[int, Action, State]], files: list[FileInfo], **kw: str
) -> FileSystemView:
    timeline = Timeline(tuple(sorted(Instant(_t(n), a, s) for n, a, s in spec)))
    active = ActiveTimeline(Storage(str(tmp_path)))
    return FileSystemView(active, timeline, listing=lambda: files, **kw)


def _slices(
    tmp_path: Path, spec: list[tuple[int, Action, State]], files: list[FileInfo], **kw: str
) -> dict[str, FileSlice]:
    view = _view(tmp_path, spec, files, **kw)
    return {f"{s.partition_path}/{s.file_id}": s for s in view.latest_file_slices()}


def _names(s: FileSlice) -> list[str]:
    return [p.rsplit("/", 1)[1] for p in s.paths]


D, C = Action.DELTA_COMMIT, State.COMPLETED


def test_log_files_join_their_base_instants_slice_in_order(tmp_path: Path) -> None:
    files = [
        _log("p", "a", 1, 2, "1-1-1"),
        _log("p", "a", 1, 10),
        _log("p", "a", 1, 2),
        _base("p", "a", 1),
        _log("p", "a", 1, 1),
        _log("p", "a", 1, 3, cdc=".cdc"),  # change-data files are not part of a slice
        _log("p", "b", 2, 1),  # a slice of log files alone (the bucket index writes them)
        _log("p", "c", 3, 1),  # a failed deltacommit's log-only group
        _base("p", "d", 3),  # a failed write's base file
        _log("q", "a", 1, 1),  # another partition, its own group
    ]
    spec = [(1, D, C), (2, D, C), (3, D, State.INFLIGHT)]
    slices = _slices(tmp_path, spec, files)
    assert sorted(slices) == ["p/a", "p/b", "q/a"]
    a = slices["p/a"]
    assert a.base_instant == _t(1) and a.base_file is not None
    assert [(log.name.version, log.name.write_token) for log in a.log_files] == [
        (1, "0-1-1"),
        (2, "0-1-1"),
        (2, "1-1-1"),
        (10, "0-1-1"),
    ]
    assert slices["p/b"].base_file is None and _names(slices["p/b"]) == [f".b_{_t(2)}.log.1_0-1-1"]
    in_q = _view(tmp_path, spec, files).latest_file_slices(["q"])
    assert [(s.partition_path, s.file_id) for s in in_q] == [("q", "a")]


def test_a_pending_compaction_is_read_with_the_slice_before_it(tmp_path: Path) -> None:
    files = [
        _base("p", "a", 1),
        _log("p", "a", 1, 1),
        _base("p", "a", 4, "0-2-2"),  # the compaction's base file, being written
        _log("p", "a", 4, 1),  # a log file written after the compaction was scheduled
    ]
    pending = [(1, D, C), (2, D, C), (4, Action.COMPACTION, State.INFLIGHT), (5, D, C)]
    a = _slices(tmp_path, pending, files)["p/a"]
    assert a.base_instant == _t(1) and a.base_file is not None
    assert a.base_file.instant_time == _t(1)
    assert _names(a) == [
        f"a_0-1-1_{_t(1)}.parquet",
        f".a_{_t(1)}.log.1_0-1-1",
        f".a_{_t(4)}.log.1_0-1-1",
    ]
    # once the compaction completes, its base file starts the slice and the old logs are gone
    done = [(1, D, C), (2, D, C), (4, Action.COMPACTION, C), (5, D, C)]
    a = _slices(tmp_path, done, files)["p/a"]
    assert _names(a) == [f"a_0-2-2_{_t(4)}.parquet", f".a_{_t(4)}.log.1_0-1-1"]
    # as of before the compaction was scheduled: the slice as it was then
    a = _slices(tmp_path, done, files[:2], as_of=_t(2))["p/a"]
    assert _names(a) == [f"a_0-1-1_{_t(1)}.parquet", f".a_{_t(1)}.log.1_0-1-1"]
