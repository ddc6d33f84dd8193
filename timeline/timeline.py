"""The active timeline: the instants in ``.hoodie/``, loaded as an immutable snapshot.

Loading lists ``.hoodie/`` once (flat) and folds the state files of each instant into one
:class:`Instant` in its latest state. Rules for what else is there:

* folders and files whose name does not start with a digit (``hoodie.properties``, ``.temp``, ...)
  are not instants and are ignored;
* a file that starts with a digit but is not a valid instant file name (unknown action, bad time,
  bad suffix) is **skipped with a warning** and listed in :attr:`Timeline.skipped`, so one stray
  file cannot stop readers; writers and table services call :meth:`Timeline.require_valid` and
  refuse to act on a timeline they cannot fully read (an unknown action may mutate data in ways
  they cannot check for conflicts);
* two different actions at the same instant time break invariant 1; both are kept, with a warning
  (except a savepoint, which Hudi names after the commit it saves);
* content is read lazily; unparsable content raises :class:`CorruptInstantError` naming the file;
  a completed instant's file found empty while its writer may still be writing it is read again
  (:meth:`ActiveTimeline.read_content`).

State transitions are write-once: the new state's file is created with create-if-absent, and only
if the previous state's file exists. A completed instant's content is a JSON object that records
its completion time under ``completionTime`` (Hudi 0.x uses the file's mtime, which is coarse on
object stores; we fall back to the mtime only for files written by others).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from timeline.errors import (
    CorruptInstantError,
    FileAlreadyExistsError,
    InstantAlreadyExistsError,
    InvalidInstantError,
    InvalidTransitionError,
)
from timeline.instant import (
    WRITE_ACTIONS,
    Action,
    Instant,
    State,
    format_instant_time,
    normalize_timestamp,
)
from timeline.instant_time import InstantTimeGenerator
from timeline.storage import Storage

logger = logging.getLogger(__name__)

META_FOLDER = ".hoodie"
_REMOVALS = frozenset({Action.CLEAN, Action.ROLLBACK, Action.RESTORE})
COMPLETION_TIME_KEY = "completionTime"

#: how long after its last write a completed instant's empty file may still be being written.
#: Apache Hudi creates a completed instant's file and then writes its content into it (its
#: ``createImmutableFileInPath``), so on a file system a reader can list the file and read nothing
#: in between; an empty file older than this is all its writer wrote (another tool's: Hudi reads
#: it as metadata with nothing in it)
WRITING_SECONDS = 5.0
#: how often such a file is read again meanwhile
_REREAD_SECONDS = 0.02


@dataclass(frozen=True)
class SkippedFile:
    """A file in ``.hoodie/`` that looked like an instant but is not a valid one."""

    name: str
    reason: str


@dataclass(frozen=True)
class Timeline:
    """An immutable, sorted snapshot of instants. Filters return new snapshots."""

    instants: tuple[Instant, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()

    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def require_valid(self) -> Timeline:
        """This timeline, or :class:`CorruptInstantError` naming the first file that looked like
        an instant but is not one (for writers and table services; readers only warn)."""
        if self.skipped:
            bad = self.skipped[0]
            raise CorruptInstantError(
                f"{META_FOLDER}/{bad.name}",
                f"{bad.reason}; writes and table services stop at a timeline they cannot fully "
                "read (move the file out of .hoodie/ if it is not an instant)",
            )
        return self

    def __len__(self) -> int:
        return len(self.instants)

    def __bool__(self) -> bool:
        return bool(self.instants)

    def filter(self, predicate: Callable[[Instant], bool]) -> Timeline:
        return Timeline(tuple(i for i in self.instants if predicate(i)), self.skipped)

    def completed(self) -> Timeline:
        return self.filter(lambda i: i.is_completed)

    def pending(self) -> Timeline:
        return self.filter(lambda i: not i.is_completed)

    def with_actions(self, *actions: Action) -> Timeline:
        wanted = set(actions)
        return self.filter(lambda i: i.action in wanted)

    def write_timeline(self) -> Timeline:
        """Instants of actions that write data files (commit, deltacommit, replacecommit, ...)."""
        return self.filter(lambda i: i.action in WRITE_ACTIONS)

    def after(self, timestamp: str) -> Timeline:
        """Instants strictly after ``timestamp``."""
        key = normalize_timestamp(timestamp)
        return self.filter(lambda i: normalize_timestamp(i.timestamp) > key)

    def before(self, timestamp: str) -> Timeline:
        """Instants strictly before ``timestamp``."""
        key = normalize_timestamp(timestamp)
        return self.filter(lambda i: normalize_timestamp(i.timestamp) < key)

    def first(self) -> Instant | None:
        return self.instants[0] if self.instants else None

    def last(self) -> Instant | None:
        return self.instants[-1] if self.instants else None

    def get(self, timestamp: str, action: Action | None = None) -> Instant | None:
        for instant in self.instants:
            if instant.timestamp == timestamp and (action is None or instant.action is action):
                return instant
        return None

    @property
    def timestamps(self) -> list[str]:
        return [i.timestamp for i in self.instants]

    def last_settled_write(self) -> Instant | None:
        """The last completed write instant before the earliest pending instant that changes
        data files: a write, or a clean, rollback or restore (Hudi's "last contiguous completed
        write", with removals counted too).

        E.g. completed 01..07, 13, 15, 17 with 09, 11, 19 pending gives 07: everything up to it is
        final, so an index built up to it never has to revisit an earlier instant. A clean or
        rollback pending before 07 would complete later with nothing to say the index lacks it
        (it is not newer than what the index covers), so it stops the count as a write does."""
        changes = self.filter(lambda i: i.action in WRITE_ACTIONS or i.action in _REMOVALS)
        first_pending = changes.pending().first()
        completed = self.write_timeline().completed()
        if first_pending is not None:
            completed = completed.before(first_pending.timestamp)
        return completed.last()


class CommittedWrites:
    """Which data-writing instant times are committed in a timeline snapshot (optionally only up
    to ``as_of``): the completed write instants, and every instant time older than where the
    active timeline starts that the snapshot does not hold at all. Apache Hudi archives old
    instants out of ``.hoodie/`` (into ``archived/``); only completed ones are archived, and a
    rollback deletes a failed write's files before its instant, so the data files of an archived
    instant are committed (Hudi's file-system view decides the same way). The start is the first
    write instant that is not a savepoint's: archival may keep a savepointed commit behind and
    archive the ones after it; when every write left is a savepoint's (a restore to one), the
    newest of them."""

    def __init__(self, timeline: Timeline, as_of: str | None = None) -> None:
        completed = timeline.write_timeline().completed()
        if as_of is not None:
            completed = completed.filter(lambda i: not _is_after(i.timestamp, as_of))
        self._completed = {i.timestamp for i in completed}
        self._known = {i.timestamp for i in timeline}
        self._as_of = as_of
        savepoints = {i.timestamp for i in timeline.with_actions(Action.SAVEPOINT)}
        writes = list(timeline.write_timeline())
        first = next((i for i in writes if i.timestamp not in savepoints), None)
        if first is None and writes:  # only savepointed writes left (a restore to a savepoint)
            first = writes[-1]
        self.start = first.timestamp if first is not None else None

    def is_archived(self, timestamp: str) -> bool:
        """Older than the active timeline's start and not in it: an archived (completed) one."""
        return (
            self.start is not None
            and timestamp not in self._known
            and normalize_timestamp(timestamp) < normalize_timestamp(self.start)
        )

    def __contains__(self, timestamp: object) -> bool:
        if not isinstance(timestamp, str):
            return False
        if timestamp in self._completed:
            return True
        return self.is_archived(timestamp) and (
            self._as_of is None or not _is_after(timestamp, self._as_of)
        )


def _is_after(a: str, b: str) -> bool:
    return normalize_timestamp(a) > normalize_timestamp(b)


@functools.lru_cache(maxsize=32)
def _folded(names: tuple[str, ...]) -> Timeline:
    """:func:`_fold` of one listing, kept by its names (a Timeline is immutable): a reader that
    loads an unchanged timeline again, as every scan does to see whether the table changed,
    folds it once."""
    return _fold(names)


def _fold(entries: Iterable[str]) -> Timeline:
    """Fold state files into instants in their latest state."""
    by_time: dict[str, list[Instant]] = defaultdict(list)
    skipped: list[SkippedFile] = []
    for name in entries:
        if not name[:1].isdigit():
            continue
        try:
            parsed = Instant.from_file_name(name)
        except InvalidInstantError as e:
            logger.warning("skipping %s/%s: %s", META_FOLDER, name, e.reason)
            skipped.append(SkippedFile(name, e.reason))
            continue
        by_time[parsed.timestamp].append(parsed)

    instants: list[Instant] = []
    for timestamp, parsed_files in by_time.items():
        actions = {i.action for i in parsed_files}
        latest: dict[Action, Instant] = {}  # (the parsed instant itself when it names its family)
        for item in parsed_files:
            family = item.action
            if item.is_completed:
                # The completed file of a compaction is T.commit (of a log compaction, T.deltacommit).
                if family is Action.COMMIT and Action.COMPACTION in actions:
                    family = Action.COMPACTION
                elif family is Action.DELTA_COMMIT and Action.LOG_COMPACTION in actions:
                    family = Action.LOG_COMPACTION
            held = latest.get(family)
            if held is None or item.state.rank > held.state.rank:
                same = item.action is family
                latest[family] = item if same else Instant(timestamp, family, item.state)
        if len(latest.keys() - {Action.SAVEPOINT}) > 1:  # a savepoint takes its commit's time
            logger.warning(
                "instant time %s is used by several actions (%s); instant times must be unique",
                timestamp,
                ", ".join(sorted(a.value for a in latest)),
            )
        instants.extend(latest.values())
    return Timeline(tuple(sorted(instants)), tuple(skipped))


class ActiveTimeline:
    """Reads and writes the instants of the table at ``storage``."""

    def __init__(self, storage: Storage, generator: InstantTimeGenerator | None = None) -> None:
        self.storage = storage
        self.generator = generator or InstantTimeGenerator(storage)
        # Completed instant files never change, so their completion times can be cached forever.
        self._completion_times: dict[tuple[str, Action], str] = {}

    # --- reading ---------------------------------------------------------------------------------

    def load(self) -> Timeline:
        """A fresh snapshot of the timeline (one listing of ``.hoodie/``)."""
        return _folded(tuple(self.storage.file_names(META_FOLDER)))

    def path(self, instant: Instant, state: State | None = None) -> str:
        return f"{META_FOLDER}/{instant.file_name_for(state or instant.state)}"

    def read_content(self, instant: Instant, state: State | None = None) -> bytes:
        """The content of an instant file. A completed one found empty is read again while it
        may still be being written (see :data:`WRITING_SECONDS`): read mid-write, a clean would
        have deleted nothing and a commit written nothing, and whoever applied it (the index's
        catch-up and sync, a file system view) would go on without what it did."""
        path = self.path(instant, state)
        data = self.storage.read(path)
        if data or (state or instant.state) is not State.COMPLETED:
            return data
        return self._written(path)

    def _written(self, path: str) -> bytes:
        """The content of the completed instant file ``path``, found empty: once it has some,
        or once it was last written :data:`WRITING_SECONDS` ago (a file with a time ahead of
        this machine's clock is waited for that long at most)."""
        deadline = time.monotonic() + WRITING_SECONDS
        while True:
            info = self.storage.info(path)
            if info.size:
                return self.storage.read(path)
            written = info.mtime if info.mtime is not None else 0.0
            age = time.time() - written - self.storage.mtime_resolution
            if age >= WRITING_SECONDS or time.monotonic() >= deadline:
                return b""
            time.sleep(_REREAD_SECONDS)

    def read_json(self, instant: Instant, state: State | None = None) -> dict[str, Any]:
        """The content of an instant file as a JSON object (empty files read as ``{}``)."""
        path = self.path(instant, state)
        raw = self.read_content(instant, state)
        if not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptInstantError(self.storage.uri(path), f"not valid JSON ({e})") from e
        if not isinstance(value, dict):
            raise CorruptInstantError(self.storage.uri(path), "content is not a JSON object")
        return value

    def completion_time(self, instant: Instant) -> str:
        """When a completed instant completed (17 digits, UTC).

        Read from the content; for a file that has none (written by another tool), its mtime.
        """
        if not instant.is_completed:
            raise InvalidTransitionError(instant, "only a completed instant has a completion time")
        key = (instant.timestamp, instant.action)
        cached = self._completion_times.get(key)
        if cached is not None:
            return cached
        path = self.path(instant)
        value: str | None = None
        try:
            content = json.loads(self.storage.read(path) or b"{}")
            if isinstance(content, dict) and isinstance(content.get(COMPLETION_TIME_KEY), str):
                value = content[COMPLETION_TIME_KEY]
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass  # not ours (e.g. Avro written by Hudi): fall back to the mtime
        if value is None:
            mtime = self.storage.mtime(path)
            value = format_instant_time(dt.datetime.fromtimestamp(mtime, tz=dt.UTC))
        self._completion_times[key] = value
        return value

    # --- writing ---------------------------------------------------------------------------------

    def _create(self, instant: Instant, content: bytes) -> None:
        path = self.path(instant)
        try:
            self.storage.create(path, content)
        except FileAlreadyExistsError as e:
            raise InstantAlreadyExistsError(instant, self.storage.uri(path)) from e
        logger.info("instant %s created", instant)

    def create_requested(
        self, action: Action, content: bytes = b"", timestamp: str | None = None
    ) -> Instant:
        """Start a new instant in the requested state, at a fresh instant time unless given."""
        instant = Instant(timestamp or self.generator.next(), action, State.REQUESTED)
        self._create(instant, content)
        return instant

    def _transition(self, instant: Instant, to: State, content: bytes) -> Instant:
        if instant.state.rank >= to.rank or instant.state.next() is not to:
            raise InvalidTransitionError(
                instant, f"{instant.state.value} cannot move to {to.value}"
            )
        if not self.storage.exists(self.path(instant)):
            raise InvalidTransitionError(
                instant, f"its {instant.state.value} file {self.path(instant)} does not exist"
            )
        target = instant.with_state(to)
        self._create(target, content)
        return target

    def transition_to_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        return self._transition(instant, State.INFLIGHT, content)

    def complete(
        self, instant: Instant, content: Mapping[str, Any] | bytes | None = None
    ) -> Instant:
        """Complete an inflight instant. JSON content records the completion time; ``bytes``
        (Apache Hudi's Avro metadata, which has no room for it) are written as they are, and the
        completion time is then the file's, as for Hudi's own instants."""
        if isinstance(content, bytes):
            return self._transition(instant, State.COMPLETED, content)
        completion = max(self.generator.peek_now(), instant.timestamp)
        body = dict(content or {})
        body[COMPLETION_TIME_KEY] = completion
        done = self._transition(instant, State.COMPLETED, json.dumps(body, sort_keys=True).encode())
        self._completion_times[(done.timestamp, done.action)] = completion
        return done

    def delete_pending(self, instant: Instant) -> None:
        """Delete the requested and inflight files of a pending instant (rollback, abort).

        The inflight file goes first so that a crash part-way leaves a requested instant, which a
        retry can roll back again; never a state without its predecessor.
        """
        if instant.is_completed:
            raise InvalidTransitionError(instant, "a completed instant is never deleted here")
        for state in (State.INFLIGHT, State.REQUESTED):
            self.storage.delete(self.path(instant, state))
        logger.info("pending instant %s deleted", instant)

    def remove(self, instant: Instant, present: Collection[str] | None = None) -> None:
        """Delete every state file of an instant that leaves the active timeline (archived, or
        trimmed from the index's own timeline): the pending states first and the completed file
        last, so a crash part-way leaves a completed instant, never one that looks pending.
        ``present``: the file names listed in the timeline's folder (only those are deleted)."""
        for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
            name = instant.file_name_for(state)
            if present is None or name in present:
                self.storage.delete(self.path(instant, state))
