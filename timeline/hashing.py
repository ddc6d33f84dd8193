"""A hash that is the same in every process, host and language (never Python's ``hash()``,
which is salted per process): CRC32 of the UTF-8 bytes, as an unsigned 32-bit integer. Used for
bucket numbers and, in the metadata table, for key -> file group."""

from __future__ import annotations

import zlib
from collections.abc import Iterable


def stable_hash(key: str) -> int:
    return zlib.crc32(key.encode("utf-8"))


def buckets_of_keys(keys: Iterable[str], buckets: int) -> list[int]:
    """``stable_hash(key) mod buckets`` of each key."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    return [zlib.crc32(k.encode("utf-8")) % buckets for k in keys]
