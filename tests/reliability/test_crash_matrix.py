"""The crash matrix: SIGKILL the indexer, a writer and the marker server at many distinct points,
then restart and converge, and check what docs/architecture.md §3 promises: no acknowledged commit lost, no
partial file visible to our reader or to hudi-rs, no instant left pending, every completed index
equal to the from-scratch build.

Points are found, not hand-picked: a first run with ``AIX_FAILPOINT=storage.write:trace`` lists
every storage mutation a run makes (creates, overwrites, deletes: instant files, plan, table
config and its backup, metadata base files, markers, data files); then each point kills a fresh
copy of the table right before its N-th mutation (``storage.write@N:kill``). Abort points are the
mutations after an injected failure in the catch-up. Without ``AIX_SOAK=1`` each matrix runs
every point of its first steps (and the indexer's scheduling) and its last four, and a sample
between (the indexer's every eighth point and every fourth of its abort, the others every third to
ninth): about 115 points, which keeps the suite within CI's budget; ``make soak`` runs them all
(over twice as many).

The killed indexer builds in its own process (``--engine local``), so its build's base files and
markers are crash points too (a Spark task's writes are not: the task is another process, and
the cluster tests kill those); the restart builds with Spark, so each point also shows that one
engine resumes what the other left.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.index_types import index_type
from metadata_table.layout import PARTITIONS
from metadata_table.maintenance import build_records, compact, initialize
from metadata_table.table import MetadataTable
from timeline import Action, Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from timeline.index_state import INDEX_FOLDER
from timeline.markers.server import MarkerServer
from timeline.rollback import clean_failed_writes
from writer.client import Operation, WriteClient, WriteOptions, WriteTransaction

from ..metadata_table.test_metadata_table import keys, rows
from ..writer.test_failed_writes import hudi_rs
from .conftest import MATRIX, SOAK

HEARTBEAT_MS = 500  # short, so dead writers expire fast; not so short that a busy CI starves it
LEASE_MS = 2000
ALL = list(PARTITIONS)
FIRED = re.compile(r"failpoint storage\.write#(\d+) (?:kill|trace): (.*)")


def settings(folder: Path) -> dict[str, str]:
    return {
        "indexer.lock.url": f"sqlite:///{folder / 'locks.sqlite'}",
        "hoodie.client.heartbeat.interval_in_ms": str(HEARTBEAT_MS),
        "indexer.lock.lease_ms": str(LEASE_MS),
    }


def sleep_until(moment: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``moment`` (not at all when it has)."""
    time.sleep(max(0.0, moment - time.monotonic()))


def config(folder: Path) -> Config:
    return Config.resolve(explicit=settings(folder))


def conf_args(folder: Path) -> list[str]:
    return [f"--conf={k}={v}" for k, v in settings(folder).items()]


def run(
    module: str, args: list[str], failpoint: str | None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIX_FAILPOINT"}
    if failpoint:
        env["AIX_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def mutations(stderr: str) -> list[str]:
    return [m.group(2) for m in FIRED.finditer(stderr)]


def fresh(template: Path, tmp: Path) -> tuple[Path, Table]:
    folder = tmp / "w"
    shutil.copytree(template, folder)
    return folder, Table.open(str(folder / "t"), config(folder))


def snapshot_rows(table: Table) -> dict[str, tuple[Any, ...]]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    out = {}
    for r in data.to_pylist():
        assert r["_hoodie_record_key"] not in out, f"{r['_hoodie_record_key']} is there twice"
        out[r["_hoodie_record_key"]] = (r["ts"], r["fare"])
    return out


def expected_rows(*batches: pa.Table) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for b in batches:
        for r in b.to_pylist():
            out[r["uuid"]] = (r["ts"], r["fare"])
    return out


def assert_converged(table: Table, want: dict[str, tuple[Any, ...]]) -> None:
    """Our reader and hudi-rs agree with ``want``; nothing pending in either timeline; no data
    file outside a completed commit; every completed index exact."""
    timeline = table.timeline.load()
    assert not list(timeline.pending()), f"pending: {list(timeline.pending())}"
    mdt = MetadataTable(table)
    assert not list(mdt.timeline.load().pending()), "a metadata instant stayed pending"
    assert snapshot_rows(table) == want
    theirs = {r["_hoodie_record_key"]: (r["ts"], r["fare"]) for r in hudi_rs(table.base_uri, {})}
    assert theirs == want
    committed = {i.timestamp for i in timeline.write_timeline().completed()}
    view = FileSystemView(table.timeline, timeline)
    stray = [b.path for b in view.all_base_files if b.instant_time not in committed]
    assert not stray, f"files of no completed commit: {stray}"
    reader = mdt.reader(timeline)
    for partition in table.reload_index_state().completed:
        kind = index_type(partition)
        assert kind.comparable(reader.read(partition)) == kind.comparable(
            build_records(table, timeline, partition)
        ), partition


# --- the indexer ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def indexer_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table whose catch-up has work: t stops before a dead writer's instant, and a commit
    completes after it."""
    folder = tmp_path_factory.mktemp("indexer-template")
    table = Table.create(
        str(folder / "t"), "trips", ["uuid"], ["city"], "ts", config=config(folder)
    )
    client = WriteClient(table)
    client.insert(rows(keys(0, 120)))
    dead = client.start(Operation.INSERT)
    dead.write(rows(keys(900, 905)))
    dead.heartbeat.pause()
    client.upsert(rows(keys(0, 30), ts=2))
    time.sleep(3 * HEARTBEAT_MS / 1000)
    return folder


def indexer_args(folder: Path) -> list[str]:
    base = str(folder / "t")
    return [
        "run",
        base,
        "--index-types",
        ",".join(ALL),
        "--engine",
        "local",
        *conf_args(folder),
        # one build thread: the traced run and each killed run make their writes in one order,
        # so a point's number names the state it kills
        "--conf=indexer.build.local.workers=1",
    ]


def _trace(template: Path, tmp: Path, failpoint: str) -> tuple[list[str], str]:
    folder, _ = fresh(template, tmp)
    done = run("indexer", indexer_args(folder), failpoint)
    shutil.rmtree(folder)
    return mutations(done.stderr), done.stderr


@pytest.fixture(scope="module")
def indexer_points(
    indexer_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[str, str]]:
    """(failpoint spec, label) of every crash point of an indexer run and of an abort."""
    tmp = tmp_path_factory.mktemp("indexer-trace")
    plain, err = _trace(indexer_template, tmp, "storage.write:trace")
    assert plain, err[-3000:]
    build_from = next(i for i, m in enumerate(plain) if ".indexing.inflight" in m) + 1
    scheduled = next(i for i, m in enumerate(plain) if ".indexing.requested" in m) + 1
    # before the schedule, each partition's base file takes the same eight steps: every point of
    # the first partition's, a sample of the others'
    first_done = next(i for i, m in enumerate(plain) if m.endswith(".commit")) + 2
    points = []
    for n, what in enumerate(plain, start=1):
        if scheduled <= n <= build_from or sampled(n, len(plain), first_done, every=8):
            points.append((f"storage.write@{n}:kill", f"run #{n} before {what}"))
    failing, err = _trace(indexer_template, tmp, "catchup.mid;storage.write:trace")
    start = err.index("failpoint catchup.mid#1")
    before_abort = len(mutations(err[:start]))
    for j, what in enumerate(failing[before_abort:], start=1):
        n = before_abort + j
        if not (SOAK or j % 4 == 1):
            continue
        points.append((f"catchup.mid;storage.write@{n}:kill", f"abort #{j} before {what}"))
    named = ["build.mid", "execute.after_build", "catchup.mid", "complete.before"]
    named += ["complete.after_partitions"]
    points += [(f"{p}:kill", f"at {p}") for p in named]
    assert len(points) <= INDEXER_SLOTS, f"{len(points)} points: raise INDEXER_SLOTS"
    return points


INDEXER_SLOTS = 80  # more than any run makes; slots past the end are skipped


@pytest.mark.parametrize("slot", range(INDEXER_SLOTS))
def test_indexer_crash_point(
    slot: int,
    indexer_points: list[tuple[str, str]],
    indexer_template: Path,
    tmp_path: Path,
    spark: Any,
) -> None:
    if slot >= len(indexer_points):
        pytest.skip(f"the indexer makes {len(indexer_points)} crash points")
    spec, label = indexer_points[slot]
    folder, table = fresh(indexer_template, tmp_path)
    killed = run("indexer", indexer_args(folder), spec)
    assert killed.returncode == -9, f"{spec} never fired: {killed.stderr[-2000:]}"
    # writers go on between the crash and the restart (waiting out the dead holder's lease)
    after = rows(keys(20, 40), ts=3)
    WriteClient(table).upsert(after)
    indexer = AsyncIndexer(table, IndexerOptions(retries=2, backoff=0.1), spark=spark)
    indexer.run(ALL)
    clean_failed_writes(table)
    want = expected_rows(rows(keys(0, 120)), rows(keys(0, 30), ts=2), after)
    assert_converged(table, want)
    MATRIX.append(("indexer", label, "killed; restart converged"))


# --- sync and resync -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sync_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table whose index lags in every way a sync handles: commits that did not update it, a
    clean another writer made and Hudi then archived (newer than active commits), and a lost
    partition (its folder deleted), which the sync rebuilds from storage in place."""
    from ..indexer.test_foreign_commits import _clean_by_another_writer

    folder = tmp_path_factory.mktemp("sync-template")
    table = Table.create(
        str(folder / "t"), "trips", ["uuid"], ["city"], "ts", config=config(folder)
    )
    WriteClient(table).insert(rows(keys(0, 90)))
    initialize(table, ALL, groups=dict.fromkeys(ALL, 1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WriteTransaction, "_update_metadata_table", lambda self, lock: None)
        WriteClient(table).upsert(rows(keys(0, 20), ts=2))
        _clean_by_another_writer(table)
        WriteClient(table).upsert(rows(keys(40, 50), ts=3))
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, "bloom_filters"))
    return folder


def sync_args(folder: Path) -> list[str]:
    return ["sync", str(folder / "t"), *conf_args(folder)]


@pytest.fixture(scope="module")
def sync_points(
    sync_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("sync-trace")
    folder, _ = fresh(sync_template, tmp)
    done = run("indexer", sync_args(folder), "storage.write:trace")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rebuilt bloom_filters from storage" in done.stdout, done.stdout
    traced = mutations(done.stderr)
    points = [
        (f"storage.write@{n}:kill", f"#{n} before {what}")
        for n, what in enumerate(traced, start=1)
        if sampled(n, len(traced), dense_until=6, every=9)
    ]
    points += [("archive.read:kill", "reading Hudi's archive"), ("resync.mid:kill", "resync.mid")]
    assert len(points) <= SYNC_SLOTS, f"{len(points)} points: raise SYNC_SLOTS"
    return points


SYNC_SLOTS = 60  # more than a sync makes; slots past the end are skipped


@pytest.mark.parametrize("slot", range(SYNC_SLOTS))
def test_sync_crash_point(
    slot: int, sync_points: list[tuple[str, str]], sync_template: Path, tmp_path: Path
) -> None:
    """A sync (applying instants, reading the archive, rebuilding a lost partition) killed at
    each point; writers go on; the next sync converges."""
    if slot >= len(sync_points):
        pytest.skip(f"a sync makes {len(sync_points)} crash points")
    spec, label = sync_points[slot]
    folder, table = fresh(sync_template, tmp_path)
    killed = run("indexer", sync_args(folder), spec)
    assert killed.returncode == -9, f"{spec} never fired: {killed.stderr[-2000:]}"
    died = time.monotonic()
    after = rows(keys(30, 35), ts=4)
    WriteClient(table).upsert(after)
    sleep_until(died + 3 * HEARTBEAT_MS / 1000)  # a killed resync's heartbeat expires
    again = run("indexer", sync_args(folder), None)
    assert again.returncode == 0, again.stderr[-2000:]
    want = expected_rows(
        rows(keys(0, 90)), rows(keys(0, 20), ts=2), rows(keys(40, 50), ts=3), after
    )
    assert_converged(table, want)
    assert not AsyncIndexer(table).unapplied() and not AsyncIndexer(table).lost()
    MATRIX.append(("sync", label, "killed; the next sync converged"))


# --- writers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def writer_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with all three indexes, so every write also writes the metadata table."""
    folder = tmp_path_factory.mktemp("writer-template")
    table = Table.create(
        str(folder / "t"), "trips", ["uuid"], ["city"], "ts", config=config(folder)
    )
    WriteClient(table).insert(rows(keys(0, 60)))
    # one file group per index partition: which groups a write's records hash to depends on its
    # random file ids, and the points must be the same steps in every run
    initialize(table, ALL, groups=dict.fromkeys(ALL, 1))
    return folder


WRITE = rows(keys(40, 80), ts=2)  # 20 updates, 20 inserts, over three partitions


def writer_args(folder: Path, data: Path) -> list[str]:
    base = str(folder / "t")
    args = [base, "--input", str(data), "--operation", "upsert"]
    return args + conf_args(folder) + ["--conf=indexer.write.max.records.per.file=8"]


@pytest.fixture(scope="module")
def writer_points(writer_template: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    import pyarrow.parquet as pq

    tmp = tmp_path_factory.mktemp("writer-trace")
    pq.write_table(WRITE, tmp / "in.parquet")
    folder, _ = fresh(writer_template, tmp)
    done = run("writer", writer_args(folder, tmp / "in.parquet"), "storage.write:trace")
    assert done.returncode == 0, done.stderr[-3000:]
    points = mutations(done.stderr)
    assert len(points) <= WRITER_SLOTS, f"{len(points)} points: raise WRITER_SLOTS"
    return points


WRITER_SLOTS = 80  # more than a write makes; slots past the end are skipped


def sampled(n: int, total: int, dense_until: int, every: int = 3) -> bool:
    """Every point in soak runs; in CI, every point up to ``dense_until``, every ``every``-th
    after, and the last four (the completion)."""
    return SOAK or n <= dense_until or n % every == 0 or n > total - 4


@pytest.mark.parametrize("slot", range(WRITER_SLOTS))
def test_writer_crash_point(
    slot: int, writer_points: list[str], writer_template: Path, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    n = slot + 1
    if n > len(writer_points):
        pytest.skip(f"a write makes {len(writer_points)} crash points")
    if not sampled(n, len(writer_points), dense_until=12, every=5):
        pytest.skip("sampled out (AIX_SOAK=1 runs every point)")
    pq.write_table(WRITE, tmp_path / "in.parquet")
    folder, table = fresh(writer_template, tmp_path)
    killed = run("writer", writer_args(folder, tmp_path / "in.parquet"), f"storage.write@{n}:kill")
    assert killed.returncode == -9, killed.stderr[-2000:]
    time.sleep(3 * HEARTBEAT_MS / 1000)  # the dead writer's heartbeat expires
    clean_failed_writes(table)
    landed = len(list(table.timeline.load().write_timeline().completed())) > 1
    want = expected_rows(rows(keys(0, 60)), *([WRITE] if landed else []))
    assert_converged(table, want)
    outcome = "committed before the kill" if landed else "rolled back by clean"
    MATRIX.append(("writer", f"#{n} before {writer_points[slot]}", outcome))


# --- table services: clean, archive, index compaction and index clean ---------------------------

#: small bounds, so a few commits give every service work; no grace period, so nothing waits
SERVICES = {
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.keep.min.commits": "3",
    "hoodie.keep.max.commits": "5",
    "indexer.clean.grace.seconds": "0",
}


@pytest.fixture(scope="module")
def services_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with every index and 8 commits that no service has passed over: old versions to
    clean, instants to archive, index logs to compact; one partition compacted before, so its
    replaced files are there to delete too."""
    folder = tmp_path_factory.mktemp("services-template")
    off = {
        "hoodie.clean.automatic": "false",
        "hoodie.archive.automatic": "false",
        "indexer.metadata.upkeep.automatic": "false",
    }
    values = {**settings(folder), **SERVICES, **off}
    table = Table.create(
        str(folder / "t"), "trips", ["uuid"], ["city"], "ts", config=Config.resolve(explicit=values)
    )
    WriteClient(table).insert(rows(keys(0, 30)))
    initialize(table, ALL, groups=dict.fromkeys(ALL, 1))
    with WriteClient(table) as client:
        for ts in range(2, 10):
            client.upsert(rows(keys(0, 10), ts=ts))
            if ts == 5:
                compact(table, "files")
    return folder


SERVICE_STEPS = (
    ("timeline", ["clean"]),  # rolls back nothing here; cleans, applies to the index, archives
    ("indexer", ["compact"]),  # compacts every partition, deletes what compactions replaced
)


def service_step(
    folder: Path, step: int, failpoint: str | None
) -> subprocess.CompletedProcess[str]:
    """Run one of the services' commands on the table in ``folder``."""
    module, command = SERVICE_STEPS[step]
    extra = [f"--conf={k}={v}" for k, v in SERVICES.items()]
    return run(module, [*command, str(folder / "t"), *conf_args(folder), *extra], failpoint)


def services_run(folder: Path, failpoint: str | None, steps: int = 2) -> list[int]:
    """Run the services' commands in order, the failpoint in each (its counter restarts per
    process); returns their exit codes, stopping after one is killed."""
    codes = []
    for step in range(steps):
        done = service_step(folder, step, failpoint)
        codes.append(done.returncode)
        if done.returncode != 0:
            break
    return codes


@pytest.fixture(scope="module")
def services_points(
    services_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[int, str, str]]:
    """(step, failpoint, label) of every crash point of the two commands."""
    tmp = tmp_path_factory.mktemp("services-trace")
    points = []
    for step, (_, command) in enumerate(SERVICE_STEPS):
        folder, _ = fresh(services_template, tmp)
        assert services_run(folder, None, steps=step) == [0] * step
        done = service_step(folder, step, "storage.write:trace")
        assert done.returncode == 0, done.stderr[-3000:]
        traced = mutations(done.stderr)
        assert any("delete" in m for m in traced), traced  # it had something to remove
        points += [
            (step, f"storage.write@{n}:kill", f"{' '.join(command)} #{n} before {what}")
            for n, what in enumerate(traced, start=1)
            if sampled(n, len(traced), dense_until=4, every=9)
        ]
        shutil.rmtree(folder)
    assert len(points) <= SERVICES_SLOTS, f"{len(points)} points: raise SERVICES_SLOTS"
    return points


SERVICES_SLOTS = 70  # more than the services make; slots past the end are skipped


@pytest.mark.parametrize("slot", range(SERVICES_SLOTS))
def test_table_services_crash_point(
    slot: int,
    services_points: list[tuple[int, str, str]],
    services_template: Path,
    tmp_path: Path,
) -> None:
    """Clean, archive, index compaction and index clean killed at each point; a writer commits;
    the services run again: every read exact, nothing pending, and nothing left behind (the
    versions, instants and index files the rules do not keep are gone)."""
    if slot >= len(services_points):
        pytest.skip(f"the services make {len(services_points)} crash points")
    step, spec, label = services_points[slot]
    folder, table = fresh(services_template, tmp_path)
    assert services_run(folder, None, steps=step) == [0] * step
    killed = service_step(folder, step, spec)
    assert killed.returncode == -9, f"{spec} never fired: {killed.stderr[-2000:]}"
    died = time.monotonic()
    after = rows(keys(5, 15), ts=20)
    quiet = Config.resolve(
        explicit={**settings(folder), **SERVICES, "indexer.metadata.upkeep.automatic": "false"}
    )
    sleep_until(died + LEASE_MS / 1000)  # the killed holder's lease lapses
    WriteClient(Table.open(str(folder / "t"), quiet)).upsert(after)
    sleep_until(died + 3 * HEARTBEAT_MS / 1000)  # and its heartbeat expires
    assert services_run(folder, None) == [0, 0]
    table = Table.open(str(folder / "t"), config(folder))
    want = expected_rows(rows(keys(0, 30)), *(rows(keys(0, 10), ts=t) for t in range(2, 10)), after)
    assert_converged(table, want)
    # nothing left behind: the versions the clean keeps, the archival's bounds, one base file
    # per index file group and at most the log of the clean that ran after the last commit
    timeline = table.timeline.load()
    assert len(timeline.write_timeline().completed()) <= 5
    view = FileSystemView(table.timeline, timeline)
    assert len(view.all_base_files) <= 3 * len(view.latest_base_files()), view.all_base_files
    mdt = MetadataTable(table)
    for partition in ALL:
        names = [e.name for e in mdt.storage.list(partition)]
        bases = [n for n in names if n.endswith(".parquet")]
        assert len(bases) == 1 and len(names) <= 2, (partition, names)
    assert len(mdt.timeline.load().with_actions(Action.DELTA_COMMIT)) <= 1, "deltacommits left"
    MATRIX.append(("services", label, "killed; the services' rerun converged"))


# --- the marker server ---------------------------------------------------------------------------


def start_marker_server(folder: Path, failpoint: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "AIX_FAILPOINT"}
    env["AIX_FAILPOINT"] = failpoint
    server = subprocess.Popen(
        [sys.executable, "-m", "timeline", "marker-server", str(folder / "t"), *conf_args(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip().split()[-1]
    assert url.startswith("http://"), url
    return server, url


def through_server(url: str) -> WriteOptions:
    return WriteOptions(
        markers="timeline_server_based", marker_server_url=url, max_records_per_file=8
    )


@pytest.fixture(scope="module")
def marker_server_points(
    writer_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[str]:
    folder, table = fresh(writer_template, tmp_path_factory.mktemp("marker-trace"))
    server, url = start_marker_server(folder, "storage.write:trace")
    try:
        WriteClient(table, through_server(url)).upsert(WRITE)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    return mutations(err)


@pytest.mark.parametrize("n", range(1, 41))
def test_marker_server_crash_point(
    n: int, marker_server_points: list[str], writer_template: Path, tmp_path: Path
) -> None:
    """The server dies right before its n-th storage write while a writer sends it markers. The
    writer fails (or finishes, if the kill came after its last marker) and rolls back; every file
    it wrote is named by an acknowledged marker, so nothing partial stays."""
    if n > len(marker_server_points):
        pytest.skip(f"the server makes {len(marker_server_points)} storage writes per write")
    if not sampled(n, len(marker_server_points), dense_until=6):
        pytest.skip("sampled out (AIX_SOAK=1 runs every point)")
    folder, table = fresh(writer_template, tmp_path)
    server, url = start_marker_server(folder, f"storage.write@{n}:kill")
    try:
        outcome = "write committed"
        try:
            WriteClient(table, through_server(url)).upsert(WRITE)
        except Exception as e:
            outcome = f"write failed ({type(e).__name__}), rolled back"
        server.wait(timeout=30) if outcome != "write committed" else None
    finally:
        if server.poll() is None:
            server.kill()
        _, err = server.communicate()
    fired = FIRED.search(err)
    if fired is None:
        # how many MARKERS rewrites a write causes depends on how its requests fall into batches
        assert outcome == "write committed", err[-2000:]
        pytest.skip(f"this run's batches made fewer than {n} server writes")
    time.sleep(3 * HEARTBEAT_MS / 1000)
    clean_failed_writes(table)
    landed = outcome == "write committed"
    assert_converged(table, expected_rows(rows(keys(0, 60)), *([WRITE] if landed else [])))
    # a new server on the same table serves the next write
    with MarkerServer(table) as fresh_server:
        again = WriteOptions(markers="timeline_server_based", marker_server_url=fresh_server.url)
        WriteClient(table, again).upsert(rows(keys(0, 5), ts=9))
    MATRIX.append(("marker server", f"#{n} before {fired.group(2)}", outcome))
