"""Apache Hudi 0.15's own metadata table, read cell by cell: a table Hudi writes with its
``files``, ``column_stats``, ``bloom_filters`` and ``record_index`` partitions on (inserts,
upserts, deletes, a metadata compaction that writes base HFiles for every file group, then
more log blocks), decoded by timeline/formats and checked against the data files themselves."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.hudi_peer.peer import HudiPeer, HudiTable
from tests.hudi_peer.rows import make_rows
from timeline.formats import metadata_records as records
from timeline.formats.hfile import HUDI_ZLIB_GZIP, HFileReader
from timeline.log_format import BlockType, HeaderKey, LogFileName, read_blocks

PARTITIONS = ("files", "column_stats", "bloom_filters", "record_index")
INDEXES = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
    "hoodie.index.type": "RECORD_INDEX",
}


@pytest.fixture(scope="module")
def table(hudi: HudiPeer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hudi-mdt") / "t"
    written = HudiTable(path=str(base), extra=INDEXES)
    hudi.write(written, "insert", make_rows(range(60), ts=1, parts=3))
    hudi.write(written, "upsert", make_rows(range(40, 80), ts=2, parts=3))
    hudi.write(written, "delete", make_rows(range(5), ts=3, parts=3))
    # a metadata compaction first (base HFiles in every file group), then log blocks on them
    compact = {"hoodie.metadata.compact.max.delta.commits": "1"}
    hudi.write(written, "upsert", make_rows(range(70, 90), ts=4, parts=3), options=compact)
    hudi.write(written, "upsert", make_rows(range(85, 95), ts=5, parts=3))
    return base


Cell = tuple[str, int, str, bytes]  # (file, file group, key, value)


def _file_group(partition: str, file_name: str) -> int:
    prefix = records.FILE_GROUP_PREFIXES[partition]
    return int(file_name.lstrip(".")[len(prefix) : len(prefix) + 4])


def _contents(table: Path, partition: str) -> list[tuple[str, Any]]:
    """The latest slice of each file group of one metadata partition, in the order a merge
    applies them: its base HFile's reader, then its log files' blocks by version."""
    folder = table / ".hoodie" / "metadata" / partition
    names = [n for n in os.listdir(folder) if not n.endswith(".crc")]
    bases = {}
    hfiles = [n for n in names if n.endswith(".hfile")]
    for name in sorted(hfiles, key=lambda n: n.rsplit("_", 1)[1]):  # the newest base last
        bases[_file_group(partition, name)] = name
    out: list[tuple[str, Any]] = []
    for group in sorted({_file_group(partition, n) for n in names if "-0_" in n}):
        base = bases.get(group)
        since = base.rsplit("_", 1)[1].removesuffix(".hfile") if base else ""
        if base is not None:
            out.append((base, HFileReader((folder / base).read_bytes(), base)))
        logs = sorted(
            (parsed.order, name)
            for name in names
            if (parsed := LogFileName.parse(name)) is not None
            and _file_group(partition, name) == group
            and parsed.base_instant >= since
        )
        for _, name in logs:
            out.extend((name, block) for block in read_blocks((folder / name).read_bytes()))
    return out


def _cells(table: Path, partition: str) -> list[Cell]:
    cells: list[Cell] = []
    for name, content in _contents(table, partition):
        if isinstance(content, HFileReader):
            assert content.file_info[b"schema"].decode() == records.SCHEMA_JSON
            reader = content
        elif content.block_type == BlockType.HFILE_DATA:
            assert content.header[HeaderKey.SCHEMA] == records.SCHEMA_JSON
            reader = HFileReader(content.content, name)
        else:
            continue
        group = _file_group(partition, name)
        cells.extend((name, group, row.decode(), value) for row, value in reader)
    return cells


@pytest.mark.parametrize("partition", PARTITIONS)
def test_every_cell_hudi_wrote_decodes_and_encodes_back_byte_for_byte(
    table: Path, partition: str
) -> None:
    cells = _cells(table, partition)
    assert cells
    groups = {group for _, group, _, _ in cells}
    count = len(
        {
            _file_group(partition, n)
            for n in os.listdir(table / ".hoodie/metadata" / partition)
            if "-0_" in n
        }
    )
    for name, group, key, value in cells:
        record = records.decode(key, value)
        assert record["key"] == key
        assert records.encode(record) == value, (name, key)
        assert records.file_group_index(key, count) == group, (name, key)
    assert groups <= set(range(count))


def _latest_data_files(table: Path) -> dict[str, tuple[str, str]]:
    """file id -> (partition, file name) of each file group's newest base file."""
    newest: dict[str, tuple[str, str]] = {}
    for partition in ("p0", "p1", "p2"):
        for name in os.listdir(table / partition):
            if name.endswith(".parquet"):
                file_id, instant = name.split("_")[0], name.rsplit("_", 1)[1]
                if file_id not in newest or newest[file_id][1].rsplit("_", 1)[1] < instant:
                    newest[file_id] = (partition, name)
    return newest


def test_keys_and_values_agree_with_the_data_files(table: Path) -> None:
    files_on_storage = {
        (p, n) for p in ("p0", "p1", "p2") for n in os.listdir(table / p) if n.endswith(".parquet")
    }
    partition_of = {name: partition for partition, name in files_on_storage}

    # files: the merged listing of each partition is what is on storage
    listing: dict[str, dict[str, bool]] = defaultdict(dict)
    for _, _, key, value in _cells(table, "files"):
        record = records.decode(key, value)
        for name, info in (record["filesystemMetadata"] or {}).items():
            listing[key][name] = not info["isDeleted"]
    assert set(listing[records.ALL_PARTITIONS_KEY]) == {"p0", "p1", "p2"}
    listed = {(p, n) for p in ("p0", "p1", "p2") for n, live in listing[p].items() if live}
    assert listed == files_on_storage

    # column_stats: a record per (file, column), its key from the names, min/max the footer's
    seen = 0
    for _, _, key, value in _cells(table, "column_stats"):
        stats = records.decode(key, value)["ColumnStatsMetadata"]
        file_name, column = stats["fileName"], stats["columnName"]
        partition = partition_of[file_name]
        assert key == records.column_stats_key(column, partition, file_name)
        assert key.startswith(records.column_stats_prefix(column))
        if column in ("id", "ts", "name", "fare"):
            footer = pq.ParquetFile(table / partition / file_name).metadata
            at = footer.schema.names.index(column)
            groups = [
                footer.row_group(i).column(at).statistics for i in range(footer.num_row_groups)
            ]
            low = records.unwrap(stats["minValue"])
            high = records.unwrap(stats["maxValue"])
            assert low is not None and high is not None
            assert low[1] == min(g.min for g in groups)
            assert high[1] == max(g.max for g in groups)
            expected = {"id": "LongWrapper", "ts": "LongWrapper", "name": "StringWrapper"}
            assert low[0] == expected.get(column, "DoubleWrapper")
            assert stats["valueCount"] == footer.num_rows
            seen += 1
    assert seen >= 4 * len(files_on_storage)

    # bloom_filters: the data file's footer string, under its key
    blooms = 0
    for _, _, key, value in _cells(table, "bloom_filters"):
        bloom = records.decode(key, value)["BloomFilterMetadata"]
        matches = [(p, n) for p, n in files_on_storage if records.bloom_filter_key(p, n) == key]
        assert len(matches) == 1, key
        partition, name = matches[0]
        footer = pq.ParquetFile(table / partition / name).metadata.metadata
        assert bloom["bloomFilter"] == footer[b"org.apache.hudi.bloomfilter"]
        assert bloom["type"] == "DYNAMIC_V0"
        blooms += 1
    assert blooms == len(files_on_storage)

    # record_index: after merging (later blocks win, deletes remove), each live key's location
    # is the file group holding it, and the instant is when it was written there
    locations: dict[str, records.RecordLocation | None] = {}
    for _, content in _contents(table, "record_index"):
        if isinstance(content, HFileReader) or content.block_type == BlockType.HFILE_DATA:
            reader = content if isinstance(content, HFileReader) else HFileReader(content.content)
            for row, value in reader:
                info = records.decode(row.decode(), value)["recordIndexMetadata"]
                location = records.record_location(info)
                assert records.record_index_value(location) == info
                locations[row.decode()] = location
        elif content.block_type == BlockType.DELETE:
            for deleted in content.deletes():
                locations[str(deleted.record_key)] = None
    live = {k: v for k, v in locations.items() if v is not None}
    expected_keys: dict[str, tuple[str, str]] = {}
    for file_id, (partition, name) in _latest_data_files(table).items():
        data = pq.read_table(table / partition / name, columns=["_hoodie_record_key"])
        for key in data.column(0).to_pylist():
            expected_keys[key] = (partition, file_id)
    assert {k: (v.partition_path, v.file_id) for k, v in live.items()} == expected_keys
    for key, location in live.items():
        written = pq.read_table(
            table / expected_keys[key][0] / _latest_data_files(table)[location.file_id][1],
            columns=["_hoodie_record_key", "_hoodie_commit_time"],
        ).to_pylist()
        instant = next(r["_hoodie_commit_time"] for r in written if r["_hoodie_record_key"] == key)
        assert location.instant_millis <= records.instant_millis(instant)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_we_write_what_hudi_wrote_byte_for_byte(table: Path, partition: str) -> None:
    """From the records alone: every HFile log block and delete block Hudi appended (content,
    header and footer), and every base HFile's data blocks (Hudi adds a bloom filter of the keys as a
    meta block after them, which its metadata readers do not consult and we do not write), when
    deflated as Hudi deflates (we deflate with ISA-L: other gzip members of the same bytes)."""
    folder = table / ".hoodie" / "metadata" / partition
    checked = 0
    for name in sorted(os.listdir(folder)):
        if name.endswith(".crc"):
            continue
        data = (folder / name).read_bytes()
        if name.endswith(".hfile"):
            theirs = HFileReader(data, name)
            decoded = [records.decode(k.decode(), v) for k, v in theirs]
            ours = records.base_file(decoded, deflate=HUDI_ZLIB_GZIP)
            first_meta = min(e.offset for e in theirs._load_on_open[1].values())
            assert ours[:first_meta] == data[:first_meta], name
            mine = HFileReader(ours)
            for field in (b"minRecordKey", b"maxRecordKey", b"schema"):
                assert mine.file_info[field] == theirs.file_info[field]
            checked += 1
        elif LogFileName.parse(name) is not None:
            for block in read_blocks(data):
                assert block.instant_time is not None
                if block.block_type == BlockType.HFILE_DATA:
                    cells = HFileReader(block.content, name)
                    decoded = [records.decode(k.decode(), v) for k, v in cells]
                    ours = records.log_block(decoded, block.instant_time, deflate=HUDI_ZLIB_GZIP)
                elif block.block_type == BlockType.DELETE:
                    keys = [str(d.record_key) for d in block.deletes()]
                    ours = records.delete_block(keys, partition, block.instant_time)
                else:
                    continue
                # the same block; Hudi's header entries come in a JVM's hash order, ours in
                # the keys' order, which Hudi's reader takes alike
                (mine,) = read_blocks(ours)
                assert (mine.block_type, mine.content, mine.footer) == (
                    block.block_type,
                    block.content,
                    block.footer,
                ), name
                assert mine.header == block.header and mine.size == block.size
                checked += 1
    assert checked > 3


def test_our_bloom_filter_of_a_files_keys_is_the_footer_hudi_wrote(table: Path) -> None:
    from timeline.formats.hudi_bloom import HudiBloomFilter

    files = [table / p / n for p in ("p0", "p1", "p2") for n in os.listdir(table / p)]
    checked = 0
    for path in files:
        if not path.name.endswith(".parquet"):
            continue
        footer = pq.ParquetFile(path).metadata.metadata
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0).to_pylist()
        assert footer[b"hoodie_bloom_filter_type_code"] == b"DYNAMIC_V0"
        ours = HudiBloomFilter.of_keys(keys).serialize().encode()
        assert ours == footer[b"org.apache.hudi.bloomfilter"], path.name
        assert footer[b"hoodie_min_record_key"].decode() == min(keys)
        assert footer[b"hoodie_max_record_key"].decode() == max(keys)
        checked += 1
    assert checked >= 9


def test_the_merged_partitions_are_the_table(table: Path) -> None:
    """metadata_table.hudi_table reads Hudi's metadata table as Hudi's readers do: the latest
    slices, the log blocks that count, records merged per key; what it answers is the table."""
    from metadata_table.hudi_table import HudiMetadataTable
    from timeline import Table
    from timeline.config import Config

    opened = Table.open(str(table), Config.resolve(explicit={"indexer.lock.url": "inprocess"}))
    hudi_mdt = HudiMetadataTable(opened)
    assert set(hudi_mdt.partitions) == set(PARTITIONS)
    on_storage = {
        p: {
            n: (table / p / n).stat().st_size
            for n in os.listdir(table / p)
            if n.endswith(".parquet")
        }
        for p in ("p0", "p1", "p2")
    }
    assert hudi_mdt.file_listing() == on_storage
    live = {
        key: records.record_location(r["recordIndexMetadata"])
        for key, r in hudi_mdt.records("record_index").items()
    }
    expected = {}
    for file_id, (partition, name) in _latest_data_files(table).items():
        data = pq.read_table(table / partition / name, columns=["_hoodie_record_key"])
        expected |= {k: (partition, file_id) for k in data.column(0).to_pylist()}
    assert {k: (v.partition_path, v.file_id) for k, v in live.items()} == expected
    files = sum(len(v) for v in on_storage.values())
    assert len(hudi_mdt.records("bloom_filters")) == files
    stats = hudi_mdt.records("column_stats")
    assert len(stats) == files * 10  # every column, the five meta columns included
    assert all(not r["ColumnStatsMetadata"]["isDeleted"] for r in stats.values())


def test_validate_passes_on_hudis_table_and_names_a_planted_record(
    table: Path, tmp_path: Path
) -> None:
    """`indexer validate` checks Hudi's metadata table against the data files; a record-index
    entry planted wrong (a log block of ours under a completed metadata deltacommit, as a
    writer would append it) is named, and so is a file the files partition lists that is gone."""
    import shutil

    from metadata_table.validate import validate_hudi
    from timeline import Table
    from timeline.config import Config

    config = Config.resolve(explicit={"indexer.lock.url": "inprocess"})
    reports = validate_hudi(Table.open(str(table), config))
    assert sorted(r.partition for r in reports) == sorted(f"hudi:{p}" for p in PARTITIONS)
    assert all(r.ok for r in reports), [r.to_json() for r in reports if not r.ok]

    copy = tmp_path / "t"
    shutil.copytree(table, copy)
    opened = Table.open(str(copy), config)
    key = "42"
    count = len(
        {
            _file_group("record_index", n)
            for n in os.listdir(copy / ".hoodie/metadata/record_index")
            if "-0_" in n
        }
    )
    group = records.file_group_index(key, count)
    wrong = records.RecordLocation("p0", "00000000-0000-0000-0000-000000000000-0", 0)
    instant = opened.timeline.load().completed().last().timestamp + "010"
    planted = {
        "key": key,
        "type": records.RecordType.RECORD_INDEX,
        "recordIndexMetadata": records.record_index_value(wrong),
    }
    folder = copy / ".hoodie/metadata/record_index"
    base = next(
        n
        for n in os.listdir(folder)
        if n.startswith(records.file_group_id("record_index", group)) and n.endswith(".hfile")
    )
    base_instant = base.removesuffix(".hfile").rsplit("_", 1)[1]
    log = folder / f".{records.file_group_id('record_index', group)}_{base_instant}.log.9_0-0-0"
    log.write_bytes(records.log_block([planted], instant))
    (copy / ".hoodie/metadata/.hoodie" / f"{instant}.deltacommit").write_text("{}")
    gone = next((copy / "p1").glob("*.parquet"))
    gone.unlink()
    reports = {r.partition: r for r in validate_hudi(Table.open(str(copy), config))}
    assert reports["hudi:record_index"].wrong == [key]
    assert reports["hudi:files"].stale == [f"p1/{gone.name}"]


def test_a_commits_records_are_the_ones_hudi_wrote_for_it(table: Path) -> None:
    """For each of Hudi's own commits, metadata_table.hudi_table.commit_records makes, from the
    commit's metadata and its files' footers, exactly the files, bloom_filters and column_stats
    records (byte for byte) Hudi's writer put in its metadata table for that commit."""
    from collections import defaultdict

    from metadata_table.hudi_table import commit_records
    from timeline import Table
    from timeline.commit_metadata import CommitMetadata
    from timeline.config import Config

    opened = Table.open(str(table), Config.resolve(explicit={"indexer.lock.url": "inprocess"}))
    partitions = ("files", "column_stats", "bloom_filters")
    written: dict[str, dict[str, list[tuple[str, bytes]]]] = defaultdict(lambda: defaultdict(list))
    for partition in partitions:
        for name, content in _contents(table, partition) + _old_logs(table, partition):
            if not isinstance(content, HFileReader) and content.block_type == BlockType.HFILE_DATA:
                for row, value in HFileReader(content.content, name):
                    written[content.instant_time][partition].append((row.decode(), value))
    commits = list(opened.timeline.load().completed())
    assert len(commits) == 5
    for instant in commits:
        metadata = CommitMetadata.from_bytes(opened.timeline.read_content(instant), "commit")
        ours = commit_records(opened, instant.timestamp, metadata, partitions)
        for partition in partitions:
            mine = sorted((r["key"], records.encode(r)) for r in ours[partition])
            assert mine == sorted(set(written[instant.timestamp][partition])), (
                instant.timestamp,
                partition,
            )


def _old_logs(table: Path, partition: str) -> list[tuple[str, Any]]:
    """The blocks of log files a compaction has since folded into a base file (still on
    storage until Hudi's metadata cleaner runs)."""
    folder = table / ".hoodie" / "metadata" / partition
    latest = {name for name, _ in _contents(table, partition)}
    out: list[tuple[str, Any]] = []
    for name in sorted(os.listdir(folder)):
        if LogFileName.parse(name) is not None and name not in latest:
            out.extend((name, block) for block in read_blocks((folder / name).read_bytes()))
    return out


def test_file_group_indexes_of_many_keys_equal_javas_hash_of_each() -> None:
    """The vectorized routing equals the one-key one (Java's String.hashCode) on ASCII keys of
    every length, an empty key, keys whose hash is negative, and keys that are not ASCII."""
    import pyarrow as pa

    from timeline.formats.metadata_records import file_group_index, file_group_indexes

    keys = [f"k-{i:010d}" for i in range(5000)] + ["", "a", "Zz9" * 40, "polygenelubricants"]
    keys += ["é-key", "\U0001f600x"]
    for count in (1, 2, 10, 997):
        expected = [file_group_index(k, count) for k in keys]
        assert file_group_indexes(pa.array(keys[:-2]), count).tolist() == expected[:-2]
        assert file_group_indexes(pa.chunked_array([keys]), count).tolist() == expected
        assert file_group_indexes(pa.array(keys).slice(7, 50), count).tolist() == expected[7:57]
        # a slice to the end of keys whose bytes end where their buffer ends (read past it)
        tail = _exact(keys[:-2]).slice(4000)  # ASCII, so hashed with numpy
        assert file_group_indexes(tail, count).tolist() == expected[4000:-2]
    assert file_group_index("polygenelubricants", 10) == abs(-(2**31)) % 10  # Integer.MIN_VALUE


def _exact(keys: list[str]) -> Any:
    """``keys`` as an Arrow string array whose data buffer holds their bytes and no more."""
    import numpy as np
    import pyarrow as pa

    data = [k.encode() for k in keys]
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in data])]).astype(np.int32)
    buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(keys), buffers)


def test_file_group_indexes_hash_in_batches_as_one_key_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys hashed in batches of a few bytes (a key longer than a batch in one of its own) are
    routed as one at a time: the kept powers of 31 serve every batch."""
    import pyarrow as pa

    from timeline.formats import metadata_records
    from timeline.formats.metadata_records import file_group_index, file_group_indexes

    monkeypatch.setattr(metadata_records, "_HASH_BATCH_BYTES", 64)
    keys = [f"key-{i}" * (1 + i % 9) for i in range(3000)] + ["x" * 500, "", "y"]
    expected = [file_group_index(k, 13) for k in keys]
    assert file_group_indexes(pa.array(keys), 13).tolist() == expected
    assert file_group_indexes(pa.array(keys).slice(1001), 13).tolist() == expected[1001:]
