"""What a table holds on storage, and what its table services last did: the figures that show
whether cleaning and archival keep a long-lived table as small as on its first day
(``indexer status``, the daemon's status page).

Storage is counted from one recursive listing, in kinds: ``data`` (every file outside
``.hoodie/``: base and log files, partition metadata), ``index`` (this project's index folder),
``hudi_metadata`` (Apache Hudi's own metadata table), ``timeline`` (the active timeline's instant
files), ``archive`` (the archived timeline) and ``other`` (markers, heartbeats, the table config
and everything else under ``.hoodie/``).
"""

from __future__ import annotations

import datetime as dt
import posixpath
from dataclasses import dataclass
from typing import Any

from timeline.archived import archived_records
from timeline.clean import clean_metadata
from timeline.errors import TableError
from timeline.hudi_metadata import HUDI_METADATA_FOLDER
from timeline.index_state import INDEX_FOLDER
from timeline.instant import Action
from timeline.table import Table
from timeline.timeline import META_FOLDER

KINDS = ("data", "index", "hudi_metadata", "timeline", "archive", "other")


@dataclass
class Usage:
    files: int = 0
    bytes: int = 0

    def to_json(self) -> dict[str, int]:
        return {"files": self.files, "bytes": self.bytes}


def _kind(path: str) -> str:
    if not path.startswith(f"{META_FOLDER}/"):
        return "data"
    if path.startswith(f"{INDEX_FOLDER}/"):
        return "index"
    if path.startswith(f"{HUDI_METADATA_FOLDER}/"):
        return "hudi_metadata"
    if path.startswith(f"{META_FOLDER}/archived/"):
        return "archive"
    if posixpath.dirname(path) == META_FOLDER and path.rsplit("/", 1)[1][:1].isdigit():
        return "timeline"
    return "other"


def storage_usage(table: Table) -> dict[str, Usage]:
    """Files and bytes of the table on storage, by kind (:data:`KINDS`)."""
    usage = {kind: Usage() for kind in KINDS}
    for entry in table.storage.list("", recursive=True):
        if entry.is_dir:
            continue
        counted = usage[_kind(entry.path)]
        counted.files += 1
        counted.bytes += entry.size
    return usage


def last_services(table: Table) -> dict[str, Any]:
    """The newest completed clean on the active timeline (when it completed, the files it
    deleted) and the newest archive file (when it was written, the instants it holds); None
    for each that has not run (or, for a clean, that was archived since)."""
    timeline = table.timeline.load()
    out: dict[str, Any] = {"clean": None, "archive": None}
    last = timeline.with_actions(Action.CLEAN).completed().last()
    if last is not None:
        try:
            deleted = clean_metadata(table, last).get("totalFilesDeleted")
        except TableError:
            deleted = None
        out["clean"] = {
            "instant": last.timestamp,
            "completed": table.timeline.completion_time(last),
            "files_deleted": deleted,
        }
    files = table.archive().files
    if files:
        newest = files[-1]
        try:
            entries = sum(1 for _ in archived_records(table.storage.read(newest.path), newest.path))
        except TableError:
            entries = None
        written = dt.datetime.fromtimestamp(newest.mtime or 0, tz=dt.UTC)
        out["archive"] = {
            "file": newest.name,
            "written": written.isoformat(timespec="seconds"),
            "instant_files": entries,
        }
    return out


__all__ = ["KINDS", "Usage", "last_services", "storage_usage"]
