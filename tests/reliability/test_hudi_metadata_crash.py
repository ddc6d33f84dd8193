"""The crash matrix of a commit of ours on a table whose Apache Hudi metadata table it keeps
(``indexer.write.hudi_metadata_table=maintain``, the default): the writer is killed before each
storage mutation from its first write into ``.hoodie/metadata`` on (the metadata deltacommit's
log files and instant files, the data instant's completion, then the metadata table's compaction
and clean that the commit makes due), as in test_crash_matrix.py. Then the failed write is
rolled back (its metadata deltacommit taken out), and the next commit finishes an interrupted
compaction or clean of the metadata table; Hudi's metadata table equals a rebuild from the data
files (``indexer validate``) at each step, and Hudi 0.15's reader, through its metadata table,
reads exactly the rows."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from metadata_table.hudi_table import HudiMetadataTable
from metadata_table.validate import validate_hudi
from timeline import Table
from timeline.config import Config
from timeline.removals import index_removal_hook
from timeline.rollback import clean_failed_writes
from writer.client import WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import by_key, make_rows
from .conftest import MATRIX, SOAK
from .test_crash_matrix import (
    HEARTBEAT_MS,
    conf_args,
    config,
    fresh,
    mutations,
    run,
    settings,
)

INDEXES = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
}
#: every commit makes the metadata table's compaction due, so its points are in the matrix too
COMPACT_EVERY_KEY = "hoodie.metadata.compact.max.delta.commits"
COMPACT_EVERY = f"{COMPACT_EVERY_KEY}=1"
FIRST = make_rows(range(20), ts=1, parts=2)
WRITE = make_rows([*range(10, 20), 50, 51], ts=2, parts=2)  # 10 updates, 2 inserts


@pytest.fixture(scope="module")
def template(hudi: HudiPeer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table Hudi wrote with its metadata table and every partition of it, then two commits
    of ours, each compacting that table: the traced write's compaction leaves some file groups
    three slices, so a clean of the metadata table follows it."""
    folder = tmp_path_factory.mktemp("hudi-mdt-template")
    hudi.write(HudiTable(str(folder / "t"), extra=INDEXES), "insert", FIRST)
    table = Table.open(
        str(folder / "t"),
        Config.resolve(explicit={**settings(folder), COMPACT_EVERY_KEY: "1"}),
    )
    with WriteClient(table) as client:
        for _ in range(2):
            client.upsert(make_rows([0, 1, 2], ts=1, parts=2))
    return folder


def _args(folder: Path, data: Path) -> list[str]:
    base = str(folder / "t")
    upsert = [base, "--input", str(data), "--operation", "upsert"]
    return [*upsert, f"--conf={COMPACT_EVERY}", *conf_args(folder)]


@pytest.fixture(scope="module")
def points(template: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, str]]:
    """(number, mutation) of the traced write from its first metadata-table mutation on."""
    tmp = tmp_path_factory.mktemp("hudi-mdt-trace")
    pq.write_table(WRITE, tmp / "in.parquet")
    folder, _ = fresh(template, tmp)
    done = run("writer", _args(folder, tmp / "in.parquet"), "storage.write:trace")
    assert done.returncode == 0, done.stderr[-3000:]
    traced = list(enumerate(mutations(done.stderr), 1))
    first = next(n for n, what in traced if ".hoodie/metadata/" in what)
    # of the clean's deletes, the first and the last (the others kill the same state)
    deletes = [n for n, what in traced if what.startswith("delete .hoodie/metadata/")]
    between = set(deletes[1:-1])
    return [(n, what) for n, what in traced if n >= first and n not in between]


SLOTS = 40  # more than the traced write makes from there; slots past the end are skipped


def _valid(table: Table) -> None:
    bad = [r.to_json() for r in validate_hudi(table) if not r.ok]
    assert not bad, json.dumps(bad)


def _hudi_rows(hudi: HudiPeer, folder: Path) -> dict[Any, Any]:
    rows = hudi.read(HudiTable(str(folder / "t"), extra=INDEXES), metadata=True).to_pylist()
    keys = [r["_hoodie_record_key"] for r in rows]
    assert len(keys) == len(set(keys)), "a record key appears twice"
    return {k: v["ts"] for k, v in by_key(rows).items()}


@pytest.mark.parametrize("slot", range(SLOTS))
def test_hudi_metadata_crash_point(
    slot: int, points: list[tuple[int, str]], template: Path, hudi: HudiPeer, tmp_path: Path
) -> None:
    if slot >= len(points):
        pytest.skip(f"the write makes {len(points)} crash points from its metadata update on")
    if not SOAK and slot % 2 and slot < len(points) - 4:
        pytest.skip("sampled out (AIX_SOAK=1 runs every point)")
    n, what = points[slot]
    pq.write_table(WRITE, tmp_path / "in.parquet")
    folder, table = fresh(template, tmp_path)
    before = len(list(table.timeline.load().write_timeline().completed()))
    killed = run("writer", _args(folder, tmp_path / "in.parquet"), f"storage.write@{n}:kill")
    # a write's data files have new names each run, which route to other file groups of the
    # metadata table: a run may make a few mutations fewer than the traced one, and finish
    assert killed.returncode in (-9, 0), killed.stderr[-2000:]
    time.sleep(3 * HEARTBEAT_MS / 1000)  # the dead writer's heartbeat expires
    clean_failed_writes(table, index_removal_hook(table))
    landed = len(list(table.timeline.load().write_timeline().completed())) > before
    expected = {k: 1 for k in range(20)} | (
        {k: 2 for k in (*range(10, 20), 50, 51)} if landed else {}
    )
    _valid(table)  # a pending compaction or clean of the metadata table changes nothing read
    # the next commit of ours finishes a compaction or clean of the metadata table left pending
    again = Table.open(str(folder / "t"), config(folder))
    with WriteClient(again) as client:
        client.upsert(make_rows([0], ts=3, parts=2))
    expected[0] = 3
    assert not [i for i in HudiMetadataTable(again).instants if i[2]], "an instant stayed pending"
    _valid(again)
    assert _hudi_rows(hudi, folder) == expected
    outcome = "committed before the kill" if landed else "rolled back, its deltacommit taken out"
    if killed.returncode == 0:
        outcome = "ran to its end (fewer mutations this run)"
    MATRIX.append(("hudi-mdt writer", f"#{n} before {what}", outcome))
