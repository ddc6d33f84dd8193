"""Hudi's log files read by timeline/log_format.py: blocks that Apache Hudi wrote (hudi-rs's
fixtures and merge-on-read sample tables, vendored in tests/data/hudi_rs), partial and damaged
blocks as a dead writer or a bad disk leaves them, and which blocks count in a file slice; the
slices merged from our blocks hold exactly the rows hudi-rs's snapshot read returns."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeline.errors import LogFormatError
from timeline.log_format import (
    MAGIC,
    BlockType,
    HeaderKey,
    LogBlock,
    LogFileName,
    avro_data_content,
    effective_blocks,
    encode_block,
    iter_blocks,
    read_blocks,
    read_log_file,
)
from timeline.storage import Storage

DATA = Path(__file__).resolve().parents[1] / "data" / "hudi_rs"
FIXTURES = DATA / "log_files"


def _fixture(case: str) -> tuple[str, bytes]:
    (path,) = (FIXTURES / case).glob(".*.log.*")
    return path.name, path.read_bytes()


def test_avro_data_block_written_by_hudi() -> None:
    name, data = _fixture("valid_log_avro_data")
    (block,) = read_blocks(data)
    assert block.block_type == BlockType.AVRO_DATA and block.size == len(data)
    assert block.instant_time == "20250316025828811" and block.footer == {}
    assert set(block.header) == {HeaderKey.INSTANT_TIME, HeaderKey.SCHEMA}
    rows = block.records().to_pylist()
    assert len(rows) == 1
    assert rows[0]["uuid"] == "334e26e9-8355-45cc-97c6-c31daf0df330"
    assert rows[0]["fare"] == 29.1 and rows[0]["ts"] == 1695159649088
    assert rows[0]["_hoodie_commit_time"] == block.instant_time
    parsed = LogFileName.parse(name)
    assert parsed is not None and rows[0]["_hoodie_file_name"] == parsed.file_id


@pytest.mark.parametrize(
    "case",
    ["valid_log_avro_data", "valid_log_parquet_data", "valid_log_delete", "valid_log_rollback"],
)
def test_blocks_encode_to_the_bytes_hudi_wrote(case: str) -> None:
    """encode_block (made-to-order log files for tests and benchmarks) frames a block exactly as
    Hudi does, and avro_data_content encodes records exactly as Hudi's Avro data block holds them."""
    _, data = _fixture(case)
    for block in read_blocks(data):
        framed = encode_block(block.block_type, block.header, block.content, block.footer)
        assert framed == data[block.offset : block.offset + block.size]
        if block.block_type == BlockType.AVRO_DATA:
            schema = block.avro_schema()
            records = block.records().to_pylist()
            assert avro_data_content(records, schema) == block.content


def test_parquet_data_block_written_by_hudi() -> None:
    _, data = _fixture("valid_log_parquet_data")
    (block,) = read_blocks(data)
    assert block.block_type == BlockType.PARQUET_DATA
    assert block.instant_time == "20250113230424191"
    records = block.records()
    assert records.num_rows == 1 and records.column("rider").to_pylist() == ["rider-A"]
    # the Avro schema in the header names the same columns, typed alike
    assert block.records().schema.names == [f["name"] for f in block.avro_schema()["fields"]]


def test_delete_block_written_by_hudi() -> None:
    _, data = _fixture("valid_log_delete")
    (block,) = read_blocks(data)
    assert block.block_type == BlockType.DELETE and block.instant_time == "20250618054714114"
    deletes = block.deletes()
    assert {d.record_key for d in deletes} == {  # riders A, C, D of datagen.sql
        "334e26e9-8355-45cc-97c6-c31daf0df330",
        "e96c4396-3fad-413a-a942-4cb36106d721",
        "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
    }
    assert {d.partition_path for d in deletes} == {"city=san_francisco"}
    with pytest.raises(LogFormatError, match="records are not read"):
        block.records()


def test_rollback_command_block_written_by_hudi() -> None:
    name, data = _fixture("valid_log_rollback")
    (block,) = read_blocks(data)
    assert block.block_type == BlockType.COMMAND and block.is_rollback
    assert block.instant_time == "20250126040936578"
    assert block.target_instant_time == "20250126040826878"
    assert LogFileName.parse(name) == LogFileName(
        "0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0", "20250126040823628", 2, "1-0-1", False
    )


def test_log_file_names() -> None:
    assert LogFileName.parse(".f1-0_20250101000000000.log.3_0-1-2.cdc") == LogFileName(
        "f1-0", "20250101000000000", 3, "0-1-2", True
    )
    assert LogFileName.parse("f1-0_20250101000000000.log.1") is None  # no leading dot
    # in Hudi's metadata table, a slice's base instant may carry a suffix (001: a compaction)
    assert LogFileName.parse(".files-0000-0_20261127185239487001.log.1_0-1-2") == LogFileName(
        "files-0000-0", "20261127185239487001", 1, "0-1-2", False
    )
    # ... and two: a compaction of a suffixed deltacommit (an index's initialization, <t>004)
    assert LogFileName.parse(".col-stats-0000-0_20261128040056131004001.log.1_0-0-0") == (
        LogFileName("col-stats-0000-0", "20261128040056131004001", 1, "0-0-0", False)
    )
    assert LogFileName.parse(".f1-0_2025010100000000.log.1") is None  # 16 digits
    assert LogFileName.parse("f1-0_0-1-2_20250101000000000.parquet") is None
    first = LogFileName.parse(".f_20250101000000000.log.2_0-1-2")
    retried = LogFileName.parse(".f_20250101000000000.log.2_1-1-3")
    later = LogFileName.parse(".f_20250101000000000.log.10_0-1-2")
    assert first and retried and later
    assert sorted([later, retried, first], key=lambda n: n.order) == [first, retried, later]


@pytest.fixture(params=["bytes", "ranged reads"])
def blocks_of(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[bytes], list[LogBlock]]:
    """A log file's blocks read from its bytes, or from storage by ranged reads (scanning for
    the next magic 13 bytes at a time, so that magics straddle the reads)."""
    if request.param == "bytes":
        return read_blocks
    storage = Storage(str(tmp_path))

    def ranged(data: bytes) -> list[LogBlock]:
        storage.overwrite("log", data)
        read = partial(storage.read_range, "log")
        return list(iter_blocks(read, len(data), scan_chunk=13))

    return ranged


def test_a_log_file_is_read_block_by_block_from_storage(tmp_path: Path) -> None:
    _, data = _fixture("valid_log_avro_data")
    _, rollback = _fixture("valid_log_rollback")
    storage = Storage(str(tmp_path))
    storage.overwrite("p/.f_20250101000000000.log.1_0-1-1", data + rollback + data[:100])
    reads = storage.requests.get("read", 0)
    blocks = list(read_log_file(storage, "p/.f_20250101000000000.log.1_0-1-1"))
    assert [b.block_type for b in blocks] == [
        BlockType.AVRO_DATA,
        BlockType.COMMAND,
        BlockType.CORRUPT,
    ]
    assert blocks[0] == read_blocks(data)[0] and blocks[1].offset == len(data)
    # a block: its head, its trailer, then the block; the partial one: its head and one scan
    assert storage.requests["read"] - reads == 3 + 3 + 2


def test_a_partial_last_block_is_corrupt_and_the_blocks_before_it_count(
    blocks_of: Callable[[bytes], list[LogBlock]],
) -> None:
    """A writer killed mid-append: the blocks before are read whole, the tail is one corrupt
    block however it was cut."""
    _, data = _fixture("valid_log_avro_data")
    _, rollback = _fixture("valid_log_rollback")
    for cut in (1, 5, len(MAGIC) + 8, 100, len(data) - 1):
        blocks = blocks_of(data + rollback + data[:cut])
        assert [b.block_type for b in blocks] == [
            BlockType.AVRO_DATA,
            BlockType.COMMAND,
            BlockType.CORRUPT,
        ], cut
        assert blocks[2].offset == len(data) + len(rollback) and blocks[2].size == cut
        assert blocks[0].records().num_rows == 1


def test_a_damaged_block_is_skipped_up_to_the_next_magic(
    blocks_of: Callable[[bytes], list[LogBlock]],
) -> None:
    _, data = _fixture("valid_log_avro_data")
    # bytes between blocks
    blocks = blocks_of(data + b"garbage" + data)
    assert [(b.block_type, b.size) for b in blocks] == [
        (BlockType.AVRO_DATA, len(data)),
        (BlockType.CORRUPT, 7),
        (BlockType.AVRO_DATA, len(data)),
    ]
    # a trailer that disagrees with the leading length
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    blocks = blocks_of(bytes(damaged) + data)
    assert [(b.block_type, b.offset) for b in blocks] == [
        (BlockType.CORRUPT, 0),
        (BlockType.AVRO_DATA, len(data)),
    ]
    # a leading length past the end of the file
    damaged = bytearray(data)
    damaged[len(MAGIC)] = 0x7F
    assert [b.block_type for b in blocks_of(bytes(damaged))] == [BlockType.CORRUPT]
    # framed whole but not readable: an error naming the block, never records silently lost
    for where, value in [(len(MAGIC) + 8, 2), (len(MAGIC) + 12, 9), (len(MAGIC) + 20, 42)]:
        odd = bytearray(data)  # format version, block type, first header key
        odd[where : where + 4] = value.to_bytes(4, "big")
        with pytest.raises(LogFormatError, match="block at byte 0"):
            blocks_of(bytes(odd))
    # whole framing around content that is not what the block type says
    (block,) = read_blocks(data)
    bad = LogBlock(block.block_type, 0, block.size, block.header, content=block.content[:40])
    with pytest.raises(LogFormatError, match="Avro data block at 0"):
        bad.records()


def _block(kind: BlockType, instant: str, **header: str) -> LogBlock:
    keys = {HeaderKey.INSTANT_TIME: instant}
    keys.update({HeaderKey[k.upper()]: v for k, v in header.items()})
    return LogBlock(kind, 0, 0, keys)


def test_which_blocks_count_in_a_file_slice() -> None:
    t1 = _block(BlockType.AVRO_DATA, "001")
    t2 = _block(BlockType.DELETE, "002")
    t2b = _block(BlockType.AVRO_DATA, "002")
    t3 = _block(BlockType.AVRO_DATA, "003")
    pending = _block(BlockType.AVRO_DATA, "009")
    rollback = _block(BlockType.COMMAND, "004", target_instant_time="002", command_block_type="0")
    corrupt = LogBlock(BlockType.CORRUPT, 0, 0)
    done = {"001", "002", "003", "004", "005"}.__contains__
    # a rollback in a later log file removes its target's blocks in earlier files, not later ones
    after = _block(BlockType.AVRO_DATA, "002")
    assert effective_blocks([[t1, t2, corrupt], [t2b, t3, pending, rollback, after]], done) == [
        t1,
        t3,
        after,
    ]
    # log compaction: its block replaces those of the instants it lists
    compacted = _block(BlockType.AVRO_DATA, "005", compacted_block_times="001,003")
    assert effective_blocks([[t1, t2, t3, compacted]], done) == [t2, compacted]
    # nothing of an instant that is not completed counts, rollbacks included
    assert effective_blocks([[t1]], lambda t: False) == []


def _unpack(name: str, into: Path) -> Path:
    archive = DATA / "mor" / f"{name}.zip"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(into, [m for m in zipped.namelist() if not m.startswith("__MACOSX")])
    return into / name


def merge(
    base_rows: list[dict[str, Any]],
    log_files: list[list[LogBlock]],
    is_completed: Callable[[str], bool],
) -> dict[str, dict[str, Any]]:
    """A file slice's live rows by record key: its base file's, then the blocks of its log files
    that count, upserts replacing a key's row and deletes removing it."""
    live = {r["_hoodie_record_key"]: r for r in base_rows}
    for block in effective_blocks(log_files, is_completed):
        if block.block_type == BlockType.DELETE:
            for d in block.deletes():
                live.pop(str(d.record_key), None)
        else:
            live.update({r["_hoodie_record_key"]: r for r in block.records().to_pylist()})
    return live


def _merged_slices(base: Path) -> dict[str, dict[str, Any]]:
    """Every live row by record key, from the file slices hudi-rs lists."""
    import hudi

    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    timeline = table.get_timeline()
    done = timeline.get_completed_commits() + timeline.get_completed_deltacommits()
    completed = {i.timestamp for i in done}
    rows: dict[str, dict[str, Any]] = {}
    for file_slice in table.get_file_slices():
        base_rows = []
        if file_slice.base_file_name:
            base_rows = pq.read_table(base / file_slice.base_file_relative_path()).to_pylist()
        names = [(LogFileName.parse(n), n) for n in file_slice.log_file_names]
        assert all(parsed is not None for parsed, _ in names), names
        ordered = sorted(names, key=lambda p: p[0].order if p[0] else ())
        part = base / file_slice.partition_path
        log_files = [read_blocks((part / n).read_bytes()) for _, n in ordered]
        rows.update(merge(base_rows, log_files, completed.__contains__))
    return rows


@pytest.mark.parametrize("name", ["v6_trips_8i1u", "v6_trips_8i3d"])
def test_slices_merged_from_our_blocks_hold_hudis_rows(name: str, tmp_path: Path) -> None:
    """On merge-on-read tables Apache Hudi wrote (an update; deletes, re-inserts and deletes
    again), each key's row from its slice's base file and our blocks is the row hudi-rs reads."""
    import hudi

    base = _unpack(name, tmp_path)
    logs = [p for p in base.rglob(".*.log.*")]
    assert logs, "the sample has log files"
    merged = _merged_slices(base)
    batches = hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
    theirs = pa.Table.from_batches(batches).to_pylist()
    columns = ("uuid", "rider", "fare", "ts", "_hoodie_commit_time")
    assert {r["uuid"]: tuple(r[c] for c in columns) for r in theirs} == {
        k: tuple(r[c] for c in columns) for k, r in merged.items()
    }
