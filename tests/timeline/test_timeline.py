"""The active timeline: loading, write-once transitions, completion times, filters, bad files."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from timeline import timeline as timeline_module
from timeline.errors import CorruptInstantError, InstantAlreadyExistsError, InvalidTransitionError
from timeline.instant import Action, Instant, State
from timeline.storage import Storage
from timeline.timeline import COMPLETION_TIME_KEY, WRITING_SECONDS, ActiveTimeline, Timeline, _fold


def _t(n: int) -> str:
    return f"202611211015{n:05d}"


def test_full_lifecycle_on_every_backend(storage: Storage) -> None:
    timeline = ActiveTimeline(storage)
    requested = timeline.create_requested(Action.COMMIT, b"")
    assert timeline.load().instants == (requested,)
    inflight = timeline.transition_to_inflight(requested, b'{"plan": 1}')
    assert timeline.load().instants == (inflight,)
    done = timeline.complete(inflight, {"partitionToWriteStats": {}, "operationType": "INSERT"})
    assert timeline.load().instants == (done,)
    names = sorted(f.name for f in storage.list(".hoodie") if not f.is_dir)
    ts = requested.timestamp
    assert names == [f"{ts}.commit", f"{ts}.commit.requested", f"{ts}.inflight"]
    content = timeline.read_json(done)
    assert content["operationType"] == "INSERT"
    assert content[COMPLETION_TIME_KEY] >= ts
    assert timeline.read_content(inflight) == b'{"plan": 1}'


def test_states_are_written_once(storage: Storage) -> None:
    timeline = ActiveTimeline(storage)
    requested = timeline.create_requested(Action.DELTA_COMMIT)
    inflight = timeline.transition_to_inflight(requested)
    with pytest.raises(InstantAlreadyExistsError) as err:
        timeline.transition_to_inflight(requested)
    assert err.value.instant == inflight
    with pytest.raises(InstantAlreadyExistsError):
        timeline.create_requested(Action.DELTA_COMMIT, timestamp=requested.timestamp)
    timeline.complete(inflight)
    with pytest.raises(InstantAlreadyExistsError):
        timeline.complete(inflight, {"again": True})


def test_transition_needs_the_previous_state(tmp_path: Any) -> None:
    timeline = ActiveTimeline(Storage(str(tmp_path)))
    ghost = Instant(_t(1), Action.CLEAN, State.REQUESTED)
    with pytest.raises(InvalidTransitionError, match="does not exist"):
        timeline.transition_to_inflight(ghost)
    assert not timeline.load()
    requested = timeline.create_requested(Action.CLEAN, timestamp=_t(2))
    with pytest.raises(InvalidTransitionError, match="cannot move"):
        timeline.complete(requested)  # requested -> completed skips inflight
    done = timeline.complete(timeline.transition_to_inflight(requested))
    with pytest.raises(InvalidTransitionError):
        timeline.transition_to_inflight(done)


def test_completion_time_is_recorded_and_ordered(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    timeline = ActiveTimeline(storage)
    first = timeline.transition_to_inflight(timeline.create_requested(Action.COMMIT))
    second = timeline.transition_to_inflight(timeline.create_requested(Action.COMMIT))
    done2 = timeline.complete(second)
    done1 = timeline.complete(first)
    # completion order differs from instant order; a fresh reader sees the recorded times
    fresh = ActiveTimeline(storage)
    c1, c2 = fresh.completion_time(done1), fresh.completion_time(done2)
    assert c2 < c1
    assert c1 >= done1.timestamp and c2 >= done2.timestamp
    with pytest.raises(InvalidTransitionError):
        fresh.completion_time(first)


def test_a_completed_file_found_empty_is_read_again_until_its_writer_wrote_it(
    tmp_path: Path,
) -> None:
    """Apache Hudi creates a completed instant's file, then writes its content into it: a read
    in between found nothing, and a clean read so had deleted nothing."""
    storage = Storage(str(tmp_path))
    storage.create(f".hoodie/{_t(1)}.clean", b"")
    storage.create(f".hoodie/{_t(2)}.commit.requested", b"")
    timeline = ActiveTimeline(storage)
    done, requested = timeline.load().instants
    avro = b"Obj\x01 the clean's metadata"
    writing = threading.Timer(0.3, (tmp_path / ".hoodie" / f"{_t(1)}.clean").write_bytes, [avro])
    writing.start()
    try:
        assert timeline.read_content(done) == avro
    finally:
        writing.join()
    started = time.monotonic()
    assert timeline.read_content(requested) == b""  # a plan's file may be empty: read at once
    assert time.monotonic() - started < 1.0  # (not the 5 s a completed one may be waited for)


def test_a_completed_file_its_writer_left_empty_reads_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written long enough ago (another tool's), at once; written just now, once it has stayed
    empty for WRITING_SECONDS since."""
    storage = Storage(str(tmp_path))
    storage.create(f".hoodie/{_t(1)}.commit", b"")
    old = time.time() - WRITING_SECONDS - 1
    os.utime(tmp_path / ".hoodie" / f"{_t(1)}.commit", (old, old))
    timeline = ActiveTimeline(storage)
    (settled,) = timeline.load().instants
    started = time.monotonic()
    assert timeline.read_content(settled) == b"" and timeline.read_json(settled) == {}
    assert time.monotonic() - started < 1.0
    monkeypatch.setattr(timeline_module, "WRITING_SECONDS", 0.4)
    storage.create(f".hoodie/{_t(2)}.commit", b"")
    fresh = timeline.load().instants[1]
    started = time.monotonic()
    assert timeline.read_json(fresh) == {}
    written = os.path.getmtime(tmp_path / ".hoodie" / f"{_t(2)}.commit")
    assert time.time() - written >= 0.4 - 0.01  # not before it had stayed empty that long
    assert time.monotonic() - started < 3


def test_completion_time_falls_back_to_mtime_for_foreign_files(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    storage.create(f".hoodie/{_t(1)}.commit", b"")  # e.g. written by another tool, 0 bytes
    storage.create(f".hoodie/{_t(2)}.clean", b"\x00\x01avro")
    path = tmp_path / ".hoodie" / f"{_t(1)}.commit"
    os.utime(path, (1_800_000_000.25, 1_800_000_000.25))
    timeline = ActiveTimeline(storage)
    loaded = timeline.load()
    assert timeline.completion_time(loaded.instants[0]) == "20270115080000250"
    assert len(timeline.completion_time(loaded.instants[1])) == 17


def test_fold_keeps_latest_state_and_restores_compaction() -> None:
    names = [
        f"{_t(1)}.commit.requested",
        f"{_t(1)}.inflight",
        f"{_t(1)}.commit",
        f"{_t(2)}.compaction.requested",
        f"{_t(2)}.compaction.inflight",
        f"{_t(2)}.commit",
        f"{_t(3)}.compaction.requested",
        f"{_t(4)}.logcompaction.requested",
        f"{_t(4)}.logcompaction.inflight",
        f"{_t(4)}.deltacommit",
        f"{_t(5)}.indexing.requested",
        f"{_t(5)}.indexing.inflight",
        "hoodie.properties",
    ]
    assert _fold(names).instants == (
        Instant(_t(1), Action.COMMIT, State.COMPLETED),
        Instant(_t(2), Action.COMPACTION, State.COMPLETED),
        Instant(_t(3), Action.COMPACTION, State.REQUESTED),
        Instant(_t(4), Action.LOG_COMPACTION, State.COMPLETED),
        Instant(_t(5), Action.INDEXING, State.INFLIGHT),
    )


def test_completing_a_compaction_writes_a_commit_file(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    timeline = ActiveTimeline(storage)
    requested = timeline.create_requested(Action.COMPACTION, b'{"operations": []}')
    done = timeline.complete(timeline.transition_to_inflight(requested))
    assert storage.exists(f".hoodie/{requested.timestamp}.commit")
    assert timeline.load().instants == (done,)
    assert done.action is Action.COMPACTION


def test_stray_files_are_skipped_with_a_warning(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    storage = Storage(str(tmp_path))
    storage.create(f".hoodie/{_t(1)}.commit", b"{}")
    storage.create(f".hoodie/{_t(2)}.unknownaction", b"")
    storage.create(".hoodie/2026.commit", b"")
    storage.create(".hoodie/hoodie.properties", b"")
    storage.create(".hoodie/.temp/x", b"")
    with caplog.at_level(logging.WARNING, logger="timeline.timeline"):
        loaded = ActiveTimeline(storage).load()
    assert loaded.timestamps == [_t(1)]
    assert sorted(s.name for s in loaded.skipped) == ["2026.commit", f"{_t(2)}.unknownaction"]
    assert "unknown action 'unknownaction'" in caplog.text


def test_corrupt_content_names_the_file(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    storage.create(f".hoodie/{_t(1)}.commit", b'{"truncated": ')
    storage.create(f".hoodie/{_t(2)}.commit", b"[1, 2]")
    timeline = ActiveTimeline(storage)
    first, second = timeline.load().instants
    with pytest.raises(CorruptInstantError) as err:
        timeline.read_json(first)
    assert err.value.path.endswith(f"{_t(1)}.commit")
    with pytest.raises(CorruptInstantError, match="not a JSON object"):
        timeline.read_json(second)


def test_duplicate_instant_time_is_kept_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="timeline.timeline"):
        loaded = _fold([f"{_t(1)}.commit", f"{_t(1)}.clean"])
    assert {i.action for i in loaded} == {Action.COMMIT, Action.CLEAN}
    assert "used by several actions" in caplog.text


def _timeline(spec: list[tuple[int, Action, State]]) -> Timeline:
    return Timeline(tuple(sorted(Instant(_t(n), a, s) for n, a, s in spec)))


C, P = State.COMPLETED, State.INFLIGHT


def test_last_settled_write_reference_example() -> None:
    # completed 01..07, 13, 15, 17; pending 09, 11, 19 -> 07
    spec = [(n, Action.COMMIT, C) for n in (1, 2, 3, 4, 5, 6, 7, 13, 15, 17)]
    spec += [(n, Action.COMMIT, P) for n in (9, 11, 19)]
    spec += [(10, Action.INDEXING, P), (12, Action.CLEAN, C)]  # no pending change of files
    assert _timeline(spec).last_settled_write() == Instant(_t(7), Action.COMMIT, C)


@pytest.mark.parametrize("action", [Action.CLEAN, Action.ROLLBACK, Action.RESTORE])
def test_a_pending_removal_stops_the_settled_writes(action: Action) -> None:
    """A clean (or rollback, restore) pending at 05 deletes files when it completes, maybe
    after an index built up to 07 listed them; 07 would then never count it as unapplied."""
    spec = [(n, Action.COMMIT, C) for n in (1, 2, 3, 4, 6, 7)]
    assert _timeline([*spec, (5, action, State.REQUESTED)]).last_settled_write() == Instant(
        _t(4), Action.COMMIT, C
    )
    assert _timeline([*spec, (5, action, C)]).last_settled_write() == Instant(
        _t(7), Action.COMMIT, C
    )


def test_a_savepoint_shares_its_commits_time_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="timeline.timeline"):
        loaded = _fold([f"{_t(1)}.commit", f"{_t(1)}.savepoint"])
    assert {i.action for i in loaded} == {Action.COMMIT, Action.SAVEPOINT}
    assert not caplog.text


def test_last_settled_write_edges() -> None:
    assert _timeline([]).last_settled_write() is None
    assert _timeline([(1, Action.COMMIT, P)]).last_settled_write() is None
    everything = _timeline([(1, Action.COMMIT, C), (2, Action.DELTA_COMMIT, C)])
    assert everything.last_settled_write() == Instant(_t(2), Action.DELTA_COMMIT, C)
    compaction_pending = _timeline([(1, Action.COMMIT, C), (2, Action.COMPACTION, State.REQUESTED)])
    assert compaction_pending.last_settled_write() == Instant(_t(1), Action.COMMIT, C)


def test_filters() -> None:
    tl = _timeline(
        [
            (1, Action.COMMIT, C),
            (2, Action.CLEAN, C),
            (3, Action.REPLACE_COMMIT, P),
            (4, Action.INDEXING, State.REQUESTED),
            (5, Action.DELTA_COMMIT, C),
        ]
    )
    assert tl.completed().timestamps == [_t(1), _t(2), _t(5)]
    assert tl.pending().timestamps == [_t(3), _t(4)]
    assert tl.write_timeline().timestamps == [_t(1), _t(3), _t(5)]
    assert tl.with_actions(Action.INDEXING).timestamps == [_t(4)]
    assert tl.after(_t(2)).timestamps == [_t(3), _t(4), _t(5)]
    assert tl.before(_t(2)).timestamps == [_t(1)]
    assert tl.get(_t(3)) == Instant(_t(3), Action.REPLACE_COMMIT, P)
    assert tl.get(_t(3), Action.COMMIT) is None
    assert tl.first() == Instant(_t(1), Action.COMMIT, C)
    assert tl.last() == Instant(_t(5), Action.DELTA_COMMIT, C)


def test_delete_pending_removes_inflight_then_requested(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    timeline = ActiveTimeline(storage)
    inflight = timeline.transition_to_inflight(timeline.create_requested(Action.COMMIT))
    timeline.delete_pending(inflight)
    assert not timeline.load()
    done = timeline.complete(
        timeline.transition_to_inflight(timeline.create_requested(Action.COMMIT))
    )
    with pytest.raises(InvalidTransitionError):
        timeline.delete_pending(done)


def test_completed_content_is_json_with_sorted_keys(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    timeline = ActiveTimeline(storage)
    done = timeline.complete(
        timeline.transition_to_inflight(timeline.create_requested(Action.CLEAN)), {"b": 1, "a": 2}
    )
    raw = json.loads(storage.read(f".hoodie/{done.file_name}"))
    assert list(raw) == ["a", "b", COMPLETION_TIME_KEY]


def test_an_unchanged_listing_is_folded_once(tmp_path: Any) -> None:
    """Every scan loads the timeline to see whether the table changed: an unchanged listing
    gives the Timeline folded before; any new state file gives a new one."""
    timeline = ActiveTimeline(Storage(str(tmp_path)))
    requested = timeline.create_requested(Action.COMMIT, timestamp=_t(1))
    first = timeline.load()
    assert ActiveTimeline(Storage(str(tmp_path))).load() is first
    timeline.transition_to_inflight(requested)
    moved = timeline.load()
    assert moved is not first and moved.instants[0].state is State.INFLIGHT
