"""The benchmarks' fast table maker (scripts/bench/synthetic.py) makes a valid table: hudi-rs (an
independent reader) reads every row, and an index built on it equals a rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata_table.layout import PARTITIONS
from metadata_table.maintenance import initialize
from metadata_table.read.snapshot import IndexedSnapshot
from scripts.bench.synthetic import make_table
from timeline import Table
from timeline.config import Config

from .indexer.test_indexer import assert_exact
from .writer.test_failed_writes import hudi_rs


def test_a_synthetic_table_reads_and_indexes_like_any_other(tmp_path: Path) -> None:
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}"})
    table = make_table(tmp_path / "t", files=40, rows=5, partitions=3, config=config)
    rows = hudi_rs(str(tmp_path / "t"), {})
    assert len(rows) == 200
    assert len({r["_hoodie_record_key"] for r in rows}) == 200
    assert {r["_hoodie_partition_path"] for r in rows} == {"p0000", "p0001", "p0002"}
    initialize(table, list(PARTITIONS))
    assert_exact(table)
    snapshot = IndexedSnapshot(table)
    kept = snapshot.prune("ts >= 100 AND ts < 105").candidates  # file 20's rows
    assert [f.file_name for f in kept] == [r["_hoodie_file_name"] for r in rows if r["ts"] == 100]


def test_a_table_of_many_commits_and_random_keys_reads_and_indexes(tmp_path: Path) -> None:
    """``--commits`` spreads the files over commits and ``--random-keys`` the keys over the key
    space; prune() and a key lookup through the index find a row's file."""
    lock = {"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}"}
    config = Config.resolve(explicit=lock)
    table = make_table(
        tmp_path / "t", files=30, rows=8, partitions=2, config=config, commits=3, random_keys=True
    )
    assert len(table.timeline.load().completed().instants) == 3
    rows = hudi_rs(str(tmp_path / "t"), {})
    assert len({r["_hoodie_record_key"] for r in rows}) == len(rows) == 240
    by_file: dict[str, list[str]] = {}
    for r in rows:
        by_file.setdefault(r["_hoodie_file_name"], []).append(r["_hoodie_record_key"])
    # every file's keys span most of the key space: no key range rules a file out
    assert all(min(keys) < "4" and max(keys) > "b" for keys in by_file.values())
    initialize(table, list(PARTITIONS))
    assert_exact(table)
    key, holder = next(
        (r["_hoodie_record_key"], r["_hoodie_file_name"]) for r in rows if r["ts"] == 100
    )
    snapshot = IndexedSnapshot(Table.open(table.base_uri, config))
    assert [f.file_name for f in snapshot.prune("ts = 100").candidates] == [holder]
    assert [h.rpartition("/")[2] for h in snapshot.lookup_keys([key])[key]] == [holder]


def test_bench_scale_stops_its_cluster_when_the_peer_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/bench/scale.py starts a Spark cluster and then Apache Hudi's peer: when the peer
    fails to start, the cluster's JVMs are stopped too (they had been left running)."""
    import tests.hudi_peer.peer as peer_module
    import tests.spark.conftest as spark_conftest
    from scripts.bench import scale

    events: list[str] = []

    class Cluster:
        def __init__(self, folder: Path) -> None:
            pass

        def start(self) -> Cluster:
            events.append("cluster started")
            return self

        def stop(self) -> None:
            events.append("cluster stopped")

    def no_peer(scratch: Path) -> None:
        raise RuntimeError("the peer's python is missing")

    monkeypatch.setattr(spark_conftest, "SparkCluster", Cluster)
    monkeypatch.setattr(peer_module, "start_peer", no_peer)
    with pytest.raises(RuntimeError, match="python is missing"):
        scale.main(["--sizes", "10", "--root", str(tmp_path), "--hudi", "--cluster"])
    assert events == ["cluster started", "cluster stopped"]
