"""Is the timeline readable? What a health check (``indexer validate``, ``status``, ``sync``,
``indexer-table show``) finds wrong in ``.hoodie/`` before a query or a write trips over it.

* a file named like an instant that is not one (the timeline skips it with a warning);
* a completed instant whose content cannot be parsed (a commit's JSON, a clean's, rollback's or
  restore's Avro): readers and writers that read it fail, naming it;
* a pending instant whose ``.requested`` file is missing: Hudi writes the requested state
  first and moves on from it (a table service's plan is its content), so neither Hudi nor this
  kernel can carry the instant on or roll it back by the protocol;
* the index's state file (``partitions.json``) that does not parse: every read ignores the
  index, and every command that changes it stops.

``hoodie.properties`` is checked where every command starts (:meth:`timeline.table.Table.open`
refuses a table whose properties do not parse, naming the file and its backup).

Reading every completed instant costs a read each: :func:`timeline_problems` reads all of them
(``indexer validate``) or the newest ``newest`` (the cheaper checks of ``status`` and ``sync``,
which the daemon runs often).
"""

from __future__ import annotations

from dataclasses import dataclass

from timeline.commit_metadata import CommitMetadata
from timeline.errors import IndexStateError, TableError
from timeline.index_state import STATE_FILE
from timeline.instant import Action, Instant, State
from timeline.removals import REMOVAL_ACTIONS, parse_removal
from timeline.table import Table
from timeline.timeline import META_FOLDER

#: the completed instants the quick check (status, sync) reads, newest first
QUICK_CHECK_INSTANTS = 20
#: actions whose completed content is commit metadata (JSON)
_COMMIT_ACTIONS = frozenset(
    {Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT, Action.COMPACTION}
)


@dataclass(frozen=True)
class TimelineProblem:
    """A file of the table's metadata that readers or writers cannot use: which, what is wrong,
    and what to do."""

    path: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}; {self.fix}"

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "what": self.what, "fix": self.fix}


def timeline_problems(table: Table, newest: int | None = None) -> list[TimelineProblem]:
    """What is wrong in ``table``'s timeline and index state file (see the module), reading the
    content of every completed instant, or of the ``newest`` ones."""
    timeline = table.timeline.load()
    problems = [
        TimelineProblem(
            f"{META_FOLDER}/{skipped.name}",
            f"named like an instant but not one ({skipped.reason})",
            "writes and table services stop at it: move it out of .hoodie/ if it is not an instant",
        )
        for skipped in timeline.skipped
    ]
    for instant in timeline.pending():
        if instant.state is State.INFLIGHT and instant.action is not Action.SAVEPOINT:
            requested = table.timeline.path(instant, State.REQUESTED)
            if not table.storage.exists(requested):
                problems.append(
                    TimelineProblem(
                        requested,
                        f"missing: {instant.timestamp} is inflight without its requested state",
                        "Hudi and this kernel move an instant on (or roll it back) from its "
                        "requested file: restore it from a backup, or roll the instant back "
                        "with Apache Hudi's CLI",
                    )
                )
    completed = [i for i in timeline.completed() if _readable_kind(i)]
    if newest is not None:
        completed = completed[-newest:]
    for instant in completed:
        path = table.timeline.path(instant)
        try:
            data = table.timeline.read_content(instant)
            if instant.action in REMOVAL_ACTIONS:
                parse_removal(instant, data, path)
            else:
                CommitMetadata.from_bytes(data, path)
        except TableError as e:
            problems.append(
                TimelineProblem(
                    path,
                    f"the completed {instant.action.value} cannot be read ({_reason(e)})",
                    "queries and writes that read it fail: restore the file from a backup or "
                    "an earlier object version (it cannot be remade from the data files)",
                )
            )
    try:
        table.reload_index_state()
    except IndexStateError as e:
        problems.append(
            TimelineProblem(
                STATE_FILE,
                f"the index's state file cannot be read ({_reason(e)})",
                "reads ignore the index and index commands stop: restore the file, or remove "
                ".hoodie/.async-indexer and build the indexes again (`indexer run`)",
            )
        )
    return problems


def _readable_kind(instant: Instant) -> bool:
    return instant.action in _COMMIT_ACTIONS or instant.action in REMOVAL_ACTIONS


def _reason(error: TableError) -> str:
    return getattr(error, "reason", None) or str(error)
