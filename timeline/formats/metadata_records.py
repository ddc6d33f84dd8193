"""Apache Hudi 0.15's metadata-table records: the ``HoodieMetadataRecord`` Avro schema its HFiles
and log blocks carry, the key of each record per partition, the file group a key belongs to, and
the values each partition stores.

A cell of a metadata-table HFile is (key, the record in Avro's binary encoding under
:data:`SCHEMA_JSON` with ``key`` set to ""): the row holds the key, and a reader puts it back.
Keys per partition (Hudi's ``HoodieMetadataPayload``)::

    files           the partition path ("." for a table without partitions); the list of
                    partitions under "__all_partitions__"
    column_stats    b64(xxh64(column)) b64(xxh64(partition)) b64(md5(file name))
    bloom_filters   b64(xxh64(partition)) b64(md5(file name))
    record_index    the record key

with XXH64 under Hudi's seed (the Java int 0xdabadaba widened to a long), big-endian, and Base64
with padding. A key's file group is Java's ``String.hashCode`` of it (over UTF-16 code units,
32-bit overflow) modulo the partition's file-group count, as Hudi's readers and writers route
every partition's keys. The schema text is Hudi's own (``HoodieAvroUtils.addMetadataFields`` of
the 0.15 generated class, the five ``_hoodie_*`` fields first), kept byte for byte because Hudi
compares it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import IntEnum
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from timeline.formats.hfile import OUR_GZIP, Deflate, write_hfile, write_hfile_arrays
from timeline.log_format import BlockType, DeleteRecord, HeaderKey, delete_content, encode_block

#: the writer schema Hudi 0.15 puts in its metadata table's HFiles and log block headers
SCHEMA_JSON: str = (
    resources.files("timeline.hudi_schemas").joinpath("HoodieMetadataRecord.avsc").read_text()
)
_NAMESPACE = "org.apache.hudi.avro.model"
_HASH_SEED = 0xDABADABA - (1 << 32) + (1 << 64)  # a negative Java int widened to a long

#: the metadata partitions of Hudi 0.15 and the prefix of their file groups' ids
FILE_GROUP_PREFIXES = {
    "files": "files-",
    "column_stats": "col-stats-",
    "bloom_filters": "bloom-filters-",
    "record_index": "record-index-",
}
ALL_PARTITIONS_KEY = "__all_partitions__"
#: the scale (and precision) of a column-stats ``DecimalWrapper``'s value: decimal(30, 15)
DECIMAL_SCALE, DECIMAL_PRECISION = 15, 30
NON_PARTITIONED = "."


class RecordType(IntEnum):
    """``HoodieMetadataRecord.type``."""

    PARTITION_LIST = 1
    FILE_LIST = 2
    COLUMN_STATS = 3
    BLOOM_FILTER = 4
    RECORD_INDEX = 5


@cache
def schema() -> Any:
    return fastavro.parse_schema(json.loads(SCHEMA_JSON))


# --- keys -------------------------------------------------------------------------------------------


def partition_identifier(partition_path: str) -> str:
    """How Hudi names a data partition in its metadata table ("." for no partition)."""
    return partition_path or NON_PARTITIONED


@lru_cache(maxsize=65_536)
def _hash_id(text: str) -> str:
    """A column's or partition's id in keys (the same few names over and over: cached)."""
    digest = xxhash.xxh64_intdigest(text.encode(), seed=_HASH_SEED)
    return base64.b64encode(digest.to_bytes(8, "big")).decode()


def file_id(file_name: str) -> str:
    """A data file's id in column-stats and bloom-filter keys."""
    return base64.b64encode(hashlib.md5(file_name.encode()).digest()).decode()


def column_stats_key(column: str, partition_path: str, file_name: str) -> str:
    return column_stats_prefix(column, partition_path) + file_id(file_name)


def file_key(partition_path: str, file_name: str) -> str:
    """A data file's part of its column-stats keys (after its column's :func:`_hash_id`), and
    its bloom-filter key."""
    return _hash_id(partition_identifier(partition_path)) + file_id(file_name)


@lru_cache(maxsize=65_536)
def column_stats_prefix(column: str, partition_path: str | None = None) -> str:
    """The key prefix of a column's records (in one data partition, or in all; kept: a build
    asks for every column of every data file)."""
    prefix = _hash_id(column)
    if partition_path is not None:
        prefix += _hash_id(partition_identifier(partition_path))
    return prefix


def bloom_filter_key(partition_path: str, file_name: str) -> str:
    return file_key(partition_path, file_name)


def file_group_index(key: str, count: int) -> int:
    """The file group (0 .. count-1) of a metadata partition that holds ``key``."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    # Java's abs(abs(h) % count): for h = MIN_VALUE too, the magnitude of the remainder
    return abs(signed) % count


def file_group_indexes(keys: pa.Array | pa.ChunkedArray, count: int) -> np.ndarray:
    """:func:`file_group_index` of many keys at once: Java's ``String.hashCode`` of ASCII keys
    worked out over their bytes with numpy (a polynomial in 31 modulo 2**32, whose prefix sums
    are taken with 31's inverse, so every key's hash is a difference of two of them), in
    batches of about :data:`_HASH_BATCH_BYTES` (the powers of 31 they take are kept); other
    keys one at a time."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    keys = keys.cast(pa.large_string())
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    if keys.null_count or not pc.all(pc.string_is_ascii(keys)).as_py():
        return np.array([file_group_index(k, count) for k in keys.to_pylist()], np.int64)
    offsets = np.frombuffer(keys.buffers()[1], np.int64, len(keys) + 1, keys.offset * 8)
    data = np.frombuffer(keys.buffers()[2], np.uint8, int(offsets[-1]))
    hashes = np.empty(len(keys), np.uint32)
    first = 0
    while first < len(keys):
        # the keys from first whose bytes fit in a batch (at least one)
        last = int(np.searchsorted(offsets, offsets[first] + _HASH_BATCH_BYTES, "right")) - 1
        last = max(last, first + 1)
        hashes[first:last] = _string_hashes(data, offsets[first : last + 1])
        first = last
    signed = hashes.view(np.int32).astype(np.int64)
    groups: np.ndarray = np.abs(signed) % count
    return groups


def _string_hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Java's ``String.hashCode`` (as uint32) of the ASCII strings at ``offsets`` in ``data``."""
    start, end = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
    data = data[offsets[0] : offsets[-1]]
    with np.errstate(over="ignore"):
        inverse = _powers(_INVERSE_31, len(data))  # 31**-j
        prefix = np.concatenate(
            [np.zeros(1, np.uint32), np.cumsum(data.astype(np.uint32) * inverse, dtype=np.uint32)]
        )
        powers = _powers(31, len(data) + 1)[np.maximum(end - 1, 0)]
        hashes: np.ndarray = (prefix[end] - prefix[start]) * powers
    return hashes


#: the key bytes :func:`file_group_indexes` hashes at once
_HASH_BATCH_BYTES = 1 << 20


#: 31's inverse modulo 2**32 (31 is odd)
_INVERSE_31 = pow(31, -1, 1 << 32)


def _powers(base: int, count: int) -> np.ndarray:
    """``base ** j`` modulo 2**32 for j = 0 .. count - 1 (uint32 products wrap), read-only: the
    powers are kept, grown to the next power of two past the longest asked for (worked out for
    every data file, they were a third of hashing its keys)."""
    kept = _POWERS.get(base)
    if kept is None or len(kept) < count:
        size = 1 << max(count - 1, 0).bit_length()
        factors = np.full(size, base, np.uint32)
        factors[0] = 1
        with np.errstate(over="ignore"):
            kept = np.cumprod(factors, dtype=np.uint32)
        kept.flags.writeable = False
        _POWERS[base] = kept  # one assignment: threads see the old powers or the new
    return kept[:count]


#: :func:`_powers` by base
_POWERS: dict[int, np.ndarray] = {}


def file_group_id(partition: str, index: int) -> str:
    """The id of file group ``index`` of metadata partition ``partition``."""
    return f"{FILE_GROUP_PREFIXES[partition]}{index:04d}-0"


# --- values ------------------------------------------------------------------------------------------


def encode(record: Mapping[str, Any]) -> bytes:
    """The Avro bytes of one record as Hudi stores it in a cell: its key left empty (the cell's
    row holds it), the ``_hoodie_*`` fields null. Column-stats values are ``(wrapper, value)``
    pairs (:func:`wrap`). A column-stats record (a build makes one per column of every file)
    is encoded by :func:`_encode_column_stats`, byte for byte what fastavro writes, in a tenth
    of its time."""
    if record.get("type") == RecordType.COLUMN_STATS and record.keys() <= _COLUMN_STATS_FIELDS:
        stats = record.get("ColumnStatsMetadata")
        if stats is not None and stats.keys() == _STATS_FIELDS:
            return _encode_column_stats(stats)
    return encode_avro(record)


def encode_avro(record: Mapping[str, Any]) -> bytes:
    """:func:`encode` by fastavro, for every record type."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema(), {**record, "key": ""})
    return out.getvalue()


_COLUMN_STATS_FIELDS = frozenset({"key", "type", "ColumnStatsMetadata"})
_STATS_FIELDS = frozenset(
    {
        "fileName",
        "columnName",
        "minValue",
        "maxValue",
        "valueCount",
        "nullCount",
        "totalSize",
        "totalUncompressedSize",
        "isDeleted",
    }
)
#: a column-stats record's bytes before its ColumnStatsMetadata: five null meta fields, key "",
#: type 3, no file list and no bloom filter, then the union's second branch
_STATS_HEAD = b"\x00\x00\x00\x00\x00\x00\x06\x00\x00\x02"
#: ... and after it: no record-index entry
_STATS_TAIL = b"\x00"
#: the end of a column-stats value: isDeleted, then the tail
_LIVE_TAIL, _DELETED_TAIL = b"\x00" + _STATS_TAIL, b"\x01" + _STATS_TAIL


#: the one-byte varints
_BYTES = [bytes((n,)) for n in range(0x80)]


@lru_cache(maxsize=65_536)
def _zigzag(n: int) -> bytes:
    """An Avro int or long: zig-zag, then base-128 varint (kept for the counts, sizes and
    lengths a build's column-stats records repeat)."""
    n = (n << 1) ^ (n >> 63)
    if n < 0x80:
        return _BYTES[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _text_bytes(value: str) -> bytes:
    data = value.encode()
    return _zigzag(len(data)) + data


def _decimal_bytes(value: Decimal) -> bytes:
    """A decimal at the wrapper's scale as fastavro writes it: the unscaled value's shortest
    two's-complement big-endian bytes, with room for the sign bit."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite decimal")
    if len(digits) > DECIMAL_PRECISION or exponent + DECIMAL_SCALE < 0:
        raise ValueError(f"{value} does not fit decimal({DECIMAL_PRECISION}, {DECIMAL_SCALE})")
    unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exponent + DECIMAL_SCALE)
    size = (unscaled.bit_length() + 8) // 8
    data: bytes = (-unscaled if sign else unscaled).to_bytes(size, "big", signed=True)
    return _zigzag(len(data)) + data


_VALUE_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "BooleanWrapper": lambda v: b"\x01" if v else b"\x00",
    "IntWrapper": _zigzag,
    "LongWrapper": _zigzag,
    "DateWrapper": _zigzag,
    "TimeMicrosWrapper": _zigzag,
    "TimestampMicrosWrapper": _zigzag,
    "FloatWrapper": struct.Struct("<f").pack,
    "DoubleWrapper": struct.Struct("<d").pack,
    "BytesWrapper": lambda v: _zigzag(len(v)) + bytes(v),
    "StringWrapper": _text_bytes,
    "DecimalWrapper": _decimal_bytes,
}


@cache
def _bound_branches() -> dict[str, tuple[bytes, Callable[[Any], bytes]]]:
    """A min or max's union branch bytes and value encoder by wrapper's full name, the branches
    in the schema's order."""
    fields = json.loads(SCHEMA_JSON)["fields"]
    stats = next(f for f in fields if f["name"] == "ColumnStatsMetadata")["type"][1]
    bound = next(f for f in stats["fields"] if f["name"] == "minValue")["type"]
    return {
        f"{_NAMESPACE}.{branch['name']}": (_zigzag(index), _VALUE_ENCODERS[branch["name"]])
        for index, branch in enumerate(bound)
        if branch != "null"
    }


#: a null column-stats min or max, encoded (the union's null branch)
NULL_BOUND = b"\x00"


def _bound(wrapped: Any) -> bytes:
    if wrapped is None:
        return NULL_BOUND
    name, record = wrapped
    branch, encoder = _bound_branches()[name]
    return branch + encoder(record["value"])


@cache
def bound_encoder(wrapper: str) -> Callable[[Any], bytes]:
    """The encoder of a column-stats min or max in ``wrapper`` (``IntWrapper``, ...) from the
    value alone: what :func:`column_stats_value` makes of :func:`wrap`'s pair, without it."""
    branch, encoder = _bound_branches()[f"{_NAMESPACE}.{wrapper}"]
    return lambda value: branch + encoder(value)


@lru_cache(maxsize=65_536)
def _optional_long(value: int | None) -> bytes:
    """An optional long as Avro writes it, kept: a build's records repeat their counts and
    sizes."""
    return b"\x00" if value is None else b"\x02" + _zigzag(value)


@lru_cache(maxsize=4_096)
def _optional_text(value: str | None) -> bytes:
    """An optional string as Avro writes it, kept: a build puts a file's name in a record for
    each of its columns, and a column's name in every file's."""
    return b"\x00" if value is None else b"\x02" + _text_bytes(value)


def _encode_column_stats(stats: Mapping[str, Any]) -> bytes:
    return column_stats_value(
        stats["fileName"],
        stats["columnName"],
        stats["minValue"],
        stats["maxValue"],
        stats["valueCount"],
        stats["nullCount"],
        stats["totalSize"],
        stats["totalUncompressedSize"],
        stats["isDeleted"],
    )


def column_stats_value(
    file_name: str | None,
    column: str | None,
    low: Any,
    high: Any,
    values: int | None,
    nulls: int | None,
    size: int | None,
    uncompressed: int | None,
    deleted: bool = False,
) -> bytes:
    """:func:`encode` of a column-stats record of these fields (bounds wrapped by
    :func:`wrap`), without the record."""
    return column_stats_bytes(
        file_name, column, _bound(low), _bound(high), values, nulls, size, uncompressed, deleted
    )


def column_stats_bytes(
    file_name: str | None,
    column: str | None,
    low: bytes,
    high: bytes,
    values: int | None,
    nulls: int | None,
    size: int | None,
    uncompressed: int | None,
    deleted: bool = False,
) -> bytes:
    """:func:`column_stats_value` of bounds already encoded (:func:`bound_encoder`; a null
    bound is ``b"\\x00"``)."""
    return b"".join(
        (
            _STATS_HEAD,
            _optional_text(file_name),
            _optional_text(column),
            low,
            high,
            _optional_long(values),
            _optional_long(nulls),
            _optional_long(size),
            _optional_long(uncompressed),
            _DELETED_TAIL if deleted else _LIVE_TAIL,
        )
    )


def column_stats_array(
    names: pa.Array,
    columns: pa.Array,
    lows: pa.Array,
    highs: pa.Array,
    values: np.ndarray,
    nulls: np.ndarray,
    sizes: np.ndarray,
    unzipped: np.ndarray,
) -> pa.Array:
    """:func:`column_stats_bytes` of many records (none deleted) at once, the ``i``-th of data
    file ``names[i]``'s column ``columns[i]``, with bounds ``lows[i]`` and ``highs[i]``
    (:func:`bounds_array`) and these counts, as one binary array: a build makes a record for
    every column of every data file, and one at a time the encoding cost more than reading the
    footer."""
    texts = [_optional_texts(names, _STATS_HEAD), _optional_texts(columns)]
    counts = [zigzag_array(v, b"\x02") for v in (values, nulls, sizes, unzipped)]
    tail = pa.scalar(_LIVE_TAIL, pa.binary())
    return pc.binary_join_element_wise(*texts, lows, highs, *counts, tail, b"")


def _optional_texts(texts: pa.Array, prefix: bytes = b"") -> pa.Array:
    """:func:`_optional_text` of each of ``texts`` (none null), each after ``prefix``."""
    return _length_prefixed(texts.cast(pa.binary()), prefix + b"\x02")


def _length_prefixed(data: pa.Array, prefix: bytes) -> pa.Array:
    """Each of binary ``data`` (none null) after ``prefix`` and its length as an Avro long:
    Avro's bytes or string, as :func:`_text_bytes` lays one out."""
    lengths = pc.binary_length(data).to_numpy(zero_copy_only=False)
    return pc.binary_join_element_wise(zigzag_array(lengths, prefix), data, b"")


def bounds_array(wrapper: str, values: pa.Array) -> pa.Array:
    """:func:`bound_encoder`'s bytes of many values in ``wrapper`` at once, ``b"\\x00"`` for a
    null (a null bound), as one binary array: the integers' (``IntWrapper``, ``LongWrapper``,
    ``DateWrapper``...) of int64 values, ``FloatWrapper``'s and ``DoubleWrapper``'s of floats,
    ``StringWrapper``'s (UTF-8, not checked here) and ``BytesWrapper``'s of binary values.
    Other wrappers are encoded one value at a time (:class:`ValueError`)."""
    branch, encoder = _bound_branches()[f"{_NAMESPACE}.{wrapper}"]
    count = len(values)
    if encoder is _zigzag:
        encoded = zigzag_array(values.fill_null(0).to_numpy(), branch)
    elif wrapper in ("FloatWrapper", "DoubleWrapper"):
        numbers = (
            values.fill_null(0).to_numpy().astype("<f4" if wrapper == "FloatWrapper" else "<f8")
        )
        width = len(branch) + numbers.itemsize
        laid = np.empty((count, width), np.uint8)
        laid[:, : len(branch)] = np.frombuffer(branch, np.uint8)
        laid[:, len(branch) :] = numbers.view(np.uint8).reshape(count, numbers.itemsize)
        fixed = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(width), count, [None, pa.py_buffer(laid)]
        )
        encoded = fixed.cast(pa.binary())
    elif wrapper in ("StringWrapper", "BytesWrapper"):
        encoded = _length_prefixed(values.cast(pa.binary()).fill_null(b""), branch)
    else:
        raise ValueError(f"{wrapper}'s bounds are encoded one at a time")
    return pc.if_else(values.is_null(), pa.scalar(NULL_BOUND, pa.binary()), encoded)


def zigzag_array(values: np.ndarray, prefix: bytes = b"") -> pa.Array:
    """:func:`_zigzag` of each of ``values`` (64-bit integers), each after ``prefix``, as one
    binary array, worked out with numpy."""
    signed = np.asarray(values, np.int64)
    zigzag = ((signed << 1) ^ (signed >> 63)).view(np.uint64)
    lengths = np.ones(len(zigzag), np.int64)  # 7 bits a byte
    rest = zigzag >> np.uint64(7)
    while rest.any():
        lengths += rest != 0
        rest >>= np.uint64(7)
    most = int(lengths.max(initial=1))
    byte = np.arange(most)
    laid = (zigzag[:, None] >> (7 * byte).astype(np.uint64)).astype(np.uint8) & 0x7F
    laid |= (byte < lengths[:, None] - 1).astype(np.uint8) << 7  # more bytes follow
    if prefix:
        head = np.broadcast_to(np.frombuffer(prefix, np.uint8), (len(laid), len(prefix)))
        laid = np.hstack((head, laid))
    sizes = lengths + len(prefix)
    offsets = np.zeros(len(sizes) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = laid[np.arange(laid.shape[1]) < sizes[:, None]]  # each row's bytes, rows in order
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), len(sizes), buffers)


def decode(key: str, value: bytes) -> dict[str, Any]:
    """One record from a cell (its key put back); column-stats values come back as
    ``(wrapper, value)`` pairs."""
    record = fastavro.schemaless_reader(
        io.BytesIO(value),
        schema(),
        None,
        return_record_name=True,
        return_record_name_override=True,
    )
    if not isinstance(record, dict):
        raise ValueError(f"metadata record {key!r}: not a HoodieMetadataRecord")
    return {**record, "key": key}


def wrap(wrapper: str, value: Any) -> tuple[str, dict[str, Any]]:
    """A column-stats min or max in its wrapper record: ``IntWrapper``, ``LongWrapper``,
    ``StringWrapper``, ``DecimalWrapper`` (a Decimal, scale 15), ``DateWrapper`` (days),
    ``TimestampMicrosWrapper`` ...; see Hudi's ``HoodieAvroUtils.wrapValueIntoAvro``."""
    return (f"{_NAMESPACE}.{wrapper}", {"value": value})


def unwrap(wrapped: Any) -> tuple[str, Any] | None:
    """(wrapper name without namespace, value) of a decoded min or max; None for null."""
    if wrapped is None:
        return None
    name, record = wrapped
    return name.rsplit(".", 1)[-1], record["value"]


def file_list_record(
    partition_path: str, files: Mapping[str, int], deleted: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The ``files`` record of one data partition: file name -> size, and deleted names."""
    listing = {name: {"size": size, "isDeleted": False} for name, size in files.items()}
    listing.update({name: {"size": 0, "isDeleted": True} for name in deleted})
    return {
        "key": partition_identifier(partition_path),
        "type": RecordType.FILE_LIST,
        "filesystemMetadata": listing,
    }


def partition_list_record(partition_paths: list[str]) -> dict[str, Any]:
    return {
        "key": ALL_PARTITIONS_KEY,
        "type": RecordType.PARTITION_LIST,
        "filesystemMetadata": {
            partition_identifier(p): {"size": 0, "isDeleted": False} for p in partition_paths
        },
    }


@dataclass(frozen=True)
class RecordLocation:
    """Where a record key lives, as the record index says: data partition, file id, and the
    instant that wrote it (epoch milliseconds as Hudi stores it)."""

    partition_path: str
    file_id: str
    instant_millis: int


def record_index_value(location: RecordLocation) -> dict[str, Any]:
    """``HoodieRecordIndexInfo``: a ``<uuid>-<n>`` (or bare UUID) file id as its 128 bits and n
    (encoding 0), any other file id as a string (encoding 1)."""
    try:
        head, _, tail = location.file_id.rpartition("-")
        if len(location.file_id) == 36:
            parsed, index = uuid.UUID(location.file_id), -1
        else:
            parsed, index = uuid.UUID(head), int(tail)
        if str(parsed) != (location.file_id if index == -1 else head):
            raise ValueError(location.file_id)
    except ValueError:
        return {
            "partitionName": location.partition_path,
            "fileIdHighBits": -1,
            "fileIdLowBits": -1,
            "fileIndex": -1,
            "fileId": location.file_id,
            "instantTime": location.instant_millis,
            "fileIdEncoding": 1,
        }
    bits = parsed.int
    high, low = bits >> 64, bits & ((1 << 64) - 1)
    return {
        "partitionName": location.partition_path,
        "fileIdHighBits": high - (1 << 64) if high >= 1 << 63 else high,
        "fileIdLowBits": low - (1 << 64) if low >= 1 << 63 else low,
        "fileIndex": index,
        "fileId": "",
        "instantTime": location.instant_millis,
        "fileIdEncoding": 0,
    }


def record_location(info: Mapping[str, Any]) -> RecordLocation:
    """The location a decoded ``HoodieRecordIndexInfo`` names."""
    if info.get("fileIdEncoding", 0) == 1:
        file_id = str(info["fileId"])
    else:
        high, low = (
            info["fileIdHighBits"] & ((1 << 64) - 1),
            info["fileIdLowBits"] & ((1 << 64) - 1),
        )
        file_id = str(uuid.UUID(int=high << 64 | low))
        if info["fileIndex"] != -1:
            file_id += f"-{info['fileIndex']}"
    return RecordLocation(str(info["partitionName"]), file_id, int(info["instantTime"]))


def instant_millis(instant_time: str, zone: Any = None) -> int:
    """Epoch milliseconds of a ``yyyyMMddHHmmssSSS`` instant time, read in ``zone`` (Hudi reads
    it in the JVM's default zone; None: this process's local zone)."""
    parsed = datetime.strptime(instant_time[:14], "%Y%m%d%H%M%S")
    parsed = parsed.replace(microsecond=int(instant_time[14:17] or 0) * 1000)
    moment = parsed.replace(tzinfo=zone) if zone is not None else parsed.astimezone()
    return int(moment.timestamp() * 1000)


# --- files -------------------------------------------------------------------------------------------


def _cells(metadata: Iterable[Mapping[str, Any]]) -> list[tuple[bytes, bytes]]:
    """(key, value) cells of records, in key order (UTF-8 bytes, as HBase compares them)."""
    return sorted(((str(r["key"]).encode(), encode(r)) for r in metadata), key=lambda c: c[0])


def base_file(
    metadata: Iterable[Mapping[str, Any]], dense: bool = False, deflate: Deflate = OUR_GZIP
) -> bytes:
    """A base HFile of one file group: the records by key (one per key), the schema and the
    first and last keys in its file info, as Hudi's writer leaves them (without the bloom filter
    of the keys Hudi adds as a meta block, which its metadata readers do not consult).
    ``dense``: the records are bloom filters (see :func:`~timeline.formats.hfile.write_hfile`);
    ``deflate``: how its blocks are (:class:`~timeline.formats.hfile.Deflate`)."""
    return base_file_of_cells(_cells(metadata), dense, deflate)


def base_file_of_cells(
    cells: list[tuple[bytes, bytes]], dense: bool = False, deflate: Deflate = OUR_GZIP
) -> bytes:
    """:func:`base_file` of records already encoded: (key, value) cells in key order."""
    info = {b"schema": SCHEMA_JSON.encode()}
    if cells:
        info[b"minRecordKey"], info[b"maxRecordKey"] = cells[0][0], cells[-1][0]
    return write_hfile(cells, info, dense=dense, deflate=deflate)


def base_file_of_arrays(rows: pa.Array, values: pa.Array) -> bytes:
    """:func:`base_file_of_cells` of cells given as Arrow binary arrays (rows in key order):
    the same bytes, for millions of cells (:func:`~timeline.formats.hfile.write_hfile_arrays`)."""
    info = {b"schema": SCHEMA_JSON.encode()}
    if len(rows):
        info[b"minRecordKey"], info[b"maxRecordKey"] = rows[0].as_py(), rows[-1].as_py()
    return write_hfile_arrays(rows, values, info)


def log_block(
    metadata: Iterable[Mapping[str, Any]],
    instant: str,
    dense: bool = False,
    deflate: Deflate = OUR_GZIP,
) -> bytes:
    """An HFile data block of records (a key may repeat) written at ``instant``, as Hudi
    appends one to a file group's log file; ``dense`` and ``deflate``: as in :func:`base_file`."""
    info = {b"schema": SCHEMA_JSON.encode()}
    content = write_hfile(_cells(metadata), info, unique=False, deflate=deflate, dense=dense)
    header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: SCHEMA_JSON}
    return encode_block(BlockType.HFILE_DATA, header, content)


def delete_block(keys: Iterable[str], partition: str, instant: str) -> bytes:
    """A delete block of metadata records (the record index's deleted keys) at ``instant``;
    with no keys, the empty block Hudi starts every new file group's log with."""
    deletes = [DeleteRecord(key, partition, ("long", 0)) for key in keys]  # a Java long 0
    header = {HeaderKey.INSTANT_TIME: instant}
    if deletes:
        header[HeaderKey.SCHEMA] = SCHEMA_JSON
    return encode_block(BlockType.DELETE, header, delete_content(deletes))
