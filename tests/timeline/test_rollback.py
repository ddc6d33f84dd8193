"""Rolling back failed writes: only writes whose writer is provably dead, in Apache Hudi's own
Avro format, with the index's update inside the rollback's critical section."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import fastavro
import pytest

from timeline import Action, Table
from timeline.config import Config
from timeline.heartbeat import heartbeat_path
from timeline.hudi_avro import ROLLBACK_METADATA_SCHEMA, ROLLBACK_PLAN_SCHEMA
from timeline.instant import Instant, State
from timeline.locks import LockHandle
from timeline.markers import DirectMarkers, IOType, Marker
from timeline.removals import Removal, parse_removal
from timeline.rollback import RollbackPlan, clean_failed_writes, pending_writes
from timeline.table_config import TableType

HEARTBEAT_MS = 200


def _table(tmp_path: Path, policy: str | None = None) -> Table:
    conf = {"indexer.lock.url": "inprocess", "hoodie.client.heartbeat.interval_in_ms": "200"}
    if policy:
        conf["hoodie.cleaner.policy.failed.writes"] = policy
    return Table.create(
        str(tmp_path / "t"), "t", ["id"], ["p"], config=Config.resolve(explicit=conf)
    )


def _pending_write(table: Table, heartbeat_age: float | None) -> tuple[Instant, str]:
    """A pending commit with one data file behind its marker; its heartbeat file is
    ``heartbeat_age`` seconds old, or missing (a writer of Hudi's in its default setup)."""
    instant = table.timeline.create_requested(Action.COMMIT)
    instant = table.timeline.transition_to_inflight(instant)
    name = f"fg1-0_0-1-1_{instant.timestamp}.parquet"
    DirectMarkers(table.storage, instant.timestamp).create(Marker("p0", name, IOType.CREATE))
    table.storage.create(f"p0/{name}", b"PAR1 data")
    if heartbeat_age is not None:
        path = heartbeat_path(instant.timestamp)
        table.storage.overwrite(path, b"0")
        then = time.time() - heartbeat_age
        os.utime(table.storage.uri(path), (then, then))
    return instant, f"p0/{name}"


@pytest.mark.parametrize("policy", [None, "EAGER"])
def test_a_pending_write_without_a_heartbeat_is_never_rolled_back(
    tmp_path: Path, policy: str | None
) -> None:
    """Apache Hudi's writer in its default single-writer setup writes no heartbeat and rolls
    back its own failed writes when it starts again: its pending instant may be live."""
    table = _table(tmp_path, policy)
    instant, data = _pending_write(table, heartbeat_age=None)
    assert clean_failed_writes(table) == []
    assert table.timeline.load().get(instant.timestamp) == instant
    assert table.storage.exists(data)
    assert not table.timeline.load().with_actions(Action.ROLLBACK)


def test_lazy_writers_count_a_missing_heartbeat_as_expired(tmp_path: Path) -> None:
    table = _table(tmp_path, "lazy")
    instant, data = _pending_write(table, heartbeat_age=None)
    assert [i.timestamp for i in clean_failed_writes(table)] == [instant.timestamp]
    assert not table.storage.exists(data)


def test_a_dead_deltacommit_of_a_merge_on_read_table_is_left_to_hudi(tmp_path: Path) -> None:
    """Rolling back log appends takes rollback command blocks (else, once the failed instant is
    older than the active timeline, Hudi's reader counts its blocks again): this kernel writes
    none, so a failed deltacommit is left to Apache Hudi's own rollback, untouched."""
    conf = {"indexer.lock.url": "inprocess", "hoodie.cleaner.policy.failed.writes": "LAZY"}
    table = Table.create(
        str(tmp_path / "mor"),
        "mor",
        ["id"],
        ["p"],
        table_type=TableType.MERGE_ON_READ,
        config=Config.resolve(explicit=conf),
    )
    instant = table.timeline.create_requested(Action.DELTA_COMMIT)
    instant = table.timeline.transition_to_inflight(instant)
    log = f"p0/.fg1-0_{instant.timestamp}.log.1_0-1-1"
    DirectMarkers(table.storage, instant.timestamp).create(Marker("p0", log[3:], IOType.APPEND))
    table.storage.create(log, b"#HUDI# a block")
    assert table.writer_is_dead(instant.timestamp)
    assert clean_failed_writes(table) == []
    assert table.timeline.load().get(instant.timestamp) == instant
    assert table.storage.exists(log)
    assert not table.timeline.load().with_actions(Action.ROLLBACK)


def test_never_rolls_back_nothing_and_a_fresh_heartbeat_is_alive(tmp_path: Path) -> None:
    table = _table(tmp_path, "NEVER")
    _, data = _pending_write(table, heartbeat_age=60)
    assert clean_failed_writes(table) == [] and table.storage.exists(data)
    table = _table(tmp_path / "second")
    _, data = _pending_write(table, heartbeat_age=0)
    assert clean_failed_writes(table) == [] and table.storage.exists(data)


def test_an_expired_heartbeat_is_rolled_back_in_hudis_avro(tmp_path: Path) -> None:
    table = _table(tmp_path)
    instant, data = _pending_write(table, heartbeat_age=60)
    seen: list[tuple[Removal, bool]] = []

    def on_removal(lock: LockHandle, removal: Removal) -> None:
        lock.ensure_valid()  # called under the lock, before the rollback completes
        rollback = table.timeline.load().get(removal.instant.timestamp, Action.ROLLBACK)
        seen.append((removal, rollback is not None and rollback.is_completed))

    (rolled,) = clean_failed_writes(table, on_removal)
    assert rolled.timestamp == instant.timestamp
    assert not table.storage.exists(data)
    assert not table.storage.exists(heartbeat_path(instant.timestamp))
    ((removal, completed_then),) = seen
    assert not completed_then and removal.deleted == {"p0": {data.split("/")[1]}}

    (done,) = table.timeline.load().with_actions(Action.ROLLBACK)
    assert done.is_completed and done.timestamp == removal.instant.timestamp
    for state, schema in ((State.REQUESTED, ROLLBACK_PLAN_SCHEMA), (State.COMPLETED, None)):
        content = table.timeline.read_content(done, state)
        reader = fastavro.reader(io.BytesIO(content))
        assert reader.codec == "null"  # as Hudi writes instant metadata
        written = json.loads(reader.metadata["avro.schema"])
        assert [f["name"] for f in written["fields"]] == [
            f["name"] for f in (schema or ROLLBACK_METADATA_SCHEMA)["fields"]
        ]
    (record,) = fastavro.reader(io.BytesIO(table.timeline.read_content(done)))
    assert isinstance(record, dict)
    assert record["commitsRollback"] == [instant.timestamp]
    assert record["instantsRollback"] == [{"commitTime": instant.timestamp, "action": "commit"}]
    assert record["partitionMetadata"]["p0"]["successDeleteFiles"] == [table.storage.uri(data)]
    removal = parse_removal(done, table.timeline.read_content(done), "x")
    assert removal.deleted == {"p0": {data.split("/")[1]}}
    plan = RollbackPlan.from_bytes(
        table.timeline.read_content(done, State.REQUESTED), "x", table.storage
    )
    assert plan.instant.timestamp == instant.timestamp and plan.files == (data,)


def test_a_failed_index_update_leaves_the_rollback_to_be_finished(tmp_path: Path) -> None:
    table = _table(tmp_path)
    instant, data = _pending_write(table, heartbeat_age=60)

    def broken(lock: LockHandle, removal: Removal) -> None:
        raise OSError("index storage unreachable")

    with pytest.raises(OSError, match="unreachable"):
        clean_failed_writes(table, broken)
    (pending,) = table.timeline.load().with_actions(Action.ROLLBACK)
    assert not pending.is_completed, "the rollback never completes without its index update"
    assert clean_failed_writes(table) == []  # finished from its plan; nothing new to roll back
    assert table.timeline.load().with_actions(Action.ROLLBACK).completed()
    assert table.timeline.load().get(instant.timestamp) is None
    assert not table.storage.exists(data)


def test_a_json_plan_of_an_earlier_version_is_finished(tmp_path: Path) -> None:
    table = _table(tmp_path)
    instant, data = _pending_write(table, heartbeat_age=60)
    plan = {
        "instantToRollback": {
            "commitTime": instant.timestamp,
            "action": "commit",
            "state": "inflight",
        },
        "filesToDelete": [data],
        "method": "markers",
    }
    table.timeline.create_requested(Action.ROLLBACK, json.dumps(plan).encode())
    assert clean_failed_writes(table) == []
    assert not table.storage.exists(data)
    assert table.timeline.load().get(instant.timestamp) is None


def test_pending_writes_say_why_the_cleaner_leaves_them(tmp_path: Path) -> None:
    table = _table(tmp_path)  # a writer counts as dead 0.4 s after its last beat
    alive, _ = _pending_write(table, heartbeat_age=0.1)
    eager, _ = _pending_write(table, heartbeat_age=None)
    dead, _ = _pending_write(table, heartbeat_age=5)
    left = {p.instant.timestamp: p for p in pending_writes(table)}
    assert set(left) == {alive.timestamp, eager.timestamp}
    assert left[alive.timestamp].why.startswith("its writer is alive or not yet provably dead")
    assert 0.2 < (left[alive.timestamp].expires_in or 0) <= 0.3 + 0.05
    assert left[eager.timestamp].why.startswith("no heartbeat file: under EAGER")
    assert left[eager.timestamp].to_json()["heartbeat_age_seconds"] is None
    assert [i.timestamp for i in clean_failed_writes(table)] == [dead.timestamp]


def test_clean_reports_a_crashed_writer_it_waits_for_and_takes_the_writers_settings(
    tmp_path: Path,
) -> None:
    """Right after a writer crashed its heartbeat is fresh: clean says it waits, and how long;
    given the writer's own (short) heartbeat settings, it rolls the write back once expired."""
    import subprocess
    import sys

    table = _table(tmp_path)
    crashed, data = _pending_write(table, heartbeat_age=1)
    lock = ["--conf", "indexer.lock.url=inprocess"]

    def clean(*conf: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "timeline", "clean", table.base_uri, *lock, *conf]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    waited = clean()  # the defaults: dead after 60 s x 2
    assert waited.returncode == 0, waited.stderr
    assert f"left {crashed.timestamp} (commit, inflight): its writer is alive" in waited.stdout
    assert "rolled back once older than 120 s (in 11" in waited.stdout
    assert "hoodie.client.heartbeat.interval_in_ms=60000" in waited.stdout
    assert "no failed writes" not in waited.stdout and table.storage.exists(data)
    config = tmp_path / "service.toml"
    config.write_text(
        f'[[tables]]\nbase = "{table.base_uri}"\n'
        'conf = { "hoodie.client.heartbeat.interval_in_ms" = "200" }\n'
    )
    rolled = clean("--config", str(config))
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout.startswith(
        f"rolled back {crashed.timestamp}"
    ) and not table.storage.exists(data)
