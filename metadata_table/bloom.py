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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from timeline.config import (
    BLOOM_DYNAMIC_MAX_ENTRIES,
    BLOOM_FILTER_ENTRIES,
    BLOOM_FILTER_FPP,
    BLOOM_FILTER_TYPE,
    HUDI_BLOOM_FOOTER,
    Config,
)
from timeline.errors import BloomFilterFormatError
from timeline.formats.hudi_bloom import (
    FOOTER_KEY,
    MAX_KEY,
    MIN_KEY,
    TYPE_CODE_KEY,
    HudiBloomFilter,
)

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


@dataclass(frozen=True)
class BloomSizing:
    """The one rule sizing a data file's record key filter, whoever makes it (the writers'
    Parquet files, a filter built from the keys where a file has none, a log file's): for the
    file's keys at rate ``fpp``, but for at most ``entries`` keys (Apache Hudi's
    ``hoodie.index.bloom.fpp`` and ``hoodie.index.bloom.num_entries``, and their defaults)."""

    fpp: float = BLOOM_FILTER_FPP.default
    entries: int = BLOOM_FILTER_ENTRIES.default
    #: Hudi's own filter in the footer too (``indexer.write.hudi_bloom_footer``: auto, true,
    #: false), its type and bound
    hudi_footer: str = HUDI_BLOOM_FOOTER.default
    hudi_type: str = BLOOM_FILTER_TYPE.default
    hudi_max_entries: int = BLOOM_DYNAMIC_MAX_ENTRIES.default

    @classmethod
    def from_config(cls, config: Config) -> BloomSizing:
        return cls(
            config.get(BLOOM_FILTER_FPP),
            config.get(BLOOM_FILTER_ENTRIES),
            config.get(HUDI_BLOOM_FOOTER),
            config.get(BLOOM_FILTER_TYPE),
            config.get(BLOOM_DYNAMIC_MAX_ENTRIES),
        )

    def hudi_footer_metadata(self, keys: Sequence[str], table_has_it: bool) -> dict[bytes, bytes]:
        """What Apache Hudi's writer puts in a base file's footer for its (sorted or written
        order) ``keys``: its bloom filter string, its type and the first and last keys; nothing
        when that is off (``auto``: unless ``table_has_it``, the table's files carry it) or the
        file has no keys."""
        wanted = self.hudi_footer == "true" or (self.hudi_footer == "auto" and table_has_it)
        if not wanted or not keys:
            return {}
        built = HudiBloomFilter.of_keys(
            keys, self.hudi_type, self.entries, self.fpp, self.hudi_max_entries
        )
        return {
            FOOTER_KEY: built.serialize().encode(),
            TYPE_CODE_KEY: self.hudi_type.encode(),
            # Java's String order (UTF-16 code units), as Hudi compares keys
            MIN_KEY: min(keys, key=_utf16).encode(),
            MAX_KEY: max(keys, key=_utf16).encode(),
        }

    def ndv(self, keys: int) -> int:
        """The number of distinct keys a filter of a file of ``keys`` keys is sized for."""
        return max(1, min(keys, self.entries))

    def parquet_options(self, keys: int) -> dict[str, float | int]:
        """pyarrow's ``bloom_filter_options`` of the record key column of a file of ``keys``."""
        return {"ndv": self.ndv(keys), "fpp": self.fpp}

    def build(self, keys: Sequence[str | bytes]) -> SplitBlockBloomFilter:
        """The filter of ``keys``, as Parquet's writer would have sized it."""
        return SplitBlockBloomFilter.build(keys, self.ndv(len(keys)), self.fpp)


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be")


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
    def build(cls, values: Iterable[str | bytes], ndv: int, fpp: float) -> SplitBlockBloomFilter:
        """A filter of ``values``, sized for ``ndv`` of them at rate ``fpp`` (as Parquet's
        writer sizes one); a file's filter is sized by :class:`BloomSizing`."""
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


def might_contain_each(
    bitsets: pa.Array | pa.ChunkedArray, h: int, at: np.ndarray | None = None
) -> np.ndarray:
    """For every filter of ``bitsets`` (binary, one SBBF bitset each; with ``at``, the filters
    at those positions), whether it may hold the value of hash ``h``: one pass over the
    bitsets' Arrow buffers, no filter made a Python object. A null (no filter known) may hold
    anything."""
    return FiltersAt(bitsets, at).might_contain_any([h])


def might_contain_any(
    bitsets: pa.Array | pa.ChunkedArray, hashes: Iterable[int], at: np.ndarray | None = None
) -> np.ndarray:
    """For every filter of ``bitsets`` (binary, one SBBF bitset each; with ``at``, the filters
    at those positions), whether it may hold the value of any of ``hashes`` (see
    :class:`FiltersAt`)."""
    return FiltersAt(bitsets, at).might_contain_any(hashes)


#: filters of a chunk that a probe copies to probe them with other chunks', at most
_COPIED_MOST = 4096

#: (hashes x filters) probed at once by :func:`_probe_laid` and :func:`_probe_in_place`, at most
_PROBES_AT_ONCE = 1 << 21


def _offsets(array: pa.Array) -> np.ndarray:
    """A binary or large_binary array's value offsets, as int64."""
    n = len(array)
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=width)[array.offset : array.offset + n + 1]
    return offsets.astype(np.int64, copy=False)


class FiltersAt:
    """The filters of ``bitsets`` (binary, one SBBF bitset each, in any chunks) at positions
    ``at`` (-1: no filter; None: each of them), laid out once to be probed many times (a kept
    snapshot probes its million filters for every lookup) and never copied: a reader aligns
    filters with its files by positions (at a million files, copying the 256-byte filters into
    the listing's order was most of a new snapshot's lookup). A position without a filter (-1,
    a null, an empty bitset) may hold anything.

    A probe tests the eight words of one block; only the pairs (value, filter) a word left
    possible go on to the next word, so where filters are sparse (one made for a 1e-9 rate
    passes a word in about 8% of pairs) a pair costs about one word read, not eight. Filters of
    one size probed with more values than their words are instead laid out as bit planes
    (:class:`_Laid`) and probed 64 filters to a machine word, with no pairs. An upsert's 1,000
    keys against a partition's 10,000 filters (of 1e-9) went from 1.4 s to 39 ms, then 31 ms
    (first words' bits as booleans), 22 ms now with the planes made (2.5 ms with them kept); and
    one key against a million filters from 203 to 47 ms."""

    def __init__(self, bitsets: pa.Array | pa.ChunkedArray, at: np.ndarray | None = None) -> None:
        chunks = bitsets.chunks if isinstance(bitsets, pa.ChunkedArray) else [bitsets]
        lengths = np.array([len(c) for c in chunks], dtype=np.int64)
        ends = np.cumsum(lengths)
        positions = np.arange(int(ends[-1]) if len(ends) else 0) if at is None else at
        positions = np.asarray(positions, dtype=np.int64)
        self.size = len(positions)
        #: (where in the answer, the chunk's words, the filters' first words, their blocks)
        self._groups: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []
        #: filters of one size laid out as bit planes, and where they go in the answer
        self._laid: dict[int, tuple[np.ndarray, _Laid]] = {}
        known = np.flatnonzero(positions >= 0)
        chunk_of = np.searchsorted(ends, positions[known], side="right")
        by_chunk = np.argsort(chunk_of, kind="stable")
        bounds = np.searchsorted(chunk_of[by_chunk], np.arange(len(chunks) + 1))
        for number, chunk in enumerate(chunks):
            mine = known[by_chunk[bounds[number] : bounds[number + 1]]]
            if len(mine):
                self._add(chunk, positions[mine] - (ends[number] - lengths[number]), mine)

    def _add(self, array: pa.Array, at: np.ndarray, answer_at: np.ndarray) -> None:
        offsets = _offsets(array)
        starts, sizes = offsets[at], offsets[at + 1] - offsets[at]
        valid = array.is_valid().to_numpy(zero_copy_only=False)[at]
        real = np.flatnonzero(valid & (sizes > 0))
        if np.any(sizes[real] % _BLOCK_BYTES):
            raise BloomFilterFormatError("a bitset is not whole 32-byte blocks")
        starts, sizes, answer_at = starts[real], sizes[real], answer_at[real]
        if np.any(starts % 4):  # a slice of a column's bytes: copied to start at whole words
            array = pc.take(array, pa.array(at[real]))
            starts = _offsets(array)[:-1]
        data_buffer = array.buffers()[2]
        data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer else np.zeros(0, np.uint8)
        words = data[: len(data) // 4 * 4].view("<u4")
        blocks = sizes // _BLOCK_BYTES
        starts = starts // 4  # in words
        if len(blocks) and blocks.min() == blocks.max():  # one size, as most of a partition's
            self._groups.append((answer_at, words, starts, int(blocks[0])))
            return
        for count in np.unique(blocks):  # the filters of one size at a time
            of_size = np.flatnonzero(blocks == count)
            self._groups.append((answer_at[of_size], words, starts[of_size], int(count)))

    def might_contain_any(
        self, hashes: Iterable[int], only: np.ndarray | None = None
    ) -> np.ndarray:
        """Per position, whether its filter may hold the value of any of ``hashes``; with
        ``only`` (a mask of positions), the filters of the other positions are not probed (and
        answer True): a point lookup probes the files column_stats kept, not every file's."""
        values = (
            hashes.astype(np.uint64, copy=False)
            if isinstance(hashes, np.ndarray)
            else np.fromiter(hashes, dtype=np.uint64)
        )
        out = np.ones(self.size, dtype=bool)
        for blocks, every in self._by_size.items():
            parts = every
            if only is not None:
                parts = []
                for answer_at, words, starts in every:
                    chosen = only[answer_at]
                    if chosen.any():
                        parts.append((answer_at[chosen], words, starts[chosen]))
            if len(values) >= blocks * _WORDS and only is None:
                # more values than a filter has words: every filter's every word is read, so
                # they are laid out as bit planes, once (kept for the next probe when small)
                answer_at, laid = self._laid_out(blocks, parts)
                out[answer_at] = _probe_laid(laid, values)
                continue
            # a few values: filters probed where they are, but a partition's filters read from
            # many index files are in as many chunks, some of a filter or two: the small ones
            # are copied into one layout filter by filter and probed together, except chunks
            # too big to copy for a probe of a few values (a kept snapshot's million filters,
            # probed in place for each lookup)
            small = [p for p in parts if len(p[2]) <= _COPIED_MOST]
            if len(small) > 1:
                answer_at = np.concatenate([a for a, _, _ in small])
                copied = np.concatenate([_word_by_word(w, s, blocks).T for _, w, s in small])
                starts = np.arange(len(answer_at), dtype=np.int64) * (blocks * _WORDS)
                out[answer_at] = _probe_in_place(copied.ravel(), starts, blocks, values)
                parts = [p for p in parts if len(p[2]) > _COPIED_MOST]
            for answer_at, words, starts in parts:
                out[answer_at] = _probe_in_place(words, starts, blocks, values)
        return out

    @cached_property
    def _by_size(self) -> dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        by_size: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        for answer_at, words, starts, blocks in self._groups:
            by_size.setdefault(blocks, []).append((answer_at, words, starts))
        return by_size

    def _laid_out(
        self, blocks: int, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, _Laid]:
        """The filters of ``blocks`` blocks laid out as bit planes (:class:`_Laid`), and where
        each goes in the answer; kept for later probes when they take at most
        :data:`_LAID_KEPT_BYTES` (a warm writer probes a partition's filters once a commit)."""
        if blocks in self._laid:
            return self._laid[blocks]
        answer_at = np.concatenate([a for a, _, _ in parts])
        words = np.concatenate([_word_by_word(w, s, blocks) for _, w, s in parts], axis=1)
        laid = (answer_at, _Laid.of(words, blocks))
        if laid[1].nbytes <= _LAID_KEPT_BYTES:
            self._laid[blocks] = laid
        return laid


#: block words
_WORDS = _BLOCK_BYTES // 4

#: filters laid out as bit planes that a :class:`FiltersAt` keeps for its next probes, at most
#: (bytes)
_LAID_KEPT_BYTES = 64 << 20


def _word_by_word(words: np.ndarray, starts: np.ndarray, blocks: int) -> np.ndarray:
    """The filters of ``blocks`` blocks starting at words ``starts`` of ``words``, laid out word
    by word: row w holds every filter's word w."""
    return words[starts[None, :] + np.arange(blocks * _WORDS)[:, None]]


@dataclass(frozen=True)
class _Laid:
    """Filters of one size laid out as bit planes: row ``(block * 8 + word) * 32 + bit`` holds
    that bit of every filter, packed 64 filters to a word (filter f at bit ``f % 64`` of word
    ``f // 64``). A value sets one bit in each of its block's eight words, so the filters that
    may hold it are the AND of eight rows, and those that may hold any of many values the OR of
    those: whole words of filters at a time, with no pair of value and filter ever formed.
    They take the bytes the filters do."""

    planes: np.ndarray
    blocks: int
    filters: int

    @classmethod
    def of(cls, words: np.ndarray, blocks: int) -> _Laid:
        """From filters laid out word by word (``words[w, f]``: word w of filter f). Byte j of
        eight filters' word, as one 64-bit integer (filter i at byte i), is an 8x8 matrix of
        bits; transposed in place (three swaps of bit blocks), its byte k holds bit ``8j + k``
        of the eight filters: so a plane is made from a few passes over the filters, not one
        per bit (14 against 20-30 ms for 10,000 filters of 512 bytes)."""
        filters = words.shape[1]
        padded = -(-filters // 64) * 64
        if padded != filters:
            words = np.pad(words, ((0, 0), (0, padded - filters)))
        eights = words.reshape(len(words), padded // 8, 8)
        planes = np.empty((len(words), 32, padded // 8), dtype=np.uint8)
        for byte in range(4):
            matrix = np.ascontiguousarray((eights >> np.uint32(8 * byte)).astype(np.uint8))
            x = matrix.view(np.uint64)[..., 0]
            for shift, mask in _TRANSPOSE_8X8:
                swapped = (x ^ (x >> shift)) & mask
                x = x ^ swapped ^ (swapped << shift)
            for bit in range(8):
                planes[:, 8 * byte + bit, :] = x >> np.uint64(8 * bit)
        return cls(planes.view(np.uint64).reshape(blocks * _WORDS * 32, -1), blocks, filters)

    @property
    def nbytes(self) -> int:
        return int(self.planes.nbytes)


#: the three steps of an 8x8 bit-matrix transpose of a 64-bit integer (row i at byte i): the
#: bits of each 1x1, 2x2 and 4x4 block pair that swap (Hacker's Delight, section 7-3)
_TRANSPOSE_8X8 = tuple(
    (np.uint64(shift), np.uint64(mask))
    for shift, mask in ((7, 0x00AA00AA00AA00AA), (14, 0x0000CCCC0000CCCC), (28, 0x00000000F0F0F0F0))
)


def _value_bits(values: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per value: the block it falls in (in a filter of ``blocks`` blocks), its bit in each of a
    block's words, and those bits as masks."""
    h = values[:, None]
    block = (((h[:, 0] >> np.uint64(32)) * np.uint64(blocks)) >> np.uint64(32)).astype(np.int64)
    salt = np.array(_SALT, dtype=np.uint64)
    bit = (((h * salt[None, :]) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)).astype(np.uint32)
    return block, bit, np.uint32(1) << bit


def _rest_of_words(
    words: np.ndarray,
    stride: int,
    filters: int,
    masks: np.ndarray,
    pairs: np.ndarray,
    word_at: np.ndarray,
) -> np.ndarray:
    """Of the pairs (``value * filters + filter``) whose first word held the value's bit, the
    filters of those whose other seven words hold theirs too (word w of a pair at
    ``word_at + w * stride``)."""
    for word in range(1, _WORDS):
        if not len(pairs):
            break
        mask = masks[pairs // filters, word]
        keep = (words[word_at + word * stride] & mask) == mask
        pairs, word_at = pairs[keep], word_at[keep]
    return pairs % filters


def _probe_laid(laid: _Laid, values: np.ndarray) -> np.ndarray:
    """Whether each filter laid out in ``laid`` may hold any of ``values`` (hashes)."""
    planes = laid.planes
    found = np.zeros(planes.shape[1], dtype=np.uint64)
    step = max(1, _PROBES_AT_ONCE // max(1, laid.filters))
    word_rows = (np.arange(_WORDS) * 32)[None, :]
    for first_value in range(0, len(values), step):
        block, bit, _ = _value_bits(values[first_value : first_value + step], laid.blocks)
        rows = block[:, None] * (_WORDS * 32) + word_rows + bit  # (value, word): its bit's row
        held = planes[rows[:, 0]]
        for word in range(1, _WORDS):
            held &= planes[rows[:, word]]
        found |= np.bitwise_or.reduce(held, axis=0)
    bits = np.unpackbits(found.view(np.uint8), bitorder="little")
    return bits[: laid.filters].astype(bool)


def _probe_in_place(
    words: np.ndarray, starts: np.ndarray, blocks: int, values: np.ndarray
) -> np.ndarray:
    """Whether each filter of ``blocks`` blocks, starting at word ``starts`` of ``words``, may
    hold any of ``values`` (hashes): each pair's words read where they are."""
    filters = len(starts)
    found = np.zeros(filters, dtype=bool)
    step = max(1, _PROBES_AT_ONCE // max(1, filters))
    for first_value in range(0, len(values), step):
        block, _, masks = _value_bits(values[first_value : first_value + step], blocks)
        word_at = (starts[None, :] + (block * _WORDS)[:, None]).ravel()
        mask = masks[:, :1]  # the first word's, against every filter at once
        pairs = np.flatnonzero((words[word_at].reshape(len(block), filters) & mask) == mask)
        found[_rest_of_words(words, 1, filters, masks, pairs, word_at[pairs])] = True
    return found


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
