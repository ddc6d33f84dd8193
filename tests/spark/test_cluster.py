"""Writes and index builds on a real Spark standalone cluster (master + two workers on loopback),
through the CLIs, each in its own driver process: a retried task's partial file and a speculative
task's duplicate are deleted by finalize; killing a worker mid-build ends in exact indexes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeline import Table
from timeline.commit_metadata import CommitMetadata
from timeline.config import Config
from timeline.instant import Action, State
from writer.client import WriteClient

from ..conftest import TEST_JVM_OPTIONS
from ..indexer.test_indexer import ALL, assert_exact
from ..writer.test_failed_writes import hudi_rs, ours
from .conftest import WORKER_HOSTS, SparkCluster

DRIVER = [
    "--spark-conf",
    "spark.driver.host=127.0.0.1",
    "--spark-conf",
    "spark.driver.bindAddress=127.0.0.1",
    "--spark-conf",
    "spark.executor.memory=512m",
    "--spark-conf",
    f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}",
]
SPECULATION = [
    "--spark-conf",
    "spark.speculation=true",
    "--spark-conf",
    "spark.speculation.interval=100ms",
    "--spark-conf",
    "spark.speculation.quantile=0.5",
    "--spark-conf",
    "spark.speculation.multiplier=1.5",
    "--spark-conf",
    "spark.speculation.minTaskRuntime=500ms",
]
TOKEN = re.compile(r"^[0-9a-f-]+-\d+_(\d+)-(\d+)-(\d+)_(\d{17})\.parquet$")
FINALIZED = re.compile(r"finalize \S+: deleting (\S+) \(not in the write stats\)")


def make_table(base: Path) -> Table:
    config = Config.resolve(explicit={"indexer.lock.url": lock_url(base)})
    return Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config)


def lock_url(base: Path) -> str:
    return f"sqlite:///{base.parent / (base.name + '.locks')}"


def records(start: int, stop: int, ts: int) -> pa.Table:
    n = stop - start
    return pa.table(
        {
            "uuid": [f"u{i:05d}" for i in range(start, stop)],
            "city": [["sf", "nyc", "la", "sea"][i % 4] for i in range(start, stop)],
            "ts": pa.array([ts] * n, pa.int64()),
            "fare": [float(i * ts) for i in range(start, stop)],
        }
    )


def cli(
    module: str,
    base: Path,
    *args: str,
    command_name: str | None = None,
    cluster: SparkCluster,
    failpoint: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIX_FAILPOINT"}
    if failpoint:
        env["AIX_FAILPOINT"] = failpoint
    command = [sys.executable, "-m", module, *([command_name] if command_name else []), str(base)]
    command += args
    command += ["--conf", f"indexer.lock.url={lock_url(base)}", "-v"]
    command += ["--spark-master", cluster.url, *DRIVER]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def spark_write(
    base: Path,
    data: pa.Table,
    operation: str,
    cluster: SparkCluster,
    *extra: str,
    failpoint: str | None = None,
) -> tuple[str, str]:
    """(instant time, log) of one write through ``python -m writer --engine spark``."""
    path = base.parent / f"{base.name}-input-{time.monotonic_ns()}.parquet"
    pq.write_table(data, path)
    done = cli(
        "writer",
        base,
        "--input",
        str(path),
        "--operation",
        operation,
        "--engine",
        "spark",
        "--conf",
        "indexer.write.max.records.per.file=25",
        *extra,
        cluster=cluster,
        failpoint=failpoint,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1], done.stderr


def check_commit(base: Path, instant_time: str) -> CommitMetadata:
    """Every data file of the instant on storage is one of its write stats, and each file name
    carries a Spark write token."""
    table = Table.open(str(base), Config.resolve(explicit={"indexer.lock.url": lock_url(base)}))
    timeline = table.timeline.load()
    instant = timeline.get(instant_time, Action.COMMIT)
    assert instant is not None and instant.state is State.COMPLETED
    metadata = CommitMetadata.from_bytes(table.timeline.read_content(instant))
    committed = {s.path for s in metadata.write_stats}
    on_storage = {
        e.path
        for e in table.storage.list(recursive=True)
        if e.path.endswith(f"_{instant_time}.parquet") and not e.path.startswith(".hoodie")
    }
    assert on_storage == committed
    for path in committed:
        match = TOKEN.match(path.rsplit("/", 1)[1])
        assert match and match.group(4) == instant_time, path
    return metadata


def expected(*batches: pa.Table) -> dict[str, float]:
    out: dict[str, float] = {}
    for batch in batches:
        out.update(
            zip(batch.column("uuid").to_pylist(), batch.column("fare").to_pylist(), strict=True)
        )
    return out


def fares(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = [r["uuid"] for r in rows]
    assert len(keys) == len(set(keys)), "a record is in the table twice"
    return {r["uuid"]: r["fare"] for r in rows}


def assert_table(base: Path, want: dict[str, float]) -> None:
    table = Table.open(str(base), Config.resolve(explicit={"indexer.lock.url": lock_url(base)}))
    assert fares(ours(table)) == want
    assert fares(hudi_rs(str(base), {})) == want


def test_writes_run_on_the_cluster(tmp_path: Path, spark_cluster: SparkCluster) -> None:
    base = tmp_path / "t"
    make_table(base)
    first, second = records(0, 200, 1), records(100, 300, 2)
    t1, _ = spark_write(base, first, "insert", spark_cluster, "--markers", "timeline-server")
    t2, _ = spark_write(base, second, "upsert", spark_cluster, "--markers", "direct")
    stats = check_commit(base, t1).write_stats
    assert len(stats) >= 200 // 25 and all(s.num_writes <= 25 for s in stats)
    assert {s.num_update_writes for s in check_commit(base, t2).write_stats} != {0}
    t3, _ = spark_write(base, records(0, 50, 3), "delete", spark_cluster)
    check_commit(base, t3)
    want = expected(first, second)
    for key in records(0, 50, 3).column("uuid").to_pylist():
        del want[key]
    assert_table(base, want)


@pytest.mark.parametrize("mode", ["kill", pytest.param("raise", marks=pytest.mark.soak)])
def test_a_retried_task_leaves_no_partial_file(
    tmp_path: Path, spark_cluster: SparkCluster, mode: str
) -> None:
    base = tmp_path / "t"
    make_table(base)
    data = records(0, 200, 1)
    point = "spark.write.partial" + (":kill" if mode == "kill" else "")
    instant_time, log = spark_write(base, data, "insert", spark_cluster, failpoint=point)
    deleted = FINALIZED.findall(log)
    assert len(deleted) == 1, log[-3000:]  # the first attempt's half-written file
    print(f"retry ({mode}): finalize deleted the partial file {deleted[0]}")
    metadata = check_commit(base, instant_time)
    partial = deleted[0].rsplit("/", 1)[1]
    assert int(TOKEN.match(partial).group(3)) not in {  # type: ignore[union-attr]
        int(TOKEN.match(s.file_name).group(3))  # type: ignore[union-attr]
        for s in metadata.write_stats
        if s.file_id == partial.split("_")[0]
    }
    assert_table(base, expected(data))


def test_speculative_duplicates_are_deleted(tmp_path: Path, spark_cluster: SparkCluster) -> None:
    base = tmp_path / "t"
    make_table(base)
    data = records(0, 200, 1)
    instant_time, log = spark_write(
        base,
        data,
        "insert",
        spark_cluster,
        "--markers",
        "timeline-server",
        *SPECULATION,
        failpoint="spark.write.slow:sleep=25",
    )
    deleted = FINALIZED.findall(log)
    assert deleted, log[-3000:]  # the slow first attempt's files, written again by its copy
    print(f"speculation: finalize deleted {len(deleted)} duplicate file(s): {deleted}")
    metadata = check_commit(base, instant_time)
    committed = {s.file_id for s in metadata.write_stats}
    assert {d.rsplit("/", 1)[1].split("_")[0] for d in deleted} <= committed
    assert_table(base, expected(data))


def indexed_table(base: Path, commits: int) -> Table:
    table = make_table(base)
    with WriteClient(table) as client:
        for i in range(commits):
            client.insert(records(i * 100, i * 100 + 100, 1))
    return table


def index_run(base: Path, cluster: SparkCluster) -> None:
    done = cli(
        "indexer",
        base,
        "--index-types",
        ",".join(ALL),
        command_name="run",
        cluster=cluster,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_index_build_on_the_cluster(tmp_path: Path, spark_cluster: SparkCluster) -> None:
    base = tmp_path / "t"
    table = indexed_table(base, 4)
    index_run(base, spark_cluster)
    assert_exact(table)


def test_killing_a_worker_mid_build(tmp_path: Path, spark_cluster: SparkCluster) -> None:
    """Every first task attempt of the build stalls; a worker dies with its executor while a task
    stalls there. Spark reschedules on the other worker, or the build aborts and a second run
    completes."""
    base = tmp_path / "t"
    table = indexed_table(base, 6)
    earlier_apps = spark_cluster.executor_logs(1)
    env = {k: v for k, v in os.environ.items() if k != "AIX_FAILPOINT"}
    env["AIX_FAILPOINT"] = "build.task:sleep=8"
    command = [sys.executable, "-m", "indexer", "run", str(base)]
    command += ["--index-types", ",".join(ALL), "--parallelism", "6"]
    command += ["--conf", f"indexer.lock.url={lock_url(base)}", "-v"]
    command += ["--spark-master", spark_cluster.url, *DRIVER]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stderr is not None
    lines: list[str] = []
    drain = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    try:
        deadline = time.monotonic() + 120
        while not any("metadata_table.spark_build: building" in line for line in list(lines)):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.2)
        # Kill only once a build task stalls on worker 1: the app may get its executor there
        # late (the previous test's executor can still hold the worker's one core).
        while not any(
            "failpoint build.task" in log.read_text(errors="replace")
            for log in spark_cluster.executor_logs(1) - earlier_apps
        ):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.2)
        spark_cluster.kill_worker(1)
        process.wait(timeout=300)
        drain.join()
        err = "".join(lines)
        print(f"first run after the worker died: exit {process.returncode}")
        assert "Lost executor" in err or process.returncode != 0, err[-3000:]
        if process.returncode != 0:
            index_run(base, spark_cluster)  # the build aborted: a second run completes
        assert_exact(table)
    finally:
        if process.poll() is None:
            process.kill()
        spark_cluster.start_worker(1)
        spark_cluster.wait_for_workers(len(WORKER_HOSTS))
