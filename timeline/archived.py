"""Apache Hudi's archived timeline: the instants it moved out of ``.hoodie/``.

Hudi keeps the active timeline short (``hoodie.keep.min.commits`` / ``max.commits``): older
completed instants are appended to ``.hoodie/archived/.commits_.archive.N_<token>`` and their
files deleted. Their data files stay (until a clean deletes older slices), so a reader that only
knew the active timeline would lose them; :class:`timeline.timeline.CommittedWrites` keeps them
committed. An index that had not applied an instant before Hudi archived it needs the instant's
metadata, which is here.

An archive file is a sequence of Hudi log blocks, each::

    "#HUDI#"  int64 block size  int32 format version  int32 block type
    header: int32 count, then count x (int32 key, int32 length, bytes)   key 2 = Avro schema
    int64 content length, content   footer (as the header)   int64 total block length

Archived instants are in Avro data blocks (type 3), whose content is ``int32 version, int32
count`` then ``count x (int32 length, Avro binary record)`` in the header's schema (one
``HoodieArchivedMetaEntry`` per instant state). Records are decoded with ``fastavro``; only the
block framing is read here. Other block types (a command block, a corrupt block left by a crash)
are skipped; a file that is not a Hudi log at all raises :class:`CorruptInstantError`.
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import fastavro

from timeline.errors import CorruptInstantError
from timeline.failpoints import failpoint
from timeline.instant import Action, Instant, State, normalize_timestamp
from timeline.storage import FileInfo, Storage

logger = logging.getLogger(__name__)

MAGIC = b"#HUDI#"
AVRO_DATA_BLOCK = 3
SCHEMA_KEY = 2

#: The field of HoodieArchivedMetaEntry that holds a completed instant's metadata, per action.
METADATA_FIELDS = {
    Action.COMMIT: "hoodieCommitMetadata",
    Action.DELTA_COMMIT: "hoodieCommitMetadata",
    Action.REPLACE_COMMIT: "hoodieReplaceCommitMetadata",
    Action.CLEAN: "hoodieCleanMetadata",
    Action.ROLLBACK: "hoodieRollbackMetadata",
    Action.RESTORE: "hoodieRestoreMetadata",
    Action.SAVEPOINT: "hoodieSavePointMetadata",
}


@dataclass(frozen=True)
class ArchivedInstant:
    """A completed instant from the archived timeline, with its metadata record (None for an
    action whose metadata this kernel does not read)."""

    instant: Instant
    metadata: Mapping[str, Any] | None
    #: when it completed, where the entry says (``stateTransitionTime``: this kernel's archiver
    #: writes a write's completion time there)
    completion_time: str | None = None


#: archive files written this long before a moment may still hold instants that completed after
#: it (the time between a snapshot of the timeline and the file we compare with, clock skew)
MTIME_MARGIN_SECONDS = 600.0


@dataclass(frozen=True)
class _ParsedFile:
    instants: tuple[ArchivedInstant, ...]
    #: the newest instant time in the file, normalized ("" for a file without instants)
    newest: str


#: parsed archive files, by (uri, size, mtime): an archive file is only ever appended to or
#: replaced whole, so a file with the same size and time has the same instants
_PARSED: OrderedDict[tuple[str, int, float | None], _ParsedFile] = OrderedDict()
_PARSED_MAX = 512
_PARSED_LOCK = threading.Lock()
#: local archive folders' listings, by path: (the folder's mtime in ns, the archive files)
_LISTINGS: dict[str, tuple[int, tuple[FileInfo, ...]]] = {}


class ArchivedTimeline:
    """The archive folder of one table, listed once (on first use) and read file by file.

    Reading the whole archive of a long-lived table on every snapshot would cost more than the
    rest of a read, so :meth:`instants` can leave out the files written well before a moment:
    an instant in such a file completed before that moment. Parsed files are kept per process."""

    def __init__(self, storage: Storage, folder: str) -> None:
        self.storage = storage
        self.folder = folder

    @cached_property
    def files(self) -> list[FileInfo]:
        """The archive files, in the order Hudi wrote them; none for a missing folder. On local
        storage the listing is kept per process while the folder's modification time stays the
        same (an archive file added or removed changes it; the newest one, which an archiver may
        append to, is looked at again): the archive of a long-lived table holds thousands of
        files, and several snapshots a commit would list them all (6 ms a listing at 1,500)."""
        stamp: int | None = None
        if self.storage.is_local:
            try:
                stamp = os.stat(self.storage.uri(self.folder)).st_mtime_ns  # before the listing
            except FileNotFoundError:
                return []
            with _PARSED_LOCK:
                kept = _LISTINGS.get(self.storage.uri(self.folder))
            if kept is not None and kept[0] == stamp:
                files = list(kept[1])
                if files:  # only the newest file may have grown (an archiver appending to it)
                    files[-1] = self.storage.info(files[-1].path)
                return files
        elif not self.storage.exists(self.folder):
            return []
        found = sorted(
            (
                e
                for e in self.storage.list(self.folder)
                if not e.is_dir and e.name.startswith(".commits_.archive.")
            ),
            key=lambda e: archive_number(e.name),
        )
        if stamp is not None:
            with _PARSED_LOCK:
                _LISTINGS[self.storage.uri(self.folder)] = (stamp, tuple(found))
        return found

    def instants(
        self, written_since: float | None = None, newer_than: str | None = None
    ) -> list[ArchivedInstant]:
        """Completed instants, oldest first, from every archive file, or only from those
        modified at or after ``written_since`` (seconds since the epoch, storage time) less
        :data:`MTIME_MARGIN_SECONDS` (a file whose time is unknown is always read), and only
        those later than instant time ``newer_than`` (a parsed file with none is passed over
        whole, so a long archive costs a look per file, not per instant)."""
        after = normalize_timestamp(newer_than) if newer_than is not None else ""
        found: dict[tuple[str, Action], ArchivedInstant] = {}
        for entry in self.files:
            if (
                written_since is not None
                and entry.mtime is not None
                and entry.mtime < written_since - MTIME_MARGIN_SECONDS
            ):
                continue
            parsed = self._parsed(entry)
            if parsed.newest <= after:
                continue
            for archived in parsed.instants:
                if not after or normalize_timestamp(archived.instant.timestamp) > after:
                    found[(archived.instant.timestamp, archived.instant.action)] = archived
        return sorted(found.values(), key=lambda a: a.instant)

    def _parsed(self, entry: FileInfo) -> _ParsedFile:
        key = (self.storage.uri(entry.path), entry.size, entry.mtime)
        with _PARSED_LOCK:
            cached = _PARSED.get(key)
            if cached is not None:
                _PARSED.move_to_end(key)
                return cached
        failpoint("archive.read", detail=entry.path)
        instants = tuple(
            _completed(archived_records(self.storage.read(entry.path), entry.path), entry.path)
        )
        newest = max((normalize_timestamp(a.instant.timestamp) for a in instants), default="")
        parsed = _ParsedFile(instants, newest)
        with _PARSED_LOCK:
            _PARSED[key] = parsed
            while len(_PARSED) > _PARSED_MAX:
                _PARSED.popitem(last=False)
        return parsed


def archive_number(name: str) -> tuple[int, str]:
    """``.commits_.archive.<N>_<token>``: Hudi numbers its archive files in order."""
    number = name.removeprefix(".commits_.archive.").split("_", 1)[0]
    return (int(number), name) if number.isdigit() else (-1, name)


def _completed(records: Iterator[dict[str, Any]], path: str) -> Iterator[ArchivedInstant]:
    for record in records:
        if str(record.get("actionState", "COMPLETED")).upper() != State.COMPLETED.name:
            continue
        try:
            action = Action(str(record["actionType"]))
            instant = Instant(str(record["commitTime"]), action, State.COMPLETED)
        except (KeyError, ValueError) as e:
            logger.warning("skipping an archived entry of %s: %s", path, e)
            continue
        field = METADATA_FIELDS.get(action)
        completed = record.get("stateTransitionTime")
        yield ArchivedInstant(
            instant, record.get(field) if field else None, str(completed) if completed else None
        )


def read_archived(storage: Storage, folder: str) -> list[ArchivedInstant]:
    """Every completed instant in the archive folder ``folder`` (relative to ``storage``),
    oldest first. A missing folder is an empty archive."""
    return ArchivedTimeline(storage, folder).instants()


def archived_records(data: bytes, path: str) -> Iterator[dict[str, Any]]:
    """The Avro records of every Avro data block of one archive file."""
    for block_type, header, content in _blocks(data, path):
        if block_type != AVRO_DATA_BLOCK:
            continue
        try:
            schema = fastavro.parse_schema(json.loads(header[SCHEMA_KEY]))
            _, count = struct.unpack_from(">ii", content, 0)
            offset = 8
            for _ in range(count):
                (length,) = struct.unpack_from(">i", content, offset)
                offset += 4
                record = fastavro.schemaless_reader(
                    io.BytesIO(content[offset : offset + length]), schema, None
                )
                offset += length
                if isinstance(record, dict):
                    yield record
        except (KeyError, ValueError, struct.error, EOFError) as e:
            raise CorruptInstantError(path, f"unreadable archived Avro block: {e}") from e


def _blocks(data: bytes, path: str) -> Iterator[tuple[int, dict[int, bytes], bytes]]:
    position = 0
    while position < len(data):
        if data[position : position + len(MAGIC)] != MAGIC:
            raise CorruptInstantError(path, f"no Hudi log block at byte {position}")
        try:
            (size,) = struct.unpack_from(">q", data, position + 6)
            body = data[position + 14 : position + 14 + size]
            if len(body) < size:  # a block a crash cut short: Hudi skips it too
                logger.warning("%s: truncated last block at byte %d, skipped", path, position)
                return
            _, block_type = struct.unpack_from(">ii", body, 0)
            header, offset = _metadata(body, 8)
            (content_length,) = struct.unpack_from(">q", body, offset)
            offset += 8
            content = body[offset : offset + content_length]
        except struct.error as e:
            raise CorruptInstantError(path, f"bad Hudi log block at byte {position}: {e}") from e
        yield block_type, header, content
        position += 14 + size


def _metadata(body: bytes, offset: int) -> tuple[dict[int, bytes], int]:
    (count,) = struct.unpack_from(">i", body, offset)
    offset += 4
    values = {}
    for _ in range(count):
        key, length = struct.unpack_from(">ii", body, offset)
        offset += 8
        values[key] = body[offset : offset + length]
        offset += length
    return values, offset


__all__ = [
    "METADATA_FIELDS",
    "MTIME_MARGIN_SECONDS",
    "ArchivedInstant",
    "ArchivedTimeline",
    "archived_records",
    "read_archived",
]
