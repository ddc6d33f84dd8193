"""Split-block bloom filters and index records from Parquet footers."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import itertools
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata_table.bloom import (
    SplitBlockBloomFilter,
    hash_value,
    might_contain_any,
    might_contain_each,
    parse_bloom_filter,
)
from metadata_table.layout import (
    NON_PARTITIONED,
    _row_groups_with,
    column_stats_key,
    column_stats_keys,
    enc,
    file_group_of,
    file_key,
    read_records,
)
from metadata_table.records import (
    column_stats_records,
    info_from_bytes,
    info_from_storage,
    python_value,
)
from timeline.errors import BloomFilterFormatError
from timeline.storage import Storage


def stats_by_column(footer: pq.FileMetaData) -> dict[str, tuple[Any, ...]]:
    """:func:`~metadata_table.records.footer_stats` of ``footer`` by column name."""
    from metadata_table.records import footer_stats

    return {stats[0]: stats for stats in footer_stats(footer)}


def _parquet(table: pa.Table, **kwargs: object) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kwargs)  # type: ignore[arg-type]
    return sink.getvalue()


def test_our_filter_is_bit_identical_to_arrows() -> None:
    keys = [f"key-{i}" for i in range(3000)]
    data = _parquet(
        pa.table({"_hoodie_record_key": keys}),
        bloom_filter_options={"_hoodie_record_key": {"ndv": 3000, "fpp": 0.01}},
    )
    info = info_from_bytes("p", "f.parquet", "20261121101500123", data)
    assert info.bloom is not None
    ours = SplitBlockBloomFilter.build(keys, ndv=3000, fpp=0.01)
    assert bytes(ours.bitset) == info.bloom
    native = SplitBlockBloomFilter(info.bloom)
    assert all(native.might_contain(k) for k in keys)
    false_positives = sum(native.might_contain(f"absent-{i}") for i in range(20000))
    assert false_positives / 20000 < 0.02


def test_probing_many_filters_at_once_answers_as_each_filter_does() -> None:
    rng = random.Random(7)
    filters = []
    for n in range(60):  # sizes from one block to 64 blocks, some filled densely
        bloom = SplitBlockBloomFilter(bytes(32 * 2 ** rng.randrange(7)))
        for i in range(rng.randrange(1, 400)):
            bloom.insert_hash(hash_value(f"{n}-{i}"))
        filters.append(bytes(bloom.bitset))
    values: list[bytes | None] = [*filters[:30], None, *filters[30:], b""]
    array = pa.array(values, pa.binary())
    chunked = pa.chunked_array([array.slice(0, 17), array.slice(17)])
    probes = [f"{n}-{i}" for n in range(0, 60, 7) for i in range(5)] + [f"x{i}" for i in range(300)]
    for value in probes:
        h = hash_value(value)
        expected = [
            v is None or v == b"" or SplitBlockBloomFilter(v).might_contain_hash(h) for v in values
        ]
        assert might_contain_each(array, h).tolist() == expected, value
        assert might_contain_each(chunked, h).tolist() == expected, value
        assert might_contain_each(array.slice(31), h).tolist() == expected[31:], value
    assert might_contain_each(pa.array([], pa.binary()), 1).tolist() == []
    with pytest.raises(BloomFilterFormatError):
        might_contain_each(pa.array([b"\x00" * 33]), 1)


def test_bad_bloom_bytes() -> None:
    with pytest.raises(BloomFilterFormatError):
        parse_bloom_filter(b"\x15")
    with pytest.raises(BloomFilterFormatError):
        SplitBlockBloomFilter(b"\x00" * 31)


def test_keys_and_file_groups_are_stable() -> None:
    assert file_key("2026/11/21", "a|b%.parquet") == "2026/11/21|a%7Cb%25.parquet"
    assert file_key("", "f.parquet") == ".|f.parquet"
    assert column_stats_key("fare", "sf", "f.parquet") == "fare|sf|f.parquet"
    cases = [("fa|re", "2026/11|x", "a%b.parquet"), ("fare", "", "f.parquet")]
    arrays = column_stats_keys(
        pa.array([c for c, _, _ in cases]),
        pa.array([p or NON_PARTITIONED for _, p, _ in cases]),
        pa.array([f for _, _, f in cases]),
    )
    assert arrays.to_pylist() == [column_stats_key(*case) for case in cases]
    assert enc("x|y") == "x%7Cy"
    # the documented rule: CRC32 of the UTF-8 key mod n; crc32(b"a") is 0xE8B7BE43
    assert file_group_of("a", 4) == 0xE8B7BE43 % 4
    assert file_group_of("a", 7) == 0xE8B7BE43 % 7


def test_typed_column_stats_from_the_footer(tmp_path: Path) -> None:
    table = pa.table(
        {
            "i": pa.array([3, None, -7], pa.int32()),
            "f": [1.5, 0.25, 9.0],
            "s": ["b", "a", "c"],
            "bin": [b"\x02", b"\x01", b"\x03"],
            "flag": [True, False, True],
            "day": pa.array([dt.date(2026, 1, 2), dt.date(2026, 1, 1), dt.date(2026, 1, 3)]),
            "ts": pa.array(
                [
                    dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC),
                    None,
                    dt.datetime(2026, 1, 1, 8, tzinfo=dt.UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array(
                [decimal.Decimal("1.10"), decimal.Decimal("-3.25"), None], pa.decimal128(9, 2)
            ),
            "tags": [[1], [2, 3], []],  # nested: not indexed
            "nulls": pa.array([None, None, None], pa.int64()),
        }
    )
    data = _parquet(table, row_group_size=2)  # two row groups: stats are aggregated
    storage = Storage(str(tmp_path))
    storage.create("p/f.parquet", data)
    info = info_from_storage(storage, "p", "f.parquet", len(data), "20261121101500123")
    assert info.metadata.num_row_groups == 2
    rows = {r["column_name"]: r for r in column_stats_records([info]).to_pylist()}
    assert "tags" not in rows
    expected = {
        "i": ("int", -7, 3, 1),
        "f": ("float", 0.25, 9.0, 0),
        "s": ("string", "a", "c", 0),
        "bin": ("binary", b"\x01", b"\x03", 0),
        "flag": ("bool", False, True, 0),
        "day": ("date", dt.date(2026, 1, 1), dt.date(2026, 1, 3), 0),
        "ts": ("timestamp", dt.datetime(2026, 1, 1, 8), dt.datetime(2026, 1, 1, 12), 1),
        "amount": ("decimal", decimal.Decimal("-3.25"), decimal.Decimal("1.10"), 1),
        "nulls": ("int", None, None, 3),
    }
    for name, (kind, lo, hi, nulls) in expected.items():
        row = rows[name]
        assert row["value_type"] == kind, name
        assert python_value(kind, row["min_value"]) == lo, name
        assert python_value(kind, row["max_value"]) == hi, name
        assert (row["null_count"], row["value_count"]) == (nulls, 3), name
        assert row["total_size"] > 0 and row["total_uncompressed_size"] > 0
    # a file without a native filter gets one built from its key column
    keyed = _parquet(pa.table({"_hoodie_record_key": ["x", "y"]}))
    storage.create("p/g.parquet", keyed)
    built = info_from_storage(storage, "p", "g.parquet", len(keyed), "20261121101500123")
    assert built.bloom is not None and SplitBlockBloomFilter(built.bloom).might_contain("x")


def test_files_of_one_parquet_schema_and_other_arrow_types_are_indexed_as_each_says() -> None:
    """What a footer's columns are indexed as is worked out once per schema and reused for the
    next file of that schema; a file whose Parquet schema is the same but whose stored Arrow
    schema gives another type (a duration kept as int64) is worked out again."""
    durations = pa.table({"d": pa.array([1, 2], pa.duration("s")), "x": [1, 2]})
    integers = pa.table({"d": pa.array([1, 2], pa.int64()), "x": [1, 2]})
    first, second = (
        pq.ParquetFile(pa.BufferReader(_parquet(t))).metadata for t in (durations, integers)
    )
    assert first.schema.equals(second.schema)
    for _ in range(2):
        assert sorted(stats_by_column(first)) == ["x"]  # a duration is not indexed
        assert sorted(stats_by_column(second)) == ["d", "x"]
    assert stats_by_column(second)["d"][3] == 2  # its max


def test_footer_reads_do_not_read_the_data(tmp_path: Path) -> None:
    data = _parquet(
        pa.table({"_hoodie_record_key": [f"k{i}" for i in range(200_000)]}),
        bloom_filter_options={"_hoodie_record_key": {"ndv": 200_000, "fpp": 0.01}},
    )
    storage = Storage(str(tmp_path))
    storage.create("f.parquet", data)
    before = storage.requests["read"]
    info_from_storage(storage, "", "f.parquet", len(data), "20261121101500123")
    assert storage.requests["read"] - before <= 3  # tail, maybe the bloom filter bytes
    assert len(data) > 1_000_000


def test_not_parquet_is_a_clear_error(tmp_path: Path) -> None:
    from metadata_table.records import NotParquetError

    storage = Storage(str(tmp_path))
    storage.create("p/bad.parquet", b"this is not parquet at all")
    with pytest.raises(NotParquetError, match=r"p/bad\.parquet"):
        info_from_storage(storage, "p", "bad.parquet", 26, "20261121101500123")


def test_a_prefix_read_decodes_only_the_row_groups_that_may_hold_the_prefix(
    tmp_path: Path,
) -> None:
    storage = Storage(str(tmp_path))
    keys = sorted(
        f"{c}|{p}|f{n:03d}" for c in ("a", "b", "b|x", "c") for p in "pq" for n in range(50)
    )
    records = pa.table({"key": keys, "n": list(range(len(keys)))})
    storage.create("m.parquet", _parquet(records, row_group_size=40))
    metadata = pq.read_metadata(str(tmp_path / "m.parquet"))
    assert metadata.num_row_groups == 10
    for prefix in ("a|", "b|", "b|x|", "b|p|f01", "c|q|f049", "0", "d", "b|z", ""):
        read, _ = read_records(storage, "m.parquet", ["key", "n"], prefix)
        assert read.column("key").to_pylist() == [k for k in keys if k.startswith(prefix)], prefix
    assert _row_groups_with(metadata, "a|") == [0, 1, 2]  # keys 0..99 of 400
    assert _row_groups_with(metadata, "b|p|f01") == [2]  # rows 110..119 of group 80..119
    assert _row_groups_with(metadata, "b|q|") == [3, 4]  # rows 150..199
    assert _row_groups_with(metadata, "d") == [] and _row_groups_with(metadata, "0") == []
    assert _row_groups_with(metadata, "") == list(range(10))
    no_stats = _parquet(records, row_group_size=40, write_statistics=False)
    assert _row_groups_with(pq.read_metadata(pa.BufferReader(no_stats)), "a|") is None


def test_probing_many_values_into_many_filters_at_once() -> None:
    """might_contain_any (an upsert's keys against a partition's filters, as arrays) answers
    what probing each filter object with each value does; a null filter may hold anything."""
    rng = random.Random(7)
    blooms = [
        SplitBlockBloomFilter.build([f"k{rng.randrange(10_000)}" for _ in range(n)], n, 0.2)
        for n in (1, 5, 40, 300)
    ]
    bitsets = pa.array([bytes(b.bitset) for b in blooms] + [None], pa.binary())
    # the same filters after a null holding 3 bytes: their words start off 4-byte boundaries
    data = b"xyz" + b"".join(bytes(b.bitset) for b in blooms)
    ends = np.cumsum([3] + [len(b.bitset) for b in blooms]).tolist()
    unaligned = pa.Array.from_buffers(
        pa.binary(),
        len(blooms) + 1,
        [
            pa.array([False] + [True] * len(blooms)).buffers()[1],
            pa.py_buffer(np.array([0, *ends], dtype=np.int32).tobytes()),
            pa.py_buffer(data),
        ],
    )
    for count in (0, 1, 3, 200):
        values = [hash_value(f"k{rng.randrange(10_000)}") for _ in range(count)]
        want = [any(b.might_contain_hash(h) for h in values) for b in blooms] + [True]
        assert might_contain_any(bitsets, values).tolist() == want
        assert might_contain_any(bitsets.slice(1), values).tolist() == want[1:]
        assert might_contain_any(unaligned, values).tolist() == [True, *want[:-1]]
    one = hash_value("k1")
    assert might_contain_each(bitsets, one).tolist() == [
        b.might_contain_hash(one) for b in blooms
    ] + [True]


@pytest.mark.parametrize("seed", range(6))
def test_probing_answers_as_each_filter_does_in_every_layout(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's paths (filters of one size or of several, read in place or laid out as bit
    planes, that layout kept for the next probes or not, values in one pass or in many, sparse filters where most pairs stop at the first word
    and dense ones where they go on; the filters at some positions of a column in chunks)
    answer what probing each filter object does."""
    import metadata_table.bloom as bloom

    rng = random.Random(seed)
    monkeypatch.setattr(bloom, "_PROBES_AT_ONCE", rng.choice([1, 50, 1 << 21]))
    monkeypatch.setattr(bloom, "_LAID_KEPT_BYTES", rng.choice([0, 64 << 20]))
    sizes = [rng.randrange(4)] if seed % 2 else [0, 1, 2, 3]
    blooms = []
    for n in range(rng.randrange(1, 80)):
        keys = [f"k{n}-{i}" for i in range(rng.randrange(1, 60))]
        blooms.append(SplitBlockBloomFilter(bytes(32 * 2 ** rng.choice(sizes))))
        for key in keys:
            blooms[-1].insert_hash(hash_value(key))
    bitsets = pa.array([bytes(b.bitset) for b in blooms], pa.binary())
    kept = bloom.FiltersAt(bitsets)  # probed with every count: its laid-out filters kept
    for count in (1, 7, 8, 63, 64, 300, 8, 1):
        values = [
            hash_value(
                f"k{rng.randrange(80)}-{rng.randrange(60)}"
                if rng.random() < 0.3
                else f"absent-{rng.random()}"
            )
            for _ in range(count)
        ]
        want = [any(b.might_contain_hash(h) for h in values) for b in blooms]
        assert might_contain_any(bitsets, values).tolist() == want, count
        assert kept.might_contain_any(values).tolist() == want, count
        # the filters at some positions (-1: none) of the column in chunks, none copied
        cut = sorted(rng.sample(range(len(blooms) + 1), min(3, len(blooms) + 1)))
        chunked = pa.chunked_array(
            [bitsets.slice(a, b - a) for a, b in itertools.pairwise([0, *cut, len(blooms)])],
            pa.binary(),
        )
        at = [rng.randrange(-1, len(blooms)) for _ in range(rng.randrange(0, 40))]
        expected = [True if p < 0 else want[p] for p in at]
        assert might_contain_any(chunked, values, np.array(at, np.int64)).tolist() == expected


def test_a_malformed_footer_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    """A footer whose Thrift bytes do not parse (a truncated or overwritten file) names the file;
    it must not abort the process, as pyarrow's bare footer parse does."""
    from metadata_table.records import NotParquetError
    from timeline.fs_view import footer_metadata, parquet_metadata

    storage = Storage(str(tmp_path))
    body = bytes(range(256)) * 4
    storage.create("p/bad.parquet", b"PAR1" + body + len(body).to_bytes(4, "little") + b"PAR1")
    for read in (
        lambda: info_from_storage(storage, "p", "bad.parquet", len(body) + 12, "2026"),
        lambda: parquet_metadata(storage, "p/bad.parquet"),
        lambda: footer_metadata(storage.read("p/bad.parquet"), "p/bad.parquet"),
    ):
        with pytest.raises(NotParquetError, match=r"p/bad\.parquet"):
            read()


def test_a_footer_read_from_a_local_path_names_what_it_is_and_keeps_no_descriptor(
    tmp_path: Path,
) -> None:
    """A local footer is read from a descriptor the reader owns: a missing file, a folder and a
    file of other bytes each fail naming the path, and no failed or finished read leaves its
    descriptor open."""
    from metadata_table.records import NotParquetError
    from timeline.errors import StorageFileNotFoundError
    from timeline.fs_view import parquet_metadata

    storage = Storage(str(tmp_path))
    storage.create("p/junk.parquet", b"not a parquet file at all")
    (tmp_path / "p" / "folder.parquet").mkdir()
    sink = io.BytesIO()
    pq.write_table(pa.table({"k": ["a"]}), sink)
    storage.create("p/f.parquet", sink.getvalue())

    def open_here() -> list[str]:  # (not a count: another thread of the process may open files)
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # closed while listed
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [t for t in targets if t.startswith(os.path.realpath(tmp_path))]

    for _ in range(50):
        assert parquet_metadata(storage, "p/f.parquet").num_rows == 1
        with pytest.raises(StorageFileNotFoundError, match=r"p/gone\.parquet"):
            parquet_metadata(storage, "p/gone.parquet")
        for bad in ("p/junk.parquet", "p/folder.parquet"):
            with pytest.raises(NotParquetError, match=bad.replace(".", r"\.")):
                parquet_metadata(storage, bad)
    assert open_here() == []


def test_footers_parsed_every_way_are_the_same(tmp_path: Path) -> None:
    from timeline.fs_view import footer_metadata, parquet_footer, parquet_metadata

    storage = Storage(str(tmp_path))
    sink = io.BytesIO()
    table = pa.table({"k": ["a", "b"], "v": pa.array([1, None], pa.int64())})
    pq.write_table(table, sink, row_group_size=1)
    storage.create("p/f.parquet", sink.getvalue())
    expected = pq.read_metadata(io.BytesIO(sink.getvalue()))
    assert parquet_metadata(storage, "p/f.parquet").equals(expected)
    assert footer_metadata(parquet_footer(storage, "p/f.parquet"), "f").equals(expected)


def test_raw_statistics_give_the_values_pyarrow_converts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Column statistics read the raw min and max of the types whose raw statistic is the
    value (a fifth of the cost): for every indexed type they equal those made from pyarrow's
    converted ``min`` and ``max`` (unsigned integers, stored signed, stay converted)."""
    import metadata_table.records as records

    rng = random.Random(7)
    rows = 40
    table = pa.table(
        {
            "s": pa.array([rng.choice(["Zürich", "a", "東京", None]) for _ in range(rows)]),
            "bin": pa.array([bytes([rng.randrange(256)]) for _ in range(rows)], pa.binary()),
            "fixed": pa.array([bytes([rng.randrange(256)] * 3) for _ in range(rows)], pa.binary(3)),
            "i8": pa.array([rng.randrange(-128, 128) for _ in range(rows)], pa.int8()),
            "i32": pa.array([rng.randrange(-(2**31), 2**31) for _ in range(rows)], pa.int32()),
            "i64": pa.array([rng.randrange(-(2**63), 2**63) for _ in range(rows)], pa.int64()),
            "u32": pa.array([rng.randrange(0, 2**32) for _ in range(rows)], pa.uint32()),
            "u64": pa.array([rng.randrange(0, 2**64) for _ in range(rows)], pa.uint64()),
            "f32": pa.array([rng.uniform(-5, 5) for _ in range(rows)], pa.float32()),
            "f64": pa.array([rng.uniform(-5, 5) for _ in range(rows)], pa.float64()),
            "b": pa.array([rng.random() < 0.5 for _ in range(rows)]),
            "d": pa.array([dt.date(2024, 1, 1 + rng.randrange(28)) for _ in range(rows)]),
            "ts": pa.array([rng.randrange(2**40) for _ in range(rows)], pa.timestamp("us", "UTC")),
            "dec": pa.array([decimal.Decimal(rng.randrange(-999, 999)) / 10 for _ in range(rows)]),
            "empty": pa.array([None] * rows, pa.string()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=15)  # three row groups to widen over
    footer = pq.read_metadata(io.BytesIO(sink.getvalue()))
    records._LAST_LAYOUT.clear()
    raw = stats_by_column(footer)
    assert {name for name, _, _, is_raw in records.footer_layout(footer).indexed if is_raw} == {
        "s", "bin", "fixed", "i8", "i32", "i64", "f32", "f64", "b", "empty"
    }  # fmt: skip
    monkeypatch.setattr(records, "_raw_is_value", lambda *_: False)
    records._LAST_LAYOUT.clear()
    converted = stats_by_column(footer)
    records._LAST_LAYOUT.clear()
    assert raw == converted
    assert raw["u64"][3] >= 2**63 or max(table.column("u64").to_pylist()) < 2**63
    assert raw["s"][2] == min(v for v in table.column("s").to_pylist() if v is not None)


def test_a_footer_of_one_row_group_gives_the_statistics_the_widening_gives() -> None:
    """Most data files have one row group, whose statistics are read without widening them over
    chunks: the same column statistics as widening gives, for every kind, a column of nulls,
    one without statistics, and a string column whose bounds are not UTF-8 (unknown)."""
    import metadata_table.records as records

    table = pa.table(
        {
            "s": ["b", None, "a"],
            "raw": pa.array([b"\xff", b"a", None], pa.binary()).cast(pa.string(), safe=False),
            "i": pa.array([3, -1, None], pa.int32()),
            "u": pa.array([2**63 + 1, 1, 0], pa.uint64()),
            "f": [0.5, None, -2.0],
            "b": [True, None, False],
            "d": pa.array([dt.date(2024, 1, 2), None, dt.date(2023, 5, 6)]),
            "ts": pa.array([5, None, 1], pa.timestamp("ms", "UTC")),
            "dec": pa.array([decimal.Decimal("1.5"), None, decimal.Decimal("-2.25")]),
            "none": pa.array([None, None, None], pa.int64()),
            "unstated": [1, 2, 3],
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, write_statistics=[c for c in table.column_names if c != "unstated"])
    footer = pq.read_metadata(io.BytesIO(sink.getvalue()))
    assert footer.num_row_groups == 1
    indexed = records.footer_layout(footer).indexed
    one = list(records.footer_stats(footer))
    assert one == list(records._widened_stats(footer, indexed))
    stats = stats_by_column(footer)
    assert stats["s"][2:6] == ("a", "b", 1, 3)  # nulls among the values counted
    assert stats["raw"][2:4] == (None, None)  # bytes that are not UTF-8: unknown
    assert stats["none"][2:6] == (None, None, 3, 3)
    assert stats["unstated"][2:5] == (None, None, None)
    assert stats["u"][3] == 2**63 + 1
    assert list(records.footer_stats(footer, ["i", "dec"])) == [stats["i"], stats["dec"]]


@pytest.mark.parametrize("note", [0, 80_000])  # a footer past 64 KB: the filter not in the tail
def test_a_files_footer_and_native_filter_read_the_same_from_local_and_remote_storage(
    tmp_path: Path, note: int
) -> None:
    """A local file's footer is read by pyarrow's reader from a descriptor and its bloom filter
    by a ranged read; a remote file's both from its end: the same footer and filter as from the
    file's bytes, whether or not the filter lies in the remote read of the file's last 64 KB."""
    keys = [f"k{i:05d}" for i in range(2_000)]
    table = pa.table({"_hoodie_record_key": keys}).replace_schema_metadata({"note": "n" * note})
    data = _parquet(table, bloom_filter_options={"_hoodie_record_key": {"ndv": 2_000}})
    expected = info_from_bytes("p", "f.parquet", "20261207000000000", data)
    assert expected.bloom is not None and expected.metadata is not None
    assert (expected.metadata.serialized_size > 64 * 1024) == bool(note)
    for storage in (Storage(str(tmp_path)), Storage(f"memory://{tmp_path.name}")):
        assert storage.is_local == (storage.uri("").startswith("/"))
        storage.create("p/f.parquet", data)
        info = info_from_storage(storage, "p", "f.parquet", len(data), "20261207000000000")
        assert info.metadata is not None and info.metadata.equals(expected.metadata)
        assert info.bloom == expected.bloom
        assert all(SplitBlockBloomFilter(info.bloom).might_contain(k) for k in keys[:50])
