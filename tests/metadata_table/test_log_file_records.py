"""A merge-on-read log file's index records come from the records its counted blocks hold
(``info_from_log``), on log files made to order with the kernel's block encoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metadata_table.records import RECORD_KEY, column_stats_records, info_from_log
from timeline.log_format import (
    ROLLBACK_COMMAND,
    BlockType,
    HeaderKey,
    avro_data_content,
    encode_block,
)
from timeline.storage import Storage

NAME = ".fg1-0_20260101000000000.log.1_0-1-1"


def _schema(*extra: str) -> dict[str, Any]:
    fields = [
        {"name": RECORD_KEY, "type": ["null", "string"], "default": None},
        {"name": "fare", "type": ["null", "double"], "default": None},
    ]
    fields += [{"name": e, "type": ["null", "long"], "default": None} for e in extra]
    return {"type": "record", "name": "r", "fields": fields}


def _data(instant: str, rows: list[dict[str, Any]], *extra: str) -> bytes:
    schema = _schema(*extra)
    header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: json.dumps(schema)}
    return encode_block(BlockType.AVRO_DATA, header, avro_data_content(rows, schema))


def _write(tmp_path: Path, *blocks: bytes) -> tuple[Storage, int]:
    storage = Storage(str(tmp_path))
    data = b"".join(blocks)
    storage.create(f"p0/{NAME}", data)
    return storage, len(data)


def _stats(storage: Storage, size: int, counted: Any) -> dict[str, dict[str, Any]]:
    info = info_from_log(storage, "p0", NAME, size, counted)
    assert info is not None
    return {r["column_name"]: r for r in column_stats_records([info]).to_pylist()}


def test_stats_cover_the_counted_blocks_only(tmp_path: Path) -> None:
    storage, size = _write(
        tmp_path,
        _data("001", [{RECORD_KEY: "a", "fare": 1.0}, {RECORD_KEY: "b", "fare": 9.0}]),
        _data("002", [{RECORD_KEY: "c", "fare": 1e9}]),  # a failed write's block
    )
    committed = _stats(storage, size, {"001"}.__contains__)
    fare = committed["fare"]
    assert (fare["min_value"]["float"], fare["max_value"]["float"]) == (1.0, 9.0)
    assert (fare["value_count"], fare["null_count"], fare["instant"]) == (2, 0, "001")
    both = _stats(storage, size, {"001", "002"}.__contains__)["fare"]
    assert (both["max_value"]["float"], both["value_count"], both["instant"]) == (1e9, 3, "002")
    assert info_from_log(storage, "p0", NAME, size, "003".__eq__) is None


def test_rows_of_blocks_without_a_column_count_as_its_nulls(tmp_path: Path) -> None:
    """A column added after the first block: the first block's rows are its nulls, so
    ``extra IS NULL`` never drops the file."""
    storage, size = _write(
        tmp_path,
        _data("001", [{RECORD_KEY: "a", "fare": 1.0}]),
        _data("002", [{RECORD_KEY: "b", "fare": 2.0, "extra": 5}], "extra"),
    )
    extra = _stats(storage, size, lambda _: True)["extra"]
    assert (extra["value_count"], extra["null_count"], extra["min_value"]["int"]) == (2, 1, 5)


def test_deletes_alone_hold_no_values_and_a_rollback_alone_adds_nothing(tmp_path: Path) -> None:
    header = {HeaderKey.INSTANT_TIME: "001", HeaderKey.SCHEMA: json.dumps(_schema())}
    # a delete block's content is not read: its keys are not values
    storage, size = _write(tmp_path, encode_block(BlockType.DELETE, header, b"\0\0\0\3"))
    fare = _stats(storage, size, lambda _: True)["fare"]
    assert (fare["value_count"], fare["null_count"], fare["min_value"]["float"]) == (0, 0, None)
    rollback = {
        HeaderKey.INSTANT_TIME: "002",
        HeaderKey.TARGET_INSTANT_TIME: "001",
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK_COMMAND,
    }
    (tmp_path / "p0" / NAME).unlink()
    storage, size = _write(tmp_path, encode_block(BlockType.COMMAND, rollback))
    assert info_from_log(storage, "p0", NAME, size, lambda _: True) is None


def test_partition_stats_reads_a_log_file_again_once_its_counted_blocks_change(
    tmp_path: Path,
) -> None:
    """partition_stats keeps a log file's info between recomputations, but not across a
    rollback of a completed deltacommit (its blocks stop counting)."""
    from metadata_table.partition_stats import _Footers
    from timeline.fs_view import LogFile

    storage, size = _write(
        tmp_path,
        _data("001", [{RECORD_KEY: "a", "fare": 1.0}]),
        _data("002", [{RECORD_KEY: "b", "fare": 1e9}]),
    )
    log = LogFile.parse("p0", NAME, size)
    assert log is not None
    footers = _Footers(8)
    both = footers.log_info(storage, log, {"001", "002"})  # type: ignore[arg-type]
    assert both is not None and both.instant == "002"
    again = footers.log_info(storage, log, {"001", "002"})  # type: ignore[arg-type]
    assert again is both  # kept
    rolled_back = footers.log_info(storage, log, {"001"})  # type: ignore[arg-type]
    assert rolled_back is not None and rolled_back.instant == "001"
    assert rolled_back.stats is not None and rolled_back.stats["fare"].maximum == 1.0
