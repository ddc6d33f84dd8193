"""Instants: an action on the table at an instant time, in one of three states.

File names follow Hudi 0.x (timeline layout 1), flat in ``.hoodie/``:

=================== ============================ ======================== ==================
action              requested                    inflight                 completed
=================== ============================ ======================== ==================
commit              ``T.commit.requested``       ``T.inflight`` (legacy)  ``T.commit``
compaction          ``T.compaction.requested``   ``T.compaction.inflight`` ``T.commit``
logcompaction       ``T.logcompaction.requested`` ``T.logcompaction.inflight`` ``T.deltacommit``
any other action a  ``T.a.requested``            ``T.a.inflight``         ``T.a``
=================== ============================ ======================== ==================

A completed compaction keeps the action ``compaction`` here (its file is ``T.commit``); parsing a
lone ``T.commit`` gives action ``commit``, and the timeline loader restores ``compaction`` when the
requested file says so. ``Instant.from_file_name(x).file_name == x`` for every valid name.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import re
from dataclasses import dataclass

from timeline.errors import InvalidInstantError

INSTANT_TIME_FORMAT = "%Y%m%d%H%M%S"
_TIMESTAMP_RE = re.compile(r"^(\d{14}|\d{17})$")


class State(enum.Enum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"

    @property
    def rank(self) -> int:
        return _STATE_RANK[self]

    def next(self) -> State:
        if self is State.REQUESTED:
            return State.INFLIGHT
        if self is State.INFLIGHT:
            return State.COMPLETED
        raise ValueError("a completed instant has no next state")


_STATE_RANK = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}


class Action(enum.StrEnum):
    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    REPLACE_COMMIT = "replacecommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    RESTORE = "restore"
    COMPACTION = "compaction"
    LOG_COMPACTION = "logcompaction"
    INDEXING = "indexing"
    #: Hudi's savepoint (``T.savepoint.inflight`` → ``T.savepoint``): pins file slices against
    #: cleaning and archival; it writes no data files
    SAVEPOINT = "savepoint"

    @property
    def completed_action(self) -> Action:
        """The action whose name the completed file carries."""
        if self is Action.COMPACTION:
            return Action.COMMIT
        if self is Action.LOG_COMPACTION:
            return Action.DELTA_COMMIT
        return self


#: Actions that write data files (the "write timeline").
WRITE_ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
    }
)


def normalize_timestamp(timestamp: str) -> str:
    """17-digit sort key; a legacy 14-digit (seconds) time sorts after every millisecond in it."""
    return timestamp + "999" if len(timestamp) == 14 else timestamp


def is_after(a: str, b: str) -> bool:
    """Whether instant time ``a`` is later than ``b`` (legacy 14-digit times included)."""
    return normalize_timestamp(a) > normalize_timestamp(b)


def validate_timestamp(timestamp: str) -> str:
    if not _TIMESTAMP_RE.match(timestamp):
        raise InvalidInstantError(timestamp, "an instant time has 17 digits (or 14, legacy)")
    return timestamp


def format_instant_time(moment: dt.datetime) -> str:
    """``yyyyMMddHHmmssSSS`` of an aware datetime, in UTC."""
    moment = moment.astimezone(dt.UTC)
    return moment.strftime(INSTANT_TIME_FORMAT) + f"{moment.microsecond // 1000:03d}"


def parse_instant_time(timestamp: str) -> dt.datetime:
    """The UTC datetime of an instant time."""
    validate_timestamp(timestamp)
    try:
        base = dt.datetime.strptime(timestamp[:14], INSTANT_TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError as e:
        raise InvalidInstantError(timestamp, "not a calendar date and time") from e
    millis = int(timestamp[14:]) if len(timestamp) == 17 else 0
    return base + dt.timedelta(milliseconds=millis)


@functools.total_ordering
@dataclass(frozen=True)
class Instant:
    """One instant of the timeline; ordered by time, then state."""

    timestamp: str
    action: Action
    state: State

    def __post_init__(self) -> None:
        validate_timestamp(self.timestamp)
        if not isinstance(self.action, Action):
            object.__setattr__(self, "action", Action(self.action))

    def __str__(self) -> str:
        return f"[{self.timestamp}__{self.action}__{self.state.name}]"

    def _key(self) -> tuple[str, int, str]:
        return (normalize_timestamp(self.timestamp), self.state.rank, self.action.value)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Instant):
            return NotImplemented
        return self._key() < other._key()

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_requested(self) -> bool:
        return self.state is State.REQUESTED

    @property
    def is_inflight(self) -> bool:
        return self.state is State.INFLIGHT

    def with_state(self, state: State) -> Instant:
        return Instant(self.timestamp, self.action, state)

    @property
    def file_name(self) -> str:
        return self.file_name_for(self.state)

    def file_name_for(self, state: State) -> str:
        """The file this instant has (or would have) in ``state``."""
        ts, action = self.timestamp, self.action
        if state is State.COMPLETED:
            return f"{ts}.{action.completed_action}"
        if state is State.INFLIGHT and action is Action.COMMIT:
            return f"{ts}.inflight"
        return f"{ts}.{action}.{state.value}"

    @classmethod
    def from_file_name(cls, name: str) -> Instant:
        """Parse an instant file name; raises :class:`InvalidInstantError` if it is not one. A
        name always means the same instant, so the answers are kept (every load of a timeline
        parses all its files' names: 2,000 of them took 50 ms of each)."""
        return _instant_of_file(name)


@functools.lru_cache(maxsize=1 << 16)
def _instant_of_file(name: str) -> Instant:
    """:meth:`Instant.from_file_name`, kept (an invalid name raises each time)."""
    parts = name.split(".")
    if len(parts) not in (2, 3):
        raise InvalidInstantError(name, "expected <time>.<action>[.requested|.inflight]")
    ts = parts[0]
    if not _TIMESTAMP_RE.match(ts):
        raise InvalidInstantError(name, f"{ts!r} is not a 17-digit (or 14, legacy) instant time")
    if len(parts) == 2:
        if parts[1] == "inflight":
            return Instant(ts, Action.COMMIT, State.INFLIGHT)
        action = _parse_action(name, parts[1])
        if action in (Action.COMPACTION, Action.LOG_COMPACTION):
            raise InvalidInstantError(
                name, f"a completed {action} is named .{action.completed_action}"
            )
        return Instant(ts, action, State.COMPLETED)
    action = _parse_action(name, parts[1])
    suffix = parts[2]
    if suffix == "requested":
        return Instant(ts, action, State.REQUESTED)
    if suffix == "inflight" and action is not Action.COMMIT:
        return Instant(ts, action, State.INFLIGHT)
    raise InvalidInstantError(name, f"unknown state suffix {suffix!r} for action {action}")


def _parse_action(name: str, value: str) -> Action:
    try:
        return Action(value)
    except ValueError:
        raise InvalidInstantError(name, f"unknown action {value!r}") from None
