"""Instants: Hudi 0.x file names, round trips, ordering, validation."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline.errors import InvalidInstantError
from timeline.instant import (
    Action,
    Instant,
    State,
    format_instant_time,
    parse_instant_time,
)

T = "20261121101500123"


@pytest.mark.parametrize(
    ("action", "state", "name"),
    [
        (Action.COMMIT, State.REQUESTED, f"{T}.commit.requested"),
        (Action.COMMIT, State.INFLIGHT, f"{T}.inflight"),
        (Action.COMMIT, State.COMPLETED, f"{T}.commit"),
        (Action.DELTA_COMMIT, State.INFLIGHT, f"{T}.deltacommit.inflight"),
        (Action.DELTA_COMMIT, State.COMPLETED, f"{T}.deltacommit"),
        (Action.REPLACE_COMMIT, State.REQUESTED, f"{T}.replacecommit.requested"),
        (Action.CLEAN, State.COMPLETED, f"{T}.clean"),
        (Action.ROLLBACK, State.INFLIGHT, f"{T}.rollback.inflight"),
        (Action.RESTORE, State.REQUESTED, f"{T}.restore.requested"),
        (Action.INDEXING, State.REQUESTED, f"{T}.indexing.requested"),
        (Action.INDEXING, State.INFLIGHT, f"{T}.indexing.inflight"),
        (Action.INDEXING, State.COMPLETED, f"{T}.indexing"),
        (Action.COMPACTION, State.REQUESTED, f"{T}.compaction.requested"),
        (Action.COMPACTION, State.INFLIGHT, f"{T}.compaction.inflight"),
        (Action.COMPACTION, State.COMPLETED, f"{T}.commit"),
        (Action.LOG_COMPACTION, State.COMPLETED, f"{T}.deltacommit"),
    ],
)
def test_hudi_file_names(action: Action, state: State, name: str) -> None:
    assert Instant(T, action, state).file_name == name


@pytest.mark.parametrize(
    "name",
    [
        "2026112110150012.commit",  # 16 digits
        "x20261121101500123.commit",
        f"{T}.bogus",
        f"{T}.commit.inflight",  # commit's inflight is the legacy T.inflight
        f"{T}.commit.done",
        f"{T}.compaction",  # a completed compaction is T.commit
        f"{T}",
        f"{T}.commit.requested.extra",
    ],
)
def test_invalid_file_names_are_rejected_with_the_name(name: str) -> None:
    with pytest.raises(InvalidInstantError) as err:
        Instant.from_file_name(name)
    assert err.value.value == name


_timestamps = st.one_of(
    st.from_regex(r"\A\d{17}\Z", fullmatch=True), st.from_regex(r"\A\d{14}\Z", fullmatch=True)
)


@given(_timestamps, st.sampled_from(list(Action)), st.sampled_from(list(State)))
def test_file_name_round_trips(timestamp: str, action: Action, state: State) -> None:
    name = Instant(timestamp, action, state).file_name
    parsed = Instant.from_file_name(name)
    assert parsed.file_name == name
    if not (state is State.COMPLETED and action in (Action.COMPACTION, Action.LOG_COMPACTION)):
        assert parsed == Instant(timestamp, action, state)


def test_ordering_by_time_then_state() -> None:
    a = Instant("20261121101500100", Action.COMMIT, State.COMPLETED)
    b = Instant("20261121101500101", Action.CLEAN, State.REQUESTED)
    c = Instant("20261121101500101", Action.CLEAN, State.COMPLETED)
    assert sorted([c, b, a]) == [a, b, c]


def test_legacy_second_timestamps_sort_after_their_milliseconds() -> None:
    legacy = Instant("20261121101500", Action.COMMIT, State.COMPLETED)
    inside = Instant("20261121101500998", Action.COMMIT, State.COMPLETED)
    after = Instant("20261121101501000", Action.COMMIT, State.COMPLETED)
    assert inside < legacy < after


def test_instant_time_format_round_trip() -> None:
    moment = dt.datetime(2026, 11, 21, 10, 15, 0, 123000, tzinfo=dt.UTC)
    assert format_instant_time(moment) == T
    assert parse_instant_time(T) == moment
    with pytest.raises(InvalidInstantError):
        parse_instant_time("20261399101500123")  # month 13


def test_str_names_time_action_state() -> None:
    assert str(Instant(T, Action.INDEXING, State.INFLIGHT)) == f"[{T}__indexing__INFLIGHT]"
