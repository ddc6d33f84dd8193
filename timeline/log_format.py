"""Apache Hudi's log files (table version 6), as its merge-on-read writers leave them: the blocks
of one log file, their headers, and the records of their data and delete blocks.

A log file ``.<fileId>_<baseInstant>.log.<version>_<writeToken>`` is a sequence of blocks. Each
block (log format version 1; all big-endian):

    "#HUDI#"  block length (8: the bytes after this field)  format version (4)  block type (4)
    header (4: n, then n x [key (4), length (4), UTF-8 value])
    content length (8)  content
    footer (as the header)  total length (8: the block length plus the magic's 6 bytes)

Block types, by number: command (0), delete (1), corrupt (2), Avro data (3), HFile data (4),
Parquet data (5), CDC data (6). Header keys: instant time (0), target instant time (1), schema
(2), command block type (3; 0 = rollback), compacted block times (4), record positions (5).

Contents: an Avro data block is ``version (4), count (4)``, then ``count`` records, each ``length
(4)`` and the record in Avro's binary encoding under the header's schema; a Parquet data block is
a Parquet file; a delete block is ``version (4), length (4)`` and one ``HoodieDeleteRecordList``
in Avro. Avro is decoded by ``fastavro``, Parquet by ``pyarrow``; this module reads only the
framing, which no library offers (hudi-rs reads whole file slices, not one log file's blocks).
:func:`read_log_file` reads a file from storage block by block, with ranged reads.

A writer that died mid-append leaves a partial block at the end, and a block may be damaged in
the middle: as Hudi's own reader does, a block whose length runs past the end of the file, or
whose trailing total length disagrees with its leading one, is a *corrupt* block that spans to
the next magic (or the end), and reading goes on from there. A block framed whole that cannot be
read (an unknown block type or header key, another format version) is an error, not skipped.

Which blocks count (:func:`effective_blocks`), as Hudi's log record reader decides over a file
slice's log files in order: blocks of instants that are not completed are left out; a rollback
command block removes the earlier blocks of its target instant; a block written by log
compaction replaces the blocks whose instants it lists; corrupt blocks are skipped.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from timeline.errors import LogFormatError
from timeline.storage import Storage

MAGIC = b"#HUDI#"
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")

_LOG_FILE = re.compile(
    # a base instant of 17 digits; in Hudi's metadata table 20 (a compaction's "001" suffix...)
    # or 23 (a compaction of a suffixed deltacommit: "<t>004001"); or 14 (legacy)
    r"^\.(?P<file_id>[^_/]+)_(?P<base>\d{17}(?:\d{3}){0,2}|\d{14})\.log\.(?P<version>\d+)"
    r"(?:_(?P<token>\d+-\d+-\d+))?(?P<suffix>\.cdc)?$"
)


class BlockType(IntEnum):
    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7


#: the only command block type Hudi writes
ROLLBACK_COMMAND = "0"
DATA_BLOCKS = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.HFILE_DATA)

#: Hudi's HoodieDeleteRecordList, as hudi-common declares it (field order matters to Avro)
DELETE_RECORD_LIST_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HoodieDeleteRecordList",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {
                "name": "deleteRecordList",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieDeleteRecord",
                        "fields": [
                            {"name": "recordKey", "type": ["null", "string"], "default": None},
                            {"name": "partitionPath", "type": ["null", "string"], "default": None},
                            {
                                "name": "orderingVal",
                                "type": [
                                    "null",
                                    "int",
                                    "long",
                                    "float",
                                    "double",
                                    "bytes",
                                    "string",
                                    {
                                        "type": "bytes",
                                        "logicalType": "decimal",
                                        "precision": 30,
                                        "scale": 15,
                                    },
                                    {"type": "int", "logicalType": "date"},
                                    {"type": "int", "logicalType": "time-millis"},
                                    {"type": "long", "logicalType": "time-micros"},
                                    {"type": "long", "logicalType": "timestamp-millis"},
                                    {"type": "long", "logicalType": "timestamp-micros"},
                                ],
                                "default": None,
                            },
                        ],
                    },
                },
            }
        ],
    }
)


@dataclass(frozen=True)
class LogFileName:
    """The parts of a log file's name."""

    file_id: str
    base_instant: str
    version: int
    write_token: str | None
    cdc: bool

    @classmethod
    def parse(cls, file_name: str) -> LogFileName | None:
        """The name's parts, or None when ``file_name`` is not a Hudi log file's name."""
        match = _LOG_FILE.match(file_name)
        if match is None:
            return None
        return cls(
            match["file_id"],
            match["base"],
            int(match["version"]),
            match["token"],
            match["suffix"] is not None,
        )

    @property
    def order(self) -> tuple[str, int, str]:
        """The order of a file slice's log files: by version, then by write token, as Hudi's
        log-file comparator (a retried task's file sorts after the first attempt's)."""
        return (self.base_instant, self.version, self.write_token or "")


@dataclass(frozen=True)
class DeleteRecord:
    record_key: str | None
    partition_path: str | None
    ordering_value: Any


@dataclass(frozen=True)
class LogBlock:
    """One block of a log file: ``offset`` is where its magic starts, ``size`` its length in
    bytes, magic and trailer included. A corrupt block has no header and no content."""

    block_type: BlockType
    offset: int
    size: int
    header: dict[HeaderKey, str] = field(default_factory=dict)
    footer: dict[HeaderKey, str] = field(default_factory=dict)
    content: bytes = b""
    format_version: int = 1

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME)

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def is_rollback(self) -> bool:
        return (
            self.block_type == BlockType.COMMAND
            and self.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND
        )

    @property
    def compacted_instants(self) -> list[str]:
        """The instants of the blocks that log compaction merged into this one."""
        value = self.header.get(HeaderKey.COMPACTED_BLOCK_TIMES, "")
        return [t for t in value.split(",") if t]

    def avro_schema(self) -> dict[str, Any]:
        text = self.header.get(HeaderKey.SCHEMA)
        if text is None:
            raise LogFormatError(f"{self.block_type.name.lower()} block has no schema")
        parsed: dict[str, Any] = json.loads(text)
        return parsed

    def records(self) -> pa.Table:
        """A data block's records as Arrow, typed by the block's Avro schema (Avro blocks) or by
        the Parquet file (Parquet blocks)."""
        if self.block_type == BlockType.PARQUET_DATA:
            return pq.read_table(io.BytesIO(self.content))
        if self.block_type != BlockType.AVRO_DATA:
            raise LogFormatError(f"{self.block_type.name.lower()} block: records are not read")
        schema = self.avro_schema()
        parsed = fastavro.parse_schema(schema)
        data = self.content
        rows = []
        try:
            (count,) = _INT.unpack_from(data, 4)
            at = 8
            for _ in range(count):
                (length,) = _INT.unpack_from(data, at)
                at += 4
                record = io.BytesIO(data[at : at + length])
                rows.append(fastavro.schemaless_reader(record, parsed))
                at += length
        except (struct.error, EOFError, ValueError) as e:
            raise LogFormatError(f"Avro data block at {self.offset}: {e}") from e
        return pa.Table.from_pylist(rows, schema=arrow_schema(schema))

    def deletes(self) -> list[DeleteRecord]:
        """A delete block's keys (Hudi 0.14+ writes them in Avro, block version 3)."""
        if self.block_type != BlockType.DELETE:
            raise LogFormatError(f"{self.block_type.name.lower()} block is not a delete block")
        (version,) = _INT.unpack_from(self.content, 0)
        if version < 3:
            raise LogFormatError(
                f"delete block at {self.offset}: version {version} (Java-serialized keys, "
                "written before Hudi 0.14) is not read"
            )
        (length,) = _INT.unpack_from(self.content, 4)
        body = io.BytesIO(self.content[8 : 8 + length])
        listed = fastavro.schemaless_reader(body, DELETE_RECORD_LIST_SCHEMA)
        if not isinstance(listed, dict):
            raise LogFormatError(f"delete block at {self.offset}: not a HoodieDeleteRecordList")
        return [
            DeleteRecord(r["recordKey"], r["partitionPath"], r["orderingVal"])
            for r in listed["deleteRecordList"]
        ]


#: reads bytes [start, end) of one log file
ReadRange = Callable[[int, int], bytes]
#: how far a scan for the next magic reads at a time, past a corrupt block
SCAN_CHUNK = 1 << 20


def read_blocks(data: bytes) -> list[LogBlock]:
    """Every block of a log file's bytes, corrupt ones included, in order."""
    return list(iter_blocks(lambda start, end: data[start:end], len(data)))


def read_log_file(storage: Storage, path: str, size: int | None = None) -> Iterator[LogBlock]:
    """The blocks of the log file at ``path`` (of ``size`` bytes, when the caller knows it from a
    listing or a write stat; asked of storage when not given or 0), read block by block with ranged reads: memory is bounded by the largest block
    (Hudi's ``hoodie.logfile.data.block.max.size``), not the file (``hoodie.logfile.max.size``,
    1 GB by default)."""
    if not size:
        size = storage.info(path).size
    return iter_blocks(lambda start, end: storage.read_range(path, start, end), size)


def iter_blocks(read: ReadRange, size: int, scan_chunk: int = SCAN_CHUNK) -> Iterator[LogBlock]:
    """The blocks of a log file of ``size`` bytes, each read whole once its framing checks out
    (a damaged length never makes it read past the trailer it claims)."""
    at = 0
    while at < size:
        block = None
        head = read(at, min(at + len(MAGIC) + 8, size))
        if len(head) == len(MAGIC) + 8 and head.startswith(MAGIC):
            (length,) = _LONG.unpack_from(head, len(MAGIC))
            end = at + len(MAGIC) + 8 + length
            if length >= 16 and end <= size:
                (total,) = _LONG.unpack_from(read(end - 8, end))
                if total - len(MAGIC) == length:
                    block = _block_at(read(at, end), 0)
        if block is None:
            following = _next_magic(read, size, at + 1, scan_chunk)
            yield LogBlock(BlockType.CORRUPT, at, following - at)
            at = following
            continue
        yield dataclasses.replace(block, offset=at)
        at += block.size


def _next_magic(read: ReadRange, size: int, start: int, chunk: int) -> int:
    """Where the next magic at or after ``start`` begins, or ``size``."""
    chunk = max(chunk, 2 * len(MAGIC))
    at = start
    while at < size:
        data = read(at, min(at + chunk, size))
        found = data.find(MAGIC)
        if found >= 0:
            return at + found
        if at + len(data) >= size:
            break
        at += len(data) - (len(MAGIC) - 1)  # a magic across the boundary is found next time
    return size


def _block_at(data: bytes, start: int) -> LogBlock | None:
    """The block whose magic is at ``start``; None when its framing is not whole (its length
    runs past the end, or its trailer disagrees: a partial append or damage). A block framed
    whole whose parts cannot be read raises :class:`LogFormatError`, as Hudi's reader fails on
    one, rather than being skipped: its records would be silently lost."""
    at = start + len(MAGIC)
    if at + 8 > len(data):
        return None
    (length,) = _LONG.unpack_from(data, at)
    at += 8
    end = at + length
    if length < 16 or end > len(data):
        return None
    (total,) = _LONG.unpack_from(data, end - 8)
    if total - len(MAGIC) != length:  # the trailer counts the magic, not the length field
        return None
    try:
        version, kind = struct.unpack_from(">ii", data, at)
        if version != 1:
            raise ValueError(f"log format version {version} (Hudi 0.x writes 1)")
        block_type = BlockType(kind)
        header, at = _metadata(data, at + 8, end)
        (content_length,) = _LONG.unpack_from(data, at)
        at += 8
        if content_length < 0 or at + content_length > end:
            raise ValueError(f"content of {content_length} bytes past the block's end")
        content = data[at : at + content_length]
        footer, at = _metadata(data, at + content_length, end)
        if at != end - 8:
            raise ValueError(f"{end - 8 - at} bytes left between the footer and the trailer")
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise LogFormatError(f"block at byte {start}: {e}") from e
    return LogBlock(block_type, start, end - start, header, footer, content, version)


def _metadata(data: bytes, at: int, end: int) -> tuple[dict[HeaderKey, str], int]:
    (count,) = _INT.unpack_from(data, at)
    at += 4
    if not 0 <= count <= 64:
        raise ValueError(f"{count} header or footer entries")
    entries: dict[HeaderKey, str] = {}
    for _ in range(count):
        key, length = struct.unpack_from(">ii", data, at)
        at += 8
        if length < 0 or at + length > end:
            raise ValueError(f"a header or footer value of {length} bytes past the block's end")
        entries[HeaderKey(key)] = data[at : at + length].decode("utf-8")
        at += length
    return entries, at


def effective_blocks(
    log_files: Iterable[Sequence[LogBlock]], is_completed: Callable[[str], bool]
) -> list[LogBlock]:
    """The data and delete blocks that count, in order, from a file slice's log files (each a
    list of its blocks, the files in :attr:`LogFileName.order`): corrupt blocks and blocks of
    instants not completed are left out, a rollback removes the earlier blocks of its target,
    and a log-compacted block replaces the blocks of the instants it lists. ``is_completed``
    answers for the table's timeline, archived instants included (Hudi counts an instant older
    than its active timeline as completed)."""
    kept: list[LogBlock] = []
    for blocks in log_files:
        for block in blocks:
            instant = block.instant_time
            if block.block_type == BlockType.CORRUPT or instant is None:
                continue
            if block.is_rollback:
                target = block.target_instant_time
                kept = [b for b in kept if b.instant_time != target]
                continue
            if block.block_type == BlockType.COMMAND or not is_completed(instant):
                continue
            replaced = set(block.compacted_instants)
            if replaced:
                kept = [b for b in kept if b.instant_time not in replaced]
            kept.append(block)
    return kept


# --- writing blocks (Hudi's metadata table; made-to-order log files for tests and benchmarks) -----


def encode_block(
    block_type: BlockType,
    header: Mapping[HeaderKey, str],
    content: bytes = b"",
    footer: Mapping[HeaderKey, str] | None = None,
) -> bytes:
    """One block, framed as Hudi's log format version 1 writes it (:func:`read_blocks` reads it
    back); a log file is its blocks one after another."""

    def entries(values: Mapping[HeaderKey, str]) -> bytes:
        out = [_INT.pack(len(values))]
        for key, value in values.items():
            data = value.encode("utf-8")
            out.append(struct.pack(">ii", int(key), len(data)) + data)
        return b"".join(out)

    body = b"".join(
        [
            struct.pack(">ii", 1, int(block_type)),
            entries(header),
            _LONG.pack(len(content)),
            content,
            entries(footer or {}),
        ]
    )
    length = len(body) + 8  # the trailer
    return MAGIC + _LONG.pack(length) + body + _LONG.pack(length + len(MAGIC))


def avro_data_content(records: Iterable[Mapping[str, Any]], schema: Mapping[str, Any]) -> bytes:
    """An Avro data block's content as Hudi 0.x writes it: version 3, the count, then each
    record, length first, in Avro's binary encoding under ``schema`` (the block's SCHEMA
    header)."""
    parsed = fastavro.parse_schema(dict(schema))
    encoded = []
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, dict(record))
        encoded.append(_INT.pack(buffer.tell()) + buffer.getvalue())
    return _INT.pack(3) + _INT.pack(len(encoded)) + b"".join(encoded)


def delete_content(deletes: Iterable[DeleteRecord]) -> bytes:
    """A delete block's content as Hudi 0.14+ writes it: version 3, the length, then one
    ``HoodieDeleteRecordList`` in Avro (:meth:`LogBlock.deletes` reads it back)."""
    buffer = io.BytesIO()
    listed = [
        {
            "recordKey": d.record_key,
            "partitionPath": d.partition_path,
            "orderingVal": d.ordering_value,
        }
        for d in deletes
    ]
    fastavro.schemaless_writer(buffer, DELETE_RECORD_LIST_SCHEMA, {"deleteRecordList": listed})
    return _INT.pack(3) + _INT.pack(buffer.tell()) + buffer.getvalue()


# --- Avro schemas as Arrow schemas ---------------------------------------------------------------

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def arrow_schema(avro: dict[str, Any]) -> pa.Schema:
    """The Arrow schema of an Avro record schema, typed as Hudi's Parquet base files type the
    same columns (timestamps in UTC, decimals as decimals, enums as strings)."""
    if avro.get("type") != "record":
        raise LogFormatError("a data block's schema is not an Avro record")
    return pa.schema([_field(f) for f in avro["fields"]])


def _field(avro_field: dict[str, Any]) -> pa.Field:
    kind, nullable = _arrow_type(avro_field["type"])
    return pa.field(avro_field["name"], kind, nullable=nullable)


def _arrow_type(avro: Any) -> tuple[pa.DataType, bool]:
    if isinstance(avro, list):  # a union: Hudi writes [null, T]
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise LogFormatError(f"Avro union {avro} has no single Arrow type")
        return _arrow_type(branches[0])[0], "null" in avro
    if isinstance(avro, str):
        if avro not in _PRIMITIVES:
            raise LogFormatError(f"Avro type {avro!r} (a named type) is not supported")
        return _PRIMITIVES[avro], avro == "null"
    logical, kind = avro.get("logicalType"), avro["type"]
    if logical == "decimal":
        return pa.decimal128(avro["precision"], avro.get("scale", 0)), False
    if logical == "date":
        return pa.date32(), False
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("ms" if logical == "timestamp-millis" else "us", tz="UTC"), False
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("ms" if logical.endswith("millis") else "us"), False
    if logical == "time-millis":
        return pa.time32("ms"), False
    if logical == "time-micros":
        return pa.time64("us"), False
    if kind == "record":
        return pa.struct([_field(f) for f in avro["fields"]]), False
    if kind == "array":
        return pa.list_(_arrow_type(avro["items"])[0]), False
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(avro["values"])[0]), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(avro["size"]), False
    return _arrow_type(kind)
