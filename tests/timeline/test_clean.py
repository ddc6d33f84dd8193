"""Cleaning old file versions: the policies' rules, the guards (savepoints, pending writes, the
readers' grace period), Hudi's Avro plan and metadata, resuming an interrupted clean, incremental
planning, and the index's update inside the clean's critical section."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from timeline import Action, Table
from timeline.clean import (
    CleanPlan,
    CleanPlanner,
    CleanPolicy,
    clean,
    clean_metadata,
    cleans_left,
    execute_clean,
    schedule_clean,
)
from timeline.config import Config
from timeline.fs_view import FileSystemView
from timeline.instant import State
from timeline.removals import parse_removal, read_avro_records
from writer.client import WriteClient

BASE_CONFIG = {
    "indexer.lock.url": "inprocess",
    "hoodie.clean.automatic": "false",
    "indexer.clean.grace.seconds": "0",
}


def make_table(base: Path, **values: str) -> Table:
    config = Config.resolve(explicit={**BASE_CONFIG, **values})
    return Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config)


def rows(keys: list[str], ts: int, city: str = "sf") -> pa.Table:
    return pa.table(
        {
            "uuid": keys,
            "city": [city] * len(keys),
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "fare": [float(ts)] * len(keys),
        }
    )


def versions(base: Path, city: str = "sf") -> list[str]:
    """The instants of the base files in ``city``, oldest first."""
    return sorted(
        p.name.rsplit("_", 1)[1].removesuffix(".parquet") for p in (base / city).glob("*.parquet")
    )


def snapshot(table: Table) -> list[dict[str, Any]]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot(
        ["uuid", "city", "ts"]
    )
    return sorted(data.to_pylist(), key=lambda r: r["uuid"])


def write(table: Table, commits: int, city: str = "sf") -> list[str]:
    with WriteClient(table) as client:
        return [client.upsert(rows(["a", "b"], ts, city)).timestamp for ts in range(commits)]


def test_keep_latest_commits_keeps_what_a_query_over_the_retained_commits_reads(
    tmp_path: Path,
) -> None:
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "3"})
    times = write(table, 6)
    before = snapshot(table)
    old = sorted(p.name for t in times[:2] for p in (tmp_path / "sf").glob(f"*_{t}.parquet"))
    (result,) = clean(table)
    # E = the 3rd newest commit (times[3]); kept: times[3:] and the newest before E (times[2])
    assert versions(tmp_path) == times[2:]
    assert result.plan.earliest_to_retain is not None
    assert result.plan.earliest_to_retain.timestamp == times[3]
    assert snapshot(table) == before
    # Hudi's Avro, as Hudi 0.15 writes it: a plan in requested and inflight, metadata completed
    done = table.timeline.load().with_actions(Action.CLEAN).completed().last()
    assert done is not None and done.timestamp == result.instant.timestamp
    (metadata,) = read_avro_records(table.timeline.read_content(done))
    assert metadata["earliestCommitToRetain"] == times[3]
    assert metadata["lastCompletedCommitTimestamp"] == times[-1]
    assert metadata["totalFilesDeleted"] == 2
    assert metadata["version"] == 2
    assert sorted(metadata["partitionMetadata"]["sf"]["successDeleteFiles"]) == old
    for state in (State.REQUESTED, State.INFLIGHT):
        (plan,) = read_avro_records(table.timeline.read_content(done, state))
        assert plan["policy"] == "KEEP_LATEST_COMMITS" and plan["version"] == 2
        paths = [i["filePath"] for i in plan["filePathsToBeDeletedPerPartition"]["sf"]]
        assert len(paths) == 2 and all(p.startswith(str(tmp_path)) for p in paths)
    removal = parse_removal(done, table.timeline.read_content(done), "x")
    assert sorted(removal.deleted["sf"]) == old
    # nothing more to clean until another commit
    assert clean(table) == []


def test_keep_latest_file_versions(tmp_path: Path) -> None:
    table = make_table(
        tmp_path,
        **{
            "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
            "hoodie.cleaner.fileversions.retained": "2",
        },
    )
    times = write(table, 5)
    (result,) = clean(table)
    assert versions(tmp_path) == times[-2:]
    assert result.plan.earliest_to_retain is None
    (metadata,) = read_avro_records(table.timeline.read_content(result.instant))
    assert metadata["earliestCommitToRetain"] == ""


def test_keep_latest_by_hours_keeps_the_last_hours(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"hoodie.cleaner.policy": "KEEP_LATEST_BY_HOURS"})
    times = write(table, 4)
    planner = CleanPlanner(table)
    assert not planner.plan()  # every commit is within the last 24 hours
    import time

    later = time.time() + 24 * 3600 + 5  # a day on: every commit is older than the window
    assert not planner.plan(now=later)  # no commit within the window: none to anchor E
    assert versions(tmp_path) == times


def test_a_pending_write_and_the_grace_period_bound_what_goes(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "1"})
    times = write(table, 3)
    pending = table.timeline.create_requested(Action.COMMIT)  # a writer that read times[1]'s
    more = write(table, 2)
    plan = CleanPlanner(table).plan()
    # E would be more[-1]; the pending write started after times[-1] bounds it there
    assert plan.earliest_to_retain is not None
    assert plan.earliest_to_retain.timestamp == times[-1]
    kept = {t for t in versions(tmp_path)} - {
        p.rsplit("_", 1)[1].removesuffix(".parquet") for p in plan.paths
    }
    assert kept == {times[-2], times[-1], *more}
    table.timeline.delete_pending(pending)
    graced = CleanPlanner(table, CleanPolicy(commits_retained=1, grace_seconds=3600))
    assert not graced.plan()  # every commit completed within the hour


def test_savepointed_files_are_never_cleaned(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "1"})
    times = write(table, 2)
    pinned = next((tmp_path / "sf").glob(f"*_{times[0]}.parquet")).name
    schema = {
        "type": "record",
        "name": "HoodieSavepointMetadata",
        "fields": [
            {
                "name": "partitionMetadata",
                "type": {
                    "type": "map",
                    "values": {
                        "type": "record",
                        "name": "HoodieSavepointPartitionMetadata",
                        "fields": [
                            {"name": "partitionPath", "type": "string"},
                            {
                                "name": "savepointDataFile",
                                "type": {"type": "array", "items": "string"},
                            },
                        ],
                    },
                },
            }
        ],
    }
    sink = io.BytesIO()
    record = {"partitionMetadata": {"sf": {"partitionPath": "sf", "savepointDataFile": [pinned]}}}
    fastavro.writer(sink, fastavro.parse_schema(schema), [record])
    saved = table.timeline.create_requested(Action.SAVEPOINT, b"", times[0])
    saved = table.timeline.transition_to_inflight(saved)
    table.timeline.complete(saved, sink.getvalue())
    times += write(table, 3)
    (result,) = clean(table)
    assert pinned not in {p.rsplit("/", 1)[1] for p in result.plan.paths}
    assert (tmp_path / "sf" / pinned).exists()
    assert set(versions(tmp_path)) == {times[0], times[-2], times[-1]}


def test_an_interrupted_clean_is_finished_from_its_plan(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "2"})
    times = write(table, 5)
    plan = CleanPlanner(table).plan()
    requested = schedule_clean(table, plan)
    assert requested is not None
    assert schedule_clean(table, plan) is None  # one pending clean at a time
    # crashed after moving to inflight and deleting one file
    inflight = table.timeline.transition_to_inflight(
        requested, table.timeline.read_content(requested)
    )
    table.storage.delete(plan.paths[0])
    assert inflight.is_inflight
    results = clean(table)
    assert [r.instant.timestamp for r in results] == [requested.timestamp]
    assert versions(tmp_path) == times[2:]
    (metadata,) = read_avro_records(table.timeline.read_content(results[0].instant))
    assert metadata["totalFilesDeleted"] == 2  # the file already gone counts as deleted


def test_two_processes_executing_one_clean_both_finish_it(tmp_path: Path) -> None:
    """A writer's inline clean and the daemon's may execute the same planned clean: the one
    that finds it inflight already goes on from there (it failed on the transition before),
    and the one that finds it completed reports it done."""
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "2"})
    times = write(table, 5)
    requested = schedule_clean(table, CleanPlanner(table).plan())
    assert requested is not None
    table.timeline.transition_to_inflight(requested, table.timeline.read_content(requested))
    first = execute_clean(table, requested)  # as read before the other moved it on
    second = execute_clean(table, requested)
    assert first.instant.is_completed and second.instant == first.instant
    assert versions(tmp_path) == times[2:]


def test_another_engines_pending_clean_is_left_to_it_until_abandoned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Apache Hudi's writer plans its clean and carries it out in one call, under no lock we
    share: a cleaner of ours that moved Hudi's requested clean to inflight first made Hudi's
    write fail (CI: "Failed to create file ...clean.inflight"). Ours plans carry their
    scheduler; one without it is finished only once its newest state file is old enough."""
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "2"})
    times = write(table, 5)
    ours = CleanPlanner(table).plan()
    assert ours.is_ours
    hudis = dataclasses.replace(ours, scheduler="")  # Hudi's plans carry no scheduler
    assert not CleanPlan.from_bytes(hudis.to_bytes(table.storage), "p", table.storage).is_ours
    requested = schedule_clean(table, hudis)
    assert requested is not None
    assert clean(table, force=True) == []  # left to Hudi, and no second clean beside it
    assert table.timeline.load().get(requested.timestamp).is_requested
    assert len(versions(tmp_path)) == 5
    inflight = table.timeline.transition_to_inflight(
        requested, table.timeline.read_content(requested)
    )
    assert clean(table) == []  # Hudi is deleting: still Hudi's
    ((left, why),) = cleans_left(table)
    assert left == inflight and "indexer.clean.adopt.seconds" in why
    told = capsys_cli(table, capsys)
    assert f"left clean {inflight.timestamp} (inflight): another engine" in told
    assert "no old file versions to delete" not in told
    path = table.storage.uri(table.timeline.path(inflight))
    old = os.stat(path).st_mtime - 900
    os.utime(path, (old, old))
    (result,) = clean(table)  # abandoned 15 minutes ago (indexer.clean.adopt.seconds)
    assert result.instant.timestamp == requested.timestamp and result.instant.is_completed
    assert versions(tmp_path) == times[2:]
    assert cleans_left(table) == []


def test_a_clean_another_engine_completes_meanwhile_is_done(tmp_path: Path) -> None:
    """Apache Hudi's writer finishes any pending clean it finds, ours too, under no lock of
    ours: one it completes while ours writes the index's update is done, not an error."""
    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "2"})
    times = write(table, 5)
    requested = schedule_clean(table, CleanPlanner(table).plan())
    assert requested is not None

    def hudi_completes_it(_lock: object, removal: object) -> None:
        inflight = requested.with_state(State.INFLIGHT)
        table.timeline.complete(inflight, b"Hudi's HoodieCleanMetadata")

    result = execute_clean(table, requested, hudi_completes_it)
    assert result.instant == requested.with_state(State.COMPLETED)
    assert table.timeline.read_content(result.instant) == b"Hudi's HoodieCleanMetadata"
    assert versions(tmp_path) == times[2:]


def capsys_cli(table: Table, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``indexer-table clean`` prints for ``table``."""
    from timeline.cli import main

    capsys.readouterr()
    conf = [f"--conf={k}={v}" for k, v in BASE_CONFIG.items()]
    assert main(["clean", table.base_uri, *conf]) == 0
    return capsys.readouterr().out


def test_incremental_planning_lists_the_partitions_written_since_the_last_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import timeline.clean as clean_module

    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "2"})
    write(table, 3, "sf")
    write(table, 3, "la")
    clean(table)  # the first clean lists every partition
    write(table, 3, "ny")
    listed: list[list[str]] = []
    original = clean_module.list_partitions

    def spy(storage: Any, partitions: list[str]) -> Any:
        listed.append(partitions)
        return original(storage, partitions)

    monkeypatch.setattr(clean_module, "list_partitions", spy)
    monkeypatch.setattr(clean_module, "list_data_files", lambda _s: pytest.fail("listed all"))
    (result,) = clean(table)
    # E moved from la's 2nd commit to ny's 2nd: the commits between wrote la and ny; la's
    # older slices go (ny's first one is what a query at E reads)
    assert listed == [["la", "ny"]]
    assert set(result.plan.files) == {"la"}


def test_a_table_that_only_receives_new_files_is_not_listed_whole_at_every_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each commit writes a new partition, so no clean ever has a file to delete: the first plan
    past the retained commits lists the table and is completed as an empty clean, which later
    plans count from (Hudi 0.15 writes none, and lists the table at every commit)."""
    import timeline.clean as clean_module

    table = make_table(
        tmp_path, **{"hoodie.clean.automatic": "true", "hoodie.cleaner.commits.retained": "2"}
    )
    whole: list[int] = []
    original = clean_module.list_data_files

    def spy(storage: Any) -> Any:
        whole.append(1)
        return original(storage)

    monkeypatch.setattr(clean_module, "list_data_files", spy)
    with WriteClient(table) as client:
        for ts in range(8):
            client.insert(rows([f"k{ts}"], ts, f"c{ts}"))
    assert len(whole) == 1
    cleans = table.timeline.load().with_actions(Action.CLEAN).completed()
    assert len(cleans) == 1
    (empty,) = cleans
    metadata = clean_metadata(table, empty)
    assert metadata["totalFilesDeleted"] == 0 and metadata["partitionMetadata"] == {}
    assert metadata["earliestCommitToRetain"]
    assert len(snapshot(table)) == 8


def test_the_plan_reads_hudi_paths_and_version_1_plans(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    root = table.storage.uri("").rstrip("/")
    hudi_style = f"file:{root}"
    plan = CleanPlan("KEEP_LATEST_COMMITS", None, "1", {"sf": ("sf/x_1-0-1_1.parquet",)})
    data = plan.to_bytes(table.storage)
    assert CleanPlan.from_bytes(data, "p", table.storage).files == plan.files
    (record,) = read_avro_records(data)
    record["filePathsToBeDeletedPerPartition"]["sf"][0]["filePath"] = (
        f"{hudi_style}/sf/x_1-0-1_1.parquet"
    )
    from timeline.hudi_avro import avro_file

    assert (
        CleanPlan.from_bytes(avro_file("clean_plan", record), "p", table.storage).files
        == plan.files
    )
    record["filePathsToBeDeletedPerPartition"] = None
    record["filesToBeDeletedPerPartition"] = {"sf": ["x_1-0-1_1.parquet"]}
    assert (
        CleanPlan.from_bytes(avro_file("clean_plan", record), "p", table.storage).files
        == plan.files
    )
    from timeline.errors import CorruptInstantError

    with pytest.raises(CorruptInstantError, match="not a valid clean plan"):
        CleanPlan.from_bytes(json.dumps({}).encode(), "p", table.storage)


def test_the_index_applies_a_clean_in_its_critical_section(tmp_path: Path) -> None:
    from metadata_table.layout import COLUMN_STATS, FILES
    from metadata_table.maintenance import initialize
    from metadata_table.table import MetadataTable
    from metadata_table.validate import validate
    from timeline.removals import index_removal_hook

    table = make_table(tmp_path, **{"hoodie.cleaner.commits.retained": "2"})
    write(table, 2)
    initialize(table, [FILES, COLUMN_STATS])
    times = write(table, 3)
    hook = index_removal_hook(table)
    assert hook is not None  # metadata_table offers it through its entry point
    (result,) = clean(table, hook)
    reader = MetadataTable(table).reader(table.timeline.load())
    for partition in (FILES, COLUMN_STATS):
        assert reader.unapplied(partition) == [], partition
    listed = reader.read(FILES)
    names = set(listed.column("file_name").to_pylist())
    assert not names & {p.rsplit("/", 1)[1] for p in result.plan.paths}
    assert {n.rsplit("_", 1)[1].removesuffix(".parquet") for n in names} == set(times)
    assert all(r.ok for r in validate(table)), [r.to_json() for r in validate(table)]


def test_our_writers_clean_after_each_commit_by_default(tmp_path: Path) -> None:
    from metadata_table.layout import FILES
    from metadata_table.maintenance import initialize
    from metadata_table.table import MetadataTable

    table = make_table(
        tmp_path, **{"hoodie.clean.automatic": "true", "hoodie.cleaner.commits.retained": "2"}
    )
    write(table, 1)
    initialize(table, [FILES])
    with WriteClient(table) as client:
        times = []
        for ts in range(6):
            times.append(client.upsert(rows(["a", "b"], ts)).timestamp)
            # from the third commit on, each commit makes one more version cleanable; the
            # second's plan, the first past the retained commits, listed the table and found
            # nothing: it is recorded, for the next plans to list only what was written since
            assert len(client.last_cleans) == (1 if ts >= 1 else 0), ts
            assert all(bool(c.plan) == (ts >= 2) for c in client.last_cleans), ts
        assert versions(tmp_path) == times[-3:]
    cleans = table.timeline.load().with_actions(Action.CLEAN)
    assert len(cleans.completed()) == 5 and not cleans.pending()
    reader = MetadataTable(table).reader(table.timeline.load())
    assert reader.unapplied(FILES) == []
    # off: nothing cleaned
    quiet = Table.open(
        str(tmp_path), Config.resolve(explicit={**BASE_CONFIG, "hoodie.clean.automatic": "false"})
    )
    with WriteClient(quiet) as client:
        client.upsert(rows(["a"], 9))
        assert client.last_cleans == []
    assert len(versions(tmp_path)) == 4


def test_the_daemon_runs_the_services_writers_left_off(tmp_path: Path) -> None:
    """Writers with the services off (hoodie.clean.automatic / archive.automatic false on their
    side): the daemon's table services clean and archive, with the index kept current."""
    from indexer.indexer import AsyncIndexer
    from indexer.service import Metrics
    from metadata_table.layout import FILES
    from metadata_table.maintenance import initialize

    table = make_table(tmp_path, **{"hoodie.archive.automatic": "false"})
    write(table, 1)
    initialize(table, [FILES])
    times = write(table, 12)
    daemon = Table.open(
        str(tmp_path),
        Config.resolve(
            explicit={
                **BASE_CONFIG,
                "hoodie.clean.automatic": "true",
                "hoodie.cleaner.commits.retained": "2",
                "hoodie.keep.min.commits": "3",
                "hoodie.keep.max.commits": "5",
            }
        ),
    )
    indexer = AsyncIndexer(daemon)
    cleaned, archived = indexer.table_services()
    assert len(cleaned) == 1 and cleaned[0].files_deleted == 13 - 3
    assert versions(tmp_path) == times[-3:]
    assert archived is not None and len(daemon.timeline.load().write_timeline()) == 3
    assert indexer.unapplied() == {}
    metrics = Metrics()
    metrics.add(cleans=1, cleaned_files=10, archived_instants=len(archived.instants))
    text = metrics.prometheus()
    assert "async_indexer_cleaned_files_total 10" in text
    assert "async_indexer_archived_instants_total" in text
