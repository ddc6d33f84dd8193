"""Conflict resolution: strategies and rules as pure objects (table-driven), candidate selection
over timelines, and reading operations from a real timeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from timeline.commit_metadata import CommitMetadata, FileGroupPlan, WriteStat
from timeline.conflict import (
    BucketStrategy,
    ConcurrentOperation,
    PreferWriterStrategy,
    SimpleStrategy,
    TxnStart,
    operation_of,
    strategy_for,
)
from timeline.errors import ConfigError, WriteConflictError
from timeline.instant import Action, Instant, State
from timeline.markers import DirectMarkers, IOType, Marker
from timeline.storage import Storage
from timeline.timeline import ActiveTimeline, Timeline

C, INF, R = State.COMPLETED, State.INFLIGHT, State.REQUESTED


def t(n: int) -> str:
    return f"202611211015{n:05d}"


def op(
    n: int,
    *groups: tuple[str, str],
    action: Action = Action.COMMIT,
    state: State = C,
    completion: str | None = None,
) -> ConcurrentOperation:
    return ConcurrentOperation(Instant(t(n), action, state), frozenset(groups), completion)


F1, F2 = "aaaa-1", "bbbb-2"
B3_X, B3_Y, B4 = "00000003-x-0", "00000003-y-0", "00000004-z-0"


@pytest.mark.parametrize(
    ("strategy", "this", "other", "conflict"),
    [
        (SimpleStrategy(), op(5, ("p", F1)), op(3, ("p", F1)), True),
        (SimpleStrategy(), op(5, ("p", F1)), op(3, ("p", F2)), False),
        (SimpleStrategy(), op(5, ("p", F1)), op(3, ("q", F1)), False),  # same id, other partition
        (BucketStrategy(), op(5, ("p", B3_X)), op(3, ("p", B3_Y)), True),  # same bucket
        (BucketStrategy(), op(5, ("p", B3_X)), op(3, ("p", B4)), False),
        (BucketStrategy(), op(5, ("p", B3_X)), op(3, ("q", B3_Y)), False),
        (
            BucketStrategy(),
            op(5, ("p", F1)),
            op(3, ("p", F1)),
            True,
        ),  # non-bucket ids compare whole
        (PreferWriterStrategy(), op(5, ("p", F1)), op(3, ("p", F1)), True),
    ],
)
def test_has_conflict(
    strategy: object, this: ConcurrentOperation, other: ConcurrentOperation, conflict: bool
) -> None:
    assert strategy.has_conflict(this, other) is conflict  # type: ignore[attr-defined]


def test_resolution_rules() -> None:
    simple = SimpleStrategy()
    this = op(5, ("p", F1))
    with pytest.raises(WriteConflictError) as err:
        simple.resolve(this, op(3, ("p", F1)))
    assert err.value.instant == this.instant
    assert err.value.other_instant == Instant(t(3), Action.COMMIT, C)
    assert err.value.file_ids == [f"p/{F1}"]
    assert "retry" in str(err.value)
    # a compaction planned before this write is compatible with it
    simple.resolve(this, op(3, ("p", F1), action=Action.COMPACTION, state=R))
    # a compaction planned after it is not
    with pytest.raises(WriteConflictError):
        simple.resolve(this, op(7, ("p", F1), action=Action.COMPACTION, state=R))
    # a log compaction never conflicts
    simple.resolve(op(5, ("p", F1), action=Action.LOG_COMPACTION, state=INF), op(3, ("p", F1)))
    simple.resolve(this, op(3, ("p", F2)))  # no overlap


def _tl(*items: tuple[int, Action, State]) -> Timeline:
    return Timeline(tuple(sorted(Instant(t(n), a, s) for n, a, s in items)))


def test_candidates_simple() -> None:
    # this write = 10, started when 01 and 04 were completed and 06 was pending
    start = TxnStart(
        Instant(t(10), Action.COMMIT, INF), last_completed=t(4), pending=frozenset({t(6)})
    )
    now = _tl(
        (1, Action.COMMIT, C),
        (4, Action.COMMIT, C),
        (6, Action.DELTA_COMMIT, C),  # (c) pending at start, completed since
        (8, Action.COMMIT, C),  # (a) completed after the last known completion
        (9, Action.COMMIT, INF),  # pending ingestion: not a candidate
        (11, Action.COMPACTION, R),  # (b) compaction planned after this write started
        (12, Action.REPLACE_COMMIT, INF),  # (b) clustering planned after this write started
        (3, Action.COMPACTION, R),  # planned before: not a candidate
        (10, Action.COMMIT, INF),  # ourselves
        (13, Action.CLEAN, C),  # not a write
    )
    picked = SimpleStrategy().candidates(now, start, lambda i: i.timestamp)
    assert [i.timestamp for i in picked] == [t(6), t(8), t(11), t(12)]


def test_candidates_prefer_writer_by_completion_time() -> None:
    start = TxnStart(Instant(t(10), Action.COMMIT, INF), last_completed=t(4))
    now = _tl(
        (2, Action.COMMIT, C),
        (4, Action.COMMIT, C),
        (12, Action.COMMIT, C),
        (9, Action.COMMIT, INF),
    )
    completions = {t(2): t(3), t(4): t(11), t(12): t(13)}  # 04 completed after 10 started
    strategy = PreferWriterStrategy()
    picked = strategy.candidates(now, start, lambda i: completions[i.timestamp])
    assert [i.timestamp for i in picked] == [t(4), t(12)]
    # a table service also yields to pending ingestion
    service = strategy.candidates(
        now, start, lambda i: completions[i.timestamp], is_table_service=True
    )
    assert [i.timestamp for i in service] == [t(4), t(9), t(12)]


def test_strategy_for() -> None:
    assert isinstance(strategy_for("Bucket"), BucketStrategy)
    with pytest.raises(ConfigError, match="unknown strategy"):
        strategy_for("optimistic")


def test_operation_of_reads_the_timeline(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    active = ActiveTimeline(storage)
    # completed commit: its write stats
    done = active.complete(
        active.transition_to_inflight(active.create_requested(Action.COMMIT)),
        CommitMetadata.of([WriteStat("f1", "p/f1_0-0-0_x.parquet", "p")], "UPSERT").to_json(),
    )
    assert operation_of(active, done).mutated == {("p", "f1")}
    assert operation_of(active, done).completion_time == active.completion_time(done)
    # completed replacecommit: written and replaced groups
    replaced = CommitMetadata(
        {"p": (WriteStat("f9", "p/f9.parquet", "p"),)}, "CLUSTER", {}, {"p": ("f2", "f3")}
    )
    rc = active.complete(
        active.transition_to_inflight(active.create_requested(Action.REPLACE_COMMIT)),
        replaced.to_json(),
    )
    assert operation_of(active, rc).mutated == {("p", "f9"), ("p", "f2"), ("p", "f3")}
    # pending compaction: its plan
    plan = FileGroupPlan(frozenset({("q", "f4")}))
    compaction = active.create_requested(Action.COMPACTION, json.dumps(plan.to_json()).encode())
    assert operation_of(active, compaction).mutated == {("q", "f4")}
    assert operation_of(active, compaction).is_table_service
    # pending clustering: its input groups
    clustering = active.create_requested(
        Action.REPLACE_COMMIT, json.dumps(plan.to_json("inputGroups")).encode()
    )
    assert operation_of(active, clustering).mutated == {("q", "f4")}
    # requested write: its markers
    pending = active.create_requested(Action.COMMIT)
    DirectMarkers(storage, pending.timestamp).create(
        Marker("r", f"f5-0_0-0-0_{pending.timestamp}.parquet", IOType.CREATE)
    )
    assert operation_of(active, pending).mutated == {("r", "f5-0")}
    # inflight write: its inflight metadata
    inflight = active.transition_to_inflight(
        pending,
        json.dumps(
            CommitMetadata.of([WriteStat("f6", "r/f6.parquet", "r")], "INSERT").to_json()
        ).encode(),
    )
    assert operation_of(active, inflight).mutated == {("r", "f6")}
