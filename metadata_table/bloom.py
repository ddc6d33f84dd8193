"""Parquet split-block bloom filters (SBBF), as the Parquet format specifies them.

The filter is a bitset of 32-byte blocks, each eight 32-bit words. A value is hashed with
xxHash64 (seed 0) over its plain encoding (for strings: the UTF-8 bytes, no length prefix); the
upper 32 bits pick the block, the lower 32 bits, multiplied by eight salts, pick one bit in each
word. In a Parquet file the bitset follows a Thrift (compact protocol) ``BloomFilterHeader``
whose field 1 is the bitset size in bytes.

We read the native filters pyarrow writes (``bloom_filter_options``), and build the same kind of
filter for files that have none, so the ``bloom_filters`` partition holds one format.
``xxhash`` is the maintained C implementation of xxHash; hashing in pure Python would be ~50x slower.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import xxhash

from timeline.errors import BloomFilterFormatError

BLOOM_TYPE = "PARQUET_SPLIT_BLOCK"
_SALT = (
    0x47B6137B,
    0x44974D91,
    0x8824AD5B,
    0xA2B7289D,
    0x705495C7,
    0x2DF1424B,
    0x9EFC4947,
    0x5C6BFB31,
)
_BLOCK_BYTES = 32
_MAX_BYTES = 128 * 1024 * 1024


def hash_value(value: str | bytes) -> int:
    data = value.encode("utf-8") if isinstance(value, str) else value
    return int(xxhash.xxh64_intdigest(data, seed=0))


class SplitBlockBloomFilter:
    def __init__(self, bitset: bytes | bytearray) -> None:
        if not bitset or len(bitset) % _BLOCK_BYTES:
            raise BloomFilterFormatError(
                f"bitset of {len(bitset)} bytes is not whole 32-byte blocks"
            )
        self.bitset = bytearray(bitset)
        self.num_blocks = len(bitset) // _BLOCK_BYTES

    @staticmethod
    def optimal_bytes(ndv: int, fpp: float) -> int:
        """Bitset size for ``ndv`` distinct values at false-positive rate ``fpp`` (power of two)."""
        bits = -8 * max(ndv, 1) / math.log(1 - fpp ** (1 / 8))
        size = max(_BLOCK_BYTES, 1 << max(0, math.ceil(math.log2(bits / 8))))
        return min(size, _MAX_BYTES)

    @classmethod
    def build(
        cls, values: Iterable[str | bytes], ndv: int, fpp: float = 0.01
    ) -> SplitBlockBloomFilter:
        bloom = cls(bytes(cls.optimal_bytes(ndv, fpp)))
        for value in values:
            bloom.insert_hash(hash_value(value))
        return bloom

    def _words(self, h: int) -> tuple[int, list[int]]:
        block = ((h >> 32) * self.num_blocks) >> 32
        key = h & 0xFFFFFFFF
        return block * _BLOCK_BYTES, [1 << (((key * salt) & 0xFFFFFFFF) >> 27) for salt in _SALT]

    def insert_hash(self, h: int) -> None:
        offset, masks = self._words(h)
        for i, mask in enumerate(masks):
            at = offset + 4 * i
            (word,) = struct.unpack_from("<I", self.bitset, at)
            struct.pack_into("<I", self.bitset, at, word | mask)

    def might_contain_hash(self, h: int) -> bool:
        offset, masks = self._words(h)
        words = struct.unpack_from("<8I", self.bitset, offset)
        return all(w & m for w, m in zip(words, masks, strict=True))

    def might_contain(self, value: str | bytes) -> bool:
        return self.might_contain_hash(hash_value(value))


def might_contain_each(bitsets: pa.Array | pa.ChunkedArray, h: int) -> np.ndarray:
    """For every filter of ``bitsets`` (binary, one SBBF bitset each), whether it may hold the
    value of hash ``h``: one pass over the bitsets' Arrow buffers, no filter made a Python
    object. A null (no filter known) may hold anything."""
    return might_contain_any(bitsets, [h])


#: (hashes x filters) probed at once by :func:`might_contain_any`, at most (32 bytes each)
_PROBES_AT_ONCE = 1 << 20


def might_contain_any(bitsets: pa.Array | pa.ChunkedArray, hashes: Iterable[int]) -> np.ndarray:
    """For every filter of ``bitsets`` (binary, one SBBF bitset each), whether it may hold the
    value of any of ``hashes``: the probes of many values into many filters as array operations
    on the bitsets' Arrow buffers (an upsert tags 1,000 keys against a partition's thousand
    files in milliseconds). A null (no filter known) may hold anything."""
    array = bitsets.combine_chunks() if isinstance(bitsets, pa.ChunkedArray) else bitsets
    array = array.cast(pa.large_binary())
    n = len(array)
    out = np.ones(n, dtype=bool)
    if n == 0:
        return out
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[array.offset : array.offset + n + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer else np.zeros(0, np.uint8)
    sizes = offsets[1:] - offsets[:-1]
    valid = array.is_valid().to_numpy(zero_copy_only=False) & (sizes > 0)
    if np.any(sizes[valid] % _BLOCK_BYTES):
        raise BloomFilterFormatError("a bitset is not whole 32-byte blocks")
    blocks = (sizes[valid] // _BLOCK_BYTES).astype(np.uint64)
    starts = offsets[:-1][valid]
    found = np.zeros(len(starts), dtype=bool)
    values = np.fromiter(hashes, dtype=np.uint64)
    salt = np.array(_SALT, dtype=np.uint64)
    # bitsets are whole 32-byte blocks: when they start at 4-byte offsets (as a column's values
    # do unless sliced), a block's eight words are gathered as words, not as 32 bytes
    aligned = not np.any(starts % 4)
    words32 = data[: len(data) // 4 * 4].view("<u4") if aligned else None
    step = max(1, _PROBES_AT_ONCE // max(1, len(starts)))
    for at in range(0, len(values), step):
        h = values[at : at + step, None]  # (values, 1)
        block = ((h >> np.uint64(32)) * blocks[None, :]) >> np.uint64(32)  # (values, filters)
        first = starts[None, :] + block.astype(np.int64) * _BLOCK_BYTES
        key = h & np.uint64(0xFFFFFFFF)
        masks = (
            np.uint32(1) << (((key * salt[None, :]) & np.uint64(0xFFFFFFFF)) >> np.uint64(27))
        ).astype(np.uint32)  # (values, 8)
        if words32 is not None:
            where = (first // 4)[:, :, None] + np.arange(_BLOCK_BYTES // 4)[None, None, :]
            words = words32[where]  # (values, filters, 8)
        else:
            where = first[:, :, None] + np.arange(_BLOCK_BYTES)[None, None, :]
            words = np.ascontiguousarray(data[where]).view("<u4")
        hit = np.all((words & masks[:, None, :]) == masks[:, None, :], axis=2)
        found |= hit.any(axis=0)
    out[valid] = found
    return out


# --- reading the filter out of a Parquet file ----------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise BloomFilterFormatError("truncated header")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _skip(data: bytes, pos: int, kind: int) -> int:
    """Skip one Thrift compact value of type ``kind`` starting at ``pos``."""
    if kind in (1, 2):  # booleans are in the type nibble
        return pos
    if kind == 3:  # byte
        return pos + 1
    if kind in (4, 5, 6):  # i16, i32, i64 (zigzag varints)
        return _varint(data, pos)[1]
    if kind == 7:  # double
        return pos + 8
    if kind == 8:  # binary
        length, pos = _varint(data, pos)
        return pos + length
    if kind in (9, 10):  # list, set
        header = data[pos]
        pos += 1
        size, elem = header >> 4, header & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        for _ in range(size):
            pos = _skip(data, pos, elem)
        return pos
    if kind == 12:  # struct
        return _struct_end(data, pos)[1]
    raise BloomFilterFormatError(f"unsupported Thrift type {kind}")


def _struct_end(data: bytes, pos: int) -> tuple[dict[int, int], int]:
    """Walk a compact-protocol struct; return its i32 fields by id and the position after it."""
    fields: dict[int, int] = {}
    last = 0
    while True:
        if pos >= len(data):
            raise BloomFilterFormatError("truncated header")
        header = data[pos]
        pos += 1
        if header == 0:
            return fields, pos
        delta, kind = header >> 4, header & 0x0F
        if delta:
            field_id = last + delta
        else:
            raw, pos = _varint(data, pos)
            field_id = (raw >> 1) ^ -(raw & 1)
        last = field_id
        if kind == 5:
            raw, pos = _varint(data, pos)
            fields[field_id] = (raw >> 1) ^ -(raw & 1)
        else:
            pos = _skip(data, pos, kind)


def parse_bloom_filter(data: bytes) -> SplitBlockBloomFilter:
    """A filter from the bytes at ``bloom_filter_offset`` (header followed by the bitset)."""
    fields, end = _struct_end(data, 0)
    num_bytes = fields.get(1)
    if num_bytes is None or num_bytes <= 0 or end + num_bytes > len(data):
        raise BloomFilterFormatError(f"bad bitset size {num_bytes}")
    return SplitBlockBloomFilter(data[end : end + num_bytes])
