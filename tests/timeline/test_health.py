"""timeline.health: what a health check finds wrong in .hoodie/, each problem naming the file,
what is wrong and what to do; a healthy Hudi timeline (empty commits, savepoints) has none."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

from timeline import Action, Table
from timeline.config import Config
from timeline.health import timeline_problems
from timeline.index_state import STATE_FILE
from timeline.instant import State
from timeline.timeline import WRITING_SECONDS


def _table(tmp_path: Path) -> Table:
    config = Config.resolve(explicit={"indexer.lock.url": "inprocess"})
    return Table.create(str(tmp_path / "t"), "t", ["uuid"], ["city"], "ts", config=config)


def _commit(table: Table, content: bytes = b"") -> str:
    """A completed commit of ``content``; an empty one written a while ago (as another tool left
    it: one written just now may still be being written, and is read again until it is not)."""
    timeline = table.timeline
    requested = timeline.create_requested(Action.COMMIT)
    done = timeline.complete(timeline.transition_to_inflight(requested), content)
    if not content:
        old = time.time() - WRITING_SECONDS - 1
        os.utime(table.storage.uri(timeline.path(done)), (old, old))
    return done.timestamp


def _meta(table: Table) -> Path:
    return Path(table.storage.uri(".hoodie"))


def test_a_healthy_timeline_has_no_problem(tmp_path: Path) -> None:
    table = _table(tmp_path)
    from writer.client import WriteClient

    WriteClient(table).insert(pa.table({"uuid": ["a"], "city": ["x"], "ts": [1]}))
    _commit(table)  # an empty commit, as Hudi reads one: no write stats
    savepoint = table.timeline.load().last()
    assert savepoint is not None
    (_meta(table) / f"{savepoint.timestamp}.savepoint.inflight").write_bytes(b"")  # no requested
    assert timeline_problems(table) == []


def test_a_corrupt_completed_instant_is_named_with_what_to_do(tmp_path: Path) -> None:
    table = _table(tmp_path)
    good = _commit(table)
    bad = _commit(table)
    (_meta(table) / f"{bad}.commit").write_text("garbage")
    clean = table.timeline.create_requested(Action.CLEAN, b"")
    table.timeline.complete(table.timeline.transition_to_inflight(clean), b"Obj\x01garbage")
    problems = timeline_problems(table)
    assert [p.path for p in problems] == [
        f".hoodie/{bad}.commit",
        f".hoodie/{clean.timestamp}.clean",
    ]
    assert "cannot be read" in problems[0].what and "not valid JSON" in problems[0].what
    assert "restore the file" in problems[0].fix
    assert good not in str(problems)
    assert [p.path for p in timeline_problems(table, newest=1)] == [problems[1].path]


def test_an_inflight_instant_without_its_requested_state_is_named(tmp_path: Path) -> None:
    table = _table(tmp_path)
    requested = table.timeline.create_requested(Action.REPLACE_COMMIT, b"{}")
    table.timeline.transition_to_inflight(requested)
    (_meta(table) / requested.file_name_for(State.REQUESTED)).unlink()
    [problem] = timeline_problems(table)
    assert problem.path == f".hoodie/{requested.timestamp}.replacecommit.requested"
    assert problem.what.startswith("missing")


def test_names_that_are_not_instants_and_an_unreadable_state_file_are_named(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path)
    (_meta(table) / "20260101000000000.bogus").write_text("")
    state = Path(table.storage.uri(STATE_FILE))
    state.parent.mkdir(parents=True)
    state.write_text("{ not json")
    problems = timeline_problems(table)
    assert [p.path for p in problems] == [".hoodie/20260101000000000.bogus", STATE_FILE]
    assert "indexer run" in problems[1].fix
