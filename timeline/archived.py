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
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro

from timeline.errors import CorruptInstantError
from timeline.instant import Action, Instant, State
from timeline.storage import Storage

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


def read_archived(storage: Storage, folder: str) -> list[ArchivedInstant]:
    """Every completed instant in the archive folder ``folder`` (relative to ``storage``),
    oldest first. A missing folder is an empty archive."""
    if not storage.exists(folder):
        return []
    found: dict[tuple[str, Action], ArchivedInstant] = {}
    for entry in sorted(storage.list(folder), key=lambda e: e.name):
        if entry.is_dir or not entry.name.startswith(".commits_.archive."):
            continue
        path = f"{folder}/{entry.name}"
        for record in archived_records(storage.read(path), path):
            if str(record.get("actionState", "COMPLETED")).upper() != State.COMPLETED.name:
                continue
            try:
                action = Action(str(record["actionType"]))
                instant = Instant(str(record["commitTime"]), action, State.COMPLETED)
            except (KeyError, ValueError) as e:
                logger.warning("skipping an archived entry of %s: %s", path, e)
                continue
            field = METADATA_FIELDS.get(action)
            metadata = record.get(field) if field else None
            found[(instant.timestamp, action)] = ArchivedInstant(instant, metadata)
    return sorted(found.values(), key=lambda a: a.instant)


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


__all__ = ["METADATA_FIELDS", "ArchivedInstant", "archived_records", "read_archived"]
