"""The build in the indexer's own process (``--engine local``, and ``auto`` on a small table with
no Spark master named): which engine runs, the same files as Spark's build, and a kill between
two of its base files ends, after another run, in exact indexes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import PARTITIONS
from metadata_table.table import MetadataTable
from timeline import Table
from timeline.config import Config
from timeline.errors import ConfigError, IndexBuildAbortedError

from .test_indexer import ALL, assert_exact, make_table

TRACED = re.compile(r"failpoint storage\.write#(\d+) trace: create (\S+)")


def lock_config(base: Path) -> dict[str, str]:
    """The lock :func:`make_table` gave ``base``."""
    return {"indexer.lock.url": f"sqlite:///{base.parent / (base.name + '.locks')}"}


def indexer_cli(
    base: Path, *args: str, failpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIX_FAILPOINT"}
    if failpoint:
        env["AIX_FAILPOINT"] = failpoint
    command = [sys.executable, "-m", "indexer", "run", str(base), "--index-types", ",".join(ALL)]
    return subprocess.run(
        [
            *command,
            *args,
            "--conf",
            f"indexer.lock.url={lock_config(base)['indexer.lock.url']}",
            "-v",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def base_files(table: Table) -> dict[str, list[str]]:
    """Partition -> the file groups of its base files (instant times differ between builds)."""
    storage = MetadataTable(table).storage
    return {
        p: sorted(e.name.split("_")[0] for e in storage.list(p) if e.name.endswith(".parquet"))
        for p in PARTITIONS
    }


def test_which_engine_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(tmp_path / "t")

    def engine(files: int, spark: Any = None, on: Table | None = None, **options: Any) -> str:
        return AsyncIndexer(on or table, IndexerOptions(**options), spark=spark).engine(files)

    assert engine(10) == "local"  # auto, no master named
    assert engine(10_000_000) == "local" and engine(10_000_001) == "spark"  # the default limit
    assert engine(10, spark_master="local[1]") == "spark"  # a master named
    assert engine(10, spark=object()) == "spark"  # a session handed in
    assert engine(10, engine="local", spark_master="local[1]") == "local"
    assert engine(10, engine="spark") == "spark"
    never = Config.resolve(
        explicit={"indexer.build.local.max.files": "0", "indexer.lock.url": "sqlite://"}
    )
    assert engine(1, on=Table.open(table.storage.uri(), never)) == "spark"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # spark-submit configured Spark
    assert engine(10) == "spark"
    with pytest.raises(ConfigError, match="unknown build engine 'ray'"):
        engine(10, engine="ray")


def test_the_local_build_writes_what_the_spark_build_writes(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "local" / "t")
    shutil.copytree(tmp_path / "local", tmp_path / "spark")
    twin = Table.open(str(tmp_path / "spark" / "t"), table.config)
    local = AsyncIndexer(table, IndexerOptions(engine="local"))
    local.run(ALL)
    assert local._spark is None, "the local build started Spark"
    AsyncIndexer(twin, spark=spark).run(ALL)
    assert_exact(table)
    assert_exact(twin)
    assert base_files(table) == base_files(twin)
    assert MetadataTable(table).reader(table.timeline.load()).read("column_stats").to_pylist() == (
        MetadataTable(twin).reader(twin.timeline.load()).read("column_stats").to_pylist()
    )


def test_one_configured_worker_writes_on_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``indexer.build.local.workers=1`` writes the file groups on one thread, so a build's
    storage writes come in one order (what the kill below counts on: CI killed at another
    write once two threads wrote); unset, up to twice as many threads as workers write."""
    import threading

    from metadata_table.group_records import PartitionBuild
    from metadata_table.workers import DEFAULT_WORKERS

    writers: set[str] = set()
    original = PartitionBuild.write_group

    def spy(self: PartitionBuild, *args: Any) -> Any:
        writers.add(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(PartitionBuild, "write_group", spy)
    for workers, most in (("1", 1), ("0", 2 * DEFAULT_WORKERS)):
        base = tmp_path / workers / "t"
        table = make_table(base)
        config = Config.resolve(
            explicit={**lock_config(base), "indexer.build.local.workers": workers}
        )
        writers.clear()
        AsyncIndexer(Table.open(table.base_uri, config), IndexerOptions(engine="local")).run(ALL)
        assert 1 <= len(writers) <= most, (workers, writers)


def test_a_kill_between_local_base_files_then_run_converges(tmp_path: Path) -> None:
    """The CLI's default on a small table builds in this process; SIGKILL it right before it
    writes the build's second column_stats base file, with the first one written, then run
    again. One build thread, so the two runs' storage writes come in the same order (with
    several, the kill's count named another write in CI)."""
    make_table(tmp_path / "trace" / "t")
    shutil.copytree(tmp_path / "trace", tmp_path / "kill")
    one = ("--conf", "indexer.build.local.workers=1")
    traced = indexer_cli(tmp_path / "trace" / "t", *one, failpoint="storage.write:trace")
    assert traced.returncode == 0, traced.stderr[-3000:]
    assert re.search(r"over \d+ data files without Spark \(1 threads\)", traced.stderr), (
        traced.stderr[-3000:]
    )
    # the last one: scheduling wrote each file group's empty base file before the build
    second, _ = [
        (int(n), path)
        for n, path in TRACED.findall(traced.stderr)
        if re.fullmatch(r"column_stats/col-stats-0001-0_\d+\.parquet", path)
    ][-1]
    base = tmp_path / "kill" / "t"
    killed = indexer_cli(base, *one, failpoint=f"storage.write@{second}:kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    table = Table.open(str(base), Config.resolve(explicit=lock_config(base)))
    names = [e.name for e in MetadataTable(table).storage.list("column_stats")]
    groups: dict[str, set[str]] = {n.split("_")[1]: set() for n in names}
    for n in names:
        groups[n.split("_")[1]].add(n.split("_")[0])
    assert {"col-stats-0000-0"} in groups.values(), names  # one base file of two, at one instant
    again = indexer_cli(base)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exact(table)


def read_partitions(table: Table) -> dict[str, list[dict[str, Any]]]:
    reader = MetadataTable(table).reader(table.timeline.load())
    return {p: sorted(reader.read(p).to_pylist(), key=lambda r: r["key"]) for p in ALL}


def test_worker_processes_write_what_threads_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A large build reads its data files in worker processes (spawned): the same records as a
    build that reads them in threads; a data file that is not Parquet fails the build with its
    path, raised from the worker as the same error a thread raises. A worker process's records
    come back as Arrow IPC bytes (read without a copy), a thread's as tables."""
    from metadata_table.group_records import PartitionBuild

    received: list[type] = []
    conformed = PartitionBuild.conformed

    def spied(self: PartitionBuild, part: Any) -> Any:
        received.append(type(part))
        return conformed(self, part)

    monkeypatch.setattr(PartitionBuild, "conformed", spied)
    make_table(tmp_path / "threads" / "t")
    shutil.copytree(tmp_path / "threads", tmp_path / "processes")
    shutil.copytree(tmp_path / "threads", tmp_path / "broken")
    two = {"indexer.build.local.workers": "2"}

    def opened(name: str) -> Table:
        base = tmp_path / name / "t"
        return Table.open(str(base), Config.resolve(explicit={**lock_config(base), **two}))

    caplog.set_level("INFO", logger="metadata_table.group_records")
    AsyncIndexer(opened("threads"), IndexerOptions(engine="local")).run(ALL)
    assert "without Spark (2 threads)" in caplog.text
    assert received and set(received) == {pa.Table}
    received.clear()
    monkeypatch.setattr("metadata_table.workers.PROCESS_MIN_FILES", 1)
    processes = opened("processes")
    AsyncIndexer(processes, IndexerOptions(engine="local")).run(ALL)
    assert "without Spark (2 processes)" in caplog.text
    # each part read from its bytes as it arrives (the write conforms the tables held)
    assert bytes in received
    assert_exact(processes)
    assert read_partitions(processes) == read_partitions(opened("threads"))

    broken = opened("broken")
    victim = next(f for f in broken.storage.list("", recursive=True) if f.path.endswith(".parquet"))
    broken.storage.overwrite(victim.path, b"not parquet at all")
    indexer = AsyncIndexer(broken, IndexerOptions(engine="local"))
    with pytest.raises(IndexBuildAbortedError, match=f"NotParquetError: {re.escape(victim.path)}"):
        indexer.run(["column_stats"])


def test_a_build_past_its_memory_budget_spills_and_writes_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past indexer.build.local.memory.mb of records, a local build spills them per file group
    to the temporary folder and writes each group from its own: the same records as a build
    that held them all, and nothing left in the temporary folder."""
    make_table(tmp_path / "held" / "t")
    shutil.copytree(tmp_path / "held", tmp_path / "spilled")

    def opened(name: str, **conf: str) -> Table:
        base = tmp_path / name / "t"
        explicit = {**lock_config(base), "indexer.build.local.workers": "2", **conf}
        return Table.open(str(base), Config.resolve(explicit=explicit))

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    caplog.set_level("INFO", logger="metadata_table.group_records")
    AsyncIndexer(opened("held"), IndexerOptions(engine="local")).run(ALL)
    assert "spilled" not in caplog.text
    spilled = opened("spilled", **{"indexer.build.local.memory.mb": "0"})
    AsyncIndexer(spilled, IndexerOptions(engine="local")).run(ALL)
    assert re.search(r"spilled \d+ MB of records to local disk", caplog.text)
    assert_exact(spilled)
    assert read_partitions(spilled) == read_partitions(opened("held"))
    assert list(scratch.iterdir()) == []


def test_worker_processes_never_run_the_callers_script_again(tmp_path: Path) -> None:
    """A user's script without a ``__main__`` guard builds through worker processes: they must
    not run it again (multiprocessing's default, which would build again in every worker and
    then fail)."""
    base = tmp_path / "t"
    make_table(base)
    script = tmp_path / "build.py"
    script.write_text(
        "import logging\n"
        "import metadata_table.workers as workers\n"
        "from indexer.indexer import AsyncIndexer, IndexerOptions\n"
        "from timeline import Table\n"
        "from timeline.config import Config\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "workers.PROCESS_MIN_FILES, workers.DEFAULT_WORKERS = 1, 2\n"
        f"table = Table.open({str(base)!r}, Config.resolve(explicit={lock_config(base)!r}))\n"
        "AsyncIndexer(table, IndexerOptions(engine='local')).run(['column_stats'])\n"
        "print('built')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "without Spark (2 processes)" in done.stderr, done.stderr[-3000:]
    assert done.stdout.split() == ["built"]
    assert_exact(
        Table.open(str(base), Config.resolve(explicit=lock_config(base))), ["column_stats"]
    )


def test_a_string_column_whose_bounds_are_not_utf8_is_indexed_as_unknown(tmp_path: Path) -> None:
    """A writer may put bytes that are not UTF-8 in a string column: the build and a later
    commit's index update go on (they failed decoding the footer's bounds), and the column's
    bounds in those files are unknown, so no filter on it drops them."""
    import pyarrow as pa

    from metadata_table import load_table
    from metadata_table.validate import validate
    from writer.client import WriteClient

    def rows(keys: list[str], texts: list[bytes]) -> pa.Table:
        text = pa.array(texts, pa.binary()).view(pa.string())  # not checked as UTF-8
        return pa.table({"k": keys, "s": text, "ts": list(range(len(keys)))})

    config = Config.resolve(explicit=lock_config(tmp_path / "t"))
    table = Table.create(str(tmp_path / "t"), "t", ["k"], [], config=config)
    WriteClient(table).insert(rows(["a", "b"], [b"\xff\xfe", b"ok"]))
    AsyncIndexer(table, IndexerOptions(engine="local")).run(["column_stats"])
    WriteClient(table).insert(rows(["c"], [b"\xc3"]))
    WriteClient(table).insert(rows(["d", "e"], [b"x", b"y"]))
    assert all(report.ok for report in validate(table))
    import duckdb  # noqa: F401 (loaded, as in a process that used it: the scan reads by DuckDB)

    scan = load_table(table.base_uri).scan("s = 'ok'")
    assert scan.to_arrow().column("k").to_pylist() == ["b"]
    plan = scan.plan()  # the bounds x..y rule their file out; the others' are unknown
    assert (plan.total, plan.kept) == (3, 2)
