"""`python -m writer`: write a file of records as one commit; clear errors with exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeline import Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from writer.client import Operation, WriteClient


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "writer", *args], capture_output=True, text=True, timeout=120
    )


def _setup(tmp_path: Path) -> tuple[str, list[str], Table]:
    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    base = str(tmp_path / "t")
    table = Table.create(
        base,
        "trips",
        ["uuid"],
        ["city"],
        "ts",
        config=Config.resolve(explicit={"indexer.lock.url": lock}),
    )
    return base, ["--conf", f"indexer.lock.url={lock}"], table


def _snapshot(table: Table) -> dict[str, int]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    return {r["uuid"]: r["ts"] for r in data.to_pylist()}


@pytest.mark.slow
def test_csv_json_parquet_inputs(tmp_path: Path) -> None:
    base, conf, table = _setup(tmp_path)
    csv = tmp_path / "in.csv"
    csv.write_text("uuid,city,ts\na,sf,1\nb,la,1\n")
    done = _run(base, "--input", str(csv), "--operation", "insert", *conf)
    assert done.returncode == 0, done.stderr
    instant = done.stdout.strip()
    assert table.timeline.load().get(instant).is_completed  # type: ignore[union-attr]
    js = tmp_path / "in.json"
    js.write_text(json.dumps({"uuid": "a", "city": "sf", "ts": 2}) + "\n")
    assert _run(base, "--input", str(js), "--operation", "upsert", *conf).returncode == 0
    pqf = tmp_path / "in.parquet"
    pq.write_table(pa.table({"uuid": ["b"], "city": ["la"], "ts": pa.array([0], pa.int64())}), pqf)
    assert _run(base, "--input", str(pqf), "--operation", "delete", *conf).returncode == 0
    assert _snapshot(table) == {"a": 2}


def test_conflict_exits_1(tmp_path: Path) -> None:
    base, conf, table = _setup(tmp_path)
    WriteClient(table).insert(pa.table({"uuid": ["a", "b"], "city": ["sf", "sf"], "ts": [1, 1]}))
    running = WriteClient(table).start(Operation.UPSERT)
    running.write(pa.table({"uuid": ["a"], "city": ["sf"], "ts": [2]}))
    csv = tmp_path / "b.csv"
    csv.write_text("uuid,city,ts\nb,sf,3\n")
    done = _run(
        base, "--input", str(csv), "--operation", "upsert", "--early-conflict-detection", *conf
    )
    assert done.returncode == 1
    assert "cannot resolve conflicts for overlapping writes" in done.stderr
    running.commit()
    assert _snapshot(table) == {"a": 2, "b": 1}


@pytest.mark.slow
def test_bad_input_exits_1(tmp_path: Path) -> None:
    base, conf, _ = _setup(tmp_path)
    missing = _run(base, "--input", str(tmp_path / "nope.csv"), "--operation", "insert", *conf)
    assert missing.returncode == 1 and "no such file" in missing.stderr
    odd = tmp_path / "in.xml"
    odd.write_text("<x/>")
    fmt = _run(base, "--input", str(odd), "--operation", "insert", *conf)
    assert fmt.returncode == 1 and "unknown format" in fmt.stderr
    nokey = tmp_path / "nokey.csv"
    nokey.write_text("id,city,ts\na,sf,1\n")
    bad = _run(base, "--input", str(nokey), "--operation", "insert", *conf)
    assert bad.returncode == 1 and "column 'uuid': missing" in bad.stderr
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"not parquet")
    assert _run(base, "--input", str(garbage), "--operation", "insert", *conf).returncode == 1
    assert "--early-conflict-detection" in _run("--help").stdout
