"""The indexer: schedule, build, catch-up, completion, abort, retry, drop, status; every injected
failure ends, after another execute or run, with partitions equal to the from-scratch build."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.index_types import index_type
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES, PARTITION_STATS, PARTITIONS
from metadata_table.maintenance import build_records, initialize
from metadata_table.partition_writer import PartitionWriter
from metadata_table.table import MetadataTable
from timeline import Action, Table
from timeline.config import LOCK_URL, Config
from timeline.errors import ConfigError, IndexBuildAbortedError, InjectedFailure
from timeline.failpoints import ENV, POINTS
from writer.client import Operation, WriteClient

from ..metadata_table.test_metadata_table import keys, rows

ALL = list(PARTITIONS)


def make_table(base: Path, heartbeat_ms: int = 60_000) -> Table:
    config = Config.resolve(
        explicit={
            "indexer.lock.url": f"sqlite:///{base.parent / (base.name + '.locks')}",
            "hoodie.client.heartbeat.interval_in_ms": str(heartbeat_ms),
        }
    )
    table = Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config)
    client = WriteClient(table)
    for batch in range(4):
        client.insert(rows(keys(batch * 50, batch * 50 + 50)))
    return table


def assert_exact(table: Table, partitions: list[str] = ALL) -> None:
    timeline = table.timeline.load()
    state = table.reload_index_state()
    reader = MetadataTable(table).reader(timeline)
    for partition in partitions:
        assert partition in state.completed, f"{partition} is not completed"
        kind = index_type(partition)
        ours = kind.comparable(reader.read(partition))
        assert ours == kind.comparable(build_records(table, timeline, partition)), partition
    assert not timeline.with_actions(Action.INDEXING).pending(), (
        "an indexing instant stayed pending"
    )


def assert_untouched(table: Table, partitions: list[str] = ALL) -> None:
    """As if the build never ran: no partition state, no metadata files, no pending instant."""
    state = table.reload_index_state()
    for partition in partitions:
        assert partition not in state.completed
        assert partition not in state.inflight
        assert MetadataTable(table).storage.list(partition) == []
    assert not table.timeline.load().with_actions(Action.INDEXING).pending()


def test_schedule_writes_the_plan_and_marks_partitions_inflight(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "t")
    indexer = AsyncIndexer(table, spark=spark)
    result = indexer.schedule([COLUMN_STATS, BLOOM_FILTERS], ["fare", "ts"])
    assert result.instant is not None and result.lock_seconds < 1.0
    plan = json.loads(table.timeline.read_content(result.instant))
    last = table.timeline.load().last_settled_write()
    assert plan == {
        "version": 1,
        "indexPartitionInfos": [
            {  # files comes along (indexer.index.files.with.others)
                "metadataPartitionPath": "files",
                "indexUptoInstant": last.timestamp,
                "columns": [],
                "fileGroups": 1,
            },
            {
                "metadataPartitionPath": "column_stats",
                "indexUptoInstant": last.timestamp,
                "columns": ["fare", "ts"],
                "fileGroups": 2,
            },
            {
                "metadataPartitionPath": "bloom_filters",
                "indexUptoInstant": last.timestamp,
                "columns": [],
                "fileGroups": 4,
            },
        ],
    }
    assert table.reload_index_state().inflight == ("bloom_filters", "column_stats", "files")
    assert MetadataTable(table).file_groups(BLOOM_FILTERS) == [
        f"bloom-filters-{i:04d}-0" for i in range(4)
    ]
    again = indexer.schedule([COLUMN_STATS, PARTITION_STATS])  # inflight ones are skipped
    assert again.skipped == {COLUMN_STATS: "already being built"}
    assert again.scheduled == [PARTITION_STATS]
    with pytest.raises(ConfigError, match="not columns of the table: nope"):
        indexer.schedule([FILES], ["nope"])
    with pytest.raises(Exception, match="unknown metadata partition"):
        indexer.schedule(["record_idx"])


def test_build_and_catch_up_while_writers_commit(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    pending = client.start(Operation.INSERT)  # pending before schedule: t stops before it
    pending.write(rows(keys(900, 910)))
    client.upsert(rows(keys(0, 20), ts=2))  # completed after t, before schedule: needs catch-up
    indexer = AsyncIndexer(table, spark=spark)
    scheduled = indexer.schedule(ALL)
    client.upsert(rows(keys(10, 30), ts=3))  # during the build: writes to the inflight partitions
    finisher = threading.Timer(1.0, pending.commit)  # catch-up waits for it
    finisher.start()
    done = indexer.execute()
    finisher.join()
    assert done.timestamp == scheduled.instant.timestamp  # type: ignore[union-attr]
    assert indexer.stats["catch_up_instants"] >= 3
    assert_exact(table)
    client.delete(rows(keys(0, 5)))  # and writers keep them exact afterwards
    assert_exact(table)


def test_catch_up_checks_each_partition_not_the_timestamp(tmp_path: Path, spark: Any) -> None:
    """Hudi's defect: catch-up saw a deltacommit with the instant's time and skipped it, though
    it had not written to the new partition."""
    table = make_table(tmp_path / "t", heartbeat_ms=200)
    initialize(table, [FILES])  # files completed: every commit now writes a deltacommit
    client = WriteClient(table)
    dead = client.start(Operation.INSERT)  # pending below the next commit: t stops before it
    dead.write(rows(keys(900, 901)))
    dead.heartbeat.pause()  # ... and its writer dies: catch-up must not wait for it
    late = client.upsert(rows(keys(0, 10), ts=5))  # a deltacommit that wrote 'files' only
    mdt = MetadataTable(table)
    delta = mdt.timeline.load().get(late.timestamp, Action.DELTA_COMMIT)
    assert delta is not None and list(mdt.timeline.read_json(delta)["logFiles"]) == [FILES]
    indexer = AsyncIndexer(table, IndexerOptions(timeout=30), spark=spark)
    indexer.schedule([COLUMN_STATS])
    time.sleep(0.6)  # the dead writer's heartbeat expires
    indexer.execute()
    assert_exact(table, [FILES, COLUMN_STATS])


def test_catch_up_timeout_aborts_gracefully(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    stuck = client.start(Operation.INSERT)  # a live writer that does not finish in time
    stuck.write(rows(keys(900, 901)))
    client.insert(rows(keys(950, 960)))
    indexer = AsyncIndexer(table, IndexerOptions(timeout=1.0), spark=spark)
    indexer.schedule(ALL)
    with pytest.raises(IndexBuildAbortedError, match="catch-up timed out"):
        indexer.execute()
    assert_untouched(table)
    stuck.commit()  # writers were never blocked, and do not touch the dropped partitions
    client.upsert(rows(keys(0, 3), ts=7))
    assert_untouched(table)
    assert AsyncIndexer(table, spark=spark).run(ALL) is not None  # a retry completes
    assert_exact(table)


def test_a_spark_tasks_failure_is_reported_in_one_line(
    tmp_path: Path, spark: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark task's error carries the task's whole Python traceback: the abort's reason (the
    log line, the error, a daemon's request) is its last line, the error the task raised."""
    table = make_table(tmp_path / "t")
    monkeypatch.setenv(ENV, "build.task")  # the first attempt of a build's task raises
    indexer = AsyncIndexer(table, IndexerOptions(engine="spark"), spark=spark)
    with (
        caplog.at_level("WARNING", "indexer.indexer"),
        pytest.raises(IndexBuildAbortedError) as aborted,
    ):
        indexer.run([COLUMN_STATS])
    reason = aborted.value.reason
    assert "\n" not in reason and "Traceback" not in reason, reason
    assert reason.startswith("PythonException: ") and "InjectedFailure" in reason, reason
    assert "build.task" in reason, reason
    logged = [r.getMessage() for r in caplog.records if r.name == "indexer.indexer"]
    assert logged == [f"aborting {aborted.value.instant}: {reason}"]
    assert_untouched(table, [COLUMN_STATS])


@pytest.mark.parametrize("point", [p for p in POINTS if not p.startswith("abort")])
def test_injected_failure_then_run_completes(
    tmp_path: Path, spark: Any, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path / "t")
    client = WriteClient(table)
    pending = client.start(Operation.INSERT)  # t stops before it ...
    pending.write(rows(keys(900, 905)))
    client.upsert(rows(keys(0, 10), ts=3))  # ... so this completed commit needs catching up
    finisher = threading.Timer(1.0, pending.commit)
    finisher.start()
    indexer = AsyncIndexer(table, spark=spark)
    monkeypatch.setenv(ENV, point)
    with pytest.raises((InjectedFailure, IndexBuildAbortedError)):
        indexer.run(ALL)
    finisher.join()
    monkeypatch.delenv(ENV)
    state = table.reload_table_config()
    if point.startswith(("execute", "build", "catchup", "complete.before")):
        assert_untouched(table)  # the failure aborted the build cleanly
    client.upsert(rows(keys(0, 10), ts=9))
    AsyncIndexer(table, spark=spark).run(ALL)
    assert_exact(table)
    assert state is not None


def test_failure_during_abort_is_resumed(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path / "t")
    indexer = AsyncIndexer(table, IndexerOptions(timeout=0.5), spark=spark)
    stuck = WriteClient(table).start(Operation.INSERT)
    stuck.write(rows(keys(900, 901)))
    WriteClient(table).insert(rows(keys(950, 951)))
    indexer.schedule(ALL)
    monkeypatch.setenv(ENV, "abort.mid")
    with pytest.raises(InjectedFailure):
        indexer.execute()  # catch-up times out, then the abort itself fails midway
    monkeypatch.delenv(ENV)
    stuck.commit()
    assert AsyncIndexer(table, spark=spark).run(ALL) is not None
    assert_exact(table)


def test_run_retries_with_backoff(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(tmp_path / "t")
    failures = {"left": 2}
    from metadata_table import spark_build as module

    real = module.run_build

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("executor lost")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "run_build", flaky)
    started = time.monotonic()
    done = AsyncIndexer(table, IndexerOptions(retries=3, backoff=0.2), spark=spark).run(ALL)
    assert done is not None and failures["left"] == 0
    assert time.monotonic() - started > 0.2 * 0.5 + 0.4 * 0.5  # two backoffs
    assert_exact(table)
    attempts = list(table.timeline.load().with_actions(Action.INDEXING))
    assert len(attempts) == 1, "aborted attempts leave no instant behind"
    # out of retries: the error surfaces, and the table is as before for that partition
    monkeypatch.setattr(module, "run_build", lambda *a, **k: (_ for _ in ()).throw(OSError("down")))
    AsyncIndexer(table, spark=spark).drop([COLUMN_STATS])
    with pytest.raises(IndexBuildAbortedError, match="down"):
        AsyncIndexer(table, IndexerOptions(retries=1, backoff=0.01), spark=spark).run(
            [COLUMN_STATS]
        )
    assert_untouched(table, [COLUMN_STATS])


def test_drop_while_writers_run(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "t")
    AsyncIndexer(table, spark=spark).run([FILES, COLUMN_STATS])
    stop = threading.Event()
    errors: list[BaseException] = []
    commits = {"n": 0}

    def ingest() -> None:
        writer = WriteClient(Table.open(table.base_uri, table.config))
        n = 0
        while not stop.is_set():
            try:
                writer.upsert(rows(keys(n % 100, n % 100 + 5), ts=100 + n))
                commits["n"] += 1
            except BaseException as e:
                errors.append(e)
                return
            n += 1

    thread = threading.Thread(target=ingest)
    thread.start()
    try:  # the writer stops whatever happens (it went on writing into the worker's next tests)
        time.sleep(1.0)
        assert AsyncIndexer(table, spark=spark).drop([COLUMN_STATS]) == [COLUMN_STATS]
        before = commits["n"]
        while commits["n"] < before + 3 and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    state = table.reload_index_state()
    assert COLUMN_STATS not in state.completed and FILES in state.completed
    assert MetadataTable(table).storage.list(COLUMN_STATS) == [], "writers did not recreate it"
    assert_exact(table, [FILES])


def test_drop_aborts_a_pending_plan(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "t")
    indexer = AsyncIndexer(table, spark=spark)
    indexer.schedule([COLUMN_STATS, BLOOM_FILTERS])
    assert indexer.drop([BLOOM_FILTERS]) == [BLOOM_FILTERS]
    assert_untouched(table)  # the whole plan was aborted
    status = indexer.status()
    assert status == {
        "table": table.base_uri,
        "partitions": {},
        "columns": {},
        "lag": {},
        "indexing": [],
        "legacy_index": False,
        "hudi_metadata_table": None,
        "hudi_deleted_by_writers": [],
        "lost": {},
        "unapplied": {},
    }


def test_any_index_brings_files_unless_told_not_to(tmp_path: Path) -> None:
    """As Hudi requires `files` of every metadata partition, a request for another index on a
    table without it builds it too (listings then come from the index); once there, or with
    indexer.index.files.with.others=false, only what is asked."""
    table = make_table(tmp_path / "t")
    indexer = AsyncIndexer(table, IndexerOptions(engine="local"))
    assert indexer.schedule([COLUMN_STATS]).scheduled == [FILES, COLUMN_STATS]
    assert indexer.schedule([BLOOM_FILTERS]).scheduled == [BLOOM_FILTERS]  # files is inflight
    indexer.execute(), indexer.execute()  # two plans
    assert table.reload_index_state().completed == (BLOOM_FILTERS, COLUMN_STATS, FILES)
    assert_exact(table, [FILES, COLUMN_STATS, BLOOM_FILTERS])

    other = make_table(tmp_path / "u")
    config = Config.resolve(
        explicit={
            "indexer.lock.url": other.config.get(LOCK_URL),
            "indexer.index.files.with.others": "false",
        }
    )
    alone = AsyncIndexer(Table.open(other.base_uri, config), IndexerOptions(engine="local"))
    assert alone.schedule([COLUMN_STATS]).scheduled == [COLUMN_STATS]


def test_indexes_keyed_by_data_file_get_file_groups_by_the_tables_size(tmp_path: Path) -> None:
    """column_stats and bloom_filters get at least one file group per
    indexer.metadata.data.files.per.file.group of the table's latest data files (their configured
    count on small tables, so no file group outgrows what one task writes); files keeps its own."""
    table = make_table(tmp_path / "t")
    files = PartitionWriter(table).table_size(records=False).data_files
    assert files > 8  # more groups than either configured count
    config = Config.resolve(
        explicit={
            "indexer.lock.url": table.config.get(LOCK_URL),
            "indexer.metadata.data.files.per.file.group": "2",
        }
    )
    table = Table.open(table.base_uri, config)
    AsyncIndexer(table, IndexerOptions(engine="local")).run([COLUMN_STATS, BLOOM_FILTERS])
    mdt = MetadataTable(table)
    grouped = {p: len(mdt.file_groups(p)) for p in (FILES, COLUMN_STATS, BLOOM_FILTERS)}
    assert grouped == {FILES: 1, COLUMN_STATS: -(-files // 2), BLOOM_FILTERS: -(-files // 2)}
    assert_exact(table, [FILES, COLUMN_STATS, BLOOM_FILTERS])


def test_status(tmp_path: Path, spark: Any) -> None:
    table = make_table(tmp_path / "t")
    indexer = AsyncIndexer(table, spark=spark)
    done = indexer.run([FILES])
    scheduled = indexer.schedule([BLOOM_FILTERS])
    status = indexer.status()
    assert status["partitions"] == {FILES: "completed", BLOOM_FILTERS: "inflight"}
    assert [(i["timestamp"], i["state"], i["partitions"]) for i in status["indexing"]] == [
        (done.timestamp, "completed", [FILES]),  # type: ignore[union-attr]
        (scheduled.instant.timestamp, "requested", [BLOOM_FILTERS]),  # type: ignore[union-attr]
    ]


def test_an_unreadable_plan_is_reported_and_can_be_dropped(tmp_path: Path, spark: Any) -> None:
    from timeline.errors import CorruptInstantError

    table = make_table(tmp_path / "t")
    indexer = AsyncIndexer(table, spark=spark)
    scheduled = indexer.schedule([COLUMN_STATS])
    path = table.timeline.path(scheduled.instant)  # type: ignore[arg-type]
    table.storage.overwrite(
        path, b'{"version": 1, "indexPartitionInfos": [{"metadataPartitionPath": "nope"'
    )
    with pytest.raises(CorruptInstantError) as err:
        indexer.execute()
    assert err.value.path.endswith(".indexing.requested")
    assert indexer.status()["indexing"][0]["index_upto_instant"].startswith("unreadable plan")
    assert indexer.drop([COLUMN_STATS]) == [COLUMN_STATS]
    assert_untouched(table, [COLUMN_STATS])
