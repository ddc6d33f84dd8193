"""Cleans, rollbacks and restores: the files they deleted, read from Apache Hudi's Avro instant
files (written by Hudi 0.15, see data/NOTICE.md) and from this kernel's JSON; savepoints load as
instants; data files of instants Hudi archived stay committed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from timeline.errors import CorruptInstantError
from timeline.fs_view import FileSystemView
from timeline.instant import Action, Instant, State
from timeline.log_format import LogFileName
from timeline.removals import parse_removal
from timeline.storage import Storage
from timeline.timeline import ActiveTimeline, CommittedWrites, Timeline

DATA = Path(__file__).parent / "data"


def _hudi(name: str) -> tuple[Instant, bytes]:
    return Instant.from_file_name(name), (DATA / name).read_bytes()


def test_hudis_clean_names_the_file_slices_it_deleted() -> None:
    instant, data = _hudi("20261123112003522.clean")
    removal = parse_removal(instant, data, str(DATA / instant.file_name))
    assert sorted(removal.deleted) == ["p0", "p1"]
    assert len(removal.deleted["p0"]) == 3
    assert removal.removes(
        "p0", "432d5ea6-8c36-457a-97f7-96370973f76a-0_0-12-14_20261123111948225.parquet"
    )
    assert not removal.removes(
        "p1", "432d5ea6-8c36-457a-97f7-96370973f76a-0_0-12-14_20261123111948225.parquet"
    )
    assert not removal.whole_partitions


def test_hudis_rollback_and_restore_give_file_names_not_paths() -> None:
    rollback, data = _hudi("20261123112006112.rollback")
    removal = parse_removal(rollback, data, "x")
    assert removal.deleted["p0"] == {
        "432d5ea6-8c36-457a-97f7-96370973f76a-0_0-180-252_20261123112004563.parquet"
    }
    restore, data = _hudi("20261123112231154.restore")
    removal = parse_removal(restore, data, "x")
    assert {p: len(n) for p, n in removal.deleted.items()} == {"p0": 1, "p1": 1}
    assert all("/" not in n for names in removal.deleted.values() for n in names)


def test_a_merge_on_read_rollback_removes_its_targets_log_files() -> None:
    """Hudi rolls back a deltacommit by appending rollback command blocks, deleting nothing: the
    log files its target wrote stay, holding nothing that counts, and leave the index."""
    rollback, data = _hudi("20261125035801583.rollback")
    removal = parse_removal(rollback, data, "x")
    assert sorted(removal.deleted) == ["p0", "p1", "p2"]
    for partition, names in removal.deleted.items():
        (name,) = names
        assert LogFileName.parse(name) is not None, name
        assert removal.removes(partition, name)
    assert not removal.whole_partitions


def test_our_rollbacks_and_empty_content() -> None:
    instant = Instant("20260101000000000", Action.ROLLBACK, State.COMPLETED)
    removal = parse_removal(
        instant, b'{"deletedFiles": ["a/b/f1_1-0-1_x.parquet", "f2.parquet"]}', "x"
    )
    assert removal.deleted == {"a/b": {"f1_1-0-1_x.parquet"}, "": {"f2.parquet"}}
    assert not parse_removal(instant, b"", "x")


@pytest.mark.parametrize("content", [b"Obj\x01garbage", b"{not json", b"\x00\x01"])
def test_unreadable_content_names_the_instant(content: bytes) -> None:
    instant = Instant("20260101000000000", Action.CLEAN, State.COMPLETED)
    with pytest.raises(CorruptInstantError, match=r"x/20260101000000000\.clean"):
        parse_removal(instant, content, "x/20260101000000000.clean")


def test_a_hudi_savepoint_is_an_instant_and_does_not_stop_writers(tmp_path: Path) -> None:
    meta = tmp_path / ".hoodie"
    meta.mkdir()
    shutil.copy(DATA / "20261123112001813.savepoint", meta)
    (meta / "20261123112001813.savepoint.inflight").write_bytes(b"")
    loaded = ActiveTimeline(Storage(str(tmp_path))).load().require_valid()
    assert [str(i) for i in loaded] == ["[20261123112001813__savepoint__COMPLETED]"]


def _t(n: int) -> str:
    return f"2026010100000{n:04d}"


def test_files_of_archived_instants_stay_committed() -> None:
    """Hudi moved instants 1 and 2 to its archived timeline; 4 is still pending and 5 failed and
    was rolled back (its instant gone, though it is newer than the start)."""
    timeline = Timeline(
        (
            Instant(_t(3), Action.COMMIT, State.COMPLETED),
            Instant(_t(4), Action.COMMIT, State.INFLIGHT),
            Instant(_t(6), Action.REPLACE_COMMIT, State.COMPLETED),
        )
    )
    committed = CommittedWrites(timeline)
    assert committed.start == _t(3)
    assert [n for n in range(1, 7) if _t(n) in committed] == [1, 2, 3, 6]
    assert [n for n in range(1, 7) if _t(n) in CommittedWrites(timeline, as_of=_t(3))] == [1, 2, 3]
    # as of 1, instant 2 (archived since) did not exist yet
    assert [n for n in range(1, 7) if _t(n) in CommittedWrites(timeline, as_of=_t(1))] == [1]
    # a savepointed commit that archival kept behind does not move the start back
    kept = Timeline(
        (
            Instant(_t(1), Action.COMMIT, State.COMPLETED),
            Instant(_t(1), Action.SAVEPOINT, State.COMPLETED),
            Instant(_t(5), Action.COMMIT, State.COMPLETED),
        )
    )
    assert CommittedWrites(kept).start == _t(5)
    assert _t(3) in CommittedWrites(kept)
    # a restore to that savepoint leaves only savepointed writes: what is older stays committed
    restored = Timeline(
        (
            Instant(_t(4), Action.DELTA_COMMIT, State.COMPLETED),
            Instant(_t(4), Action.SAVEPOINT, State.COMPLETED),
            Instant(_t(7), Action.RESTORE, State.COMPLETED),
        )
    )
    assert CommittedWrites(restored).start == _t(4)
    assert [n for n in range(1, 8) if _t(n) in CommittedWrites(restored)] == [1, 2, 3, 4]


def test_the_view_lists_files_of_archived_instants(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    active = ActiveTimeline(storage)
    files = []
    for n in (1, 2, 3):
        instant = active.create_requested(Action.COMMIT, timestamp=_t(n))
        name = f"fg{n}_0-1-1_{_t(n)}.parquet"
        storage.create(f"p/{name}", _parquet())
        files.append(name)
        active.complete(active.transition_to_inflight(instant))
    for name in (tmp_path / ".hoodie").iterdir():  # archive instant 1, as Hudi does
        if name.name.startswith(_t(1)):
            name.unlink()
    view = FileSystemView(active, active.load())
    assert [b.file_name for b in view.latest_base_files()] == files


def _parquet() -> bytes:
    import io

    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"x": [1]}), sink)
    return sink.getvalue()
