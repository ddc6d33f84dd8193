"""Apache Hudi's bloom filter of record keys, the string its writers put in every base file's
footer (``org.apache.hudi.bloomfilter``) and its metadata table's ``bloom_filters`` partition
copies: Hudi's bloom index tags an upsert's keys with it.

Two types (``hoodie_bloom_filter_type_code``): ``SIMPLE``, one filter, and ``DYNAMIC_V0`` (the
default), rows of filters of ``nr`` keys each, added while ``rows * nr`` stays below the maximum
(``hoodie.index.bloom.num_entries`` 60,000 and ``hoodie.bloom.index.filter.dynamic.max.entries``
100,000 by default), after which keys go to the rows in turn. A filter of ``numEntries`` keys at
false-positive rate ``p`` has ``ceil(n * -ln(p) / ln(2)^2)`` bits and ``round(bits / n * ln 2)``
hash functions (1e-9: 2,587,966 bits, 30 hashes). A key's positions are Hadoop's: its UTF-8 bytes
hashed by Hadoop's MurmurHash (32-bit, the previous hash as the next seed, from 0), each
``abs(hash % bits)`` in Java's arithmetic (Hadoop's MurmurHash takes the last one to three bytes
in the reverse order of the reference MurmurHash2, sign-extended). The string is Base64 of Hadoop's Writable form, all
big-endian::

    filter:  int -1 (version)  int hashes  byte 1 (murmur)  int bits   [DYNAMIC_V0 only:
             int nr  int keys in the current row  int rows  then each row as a SIMPLE filter]
    SIMPLE:  the four fields, then the bits, bit i at byte i/8, mask 1 << i%8

Hashing is vectorized with numpy (keys grouped by length), so a file of 100,000 keys costs
milliseconds, not the seconds a Python loop over 30 hashes a key would.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DYNAMIC_V0, SIMPLE = "DYNAMIC_V0", "SIMPLE"
#: the footer keys of a Hudi base file: the filter, its type, the first and last record keys
FOOTER_KEY = b"org.apache.hudi.bloomfilter"
TYPE_CODE_KEY = b"hoodie_bloom_filter_type_code"
MIN_KEY, MAX_KEY = b"hoodie_min_record_key", b"hoodie_max_record_key"
#: Hudi's defaults: hoodie.index.bloom.num_entries, .fpp, hoodie.bloom.index.filter.dynamic.max.entries
DEFAULT_ENTRIES, DEFAULT_FPP, DEFAULT_MAX_ENTRIES = 60_000, 1e-9, 100_000
MURMUR = 1
_M = np.uint32(0x5BD1E995)
#: version (-1), hash functions, hash type, bits: the fields every filter starts with
_HEADER = struct.Struct(">iibi")


def sizes(entries: int, fpp: float) -> tuple[int, int]:
    """(bits, hash functions) of a filter for ``entries`` keys at false-positive rate ``fpp``."""
    bits = math.ceil(entries * (-math.log(fpp) / (math.log(2) ** 2)))
    return bits, max(1, round(bits / entries * math.log(2)))


def _positions(keys: Sequence[str], hashes: int, bits: int) -> np.ndarray:
    """(len(keys), hashes) bit positions, as Hudi's (Hadoop's) hash functions give them."""
    out = np.empty((len(keys), hashes), dtype=np.int64)
    encoded = [k.encode() for k in keys]
    lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        n = int(length)
        data = np.frombuffer(b"".join(encoded[i] for i in rows), dtype=np.uint8).reshape(-1, n)
        whole = n // 4 * 4
        blocks = data[:, :whole].copy().view("<u4").astype(np.uint32) if whole else None
        if blocks is not None:  # the mixing of each 4-byte block does not depend on the seed
            blocks = blocks * _M
            blocks ^= blocks >> np.uint32(24)
            blocks = blocks * _M
        tail = np.zeros(len(rows), dtype=np.uint32)
        for at in range(whole, n):  # Hadoop's tail: the last byte lowest; bytes sign-extended
            signed = data[:, at].astype(np.int8).astype(np.int64) << (8 * (n - 1 - at))
            tail ^= (signed & 0xFFFFFFFF).astype(np.uint32)
        seed = np.zeros(len(rows), dtype=np.uint32)
        for i in range(hashes):
            h = seed ^ np.uint32(n)
            if blocks is not None:
                for j in range(blocks.shape[1]):
                    h = (h * _M) ^ blocks[:, j]
            if n > whole:
                h = (h ^ tail) * _M
            h ^= h >> np.uint32(13)
            h = h * _M
            h ^= h >> np.uint32(15)
            seed = h
            out[rows, i] = np.abs(h.view(np.int32).astype(np.int64)) % bits
    return out


def _row_of_each_key(count: int, nr: int, max_entries: int) -> tuple[np.ndarray, int, int]:
    """Which row each key goes to, the number of rows and the keys counted in the current row,
    as Hudi's bounded dynamic filter adds keys one by one."""
    full = max(1, -(-max_entries // nr))  # rows once the bound is reached
    index = np.arange(count, dtype=np.int64)
    rows = np.minimum(index // nr, full - 1)
    past = index >= full * nr
    # the first key past the bound goes to row 0; the next ones to the rows in turn from row 0
    rows[past] = np.maximum(index[past] - full * nr - 1, 0) % full
    if count > full * nr:
        return rows, full, nr + count - full * nr
    used = max(1, -(-count // nr))
    return rows, used, count - (used - 1) * nr


@dataclass
class HudiBloomFilter:
    """A filter of record keys as Hudi builds, writes and reads it."""

    type_code: str
    bits: int
    hashes: int
    rows: list[np.ndarray]  # one bool array of ``bits`` per row
    nr: int = 0
    current: int = 0

    @classmethod
    def of_keys(
        cls,
        keys: Sequence[str],
        type_code: str = DYNAMIC_V0,
        entries: int = DEFAULT_ENTRIES,
        fpp: float = DEFAULT_FPP,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> HudiBloomFilter:
        """The filter Hudi's writer builds over ``keys`` (in the order it adds them)."""
        if type_code not in (DYNAMIC_V0, SIMPLE):
            raise ValueError(f"bloom filter type {type_code!r}: {DYNAMIC_V0} or {SIMPLE}")
        bits, hashes = sizes(entries, fpp)
        positions = _positions(keys, hashes, bits)
        if type_code == SIMPLE:
            row = np.zeros(bits, dtype=bool)
            row[positions.ravel()] = True
            return cls(SIMPLE, bits, hashes, [row])
        assignment, count, current = _row_of_each_key(len(keys), entries, max_entries)
        rows = []
        for r in range(count):
            row = np.zeros(bits, dtype=bool)
            row[positions[assignment == r].ravel()] = True
            rows.append(row)
        return cls(DYNAMIC_V0, bits, hashes, rows, entries, current)

    def serialize(self) -> str:
        """The footer string (Base64 of Hadoop's Writable form)."""
        header = _HEADER.pack(-1, self.hashes, MURMUR, self.bits)

        def simple(row: np.ndarray) -> bytes:
            return header + np.packbits(row, bitorder="little").tobytes()

        if self.type_code == SIMPLE:
            data = simple(self.rows[0])
        else:
            counts = struct.pack(">iii", self.nr, self.current, len(self.rows))
            data = header + counts + b"".join(simple(r) for r in self.rows)
        return base64.b64encode(data).decode()

    @classmethod
    def parse(cls, text: str | bytes, type_code: str = DYNAMIC_V0) -> HudiBloomFilter:
        """A filter from its footer string (``hoodie_bloom_filter_type_code`` says the type)."""
        data = base64.b64decode(text)

        def simple(at: int) -> tuple[np.ndarray, int, int, int]:
            """A row: its bits, hash functions, bit count, and where it ends."""
            hashes, bits, start = _header(data, at)
            size = -(-bits // 8)
            packed = np.frombuffer(data, dtype=np.uint8, count=size, offset=start)
            row = np.unpackbits(packed, bitorder="little")[:bits].astype(bool)
            return row, hashes, bits, start + size

        try:
            if type_code == SIMPLE:
                row, hashes, bits, _ = simple(0)
                return cls(SIMPLE, bits, hashes, [row])
            if type_code != DYNAMIC_V0:
                raise ValueError(f"bloom filter type {type_code!r}")
            hashes, bits, at = _header(data, 0)
            nr, current, count = struct.unpack_from(">iii", data, at)
            at += 12
            rows = []
            for _ in range(count):
                row, _, _, at = simple(at)
                rows.append(row)
        except (struct.error, ValueError) as e:
            raise ValueError(f"not a Hudi {type_code} bloom filter: {e}") from e
        return cls(DYNAMIC_V0, bits, hashes, rows, nr, current)

    def might_contain(self, keys: Sequence[str], positions: np.ndarray | None = None) -> np.ndarray:
        """Per key, whether the filter may hold it (False: it certainly does not); with the
        keys' ``positions`` for this filter's hashes and bits (:meth:`positions`), worked out
        once for many filters of one size."""
        if positions is None:
            positions = self.positions(keys)
        found = np.zeros(len(keys), dtype=bool)
        for row in self.rows:
            found |= row[positions].all(axis=1)
        return found

    def positions(self, keys: Sequence[str]) -> np.ndarray:
        """The keys' bit positions in this filter: (len(keys), hash functions)."""
        return _positions(keys, self.hashes, self.bits)


def _header(data: bytes, at: int) -> tuple[int, int, int]:
    """(hash functions, bits, offset after) of the fields a filter starts with at ``at``."""
    version, hashes, hash_type, bits = _HEADER.unpack_from(data, at)
    if version != -1 or hash_type != MURMUR:
        raise ValueError(f"bloom filter version {version}, hash type {hash_type}")
    return hashes, bits, at + _HEADER.size
