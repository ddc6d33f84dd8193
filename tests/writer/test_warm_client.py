"""A warm write client keeps the latest base files of the partitions it wrote and their bloom
filters from one commit to the next (timeline.fs_view.KeptBaseFiles,
metadata_table.read.kept.KeptFilters). Whatever happened between two of its writes (its own
commits, another writer's, a failed write left pending and then rolled back, the index
compacted), what it keeps must give the answers a fresh snapshot gives, and the table must hold
every key once with its newest value."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from metadata_table.layout import BLOOM_FILTERS, FILES
from metadata_table.maintenance import compact, initialize
from metadata_table.read.snapshot import IndexedSnapshot
from timeline.fs_view import FileSystemView, _kept
from writer.client import Operation, WriteClient, WriteOptions, WriteTransaction

from .test_client import make_table, snapshot

CITIES = ["sf", "la", "ny"]


def _rows(keys: list[int], value: int) -> pa.Table:
    return pa.table(
        {
            "uuid": [f"k{k:04d}" for k in keys],
            "city": [CITIES[k % len(CITIES)] for k in keys],
            "ts": pa.array([value] * len(keys), pa.int64()),
            "fare": [float(value * 10_000 + k) for k in keys],
        }
    )


def _fresh_answers(warm: WriteClient, partitions: list[str]) -> None:
    """What ``warm`` keeps for ``partitions`` equals a fresh snapshot's answers: the latest base
    files, and the files whose filters may hold a set of keys."""
    table = warm.table
    index = IndexedSnapshot(table)
    view: FileSystemView = index.view
    kept = warm.kept_bases.latest_base_table_of(view, partitions)
    assert kept.to_pylist() == _kept(view.latest_base_table_of(partitions)).to_pylist()
    fresh = IndexedSnapshot(table)
    for partition in partitions:
        files = kept.filter(pa.compute.equal(kept.column("partition_path"), partition))
        asked = [f"k{k:04d}" for k in range(0, 400, 7)] + ["absent"]
        with_kept = index.candidate_files(partition, asked, files, warm.kept_filters)
        assert with_kept.to_pylist() == fresh.candidate_files(partition, asked, files).to_pylist()


@pytest.mark.parametrize("seed", range(4))
def test_a_warm_client_answers_as_a_fresh_snapshot_whatever_happened_between(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    table = make_table(str(tmp_path / "t"))
    options = WriteOptions(max_records_per_file=rng.choice([5, 40]))
    warm, other = WriteClient(table, options), WriteClient(table, options)
    model: dict[str, float] = {}

    def write(client: WriteClient, keys: list[int], value: int) -> None:
        client.upsert(_rows(keys, value))
        model.update({f"k{k:04d}": float(value * 10_000 + k) for k in keys})

    write(other, list(range(60)), 1)
    initialize(table, [FILES, BLOOM_FILTERS])
    pending: WriteTransaction | None = None
    for step in range(2, 16):
        keys = rng.sample(range(400), rng.randrange(1, 40))
        action = rng.choice(["warm", "warm", "warm", "other", "pending", "compact"])
        if action == "other":
            write(other, keys, step)
        elif action == "pending" and pending is None:  # a failed write, rolled back later
            pending = other.start(Operation.UPSERT)
            pending.write(_rows(keys, step))
        elif action == "compact":
            compact(table, rng.choice([FILES, BLOOM_FILTERS]))
        else:
            if pending is not None and rng.random() < 0.5:
                pending.abort()
                pending = None
            _fresh_answers(warm, CITIES)
            write(warm, keys, step)
        if action != "pending":
            after = snapshot(table)
            assert {k: r["fare"] for k, r in after.items()} == model, (step, action)
    _fresh_answers(warm, CITIES)


def test_a_warm_clients_next_upsert_neither_lists_nor_reads_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a warm client's upsert into a partition, its next one (nothing else committed
    between) works the partition's latest files out from what it kept and its own commit, and
    probes the filters it kept and those its commit wrote: no listing, no read of the index's
    filters, and every key lands where it belongs."""
    table = make_table(str(tmp_path / "t"))
    warm = WriteClient(table, WriteOptions(max_records_per_file=10))
    warm.upsert(_rows(list(range(0, 90, 3)), 1))  # all in "sf"
    initialize(table, [FILES, BLOOM_FILTERS])
    warm.upsert(_rows(list(range(0, 30, 3)), 2))  # keeps sf's files and filters

    def refused(*_: object) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(FileSystemView, "latest_base_table_of", refused)
    monkeypatch.setattr(IndexedSnapshot, "_partition_filters", refused)
    warm.upsert(_rows(list(range(30, 120, 3)), 3))  # updates and inserts
    warm.upsert(_rows(list(range(0, 120, 3)), 4))  # every key, in the files both wrote
    after = snapshot(table)
    assert {k: r["fare"] for k, r in after.items()} == {
        f"k{k:04d}": float(40_000 + k) for k in range(0, 120, 3)
    }


def test_kept_base_files_let_go_past_their_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client keeps at most KEPT_ROWS_MOST rows: past it, those of its last write's partitions,
    and none when they alone are more; its answers stay a fresh view's."""
    from timeline import fs_view

    table = make_table(str(tmp_path / "t"))
    warm = WriteClient(table, WriteOptions(max_records_per_file=2))
    warm.upsert(_rows(list(range(30)), 1))  # five files in each city
    monkeypatch.setattr(fs_view, "KEPT_ROWS_MOST", 7)
    kept = warm.kept_bases
    view = FileSystemView(table.timeline, table.timeline.load())
    want = _kept(view.latest_base_table_of(["la", "sf"])).to_pylist()
    assert kept.latest_base_table_of(view, ["sf"]).num_rows == 5
    assert kept.latest_base_table_of(view, ["la", "sf"]).to_pylist() == want
    assert not kept._rows, "ten rows asked at once: none kept"
    kept.latest_base_table_of(view, ["sf"])
    kept.latest_base_table_of(view, ["la"])
    assert list(kept._rows) == ["la"], "past the limit: the last write's partitions"
