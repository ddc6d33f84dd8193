"""A process keeps the records it decoded from metadata files (metadata_table/file_cache.py): a
new snapshot after a commit decodes only the files written since, answers as a reader without
the cache does, and a file written again under its name is never answered from its old
content. A column's stats are read with only the min/max field of its value kind."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import metadata_table.read.snapshot as snapshot_module
import metadata_table.reader as reader_module
from metadata_table.file_cache import DecodedFiles, process_cache
from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    COLUMN_STATS_SCHEMA,
    COVERS_UPTO,
    FILES,
    column_prefix,
    column_stats_key,
    column_values,
    read_records,
    write_records,
)
from metadata_table.maintenance import initialize
from metadata_table.read.filters import col
from metadata_table.read.snapshot import _FEW_FILES, IndexedSnapshot, _aligned
from metadata_table.records import RECORD_KEY
from metadata_table.table import MetadataTable
from timeline import Table
from timeline.config import Config
from timeline.fs_view import PATH_CHECK, PATH_HASH
from timeline.hashing import CHECK_SEED, key_hash64
from writer.client import WriteClient

from .test_metadata_table import keys, make_table, rows

PARTITIONS = [FILES, COLUMN_STATS, BLOOM_FILTERS]


def _answers(table: Table) -> tuple[Any, ...]:
    snapshot = IndexedSnapshot(table)
    return (
        sorted(f.path for f in snapshot.prune(col("fare") >= 1050.0).candidates),
        sorted(f.path for f in snapshot.prune(col("city") == "ny").candidates),
        snapshot.lookup_keys(["k0005", "k1099", "k9999"]),
    )


def _indexed(tmp_path: Path) -> tuple[Table, WriteClient]:
    """A table of two partitions' files (fares 0-99 in sf, 1000-1099 in la), indexed, and its
    writer."""
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 100), city="sf"))
    client.insert(rows(keys(1000, 1100), city="la"))
    initialize(table, PARTITIONS)
    return table, client


def _without_cache(table: Table) -> Table:
    config = Config.resolve(
        explicit={"indexer.lock.url": "inprocess", "indexer.read.cache.max.mb": "0"}
    )
    return Table.open(table.base_uri, config)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The metadata files decoded from now on (path -> times), with an empty process cache."""
    process_cache(256 * 1024 * 1024).clear()
    counts: Counter[str] = Counter()
    read = reader_module.read_records

    def counted(storage: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        counts[path] += 1
        return read(storage, path, *args, **kwargs)

    monkeypatch.setattr(reader_module, "read_records", counted)
    return counts


def test_a_new_snapshot_decodes_only_the_files_written_since(
    tmp_path: Path, decoded: Counter[str]
) -> None:
    table, client = _indexed(tmp_path)

    first = _answers(table)
    assert decoded, "nothing was read"
    seen = set(decoded)
    decoded.clear()
    assert _answers(table) == first
    assert not decoded, f"decoded again with nothing written: {dict(decoded)}"

    client.insert(rows(keys(2000, 2010), city="ny"))  # reflected through log files
    decoded.clear()  # (the write's own reads)
    after = _answers(table)
    assert decoded and not set(decoded) & seen, dict(decoded)
    assert all(Path(p).name.startswith(".") for p in decoded)  # log files only
    assert after == _answers(_without_cache(table))
    assert after[1] and after != first


def test_file_groups_not_decoded_yet_are_decoded_on_several_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition's base files that the process has not decoded are read at once on its
    decoding threads (four bloom_filters file groups: most of a new process's first lookup);
    the answers are those of reading them one after another, and once decoded they are taken
    from the cache in the calling thread."""
    table, _ = _indexed(tmp_path)
    process_cache(256 * 1024 * 1024).clear()
    threads: dict[str, set[str]] = {}
    read = reader_module.read_records

    def noted(storage: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        threads.setdefault(path.split("/")[-2], set()).add(threading.current_thread().name)
        return read(storage, path, *args, **kwargs)

    monkeypatch.setattr(reader_module, "read_records", noted)
    together = _answers(table)
    assert len(threads[BLOOM_FILTERS]) > 1, threads  # (4 groups on at least 2 threads)
    assert threading.main_thread().name not in threads[BLOOM_FILTERS]
    parallel = reader_module.in_parallel
    calls: list[int] = []

    def counted(work: Any, items: Any) -> Any:
        calls.append(len(items))
        return parallel(work, items)

    monkeypatch.setattr(reader_module, "in_parallel", counted)
    assert _answers(table) == together
    assert not calls  # decoded: nothing is read in parallel

    process_cache(256 * 1024 * 1024).clear()
    monkeypatch.setattr(reader_module, "in_parallel", lambda work, items: list(map(work, items)))
    assert _answers(table) == together


def test_a_kept_snapshot_aligns_its_bloom_filters_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lookups on a kept snapshot reuse the bloom filters aligned with its listing (at a million
    files the alignment was most of a kept lookup); a new snapshot aligns again."""
    table, _ = _indexed(tmp_path)
    aligned: Counter[str] = Counter()  # who aligned: the blooms, or the key ranges
    positions = snapshot_module._positions

    def counted(*args: Any) -> Any:
        aligned[sys._getframe(1).f_code.co_name] += 1
        return positions(*args)

    monkeypatch.setattr(snapshot_module, "_positions", counted)
    snapshot = IndexedSnapshot(table)
    first = snapshot.lookup_keys(["k0005", "k1099", "k9999"])
    assert aligned["_listing_blooms"] == 1
    assert snapshot.lookup_keys(["k0005", "k1099", "k9999"]) == first
    assert snapshot.lookup_keys(["k0042"]) == snapshot.lookup_keys(["k0042"])
    assert aligned["_listing_blooms"] == 1
    assert IndexedSnapshot(table).lookup_keys(["k0005", "k1099", "k9999"]) == first
    assert aligned["_listing_blooms"] == 2


def test_a_lookup_reads_the_key_ranges_of_the_files_its_bloom_filters_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-key lookup whose bloom filters keep one file reads that file's column_stats
    records by their key, not every file's key range; one they keep no file for reads none;
    a snapshot that goes on answering reads the whole column once. The answers are those of a
    snapshot that holds the whole column."""
    table, client = _indexed(tmp_path)
    client.insert(rows(keys(2000, 2100), city="ny"))  # three files in three partitions
    prefixes: list[str | None] = []
    read = reader_module.MetadataReader.read

    def spied(self: Any, partition: str, prefix: str | None = None, *args: Any, **kw: Any) -> Any:
        if partition == COLUMN_STATS:
            prefixes.append(prefix)
        return read(self, partition, prefix, *args, **kw)

    monkeypatch.setattr(reader_module.MetadataReader, "read", spied)
    asked = ["k0005", "k1099", "k2050", "k0100", "nope"]
    snapshot = IndexedSnapshot(table)
    (holder,) = snapshot.lookup_keys(["k1042"])["k1042"]
    partition, _, name = holder.rpartition("/")
    assert prefixes == [column_stats_key(RECORD_KEY, partition, name)]
    prefixes.clear()
    assert snapshot.lookup_keys(["k0100"]) == {"k0100": []}
    assert prefixes == []
    for number in range(_FEW_FILES - 1):  # (the first lookup read narrowly once)
        snapshot.lookup_keys([f"k{number % 3}{number:03d}"])
    assert len(prefixes) == _FEW_FILES - 1 and column_prefix(RECORD_KEY) not in prefixes
    snapshot.lookup_keys(["k0007"])
    assert prefixes[-1] == column_prefix(RECORD_KEY)
    narrow = {k: IndexedSnapshot(table).lookup_keys([k])[k] for k in asked}
    whole = IndexedSnapshot(table)
    whole._column_records(RECORD_KEY)
    assert narrow == whole.lookup_keys(asked)
    assert narrow["k2050"] and narrow["k0100"] == narrow["nope"] == []


def test_a_read_of_decoded_files_works_out_nothing_again(tmp_path: Path) -> None:
    """A read whose files the process has decoded derives no columns again, not even those of
    the empty table a read starts from (a new snapshot's reads spent 0.3 ms so)."""
    table, _ = _indexed(tmp_path)
    derived: list[int] = []

    def derive(records: pa.Table) -> pa.Table:
        derived.append(records.num_rows)
        return records.append_column("twice", pc.multiply(records.column("size"), 2))

    reader = MetadataTable(table).reader(table.timeline.load())
    first = reader.read(FILES, derive=derive)
    assert first.column("twice").to_pylist() == [2 * n for n in first.column("size").to_pylist()]
    calls = len(derived)
    again = MetadataTable(table).reader(table.timeline.load()).read(FILES, derive=derive)
    assert again.equals(first) and len(derived) == calls


def test_a_file_written_again_under_its_name_is_read_again(
    tmp_path: Path, decoded: Counter[str]
) -> None:
    table, _ = _indexed(tmp_path)
    before = IndexedSnapshot(table).indexed_files().num_rows
    assert before == 2

    mdt = MetadataTable(table)
    (base, _), *_ = mdt.reader(table.timeline.load()).slices(FILES).values()
    assert base is not None
    records, covers = read_records(mdt.storage, base.path)
    mdt.storage.delete(base.path)  # as a rollback would, then the same name again
    write_records(mdt.storage, base.path, records.slice(0, 1), covers)
    assert IndexedSnapshot(table).indexed_files().num_rows == 1


def test_the_cache_keeps_the_recently_used_within_its_budget() -> None:
    cache = DecodedFiles(max_bytes=3000)
    table = pa.table({"x": pa.array(range(125), pa.int64())})  # 1,000 bytes

    def entry(n: int) -> tuple[pa.Table, str | None]:
        return table, str(n)

    reads: list[int] = []

    def read(n: int) -> Any:
        return lambda: (reads.append(n), entry(n))[1]

    for n in (1, 2, 3):
        cache.records(n, read(n))
    cache.records(1, read(1))  # a hit: 1 is now the most recent
    cache.records(4, read(4))  # over budget: 2, the least recent, goes
    assert reads == [1, 2, 3, 4] and len(cache) == 3 and cache.size_bytes == 3000
    cache.records(2, read(2))
    assert reads[-1] == 2
    cache.records(1, read(1))
    assert reads[-1] == 2, "1 was dropped though used more recently than 3"
    big = pa.table({"x": pa.array(range(1000), pa.int64())})
    assert cache.records(9, lambda: (big, None))[0] is big
    assert 9 not in cache._entries and cache.size_bytes <= 3000
    cache.resize(0)
    assert len(cache) == 0 and cache.size_bytes == 0


def test_a_columns_stats_are_read_with_one_value_kind(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 100), city="sf"))
    initialize(table, PARTITIONS)
    client.insert(rows(keys(1000, 1100), city="la"))
    snapshot = IndexedSnapshot(table)
    records = snapshot._column_records("fare")
    assert records.schema.field("min_value").type == pa.struct([("float", pa.float64())])
    assert records.num_rows == 2
    full = snapshot.reader.read(COLUMN_STATS, prefix=column_prefix("fare"), ordered=False)
    assert sorted(records.column("min_value").to_pylist(), key=str) == sorted(
        ({"float": v["float"]} for v in full.column("min_value").to_pylist()), key=str
    )


def test_an_empty_file_does_not_hide_a_columns_value_kind(tmp_path: Path) -> None:
    """An empty metadata file (a file group a partition's records did not reach: one data
    file's stats all go to one group) holds one row group without statistics: it holds no
    value, so a column's value kind is still told, and a prefix read opens no group of it."""
    table = make_table(tmp_path / "t")
    storage = table.storage
    empty = COLUMN_STATS_SCHEMA.empty_table()
    write_records(storage, "column_stats/empty.parquet", empty)
    assert pq.ParquetFile(tmp_path / "t" / "column_stats/empty.parquet").metadata.num_row_groups
    assert column_values(storage, "column_stats/empty.parquet", "value_type", "fare|") == set()
    client = WriteClient(table)
    client.insert(rows(keys(0, 10), city="sf"))
    initialize(table, [COLUMN_STATS], groups={COLUMN_STATS: 4})
    reader = MetadataTable(table).reader(table.timeline.load())
    mdt_storage = MetadataTable(table).storage
    sizes = [
        read_records(mdt_storage, base.path)[0].num_rows
        for base, _ in reader.slices(COLUMN_STATS).values()
        if base is not None
    ]
    assert len(sizes) == 4 and 0 in sizes and sum(sizes) > 0
    assert reader.column_values(COLUMN_STATS, column_prefix("fare"), "value_type") == {"float"}


def test_a_file_of_mixed_row_groups_is_read_whole(tmp_path: Path) -> None:
    """A column_stats file whose row groups mix columns (as written before each column got
    row groups of its own) tells no value kind: its records are read with every field, and
    answer as before."""
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 10), city="sf"))
    client.insert(rows(keys(1000, 1010), city="la"))
    initialize(table, PARTITIONS)
    mdt = MetadataTable(table)
    prefix = column_prefix("fare")
    reader = mdt.reader(table.timeline.load())
    assert reader.column_values(COLUMN_STATS, prefix, "value_type") == {"float"}
    want = _answers(table)

    for base, _ in reader.slices(COLUMN_STATS).values():
        assert base is not None
        records, covers = read_records(mdt.storage, base.path)
        assert covers is not None
        sink = pa.BufferOutputStream()
        watermark = {COVERS_UPTO: covers.encode()}
        pq.write_table(records.replace_schema_metadata(watermark), sink)  # one row group
        mdt.storage.delete(base.path)
        mdt.storage.create(base.path, sink.getvalue().to_pybytes())
    reader = mdt.reader(table.timeline.load())
    assert reader.column_values(COLUMN_STATS, prefix, "value_type") is None
    whole = IndexedSnapshot(table)._column_records("fare").schema.field("min_value").type
    assert whole.num_fields == 8
    assert _answers(table) == want


def _path_hashes(first: Any, check: Any) -> pa.Table:
    return pa.table(
        {
            PATH_HASH: pa.array(key_hash64(first), pa.uint64()),
            PATH_CHECK: pa.array(key_hash64(check, CHECK_SEED), pa.uint64()),
        }
    )


def test_aligning_a_few_files_equals_aligning_all() -> None:
    """Stats aligned with a few files, or with all; by path, or by the paths' two hashes (and
    where a path's first hash is another's but its second is not, the strings decide)."""
    paths = pa.array([f"p/f{i}" for i in range(50)])
    hashes = _path_hashes(paths, paths)
    records = pa.table(
        {
            "value_type": ["int"] * 50,
            "min_value": pa.array([{"int": i} for i in range(50)]),
            "max_value": pa.array([{"int": i + 1} for i in range(50)]),
            "null_count": pa.array([0] * 50, pa.int64()),
            "value_count": pa.array([2] * 50, pa.int64()),
            "path": paths,
        }
    )
    records = pa.Table.from_arrays(
        [*records.columns, *hashes.columns], [*records.column_names, *hashes.column_names]
    )
    few = pa.array(["p/f7", "p/nope", "p/f3"])
    few_hashes = _path_hashes(few, few)
    collided = _path_hashes(["p/f7", "p/f9", "p/f3"], few)  # nope's first hash is f9's
    for hashed in (None, few_hashes, collided):
        all_hashes = None if hashed is None else pa.concat_tables([hashed, hashes])
        small = _aligned(records, "path", few, hashed)
        whole = _aligned(records, "path", pa.concat_arrays([few, paths]), all_hashes)
        assert small is not None and whole is not None
        assert small.minimum.to_pylist() == whole.minimum.to_pylist()[:3] == [7, None, 3]
        assert small.present.to_pylist() == [True, False, True]
    backwards = pa.array(range(49, -1, -1))
    exact = _aligned(records, "path", paths.take(backwards), hashes.take(backwards))
    assert exact is not None and exact.minimum.to_pylist() == list(range(49, -1, -1))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8),
    st.lists(
        st.lists(st.tuples(st.sampled_from("abcdefghij"), st.booleans()), max_size=5),
        min_size=1,
        max_size=5,
    ),
)
def test_the_newest_record_of_each_key_wins(
    base_keys: list[str], logs: list[list[tuple[str, bool]]]
) -> None:
    """A base file's records and logs (oldest first, one record per key each): every key's
    newest record, a tombstone too, base records first, then the logs' in their order; whether
    the logs' keys are all different (one test of the base: each commit adds new files) or
    not (each log keeps the keys no newer one has)."""
    from metadata_table.reader import newest_records

    schema = pa.schema([("key", pa.string()), ("is_deleted", pa.bool_()), ("instant", pa.string())])
    base = pa.table(
        {
            "key": base_keys,
            "is_deleted": [False] * len(base_keys),
            "instant": ["b"] * len(base_keys),
        },
        schema=schema,
    )
    tables, want = [], {k: (False, "b") for k in base_keys}
    for n, log in enumerate(logs):
        unique = dict(log)  # one record per key a log
        tables.append(
            pa.table(
                {
                    "key": list(unique),
                    "is_deleted": list(unique.values()),
                    "instant": [f"l{n}"] * len(unique),
                },
                schema=schema,
            )
        )
        want.update({k: (d, f"l{n}") for k, d in unique.items()})
    merged = newest_records(base, tables)
    states = zip(
        merged.column("is_deleted").to_pylist(), merged.column("instant").to_pylist(), strict=True
    )
    got = list(zip(merged.column("key").to_pylist(), states, strict=True))
    assert dict(got) == want and len(got) == len(want)
    kept = [k for k, (_, at) in got if at == "b"]
    assert kept == [k for k in base_keys if want[k][1] == "b"]  # base records first, in order
    instants = [at for _, (_, at) in got if at != "b"]
    assert instants == sorted(instants, key=lambda at: int(at[1:]))  # then the logs, oldest first
