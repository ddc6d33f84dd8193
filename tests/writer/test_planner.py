"""The one write planner of both engines (writer/planner.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeline.errors import BadRecordsError
from timeline.fs_view import BaseFile
from timeline.markers import IOType
from writer.planner import (
    bucket_file_id,
    derived_file_id,
    new_file_id,
    plan_group,
    records_per_file,
)

ROOT = Path(__file__).resolve().parents[2]


def _rows(keys: list[str], ts: list[int]) -> pa.Table:
    return pa.table({"uuid": keys, "ts": pa.array(ts, pa.int64())})


def test_a_new_group_splits_into_files_with_ids_derived_from_the_first() -> None:
    first = new_file_id()
    keys = [f"k{i}" for i in range(7)]
    planned = plan_group(
        "sf", first, None, _rows(keys, [1] * 7), keys, deleting=False, precombine="ts", per_file=3
    )
    assert [len(t.incoming_keys) for t in planned] == [3, 3, 1]
    assert [t.file_id for t in planned] == [
        first,
        derived_file_id(first, 1),
        derived_file_id(first, 2),
    ]
    assert derived_file_id(first, 2) == derived_file_id(first, 2) != derived_file_id(first, 1)
    assert all(t.io_type is IOType.CREATE and t.base is None for t in planned)
    # a bucket's group (per_file None) is one file
    bucket = bucket_file_id(3)
    assert (
        bucket.startswith("00000003-")
        and len(
            plan_group(
                "sf", bucket, None, _rows(keys, [1] * 7), keys, deleting=False, precombine="ts"
            )
        )
        == 1
    )


def test_duplicates_keep_the_largest_precombine_value_or_are_refused() -> None:
    keys = ["a", "b", "a"]
    (target,) = plan_group(
        "sf", "f-0", None, _rows(keys, [5, 1, 3]), keys, deleting=False, precombine="ts"
    )
    assert target.incoming is not None
    assert dict(
        zip(target.incoming_keys, target.incoming.column("ts").to_pylist(), strict=True)
    ) == {
        "a": 5,
        "b": 1,
    }
    with pytest.raises(BadRecordsError, match="appears more than once"):
        plan_group("sf", "f-0", None, _rows(keys, [5, 1, 3]), keys, deleting=False, precombine=None)
    with pytest.raises(BadRecordsError, match="precombine field is missing"):
        plan_group(
            "sf", "f-0", None, pa.table({"uuid": keys}), keys, deleting=False, precombine="ts"
        )


def test_existing_groups_merge_and_deletes_touch_only_existing_groups() -> None:
    base = BaseFile(
        "sf", "f-0", "20261123120000000", "1-0-0", "f-0_1-0-0_20261123120000000.parquet"
    )
    keys = ["a", "b"]
    (merge,) = plan_group(
        "sf", "f-0", base, _rows(keys, [1, 1]), keys, deleting=False, precombine="ts"
    )
    assert merge.io_type is IOType.MERGE and merge.base is base
    (delete,) = plan_group(
        "sf", "f-0", base, _rows(keys, [1, 1]), keys, deleting=True, precombine="ts"
    )
    assert delete.delete_keys == {"a", "b"} and delete.incoming is None
    assert (
        plan_group("sf", "f-1", None, _rows(keys, [1, 1]), keys, deleting=True, precombine="ts")
        == []
    )


def test_records_per_file_follows_the_record_size() -> None:
    assert records_per_file(100, max_records=1_000_000, max_file_bytes=1000) == 10
    assert records_per_file(1, max_records=5, max_file_bytes=1000) == 5
    assert records_per_file(10_000, max_records=5, max_file_bytes=1000) == 1


def test_both_engines_plan_through_it_with_one_file_id_rule() -> None:
    for engine in ("client.py", "spark.py"):
        text = (ROOT / "writer" / engine).read_text()
        assert "plan_group(" in text, engine
        assert "uuid" not in text, f"writer/{engine} makes file ids of its own"
