"""Archiving the active timeline, as Apache Hudi 0.15's ``HoodieTimelineArchiver`` does.

Every instant is a few files in ``.hoodie/``, and every fresh reader lists them and many read
them: a timeline that only grows makes every commit, status and first read slower. Hudi keeps it
short. When more than ``hoodie.keep.max.commits`` (30) writes are completed on the active
timeline, the oldest are moved to the archived timeline down to ``hoodie.keep.min.commits``
(20); cleans and rollbacks are counted apart, action by action, with the same bounds. Never
archived: anything at or after the earliest pending instant (of any action), the earliest commit
the last clean retains (a query may still read there), the newest write that completed
``indexer.clean.grace.seconds`` ago (the cleaner's guard for readers' open snapshots: archiving
it would leave the cleaner nothing to measure that period by), a savepoint, or an instant this
table's index has not applied yet (its readers would need it). On a table with Apache Hudi's own
metadata table, nothing at or after that table's newest compaction (as Hudi's archiver: the log
blocks written since name data instants its readers look for on the active timeline), and
nothing at all unless this process keeps that table (``indexer.write.hudi_metadata_table``;
otherwise Hudi's archiver does it).

An archival, under the table lock as Hudi's, writes one new file
``.hoodie/archived/.commits_.archive.<N>_1-0-1``: a Hudi log file of one Avro data block of
``HoodieArchivedMetaEntry`` records (one per instant file: requested, inflight and completed), in
Hudi 0.15's schema (``hudi_schemas/HoodieArchivedMetaEntry.avsc``, as compiled into Hudi's
bundle), so Hudi's archived timeline, its incremental queries and its own archiver (which
appends after ours) read it; then it deletes the instants' files from ``.hoodie/``, pending
states first and the completed file last (never a completed instant without its earlier states
showing as pending).
A crash between the two leaves instants both archived and active: the next archival archives
them again, and readers take each instant once.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from timeline.archived import archive_number, archived_records
from timeline.clean import clean_metadata, newest_completed_before
from timeline.commit_metadata import CommitMetadata
from timeline.config import (
    ARCHIVE_MERGE_BATCH,
    ARCHIVE_MERGE_ENABLE,
    ARCHIVE_MERGE_SMALL_BYTES,
    CLEAN_GRACE_SECONDS,
    KEEP_MAX_COMMITS,
    KEEP_MIN_COMMITS,
    Config,
)
from timeline.errors import ConfigError, StorageFileNotFoundError
from timeline.hudi_avro import avro_file
from timeline.hudi_metadata import (
    hudi_metadata_table_present,
    keeps_hudi_metadata_table,
    latest_metadata_compaction,
)
from timeline.instant import WRITE_ACTIONS, Action, Instant, State
from timeline.instant import normalize_timestamp as _norm
from timeline.instant_time import CLAIM_RETENTION
from timeline.locks import LockHandle
from timeline.log_format import BlockType, HeaderKey, avro_data_content, encode_block
from timeline.removals import AVRO_MAGIC, read_avro_records
from timeline.storage import FileInfo, Storage
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

#: Hudi's write token for archive files
WRITE_TOKEN = "1-0-1"

#: the field of HoodieArchivedMetaEntry each completed action's metadata goes in; a clean's
#: requested and inflight states carry its plan, a compaction's requested state its plan
_COMPLETED_FIELD = {
    Action.COMMIT.value: "hoodieCommitMetadata",
    Action.DELTA_COMMIT.value: "hoodieCommitMetadata",
    Action.REPLACE_COMMIT.value: "hoodieReplaceCommitMetadata",
    Action.CLEAN.value: "hoodieCleanMetadata",
    Action.ROLLBACK.value: "hoodieRollbackMetadata",
}
_WRITE_ACTIONS = {a.value for a in WRITE_ACTIONS}

#: What the caller's index says: the oldest completed instant it has not applied (None: none).
UnappliedBound = Callable[[Timeline], str | None]


@functools.cache
def entry_schema() -> dict[str, Any]:
    """Hudi 0.15's ``HoodieArchivedMetaEntry`` schema."""
    text = resources.files("timeline.hudi_schemas").joinpath("HoodieArchivedMetaEntry.avsc")
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


@dataclass(frozen=True)
class ArchivalPolicy:
    min_commits: int = KEEP_MIN_COMMITS.default
    max_commits: int = KEEP_MAX_COMMITS.default

    @classmethod
    def from_config(cls, config: Config) -> ArchivalPolicy:
        policy = cls(config.get(KEEP_MIN_COMMITS), config.get(KEEP_MAX_COMMITS))
        if policy.min_commits >= policy.max_commits:
            raise ConfigError(
                KEEP_MAX_COMMITS.key,
                f"must be greater than {KEEP_MIN_COMMITS.key} ({policy.min_commits})",
            )
        return policy


@dataclass(frozen=True)
class ArchiveResult:
    instants: tuple[Instant, ...]
    file: str
    #: the archive file the small ones were merged into afterwards, if they were
    merged: str | None = None


def _readers_guard(table: Table, timeline: Timeline, now: float | None) -> str | None:
    """The cleaner's readers' guard (:func:`timeline.clean.newest_completed_before`: the newest
    write that completed ``indexer.clean.grace.seconds`` ago or more; the oldest write, when
    none did), which must stay on the active timeline. Without this bound a writer committing
    faster than ``hoodie.keep.max.commits`` per grace period would archive every such write
    before the cleaner could use it, and nothing would ever be cleaned."""
    grace = table.config.get(CLEAN_GRACE_SECONDS)
    writes = timeline.write_timeline().completed()
    first = writes.first()
    if grace <= 0 or first is None:
        return None
    guard = newest_completed_before(table, writes, grace, now)
    return (guard or first).timestamp


def instants_to_archive(
    table: Table,
    timeline: Timeline,
    policy: ArchivalPolicy,
    unapplied: str | None = None,
    now: float | None = None,
) -> list[Instant]:
    """The completed instants an archival moves now, oldest first (see the module's rules)."""
    bound = _bound(table, timeline, unapplied, now)

    def before_bound(i: Instant) -> bool:
        return bound is None or _norm(i.timestamp) < _norm(bound)

    out: list[Instant] = []
    for action in (Action.CLEAN, Action.ROLLBACK):
        done = list(timeline.with_actions(action).completed())
        if len(done) > policy.max_commits:
            out.extend(i for i in done[: len(done) - policy.min_commits] if before_bound(i))
    writes = list(timeline.write_timeline().completed())
    if len(writes) > policy.max_commits:
        saved = {i.timestamp for i in timeline.with_actions(Action.SAVEPOINT)}
        for instant in writes[: len(writes) - policy.min_commits]:
            if not before_bound(instant) or instant.timestamp in saved:
                break  # (Hudi stops at a savepoint: what follows it stays active)
            out.append(instant)
    if len(out) < policy.max_commits - policy.min_commits:
        # a bound (the readers' grace period, a pending write) leaves only a few: wait for a
        # batch, as Hudi archives one, or every commit would write an archive file of its own
        return []
    return sorted(out)


def _bound(
    table: Table, timeline: Timeline, unapplied: str | None, now: float | None = None
) -> str | None:
    """The oldest instant time nothing at or after may be archived."""
    candidates = [unapplied] if unapplied else []
    guard = _readers_guard(table, timeline, now)
    if guard is not None:
        candidates.append(guard)
    pending = timeline.pending().filter(lambda i: i.action is not Action.SAVEPOINT).first()
    if pending is not None:
        candidates.append(pending.timestamp)
    saved = timeline.with_actions(Action.SAVEPOINT).first()
    if saved is not None:
        candidates.append(saved.timestamp)
    last_clean = timeline.with_actions(Action.CLEAN).completed().last()
    if last_clean is not None:
        retained = str(clean_metadata(table, last_clean).get("earliestCommitToRetain") or "")
        if retained:
            candidates.append(retained)
    return min_bound(candidates)


def min_bound(candidates: Iterable[str | None]) -> str | None:
    """The oldest of some bounds (None: no bound)."""
    return min((c for c in candidates if c), key=_norm, default=None)


def _entries(table: Table, instants: Iterable[Instant], present: set[str]) -> list[dict[str, Any]]:
    """One ``HoodieArchivedMetaEntry`` per instant file that exists, oldest first."""
    timeline = table.timeline
    out = []
    for instant in instants:
        for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
            if instant.file_name_for(state) not in present:
                continue
            completed = state is State.COMPLETED
            out.append(
                archive_entry(
                    instant.timestamp,
                    instant.action.value,
                    state,
                    functools.partial(timeline.read_content, instant, state),
                    timeline.completion_time(instant)
                    if completed and instant.action in WRITE_ACTIONS
                    else None,
                )
            )
    return out


def archive_entry(
    commit_time: str,
    action: str,
    state: State,
    content: Callable[[], bytes],
    completed_at: str | None = None,
) -> dict[str, Any]:
    """The ``HoodieArchivedMetaEntry`` of one instant file: ``action`` is the instant's (a
    compaction's completed file is a ``commit``), ``content`` reads the file when the entry
    carries it (a completed instant's metadata, a clean's or a compaction's plan),
    ``completed_at`` is a write's completion time."""
    entry: dict[str, Any] = {
        "commitTime": commit_time,
        "actionType": action,
        "actionState": state.name,
        "version": 1,
    }
    if state is State.COMPLETED and action in _COMPLETED_FIELD:
        entry[_COMPLETED_FIELD[action]] = _metadata(content())
        if action in _WRITE_ACTIONS and completed_at:
            entry["stateTransitionTime"] = completed_at
    elif action in (Action.CLEAN.value, Action.COMPACTION.value):
        plan = content()
        if plan.startswith(AVRO_MAGIC):
            field = "hoodieCleanerPlan" if action == Action.CLEAN.value else "hoodieCompactionPlan"
            (entry[field],) = read_avro_records(plan)
    return entry


def write_archive_file(
    storage: Storage, folder: str, entries: list[dict[str, Any]], name: str | None = None
) -> str:
    """Write ``entries`` as the next archive file of the archived timeline in ``folder``
    (``.commits_.archive.<N>_1-0-1``: a Hudi log file of one Avro data block), or as the path
    ``name``; its path."""
    schema = entry_schema()
    block = encode_block(
        BlockType.AVRO_DATA,
        {HeaderKey.SCHEMA: json.dumps(schema, separators=(",", ":"))},
        avro_data_content(entries, schema),
    )
    if name is None:
        numbers = [archive_number(n)[0] for n in storage.file_names(folder)]
        name = f"{folder}/.commits_.archive.{max(numbers, default=0) + 1}_{WRITE_TOKEN}"
    storage.create(name, block)
    return name


# --- merging small archive files -------------------------------------------------------------------

#: the plan of a merge in progress, in the archive folder (Hudi's MERGE_ARCHIVE_PLAN_NAME)
MERGE_PLAN = "mergeArchivePlan"


@dataclass(frozen=True)
class MergePolicy:
    """``hoodie.archive.merge.*``: whether to merge, how many small files at once, and what
    counts as small."""

    enabled: bool = True
    batch: int = 10
    small_bytes: int = 20 * 1024 * 1024

    @classmethod
    def from_config(cls, config: Config) -> MergePolicy:
        return cls(
            config.get(ARCHIVE_MERGE_ENABLE),
            config.get(ARCHIVE_MERGE_BATCH),
            config.get(ARCHIVE_MERGE_SMALL_BYTES),
        )


def _archive_files(storage: Storage, folder: str) -> list[FileInfo]:
    """The archive files of ``folder``, oldest first (by their number)."""
    entries = storage.list(folder)  # (a missing folder lists as empty)
    found = [e for e in entries if not e.is_dir and e.name.startswith(".commits_.archive.")]
    return sorted(found, key=lambda e: archive_number(e.name))


def merge_candidates(storage: Storage, folder: str, policy: MergePolicy) -> list[FileInfo]:
    """The archive files a merge replaces now, oldest first: the newest ones in a row that are
    small (at most ``small_bytes``; an older file after a large one is left, so the files keep
    the order of the instants in them), when there are ``batch`` of them; else none."""
    if not policy.enabled:
        return []
    run: list[FileInfo] = []
    for entry in reversed(_archive_files(storage, folder)):
        if entry.size is not None and entry.size > policy.small_bytes:
            break
        run.append(entry)
    return run[::-1] if len(run) >= policy.batch else []


def merge_archive_files(
    storage: Storage, folder: str, policy: MergePolicy, lock: LockHandle
) -> str | None:
    """Merge the archive files :func:`merge_candidates` picks into one, as Hudi's archiver
    merges small archive files (``hoodie.archive.merge.*``), under the table lock: first the
    plan ``mergeArchivePlan`` (Hudi's Avro ``HoodieMergeArchiveFilePlan``: the candidates and
    the merged file's name), then the merged file (every record of the candidates, in one Avro
    data block), then the candidates are deleted, then the plan. A merge a crash interrupted is
    finished or undone first (:func:`finish_interrupted_merge`). Readers take each instant once,
    so the moments when the merged file and candidates both exist read the same timeline.
    Returns the merged file's path, None when there was nothing to merge."""
    finish_interrupted_merge(storage, folder, lock)
    candidates = merge_candidates(storage, folder, policy)
    if not candidates:
        return None
    numbers = [archive_number(e.name)[0] for e in _archive_files(storage, folder)]
    merged = f"{folder}/.commits_.archive.{max(numbers) + 1}_{WRITE_TOKEN}"
    records = [
        r for e in candidates for r in archived_records(storage.read(e.path), storage.uri(e.path))
    ]
    plan = {
        "version": 1,
        "candidate": [storage.uri(e.path) for e in candidates],
        "mergedArchiveFileName": merged.rsplit("/", 1)[-1],
    }
    lock.ensure_valid()
    storage.create(f"{folder}/{MERGE_PLAN}", avro_file("merge_archive_plan", plan))
    write_archive_file(storage, folder, records, name=merged)
    for entry in candidates:
        storage.delete(entry.path)
    storage.delete(f"{folder}/{MERGE_PLAN}")
    logger.info("merged %d archive files into %s", len(candidates), merged)
    return merged


def finish_interrupted_merge(storage: Storage, folder: str, lock: LockHandle) -> None:
    """What Hudi's archiver does with a merge plan left behind: a plan that cannot be read is
    deleted (the merge had not begun); with every candidate still there, the merged file (if
    any) is deleted (the merge had not finished writing it); with some gone, the merged file is
    complete and the remaining candidates are deleted. Then the plan goes."""
    path = f"{folder}/{MERGE_PLAN}"
    try:
        data = storage.read(path)
    except StorageFileNotFoundError:
        return
    lock.ensure_valid()
    try:
        (plan,) = read_avro_records(data)
        # (full paths, as Hudi writes them: every candidate is a file of this folder)
        candidates = [f"{folder}/{c.rsplit('/', 1)[-1]}" for c in plan.get("candidate") or []]
        merged = f"{folder}/{plan['mergedArchiveFileName']}"
    except (ValueError, KeyError, TypeError, EOFError) as e:
        logger.warning("an unreadable archive merge plan %s is deleted: %s", path, e)
        storage.delete(path)
        return
    present = [c for c in candidates if storage.exists(c)]
    if len(present) == len(candidates):
        if storage.exists(merged):
            storage.delete(merged)
    elif storage.exists(merged):
        for candidate in present:
            storage.delete(candidate)
    storage.delete(path)
    logger.info("finished an interrupted merge of archive files (%s)", merged)


def _metadata(data: bytes) -> dict[str, Any] | None:
    """A completed instant's metadata as the entry's record: Avro instants' record as it is,
    JSON commit metadata in Hudi's Avro shape (same field names)."""
    if data.startswith(AVRO_MAGIC):
        (record,) = read_avro_records(data)
        return record
    if not data.strip():
        return None
    value = CommitMetadata.from_bytes(data).to_json()
    value["version"] = 1
    return value


def archive(
    table: Table,
    policy: ArchivalPolicy | None = None,
    unapplied: UnappliedBound | None = None,
    timeline: Timeline | None = None,
    now: float | None = None,
) -> ArchiveResult | None:
    """Archive what the rules allow now (None when nothing is due). ``unapplied`` names the
    oldest instant the table's index has not applied (that and everything after stays).
    ``timeline`` (the caller's own) only saves a listing when nothing is due: what is archived
    is chosen on a timeline loaded under the table lock."""
    compacted = None
    if hudi_metadata_table_present(table):
        compacted = latest_metadata_compaction(table) if keeps_hudi_metadata_table(table) else None
        if compacted is None:
            logger.info(
                "%s has Apache Hudi's metadata table, %s: its timeline is not archived",
                table.base_uri,
                "not compacted yet" if keeps_hudi_metadata_table(table) else "kept by Hudi",
            )
            return None
    policy = policy or ArchivalPolicy.from_config(table.config)
    if not _due(timeline or table.timeline.load(), policy):
        return None  # the usual case after a commit: nothing read, no lock taken
    # under the table lock, as Hudi's archiver: two archivers (a writer's services and the
    # daemon's) would otherwise both archive the same instants
    with table.lock("archive") as lock:
        timeline = table.timeline.load()
        if not _due(timeline, policy):
            return None
        bounds = [unapplied(timeline)] if unapplied is not None else []
        chosen = instants_to_archive(table, timeline, policy, min_bound([*bounds, compacted]), now)
        if not chosen:
            return None
        present = set(table.storage.file_names(".hoodie"))
        folder = table.archive().folder
        entries = _entries(table, chosen, present)
        lock.ensure_valid()
        path = write_archive_file(table.storage, folder, entries)
        for instant in chosen:
            table.timeline.remove(instant, present)
        table.timeline.generator.prune(CLAIM_RETENTION)
        logger.info(
            "archived %d instants (%s .. %s) into %s",
            len(chosen),
            chosen[0].timestamp,
            chosen[-1].timestamp,
            path,
        )
        merged = None
        merging = MergePolicy.from_config(table.config)
        if merge_candidates(table.storage, folder, merging) or table.storage.exists(
            f"{folder}/{MERGE_PLAN}"
        ):
            merged = merge_archive_files(table.storage, folder, merging, lock)
    return ArchiveResult(tuple(chosen), path, merged)


def _due(timeline: Timeline, policy: ArchivalPolicy) -> bool:
    """Whether any action's completed instants exceed ``hoodie.keep.max.commits``."""
    return any(
        len(completed) > policy.max_commits
        for completed in (
            timeline.write_timeline().completed(),
            timeline.with_actions(Action.CLEAN).completed(),
            timeline.with_actions(Action.ROLLBACK).completed(),
        )
    )


__all__ = [
    "WRITE_TOKEN",
    "ArchivalPolicy",
    "ArchiveResult",
    "MergePolicy",
    "archive",
    "archive_entry",
    "entry_schema",
    "instants_to_archive",
    "merge_archive_files",
    "write_archive_file",
]
