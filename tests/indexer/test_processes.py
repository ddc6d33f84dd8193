"""The indexer as users run it: real processes, SIGKILL at chosen points, and the central test
(three writer processes ingesting while `indexer run` builds every partition)."""

from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metadata_table.layout import PARTITIONS
from timeline import Table
from timeline.config import LOCK_URL, Config
from timeline.errors import WriteConflictError
from writer.client import Operation, WriteClient

from ..metadata_table.test_metadata_table import keys, rows
from .test_indexer import assert_exact, make_table

#: CI kills mid-build and mid-catch-up here, and make soak at every point; the crash matrix
#: (tests/reliability) kills the indexer at each of its failpoints and storage writes in CI
KILL_POINTS = [
    pytest.param("schedule.after_plan", marks=pytest.mark.soak),
    pytest.param("execute.after_inflight", marks=pytest.mark.soak),
    "build.mid",
    pytest.param("execute.after_build", marks=pytest.mark.soak),
    "catchup.mid",
    pytest.param("complete.after_partitions", marks=pytest.mark.soak),
]


pytestmark = pytest.mark.slow  # writer and indexer processes, each starting Spark


def _indexer(
    base: str, lock: str, *args: str, failpoint: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("AIX_FAILPOINT", None)
    if failpoint:
        env["AIX_FAILPOINT"] = failpoint
    command = [
        sys.executable,
        "-m",
        "indexer",
        *args[:1],
        base,
        *args[1:],
        "--lock-url",
        lock,
        "--conf",
        "hoodie.client.heartbeat.interval_in_ms=200",
        "--conf",
        "indexer.lock.lease_ms=3000",
        "--spark-master",
        "local[2]",
    ]
    if args[0] not in ("run", "execute"):
        command = command[: command.index("--spark-master")]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_then_run_converges(tmp_path: Path, point: str) -> None:
    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    config = Config.resolve(
        explicit={"indexer.lock.url": lock, "hoodie.client.heartbeat.interval_in_ms": "200"}
    )
    table = Table.create(str(tmp_path / "t"), "trips", ["uuid"], ["city"], "ts", config=config)
    client = WriteClient(table)
    client.insert(rows(keys(0, 120)))
    dead = client.start(Operation.INSERT)  # t stops before this dead writer ...
    dead.write(rows(keys(900, 905)))
    dead.heartbeat.pause()
    client.upsert(rows(keys(0, 30), ts=2))  # ... so this commit is caught up
    time.sleep(0.6)
    killed = _indexer(
        table.base_uri,
        lock,
        "run",
        "--index-types",
        ",".join(PARTITIONS),
        failpoint=f"{point}:kill",
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    client.upsert(rows(keys(20, 40), ts=3))  # writers go on between the crash and the restart
    recovered = _indexer(table.base_uri, lock, "run", "--index-types", ",".join(PARTITIONS))
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    assert_exact(table)


# --- the central test ----------------------------------------------------------------------------


def _ingest(base: str, lock: str, writer: int, stop_file: str) -> list[tuple[float, float, str]]:
    """Commit continuously until the stop file appears: (start time, seconds, outcome) each."""
    table = Table.open(base, Config.resolve(explicit={"indexer.lock.url": lock}))
    client = WriteClient(table)
    log: list[tuple[float, float, str]] = []
    n = 0
    while not os.path.exists(stop_file):
        own = keys(1000 * (writer + 1) + n * 5, 1000 * (writer + 1) + n * 5 + 5)  # disjoint, new
        shared = keys((n * 7 + writer) % 60, (n * 7 + writer) % 60 + 2)  # overlapping
        started = time.time()
        try:
            # an insert takes only new keys: an insert of a stored key would add a second copy
            # (no index lookup), which the record index, being built, refuses
            if n % 3 == 0:
                client.insert(rows(own, ts=n))
            else:
                client.upsert(rows(own + shared, ts=n))
            outcome = "committed"
        except WriteConflictError:
            outcome = "conflict"  # between writers; the indexer never conflicts with them
        except Exception as e:
            outcome = f"error: {type(e).__name__}: {e}"
        log.append((started, time.time() - started, outcome))
        n += 1
    return log


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else float("nan")


def test_central_writers_ingest_while_the_indexer_builds(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    lock = table.config.get(LOCK_URL)
    stop = tmp_path / "stop"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        pending = pool.starmap_async(
            _ingest, [(table.base_uri, lock, w, str(stop)) for w in range(3)]
        )
        time.sleep(8.0)  # writers alone: the baseline
        index_started = time.time()
        built = _indexer(table.base_uri, lock, "run", "--index-types", ",".join(PARTITIONS))
        index_ended = time.time()
        time.sleep(2.0)  # writers after the build
        stop.write_text("")
        logs = [entry for log in pending.get(timeout=120) for entry in log]
    assert built.returncode == 0, built.stderr[-3000:]
    errors = [o for _, _, o in logs if o.startswith("error")]
    assert errors == [], f"writer commits failed: {errors[:3]}"
    baseline = [s for t, s, o in logs if t < index_started and o == "committed"]
    during = [s for t, s, o in logs if index_started <= t <= index_ended and o == "committed"]
    assert len(during) >= 3, "writers kept committing while the index was built"
    print(
        f"\ncommits: {len(baseline)} before, {len(during)} during the build "
        f"({index_ended - index_started:.1f}s), conflicts between writers: "
        f"{sum(o == 'conflict' for _, _, o in logs)}; p95 commit latency "
        f"{_p95(baseline) * 1000:.0f} ms without, {_p95(during) * 1000:.0f} ms with the indexer "
        f"(ratio {_p95(during) / _p95(baseline):.2f})"
    )
    assert_exact(table)
