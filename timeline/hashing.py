"""Hashes that are the same in every process, host and language (never Python's ``hash()``,
which is salted per process).

* :func:`stable_hash`: CRC32 of the UTF-8 bytes, as an unsigned 32-bit integer. Used for bucket
  numbers and, in the metadata table, for key -> file group of the partitions keyed by data file.
* :func:`key_hash64`: a 64-bit hash of record keys, computed on Arrow arrays in blocks of keys
  (numpy over the array's byte buffer, no Python object per key), for the partitions keyed by record key,
  which route and order millions of keys per build. Its definition, so that any language can
  compute it: take the key's UTF-8 bytes (length ``n``), zero-padded to a multiple of 8 (8 at
  least), as little-endian unsigned 64-bit words ``w``; start from ``h = SEED ^ (n * M1)``; for
  each word ``h = ((h ^ w) * M1) ^ (((h ^ w) * M1) >> 29)``; finish with murmur3's ``fmix64``
  (all arithmetic modulo 2**64). :func:`key_hash64_of` is that definition in plain Python, and a
  test checks both agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 0x9E3779B97F4A7C15
#: the seed of the second hash of a path (:data:`timeline.fs_view.PATH_CHECK`)
CHECK_SEED = 0xD6E8FEB86659FD93
M1 = 0xBF58476D1CE4E5B9
_FMIX1 = 0xFF51AFD7ED558CCD
_FMIX2 = 0xC4CEB9FE1A85EC53
_MASK = (1 << 64) - 1


def stable_hash(key: str) -> int:
    return zlib.crc32(key.encode("utf-8"))


def buckets_of_keys(keys: Iterable[str], buckets: int) -> list[int]:
    """``stable_hash(key) mod buckets`` of each key."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    return [zlib.crc32(k.encode("utf-8")) % buckets for k in keys]


def key_hash64_of(key: str, seed: int = SEED) -> int:
    """:func:`key_hash64` of one key, in plain Python (the reference definition)."""
    data = key.encode("utf-8")
    n = len(data)
    padded = data + b"\0" * (-n % 8 if n else 8)
    h = seed ^ ((n * M1) & _MASK)
    for at in range(0, len(padded), 8):
        w = int.from_bytes(padded[at : at + 8], "little")
        x = ((h ^ w) * M1) & _MASK
        h = x ^ (x >> 29)
    h ^= h >> 33
    h = (h * _FMIX1) & _MASK
    h ^= h >> 33
    h = (h * _FMIX2) & _MASK
    return h ^ (h >> 33)


def key_hash64(keys: pa.Array | pa.ChunkedArray | Sequence[str], seed: int = SEED) -> np.ndarray:
    """:func:`key_hash64_of` of every key (uint64), on the array's buffers. Null keys hash as
    empty strings. Another ``seed`` gives another hash of the same definition (:data:`SEED`
    replaced), for a second opinion on keys the first says are equal."""
    if not isinstance(keys, pa.Array | pa.ChunkedArray):
        keys = pa.array(keys, pa.string())
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    offset_type: type[np.signedinteger[Any]] = np.int64
    if not pa.types.is_large_string(keys.type) and not pa.types.is_large_binary(keys.type):
        keys = keys.cast(pa.string()) if not pa.types.is_string(keys.type) else keys
        offset_type = np.int32
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    if keys.null_count:
        keys = pc.fill_null(keys, "")
    h = np.empty(count, dtype=np.uint64)
    for at in range(0, count, _BLOCK):
        h[at : at + _BLOCK] = _hash_block(keys.slice(at, _BLOCK), offset_type, seed)
    return h


#: keys hashed at once by :func:`key_hash64`: each numpy pass over a block's words stays in
#: the CPU's cache (5M keys of 12 bytes: 114 against 250 ms in one block here)
_BLOCK = 1 << 15


def _hash_block(keys: pa.Array, offset_type: type[np.signedinteger[Any]], seed: int) -> np.ndarray:
    """:func:`key_hash64` of string keys without nulls (``offset_type``: their offsets')."""
    count = len(keys)
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[keys.offset : keys.offset + count + 1]
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    data = data[first:last]
    h = np.empty(count, dtype=np.uint64)
    # keys of one length form a matrix of bytes (zero-copy when every key has that length),
    # whose zero-padded rows are the words: no shift or mask per key
    shortest, longest = int(lengths.min()), int(lengths.max())
    distinct = [shortest] if shortest == longest else np.unique(lengths).tolist()
    for length in distinct:
        rows: slice | np.ndarray
        if len(distinct) == 1:
            rows = slice(None)
            block = data.reshape(count, length)
        else:
            rows = np.flatnonzero(lengths == length)
            starts = offsets[:-1][rows].astype(np.int64) - first
            block = data[starts[:, None] + np.arange(length)]
        width = max(8, -(-length // 8) * 8)
        padded = np.zeros((block.shape[0], width), dtype=np.uint8)
        padded[:, :length] = block
        words = padded.view("<u8")
        with np.errstate(over="ignore"):
            x = np.full(block.shape[0], seed ^ ((length * M1) & _MASK), dtype=np.uint64)
            for j in range(words.shape[1]):
                x ^= words[:, j]
                x *= np.uint64(M1)
                x ^= x >> np.uint64(29)
        h[rows] = x
    with np.errstate(over="ignore"):
        h ^= h >> np.uint64(33)
        h *= np.uint64(_FMIX1)
        h ^= h >> np.uint64(33)
        h *= np.uint64(_FMIX2)
        h ^= h >> np.uint64(33)
    return h
