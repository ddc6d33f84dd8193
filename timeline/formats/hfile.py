"""HFile version 3, as Apache HBase 2.4 writes it for Apache Hudi 0.15's metadata table (its base
files, and the content of its log files' HFile data blocks). No library reads or writes HFile
outside the JVM (hudi-rs reads it in Rust, for itself), so both directions are written here.

A file is a sequence of blocks, then a fixed 4,096-byte trailer::

    data blocks ("DATABLK*")   meta blocks ("METABLKc")
    root data index ("IDXROOT2")   meta index ("IDXROOT2")   file info ("FILEINF2")
    trailer: "TRABLK\\"$", a length-delimited protobuf, zeros, (minor << 24 | major) = 3, 3

Every block (big-endian) is a 33-byte header, the payload (compressed on its own: gzip members
for Hudi's default GZ, deflated by ISA-L: :class:`Deflate`), then a checksum per 16 KiB of
header and payload::

    magic (8)  on-disk size after the header, checksums included (4)
    uncompressed payload size (4)  previous block of this type's offset, or -1 (8)
    checksum type (1: 2 = CRC32C)  bytes per checksum (4)  header and on-disk payload size (4)

A data block holds the cells in key order, each ``key length (4) value length (4) key value``
and the cell's MVCC version as a Hadoop variable-length long (one byte 0 in Hudi's files). A key
is HBase's: ``row length (2) row family length (1) family qualifier timestamp (8) type (1)``;
Hudi puts its record key in the row, nothing in the family and qualifier, the newest timestamp
and type 4 (put). The root index has a block's ``offset (8) on-disk size, header included (4)``
and first key (a Hadoop variable-length int, then the key) per data block; a file with many
blocks may index them through leaf index blocks instead, which :class:`HFileReader` reads and
:func:`write_hfile` never writes (Hudi's own native reader takes one level only). File info is
``"PBUF"`` and a length-delimited protobuf of (name, value) byte pairs, sorted by name.

The layout was learned from HBase's and Hudi's sources and is pinned by tests on the files
hudi-rs vendors (written by HBase 2.4.9 and 2.4.13) and on files Apache Hudi writes here.
"""

from __future__ import annotations

import bisect
import gzip
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from enum import IntEnum
from functools import cached_property
from typing import NamedTuple, cast

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from isal import isal_zlib

from timeline.errors import HFileFormatError

#: what Hudi 0.15 writes as the trailer's comparator (a stable name across its shading of HBase)
HUDI_COMPARATOR = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
TRAILER_SIZE = 4096
MAJOR_VERSION, MINOR_VERSION = 3, 3
HEADER = struct.Struct(">8siiqbii")
BYTES_PER_CHECKSUM = 16384
#: Hudi's default block size for its metadata table's files (``hoodie.hfile.block.size``)
DEFAULT_BLOCK_SIZE = 1024 * 1024
#: the newest timestamp and the "put" type: what every key Hudi writes ends with
LATEST_TIMESTAMP = 0x7FFFFFFFFFFFFFFF
PUT = 4
MAX_ROW_LENGTH = 0x7FFF

DATA, META, ROOT_INDEX = b"DATABLK*", b"METABLKc", b"IDXROOT2"
LEAF_INDEX, INTERMEDIATE_INDEX = b"IDXLEAF2", b"IDXINTE2"
FILE_INFO, TRAILER = b"FILEINF2", b'TRABLK"$'
ENCODED_DATA = b"DATABLKE"


class Compression(IntEnum):
    """HBase's compression algorithms, by the number its trailer stores."""

    LZO = 0
    GZ = 1
    NONE = 2
    SNAPPY = 3
    LZ4 = 4
    BZIP2 = 5
    ZSTD = 6


class ChecksumType(IntEnum):
    NULL = 0
    CRC32 = 1
    CRC32C = 2


# --- protobuf, the two wire types HFile's messages use ------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 / uint64 fields: ten bytes, as protobuf does
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a protobuf varint runs past its message")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _proto_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as ints, length-delimited as bytes
    (fixed-width fields, which HFile's messages do not use, are refused)."""
    at = 0
    while at < len(data):
        tag, at = _read_varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, at = _read_varint(data, at)
            yield number, value
        elif wire == 2:
            length, at = _read_varint(data, at)
            if at + length > len(data):
                raise ValueError("a protobuf field runs past its message")
            yield number, data[at : at + length]
            at += length
        else:
            raise ValueError(f"protobuf wire type {wire} (field {number})")


def _proto_field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


# --- Hadoop's variable-length integers (WritableUtils) -------------------------------------------


def _vlong(value: int) -> bytes:
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    prefix = -112
    if value < 0:
        value, prefix = ~value, -120
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return struct.pack(">b", prefix - len(body)) + body


def _read_vlong(data: bytes | memoryview, at: int) -> tuple[int, int]:
    first = struct.unpack_from(">b", data, at)[0]
    if first >= -112:
        return first, at + 1
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)
    value = int.from_bytes(data[at + 1 : at + size], "big")
    return (~value if negative else value), at + size


# --- keys ---------------------------------------------------------------------------------------


def cell_key(row: bytes) -> bytes:
    """HBase's key of a cell whose row is ``row``, as Hudi writes every cell: no family or
    qualifier, the newest timestamp, a put."""
    if len(row) > MAX_ROW_LENGTH:
        raise ValueError(f"an HFile row key is at most {MAX_ROW_LENGTH} bytes, not {len(row)}")
    return struct.pack(">h", len(row)) + row + b"\x00" + struct.pack(">qb", LATEST_TIMESTAMP, PUT)


#: what a cell's key holds besides its row: the row's length, the family's (none), the timestamp
#: and the type
_KEY_TAIL = b"\x00" + struct.pack(">qb", LATEST_TIMESTAMP, PUT)
_KEY_OVERHEAD = 2 + len(_KEY_TAIL)
_CELL_HEAD = struct.Struct(">iih")
_CELL_HEAD_DTYPE = np.dtype([("key", ">i4"), ("value", ">i4"), ("row", ">i2")])


def key_row(key: bytes | memoryview) -> bytes:
    """The row of an HBase key (Hudi's record key); a shortened "fake" index key too."""
    (length,) = struct.unpack_from(">h", key, 0)
    return bytes(key[2 : 2 + length])


# --- the trailer -----------------------------------------------------------------------------------


#: protobuf field numbers (HBase's FileTrailerProto), in the trailer's order
_TRAILER_FIELDS = {
    "file_info_offset": 1,
    "load_on_open_data_offset": 2,
    "uncompressed_data_index_size": 3,
    "total_uncompressed_bytes": 4,
    "data_index_count": 5,
    "meta_index_count": 6,
    "entry_count": 7,
    "num_data_index_levels": 8,
    "first_data_block_offset": 9,
    "last_data_block_offset": 10,
    "comparator_class_name": 11,
    "compression_codec": 12,
}


@dataclass(frozen=True)
class Trailer:
    """HFile's fixed trailer: where the load-on-open section is, and what the file holds."""

    file_info_offset: int = 0
    load_on_open_data_offset: int = 0
    uncompressed_data_index_size: int = 0
    total_uncompressed_bytes: int = 0
    data_index_count: int = 0
    meta_index_count: int = 0
    entry_count: int = 0
    num_data_index_levels: int = 1
    first_data_block_offset: int = 0
    last_data_block_offset: int = 0
    comparator_class_name: str = HUDI_COMPARATOR
    compression_codec: int = Compression.GZ
    major_version: int = MAJOR_VERSION
    minor_version: int = MINOR_VERSION

    def to_bytes(self) -> bytes:
        message = b"".join(
            _proto_field(number, getattr(self, name).encode())
            if name == "comparator_class_name"
            else _proto_field(number, getattr(self, name))
            for name, number in _TRAILER_FIELDS.items()
        )
        body = TRAILER + _varint(len(message)) + message
        version = struct.pack(">i", self.minor_version << 24 | self.major_version)
        return body + b"\x00" * (TRAILER_SIZE - len(body) - 4) + version

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> Trailer:
        if len(data) < TRAILER_SIZE:
            raise HFileFormatError(path, f"{len(data)} bytes, shorter than its trailer")
        tail = data[-TRAILER_SIZE:]
        (version,) = struct.unpack_from(">i", tail, TRAILER_SIZE - 4)
        major, minor = version & 0xFFFFFF, version >> 24 & 0xFF
        if major != MAJOR_VERSION:
            raise HFileFormatError(path, f"HFile version {major}.{minor}, not 3")
        if tail[:8] != TRAILER:
            raise HFileFormatError(path, "no trailer magic 4,096 bytes from its end")
        names = {number: name for name, number in _TRAILER_FIELDS.items()}
        values: dict[str, object] = {"major_version": major, "minor_version": minor}
        try:
            length, at = _read_varint(tail, 8)
            for number, value in _proto_fields(tail[at : at + length]):
                name = names.get(number)
                if name == "comparator_class_name" and isinstance(value, bytes):
                    values[name] = value.decode()
                elif name is not None and isinstance(value, int):
                    # uint64 fields may hold -1 (the first data block of an empty file)
                    values[name] = value - (1 << 64) if value >= 1 << 63 else value
        except (ValueError, UnicodeDecodeError) as e:
            raise HFileFormatError(path, f"its trailer: {e}") from e
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})  # type: ignore[arg-type]


# --- blocks ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    magic: bytes
    offset: int
    #: the block's bytes on storage: header, payload, checksums
    on_disk_size: int
    payload: bytes


#: the operating-system byte of a gzip member's header: 255 ("unknown") is what Hudi 0.15
#: writes here (Hadoop's native zlib); HBase's Java gzip writes 0
GZIP_OS_UNKNOWN, GZIP_OS_JAVA = 255, 0


class Deflate(NamedTuple):
    """How GZ blocks are deflated. ``zlib``: by zlib at level 6, byte for byte what HBase's Java
    gzip and Hadoop's native zlib write; otherwise (what we write) by ISA-L's igzip at level 1,
    which every inflater reads as well (a record-index group of 68 MB: 18 ms against zlib's
    233, 3.5% larger). ``os``: the operating-system byte of each gzip member's header."""

    os: int = GZIP_OS_UNKNOWN
    zlib: bool = False


#: how we deflate; and the bytes of HBase's Java gzip and of Hudi 0.15's writer (Hadoop's native
#: zlib), to compare a rewrite with a file either wrote
OUR_GZIP = Deflate()
HBASE_JAVA_GZIP, HUDI_ZLIB_GZIP = Deflate(GZIP_OS_JAVA, zlib=True), Deflate(zlib=True)


def _compress(payload: bytes, codec: Compression, deflate: Deflate, dense: bool = False) -> bytes:
    """A block's payload compressed; ``dense`` (high-entropy values, such as bloom filters)
    deflates with Huffman coding alone: five times faster there than zlib's level 6, and as
    small (a gzip member all the same, which every inflater reads)."""
    if codec is Compression.NONE:
        return payload
    if codec is Compression.GZ:
        if dense:
            deflater = zlib.compressobj(6, zlib.DEFLATED, 31, 8, zlib.Z_HUFFMAN_ONLY)
            member = deflater.compress(payload) + deflater.flush()
        elif deflate.zlib:
            member = gzip.compress(payload, compresslevel=6, mtime=0)
        else:
            member = isal_zlib.compress(payload, 1, wbits=31)  # its header's mtime is 0
        return member[:9] + bytes([deflate.os]) + member[10:]
    raise ValueError(f"HFile compression {codec.name}: only GZ and NONE are written")


#: what ISA-L's inflate raises (its stubs declare it an instance, not a class)
_INFLATE_ERROR = cast("type[Exception]", isal_zlib.error)


def _decompress(data: bytes, codec: int, size: int, path: str) -> bytes:
    if codec == Compression.NONE:
        out = data
    elif codec == Compression.GZ:
        try:  # one gzip member, by ISA-L's inflate: 3x zlib's speed on a record-index group
            out = isal_zlib.decompress(data, wbits=31)
        except _INFLATE_ERROR as e:
            raise HFileFormatError(path, f"a GZ block does not inflate: {e}") from e
    else:
        try:
            name = Compression(codec).name
        except ValueError:
            name = str(codec)
        raise HFileFormatError(path, f"compression {name}: only GZ and NONE are read")
    if len(out) != size:
        raise HFileFormatError(path, f"a block inflates to {len(out)} bytes, not {size}")
    return out


def _checksums(data: bytes | memoryview, kind: int, chunk: int) -> bytes:
    if kind == ChecksumType.NULL:
        return b""
    digest = google_crc32c.value if kind == ChecksumType.CRC32C else zlib.crc32
    return b"".join(
        struct.pack(">I", digest(bytes(data[at : at + chunk]))) for at in range(0, len(data), chunk)
    )


def encode_block(
    magic: bytes,
    payload: bytes,
    codec: Compression,
    previous: int = -1,
    deflate: Deflate = OUR_GZIP,
    dense: bool = False,
) -> tuple[bytes, int]:
    """A block's bytes (header, compressed payload, CRC32C checksums) and its size before
    compression with its header (what the trailer's totals count); ``dense``: see
    :func:`_compress`."""
    body = _compress(payload, codec, deflate, dense)
    chunks = -(-(HEADER.size + len(body)) // BYTES_PER_CHECKSUM)
    header = HEADER.pack(
        magic,
        len(body) + 4 * chunks,
        len(payload),
        previous,
        ChecksumType.CRC32C,
        BYTES_PER_CHECKSUM,
        HEADER.size + len(body),
    )
    data = header + body
    return data + _checksums(data, ChecksumType.CRC32C, BYTES_PER_CHECKSUM), HEADER.size + len(
        payload
    )


# --- reading -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexEntry:
    """One data block, as an index names it: where it is and the row of its first key (for a
    shortened "fake" key, a row between the previous block's last and this block's first)."""

    offset: int
    on_disk_size: int
    first_row: bytes


class HFileReader:
    """One HFile in memory: its cells in key order, point and prefix lookups through the block
    index (only the blocks that can hold the key are inflated), its file info and meta blocks.
    Rows compare as unsigned bytes, as HBase compares them."""

    def __init__(self, data: bytes, path: str = "<hfile>", verify_checksums: bool = True) -> None:
        self.data = data
        self.path = path
        self.verify_checksums = verify_checksums
        self.trailer = Trailer.from_bytes(data, path)
        if self.trailer.num_data_index_levels < 1:
            raise HFileFormatError(path, "a data index of no levels")
        self._blocks: dict[int, list[tuple[bytes, bytes]]] = {}

    def __len__(self) -> int:
        return self.trailer.entry_count

    # the load-on-open section ---------------------------------------------------------------------

    def read_block(self, offset: int, expect: bytes | None = None) -> Block:
        path, data = self.path, self.data
        end_of_blocks = len(data) - TRAILER_SIZE
        if not 0 <= offset <= end_of_blocks - HEADER.size:
            raise HFileFormatError(path, f"a block at offset {offset}, outside the file")
        magic, on_disk, size, _, kind, per_checksum, with_header = HEADER.unpack_from(data, offset)
        if expect is not None and magic != expect:
            raise HFileFormatError(
                path, f"block at {offset} is {magic!r}, not the {expect!r} expected"
            )
        end = offset + HEADER.size + on_disk
        if with_header < HEADER.size or offset + with_header > end or end > end_of_blocks:
            raise HFileFormatError(path, f"block at {offset} has sizes that do not fit the file")
        if self.verify_checksums and kind != ChecksumType.NULL:
            if kind not in (ChecksumType.CRC32, ChecksumType.CRC32C) or per_checksum <= 0:
                raise HFileFormatError(path, f"block at {offset}: checksum type {kind}")
            stored = data[offset + with_header : end]
            if _checksums(memoryview(data)[offset : offset + with_header], kind, per_checksum) != (
                stored
            ):
                raise HFileFormatError(path, f"block at {offset}: its checksum disagrees")
        payload = _decompress(
            data[offset + HEADER.size : offset + with_header],
            self.trailer.compression_codec,
            size,
            path,
        )
        return Block(magic, offset, HEADER.size + on_disk, payload)

    @cached_property
    def _load_on_open(self) -> tuple[list[IndexEntry], dict[str, IndexEntry]]:
        trailer = self.trailer
        root = self.read_block(trailer.load_on_open_data_offset, ROOT_INDEX)
        entries = self._root_entries(root.payload, trailer.data_index_count)
        meta = self.read_block(root.offset + root.on_disk_size, ROOT_INDEX)
        names = {
            e.first_row.decode(): e
            for e in self._root_entries(meta.payload, trailer.meta_index_count, raw=True)
        }
        for _ in range(trailer.num_data_index_levels - 1):
            entries = [e for parent in entries for e in self._non_root_entries(parent)]
        return entries, names

    def _root_entries(self, payload: bytes, count: int, raw: bool = False) -> list[IndexEntry]:
        out, at = [], 0
        try:
            for _ in range(count):
                offset, size = struct.unpack_from(">qi", payload, at)
                length, at = _read_vlong(payload, at + 12)
                key = payload[at : at + length]
                at += length
                out.append(IndexEntry(offset, size, key if raw else key_row(key)))
        except struct.error as e:
            raise HFileFormatError(
                self.path, f"its root index holds fewer than {count} entries"
            ) from e
        return out

    def _non_root_entries(self, parent: IndexEntry) -> list[IndexEntry]:
        block = self.read_block(parent.offset)
        if block.magic not in (LEAF_INDEX, INTERMEDIATE_INDEX):
            raise HFileFormatError(self.path, f"block at {parent.offset} is not an index block")
        payload = block.payload
        (count,) = struct.unpack_from(">i", payload, 0)
        positions = struct.unpack_from(f">{count + 1}i", payload, 4)
        start = 4 * (count + 2)
        out = []
        for i in range(count):
            at, end = start + positions[i], start + positions[i + 1]
            offset, size = struct.unpack_from(">qi", payload, at)
            out.append(IndexEntry(offset, size, key_row(payload[at + 12 : end])))
        return out

    @property
    def index(self) -> list[IndexEntry]:
        """The data blocks, in order."""
        return self._load_on_open[0]

    @cached_property
    def file_info(self) -> dict[bytes, bytes]:
        """The file info's (name, value) pairs: HBase's (``hfile.LASTKEY``, ...) and the
        writer's (Hudi's ``schema``, ``minRecordKey``, ...)."""
        payload = self.read_block(self.trailer.file_info_offset, FILE_INFO).payload
        if payload[:4] != b"PBUF":
            raise HFileFormatError(self.path, "file info without its PBUF magic")
        try:
            length, at = _read_varint(payload, 4)
            info: dict[bytes, bytes] = {}
            for number, pair in _proto_fields(payload[at : at + length]):
                if number == 1 and isinstance(pair, bytes):
                    parts = dict(_proto_fields(pair))
                    first, second = parts.get(1, b""), parts.get(2, b"")
                    if isinstance(first, bytes) and isinstance(second, bytes):
                        info[first] = second
        except ValueError as e:
            raise HFileFormatError(self.path, f"its file info: {e}") from e
        return info

    def meta_block(self, name: str) -> bytes | None:
        """The payload of meta block ``name`` (Hudi's base files keep a ``bloomFilter``)."""
        entry = self._load_on_open[1].get(name)
        return None if entry is None else self.read_block(entry.offset, META).payload

    # cells -----------------------------------------------------------------------------------------

    @cached_property
    def _mvcc(self) -> bool:
        """Whether each cell carries its MVCC version (``KEY_VALUE_VERSION`` 1)."""
        version = self.file_info.get(b"KEY_VALUE_VERSION")
        return version is not None and int.from_bytes(version, "big", signed=True) == 1

    @cached_property
    def _tags(self) -> bool:
        return b"hfile.MAX_TAGS_LEN" in self.file_info

    def _cells(self, block: int) -> list[tuple[bytes, bytes]]:
        """The (row, value) cells of data block number ``block``, inflated once."""
        cached = self._blocks.get(block)
        if cached is not None:
            return cached
        entry = self.index[block]
        read = self.read_block(entry.offset)
        if read.magic == ENCODED_DATA:
            raise HFileFormatError(self.path, "data blocks with an HBase data block encoding")
        if read.magic != DATA:
            raise HFileFormatError(self.path, f"block at {entry.offset} is not a data block")
        payload, mvcc, tags = read.payload, self._mvcc, self._tags
        cells, at, end = [], 0, len(payload)
        unpack = struct.unpack_from
        try:
            while at < end:
                key_length, value_length = unpack(">ii", payload, at)
                at += 8
                (row_length,) = unpack(">h", payload, at)
                cells.append(
                    (
                        payload[at + 2 : at + 2 + row_length],
                        payload[at + key_length : at + key_length + value_length],
                    )
                )
                at += key_length + value_length
                if tags:
                    (tags_length,) = unpack(">H", payload, at)
                    at += 2 + tags_length
                if mvcc:
                    _, at = _read_vlong(payload, at)
        except struct.error as e:
            raise HFileFormatError(self.path, f"data block at {entry.offset} is cut short") from e
        if at != end:
            raise HFileFormatError(self.path, f"data block at {entry.offset} is cut short")
        if len(self._blocks) >= 64:
            self._blocks.clear()
        self._blocks[block] = cells
        return cells

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (row, value) cell, in key order."""
        for block in range(len(self.index)):
            yield from self._cells(block)

    def _from(self, row: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The cells from the first whose row is at least ``row``, in key order."""
        firsts = [e.first_row for e in self.index]
        # the last block that starts before ``row``: a row equal to a block's first may also end
        # the block before it (rows repeat in log blocks; an index key may be shortened)
        start = max(0, bisect.bisect_left(firsts, row) - 1)
        for block in range(start, len(firsts)):
            for cell in self._cells(block):
                if cell[0] >= row:
                    yield cell

    def get(self, row: bytes) -> list[bytes]:
        """The values of the cells whose row is ``row`` (one in a base file; a log block may
        hold several), in file order."""
        out = []
        for found, value in self._from(row):
            if found != row:
                break
            out.append(value)
        return out

    def get_many(self, rows: Iterable[bytes]) -> Iterator[tuple[bytes, bytes]]:
        """The cells of each of ``rows``, in key order: each found by the block index, then by
        bisection in its block (a block is inflated once however many rows it holds)."""
        firsts = [e.first_row for e in self.index]
        for row in sorted(set(rows)):
            # (as :meth:`_from`: the block before the first that starts at or after ``row``)
            for block in range(max(0, bisect.bisect_left(firsts, row) - 1), len(firsts)):
                cells = self._cells(block)
                at = bisect.bisect_left(cells, (row,))
                while at < len(cells) and cells[at][0] == row:
                    yield cells[at]
                    at += 1
                if at < len(cells):
                    break  # a later row ends the search: the next blocks start after it

    def with_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The cells whose row starts with ``prefix``, in key order."""
        for cell in self._from(prefix):
            if not cell[0].startswith(prefix):
                return
            yield cell


# --- writing -----------------------------------------------------------------------------------------


def write_hfile(
    cells: Iterable[tuple[bytes, bytes]],
    file_info: Mapping[bytes, bytes] | None = None,
    meta_blocks: Mapping[str, bytes] | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    compression: Compression = Compression.GZ,
    unique: bool = True,
    deflate: Deflate = OUR_GZIP,
    dense: bool = False,
) -> bytes:
    """An HFile of ``cells`` ((row, value), in ascending row order: strictly so when ``unique``,
    as in Hudi's base files; a log block's may repeat), as Hudi 0.15's writer lays it out: data
    blocks of about ``block_size`` bytes before compression, ``meta_blocks`` by name, one level
    of index, file info with HBase's entries and ``file_info``, Hudi's comparator; gzip members
    deflated as ``deflate`` says. ``dense`` values (bloom filters) are compressed with
    Huffman coding alone (:func:`_compress`)."""
    out = bytearray()
    index: list[tuple[int, int, bytes]] = []
    total_uncompressed = entries = key_bytes = value_bytes = 0
    previous_row: bytes | None = None
    last_key = b""
    block = bytearray()
    block_first: bytes | None = None
    previous_data = -1

    def flush() -> None:
        nonlocal block, block_first, previous_data, total_uncompressed
        if block_first is None:
            return
        data, uncompressed = encode_block(
            DATA, bytes(block), compression, previous_data, deflate, dense
        )
        index.append((len(out), len(data), block_first))
        previous_data = len(out)
        total_uncompressed += uncompressed
        out.extend(data)
        block, block_first = bytearray(), None

    # a cell: key length, value length, the key (row length, row, no family, its tail), the
    # value, MVCC 0; the loop appends the parts (a million cells a second, not a third of that)
    head, tail = _CELL_HEAD.pack, _KEY_TAIL
    for row, value in cells:
        if previous_row is not None and (row < previous_row or (unique and row == previous_row)):
            order = "strictly ascending" if unique else "ascending"
            raise ValueError(f"HFile rows must be in {order} order: {row!r} after {previous_row!r}")
        if row != previous_row and len(block) >= block_size:
            flush()  # as HBase: a block ends before a new row, never between equal rows
        previous_row = row
        length = len(row)
        if block_first is None:
            block_first = cell_key(row)  # checks the row's length
        elif length > MAX_ROW_LENGTH:
            cell_key(row)  # raises
        block += head(length + _KEY_OVERHEAD, len(value), length)
        block += row
        block += tail
        block += value
        block += b"\x00"
        entries += 1
        key_bytes += length + _KEY_OVERHEAD
        value_bytes += len(value)
    flush()
    if previous_row is not None:
        last_key = cell_key(previous_row)
    totals = (total_uncompressed, entries, key_bytes, value_bytes)
    return _finish(out, index, totals, last_key, file_info, meta_blocks, compression, deflate)


def write_hfile_arrays(
    rows: pa.Array,
    values: pa.Array,
    file_info: Mapping[bytes, bytes] | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    compression: Compression = Compression.GZ,
    deflate: Deflate = OUR_GZIP,
) -> bytes:
    """:func:`write_hfile` of cells given as two Arrow binary arrays, ``rows`` in strictly
    ascending order (millions of them: a record index's file group), the same bytes: every cell
    laid out by Arrow (``binary_join_element_wise``) into one buffer, cut into blocks where the
    loop would cut it (before the first cell at or past ``block_size`` bytes of its block)."""
    count = len(rows)
    if count != len(values):
        raise ValueError(f"{count} rows and {len(values)} values")
    if count == 0:
        return write_hfile([], file_info, None, block_size, compression, True, deflate)
    rows = rows.cast(pa.large_binary())
    values = values.cast(pa.large_binary())
    row_lengths = pc.binary_length(rows).to_numpy(zero_copy_only=False).astype(np.int64)
    value_lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
    longest = int(row_lengths.max())
    if longest > MAX_ROW_LENGTH:
        raise ValueError(f"an HFile row key is at most {MAX_ROW_LENGTH} bytes, not {longest}")
    if count > 1:
        ascending = pc.greater(rows.slice(1), rows.slice(0, count - 1))
        if not pc.all(ascending).as_py():
            at = int(np.flatnonzero(~ascending.to_numpy(zero_copy_only=False))[0])
            raise ValueError(
                f"HFile rows must be in strictly ascending order: {rows[at + 1].as_py()!r} "
                f"after {rows[at].as_py()!r}"
            )
    heads = np.empty(count, _CELL_HEAD_DTYPE)
    heads["key"] = row_lengths + _KEY_OVERHEAD
    heads["value"] = value_lengths
    heads["row"] = row_lengths
    head = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(_CELL_HEAD.size), count, [None, pa.py_buffer(heads.tobytes())]
    ).cast(pa.large_binary())
    cells = pc.binary_join_element_wise(
        head,
        rows,
        pa.scalar(_KEY_TAIL, pa.large_binary()),
        values,
        pa.scalar(b"\x00", pa.large_binary()),
        pa.scalar(b"", pa.large_binary()),
    )
    starts = np.frombuffer(cells.buffers()[1], np.int64, count + 1, cells.offset)
    data = cells.buffers()[2]  # (the offsets index it)
    out = bytearray()
    index: list[tuple[int, int, bytes]] = []
    total_uncompressed = 0
    previous_data = -1
    first = 0
    while first < count:
        # the first cell that starts at or past block_size bytes into the block ends it
        last = int(np.searchsorted(starts, starts[first] + block_size, "left"))
        last = min(max(last, first + 1), count)
        payload = data[int(starts[first]) : int(starts[last])].to_pybytes()
        block, uncompressed = encode_block(DATA, payload, compression, previous_data, deflate)
        index.append((len(out), len(block), cell_key(rows[first].as_py())))
        previous_data = len(out)
        total_uncompressed += uncompressed
        out.extend(block)
        first = last
    totals = (
        total_uncompressed,
        count,
        int(row_lengths.sum()) + count * _KEY_OVERHEAD,
        int(value_lengths.sum()),
    )
    last_key = cell_key(rows[count - 1].as_py())
    return _finish(out, index, totals, last_key, file_info, None, compression, deflate)


def _finish(
    out: bytearray,
    index: list[tuple[int, int, bytes]],
    totals: tuple[int, int, int, int],
    last_key: bytes,
    file_info: Mapping[bytes, bytes] | None,
    meta_blocks: Mapping[str, bytes] | None,
    compression: Compression,
    deflate: Deflate,
) -> bytes:
    """An HFile's end after its data blocks (``out``, their ``index``): meta blocks, the root
    indexes, file info and the trailer. ``totals``: the data blocks' bytes before compression,
    and the cells', their keys' and their values' counts."""
    total_uncompressed, entries, key_bytes, value_bytes = totals
    metas: list[tuple[int, int, bytes]] = []
    previous_meta = -1
    for name in sorted(meta_blocks or {}):
        data, uncompressed = encode_block(
            META, (meta_blocks or {})[name], compression, previous_meta, deflate
        )
        metas.append((len(out), len(data), name.encode()))
        previous_meta = len(out)
        total_uncompressed += uncompressed
        out.extend(data)

    def root_index(items: list[tuple[int, int, bytes]]) -> bytes:
        return b"".join(
            struct.pack(">qi", offset, size) + _vlong(len(key)) + key for offset, size, key in items
        )

    load_on_open = len(out)
    data_index = root_index(index)
    data, _ = encode_block(
        ROOT_INDEX, data_index, compression, -1, deflate
    )  # HBase leaves it out of the total
    out.extend(data)
    data, uncompressed = encode_block(
        ROOT_INDEX, root_index(metas), compression, load_on_open, deflate
    )
    total_uncompressed += uncompressed
    out.extend(data)

    info = {
        b"KEY_VALUE_VERSION": struct.pack(">i", 1),
        b"MAX_MEMSTORE_TS_KEY": struct.pack(">q", 0),
        b"hfile.AVG_KEY_LEN": struct.pack(">i", key_bytes // entries if entries else 0),
        b"hfile.AVG_VALUE_LEN": struct.pack(">i", value_bytes // entries if entries else 0),
        b"hfile.CREATE_TIME_TS": struct.pack(">q", 0),
        **({b"hfile.LASTKEY": last_key} if entries else {}),
        **(file_info or {}),
    }
    pairs = b"".join(
        _proto_field(1, _proto_field(1, name) + _proto_field(2, info[name]))
        for name in sorted(info)
    )
    file_info_offset = len(out)
    data, uncompressed = encode_block(
        FILE_INFO, b"PBUF" + _varint(len(pairs)) + pairs, compression, -1, deflate
    )
    total_uncompressed += uncompressed
    out.extend(data)

    trailer = Trailer(
        file_info_offset=file_info_offset,
        load_on_open_data_offset=load_on_open,
        uncompressed_data_index_size=len(data_index),
        total_uncompressed_bytes=total_uncompressed + TRAILER_SIZE,
        data_index_count=len(index),
        meta_index_count=len(metas),
        entry_count=entries,
        num_data_index_levels=1,
        first_data_block_offset=index[0][0] if index else -1,
        last_data_block_offset=index[-1][0] if index else -1,
        compression_codec=compression,
    )
    out.extend(trailer.to_bytes())
    return bytes(out)
