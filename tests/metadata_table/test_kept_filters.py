"""The bloom filters a warm writer keeps (KeptFilters): what a probe of them answers, the filters
its commits add, and what it lets go."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from metadata_table.bloom import SplitBlockBloomFilter, hash_value
from metadata_table.read import kept as kept_module
from metadata_table.read.kept import KeptFilters


def _filter(*keys: str) -> bytes:
    bloom = SplitBlockBloomFilter.build(keys, max(1, len(keys)), 0.01)
    return bytes(bloom.bitset)


def _records(partition: str, names: list[str], deleted: list[bool]) -> pa.Table:
    return pa.table(
        {
            "partition": [partition] * len(names),
            "file_name": names,
            "bloom_filter": pa.array([_filter(n) for n in names], pa.binary()),
            "is_deleted": deleted,
        }
    )


def test_kept_filters_answer_for_the_files_asked_and_take_a_writers_new_ones() -> None:
    kept = KeptFilters()
    assert kept.positions("a", pa.array(["f1"])) is None, "nothing kept yet"
    kept.put("a", pa.array(["f1", "f2", "f3"]), pa.array([_filter("f1"), None, _filter("f3")]))
    names = pa.array(["f3", "new", "f1", "f2"])
    at = kept.positions("a", names)
    assert at is not None and at.tolist() == [2, -1, 0, 1]
    hashes = np.array([hash_value("f1")], dtype=np.uint64)
    # f3's filter lacks f1; a file with none kept and one without a filter may hold anything
    assert kept.might_contain_any("a", hashes, at).tolist() == [False, True, True, True]
    # a commit's records: live ones of kept partitions are kept, tombstones and others not
    kept.add_records(
        pa.concat_tables(
            [
                _records(".", ["x"], [False]),  # the base path's partition, not kept
                _records("a", ["new", "gone"], [False, True]),
            ]
        )
    )
    assert kept.positions("", pa.array(["x"])) is None
    at = kept.positions("a", pa.array(["new", "gone", "f1"]))
    assert at is not None and at.tolist() == [3, -1, 0]
    answers = kept.might_contain_any("a", np.array([hash_value("new")], np.uint64), at)
    assert answers.tolist() == [True, True, False]
    assert kept.might_contain_any("a", hashes, at).tolist() == [False, True, True]


def test_kept_filters_let_go_of_added_filters_past_the_tail_and_of_old_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kept_module, "TAIL_MOST", 2)
    kept = KeptFilters()
    kept.put("a", pa.array(["f1"]), pa.array([_filter("f1")]))
    kept.add_records(_records("a", ["n1", "n2"], [False, False]))
    assert kept.positions("a", pa.array(["n2"])) is not None
    kept.add_records(_records("a", ["n3"], [False]))
    assert kept.positions("a", pa.array(["n3"])) is None, "past the tail: read again"
    one = _filter("f1")
    monkeypatch.setattr(kept_module, "KEPT_BYTES_MOST", 3 * len(one))
    kept.put("a", pa.array(["f1"]), pa.array([one]))
    kept.put("b", pa.array(["f1"]), pa.array([one]))
    assert kept.positions("a", pa.array(["f1"])) is None, "the oldest let go"
    kept.put("c", pa.array([f"f{i}" for i in range(9)]), pa.array([one] * 9))
    assert kept.positions("b", pa.array(["f1"])) is None
    assert kept.positions("c", pa.array(["f8"])) is not None, "the last one is always kept"
