"""HFile, as HBase writes it for Apache Hudi's metadata table: read on the files hudi-rs vendors
(tests/timeline/data/hfile, written by HBase 2.4.9 and 2.4.13: GZ and uncompressed, 5,000 to
20,000 cells, one to three index levels, shortened index keys, repeated rows, an empty file),
and written back block for block."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline.errors import HFileFormatError
from timeline.formats.hfile import (
    HBASE_JAVA_GZIP,
    HEADER,
    HUDI_COMPARATOR,
    Compression,
    HFileReader,
    cell_key,
    key_row,
    write_hfile,
    write_hfile_arrays,
)

DATA = Path(__file__).parent / "data" / "hfile"
#: file -> (cells, index levels); rows "hudi-key-<9 digits>" (a long "aaa..." infix in the
#: large-key files, "-abcdefghij" after them in the fake-first-key file), values
#: "hudi-value-<9 digits>"
GOLDEN = {
    "hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile": (20000, 1),
    "hudi_1_0_hbase_2_4_9_512KB_GZ_20000.hfile": (20000, 1),
    "hudi_1_0_hbase_2_4_9_16KB_NONE_5000.hfile": (5000, 1),
    "hudi_1_0_hbase_2_4_9_64KB_NONE_5000.hfile": (5000, 1),
    "hudi_1_0_hbase_2_4_13_16KB_GZ_20000_fake_first_key.hfile": (20000, 1),
    "hudi_1_0_hbase_2_4_13_1KB_GZ_20000_large_keys.hfile": (20000, 2),
    "hudi_1_0_hbase_2_4_13_1KB_GZ_10000_large_keys_deep_index.hfile": (10000, 3),
}
LARGE = b"hudi-key-" + b"a" * 100 + b"-"


def golden(name: str) -> HFileReader:
    return HFileReader((DATA / name).read_bytes(), name)


def row_of(name: str, i: int) -> bytes:
    if "large_keys" in name:
        return LARGE + b"%09d" % i
    suffix = b"-abcdefghij" if "fake_first_key" in name else b""
    return b"hudi-key-%09d" % i + suffix


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_hbase_written_files_read_cell_by_cell(name: str) -> None:
    count, levels = GOLDEN[name]
    reader = golden(name)
    assert reader.trailer.num_data_index_levels == levels
    cells = list(reader)
    assert len(cells) == len(reader) == count
    assert cells == [(row_of(name, i), b"hudi-value-%09d" % i) for i in range(count)]
    assert reader.file_info[b"hfile.LASTKEY"] == cell_key(row_of(name, count - 1))


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_lookups_go_through_the_index(name: str) -> None:
    count, _ = GOLDEN[name]
    reader = golden(name)
    for i in (0, 1, count // 3, count // 2 + 7, count - 1):
        assert reader.get(row_of(name, i)) == [b"hudi-value-%09d" % i]
    assert reader.get(b"hudi-key-") == []
    assert reader.get(b"zzz") == []
    assert reader.get(b"") == []
    # a row between two blocks' first keys (and, in the fake-first-key file, between a block's
    # shortened index key and its first row) is absent, not an error
    assert reader.get(row_of(name, count // 2)[:-1] + b"\x00") == []
    prefix = row_of(name, 1230)[: len(row_of(name, 1230)) - 1 - (11 if "fake" in name else 0)]
    found = [row for row, _ in reader.with_prefix(prefix)]
    assert found == [row_of(name, i) for i in range(1230, 1240)]


def test_inflates_only_the_blocks_a_lookup_needs() -> None:
    name = "hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile"
    reader = golden(name)
    assert reader.get(row_of(name, 12345)) == [b"hudi-value-000012345"]
    assert 1 <= len(reader._blocks) <= 2 < len(reader.index)


def test_repeated_rows_come_back_in_file_order() -> None:
    reader = golden("hudi_1_0_hbase_2_4_9_16KB_GZ_200_20_non_unique.hfile")
    cells = list(reader)
    assert len(cells) == len(reader) == 4200
    rows = [row for row, _ in cells]
    assert rows == sorted(rows)
    for i in (0, 7, 101, 199):
        expected = [value for row, value in cells if row == b"hudi-key-%09d" % i]
        assert len(expected) > 1
        assert reader.get(b"hudi-key-%09d" % i) == expected
    asked = {b"hudi-key-%09d" % i for i in (0, 7, 101, 199)} | {b"absent"}
    assert list(reader.get_many(asked)) == [c for c in cells if c[0] in asked]


def test_many_lookups_inflate_each_block_once() -> None:
    name = "hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile"
    reader = golden(name)
    asked = [row_of(name, i) for i in range(12000, 12400, 7)] + [b"zzz"]
    found = list(reader.get_many(asked))
    assert [row for row, _ in found] == sorted(asked[:-1])
    assert 1 <= len(reader._blocks) <= 4 < len(reader.index)


def test_an_empty_file_and_hudis_file_info() -> None:
    reader = golden("hudi_1_0_hbase_2_4_9_no_entry.hfile")
    assert list(reader) == [] and len(reader) == 0
    assert reader.trailer.comparator_class_name == HUDI_COMPARATOR
    assert reader.trailer.first_data_block_offset == -1
    assert reader.get(b"anything") == []
    assert b"schema" in reader.file_info and b"bloomFilterTypeCode" in reader.file_info
    assert reader.meta_block("bloomFilter") is not None
    assert reader.meta_block("none") is None


def _rewrite(name: str, block_size: int) -> tuple[bytes, bytes]:
    raw = (DATA / name).read_bytes()
    reader = HFileReader(raw, name)
    writer_info = {
        k: v
        for k, v in reader.file_info.items()
        if k == b"hfile.CREATE_TIME_TS"
        or not (k.startswith(b"hfile.") or k in (b"KEY_VALUE_VERSION", b"MAX_MEMSTORE_TS_KEY"))
    }
    metas = {n: reader.meta_block(n) or b"" for n in ("bloomFilter",) if reader.meta_block(n)}
    ours = write_hfile(
        list(reader),
        writer_info,
        metas,
        block_size=block_size,
        compression=Compression(reader.trailer.compression_codec),
        unique="non_unique" not in name,
        deflate=HBASE_JAVA_GZIP,  # these were written by HBase's Java gzip
    )
    return raw, ours


def test_an_empty_file_is_written_byte_for_byte_as_hbase_wrote_it() -> None:
    raw, ours = _rewrite("hudi_1_0_hbase_2_4_9_no_entry.hfile", 64 * 1024)
    assert ours == raw


@pytest.mark.parametrize(
    ("name", "block_size"),
    [
        ("hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile", 16 * 1024),
        ("hudi_1_0_hbase_2_4_9_512KB_GZ_20000.hfile", 512 * 1024),
        ("hudi_1_0_hbase_2_4_9_16KB_NONE_5000.hfile", 16 * 1024),
        ("hudi_1_0_hbase_2_4_9_64KB_NONE_5000.hfile", 64 * 1024),
        ("hudi_1_0_hbase_2_4_9_16KB_GZ_200_20_non_unique.hfile", 16 * 1024),
    ],
)
def test_data_and_meta_blocks_are_written_byte_for_byte_as_hbase_wrote_them(
    name: str, block_size: int
) -> None:
    """Same block boundaries (a block ends before a new row once it holds the block size, never
    between repeated rows), same gzip members, same checksums and totals; only the index may
    differ, where HBase shortened a block's first key and we keep it whole."""
    raw, ours = _rewrite(name, block_size)
    theirs, mine = HFileReader(raw, name), HFileReader(ours, "ours")
    load_on_open = theirs.trailer.load_on_open_data_offset
    assert ours[:load_on_open] == raw[:load_on_open]
    assert mine.trailer.total_uncompressed_bytes == theirs.trailer.total_uncompressed_bytes
    assert [(e.offset, e.on_disk_size) for e in mine.index] == [
        (e.offset, e.on_disk_size) for e in theirs.index
    ]
    assert list(mine) == list(theirs)


def test_a_damaged_file_is_refused_by_name() -> None:
    name = "hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile"
    raw = bytearray((DATA / name).read_bytes())
    raw[HEADER.size + 40] ^= 0xFF  # inside the first data block's gzip member
    damaged = HFileReader(bytes(raw), "damaged.hfile")
    with pytest.raises(HFileFormatError, match=r"damaged\.hfile.*checksum"):
        damaged.get(row_of(name, 0))
    unchecked = HFileReader(bytes(raw), "damaged.hfile", verify_checksums=False)
    with pytest.raises(HFileFormatError, match="GZ block"):
        list(unchecked)
    with pytest.raises(HFileFormatError, match="shorter than its trailer"):
        HFileReader(b"not an hfile", "x.hfile")
    tail = bytearray((DATA / name).read_bytes())
    tail[-4096] = ord("X")
    with pytest.raises(HFileFormatError, match="trailer magic"):
        HFileReader(bytes(tail), "x.hfile")
    v2 = bytearray((DATA / name).read_bytes())
    v2[-4:] = struct.pack(">i", 2)
    with pytest.raises(HFileFormatError, match="version 2"):
        HFileReader(bytes(v2), "x.hfile")


def test_the_writer_refuses_what_hbase_would() -> None:
    with pytest.raises(ValueError, match="strictly ascending"):
        write_hfile([(b"b", b"1"), (b"a", b"2")])
    with pytest.raises(ValueError, match="strictly ascending"):
        write_hfile([(b"a", b"1"), (b"a", b"2")])
    with pytest.raises(ValueError, match="ascending order"):
        write_hfile([(b"b", b"1"), (b"a", b"2")], unique=False)
    with pytest.raises(ValueError, match="at most 32767 bytes"):
        write_hfile([(b"k" * 40_000, b"1")])


def test_written_files_carry_what_hudis_readers_need() -> None:
    data = write_hfile(
        [(b"a", b"1"), (b"bb", b"22")], {b"schema": b"{}"}, block_size=1, compression=Compression.GZ
    )
    reader = HFileReader(data)
    assert reader.trailer.comparator_class_name == HUDI_COMPARATOR
    assert reader.trailer.num_data_index_levels == 1
    assert len(reader.index) == 2  # a block per cell at this block size
    info = reader.file_info
    assert struct.unpack(">i", info[b"hfile.AVG_KEY_LEN"])[0] == (13 + 14) // 2
    assert struct.unpack(">i", info[b"hfile.AVG_VALUE_LEN"])[0] == 1
    assert struct.unpack(">i", info[b"KEY_VALUE_VERSION"])[0] == 1
    assert key_row(info[b"hfile.LASTKEY"]) == b"bb"
    assert info[b"schema"] == b"{}"
    assert data[HEADER.size : HEADER.size + 2] == b"\x1f\x8b"  # every block its own gzip member


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.binary(min_size=0, max_size=40), max_size=300, unique=True),
    block_size=st.sampled_from([1, 64, 1024, 1 << 20]),
    compression=st.sampled_from([Compression.GZ, Compression.NONE]),
    probes=st.lists(st.binary(max_size=6), max_size=20),
)
def test_round_trip(
    rows: list[bytes], block_size: int, compression: Compression, probes: list[bytes]
) -> None:
    cells = [(row, row[::-1] * 3) for row in sorted(rows)]
    reader = HFileReader(write_hfile(cells, block_size=block_size, compression=compression))
    assert list(reader) == cells
    for probe in [*probes, *rows[:10]]:
        assert reader.get(probe) == [v for r, v in cells if r == probe]
        assert list(reader.with_prefix(probe)) == [c for c in cells if c[0].startswith(probe)]
    asked = {*probes, *rows[::3]}
    assert list(reader.get_many(asked)) == [c for c in cells if c[0] in asked]


@settings(max_examples=60, deadline=None)
@given(
    cells=st.dictionaries(
        st.binary(min_size=0, max_size=40), st.binary(min_size=0, max_size=80), max_size=400
    ),
    block_size=st.sampled_from([1, 50, 1024, 1 << 20]),
    compression=st.sampled_from([Compression.GZ, Compression.NONE]),
)
def test_cells_given_as_arrow_arrays_are_written_byte_for_byte_as_the_loop_writes_them(
    cells: dict[bytes, bytes], block_size: int, compression: Compression
) -> None:
    ordered = sorted(cells.items())
    rows = pa.array([r for r, _ in ordered], pa.binary())
    values = pa.array([v for _, v in ordered], pa.binary())
    info = {b"schema": b"{}"}
    written = write_hfile_arrays(rows, values, info, block_size, compression)
    assert written == write_hfile(ordered, info, None, block_size, compression)


def test_cells_given_as_arrays_are_refused_as_the_loop_refuses_them() -> None:
    with pytest.raises(ValueError, match="strictly ascending"):
        write_hfile_arrays(pa.array([b"b", b"a"]), pa.array([b"1", b"2"]))
    with pytest.raises(ValueError, match="strictly ascending"):
        write_hfile_arrays(pa.array([b"a", b"a"]), pa.array([b"1", b"2"]))
    with pytest.raises(ValueError, match="at most 32767 bytes"):
        write_hfile_arrays(pa.array([b"k" * 40_000]), pa.array([b"1"]))
    with pytest.raises(ValueError, match="2 rows and 1 values"):
        write_hfile_arrays(pa.array([b"a", b"b"]), pa.array([b"1"]))
