"""What an operator sees on a terminal: only our own lines. Spark's start-up lines, its log and
the JVM's warnings go to a log file in the state folder, which a failure names; ``-v`` brings
them back to stderr."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from timeline.config import LOCK_URL
from timeline.index_state import STATE_FILE

from .test_indexer import make_table

pytestmark = pytest.mark.slow  # indexer runs in processes of their own, starting Spark


def _indexer(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIX_STATE_DIR": str(state)}
    env.pop("AIX_SPARK_VERBOSE", None)
    command = [sys.executable, "-m", "indexer", *args]
    if args[0] in ("run", "execute"):
        command += ["--spark-master", "local[1]"]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_a_build_prints_only_our_lines_and_spark_logs_to_a_file(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    lock = ["--lock-url", table.config.get(LOCK_URL)]
    state = tmp_path / "state"
    done = _indexer(state, "run", table.base_uri, "--index-types", "column_stats", *lock)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith("completed ") and len(done.stdout.splitlines()) == 1
    log = (state / "spark.log").read_text()
    assert "log4j" in log and "WARN" in log  # what used to reach the terminal

    loud = _indexer(state, "run", table.base_uri, "--index-types", "bloom_filters", "-v", *lock)
    assert loud.returncode == 0, loud.stderr
    assert "log4j" in loud.stderr


def test_a_failed_spark_job_is_one_line_naming_the_log(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    state = tmp_path / "state"
    lock = ["--lock-url", table.config.get(LOCK_URL)]
    # a setting Spark refuses at start-up: the build aborts (a warning says so) and the error is
    # one line, followed by where Spark's log is
    failed = _indexer(
        state,
        "run",
        table.base_uri,
        "--index-types",
        "column_stats",
        "--spark-conf",
        "spark.executor.cores=not-a-number",
        *lock,
    )
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error: ")], failed.stderr
    assert lines[-1] == f"Spark's log: {state / 'spark.log'}", failed.stderr
    assert "Java gateway process exited" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_long_steps_report_progress_and_bars_show_only_on_a_terminal(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from indexer.indexer import AsyncIndexer, IndexerOptions
    from timeline.cli import Progress

    from ..metadata_table.test_metadata_table import keys, rows
    from .test_foreign_commits import foreign_write

    table = make_table(tmp_path / "t")
    calls: list[tuple[str, int, int]] = []
    options = IndexerOptions(progress=lambda step, done, total: calls.append((step, done, total)))
    indexer = AsyncIndexer(table, options, spark=spark)
    indexer.run(["files", "column_stats"])
    foreign_write(table, rows(keys(500, 505)), monkeypatch)
    foreign_write(table, rows(keys(600, 605)), monkeypatch)
    indexer.sync()
    steps = {step for step, _, _ in calls}
    assert {"build", "catch-up", "sync"} <= steps
    assert ("sync", 2, 2) in calls and ("sync", 0, 2) in calls
    build = [(done, total) for step, done, total in calls if step == "build"]
    assert build and build[-1][0] == build[-1][1] > 0

    shown = io.StringIO()
    monkeypatch.setattr(sys, "stderr", shown)
    bar = Progress(enabled=True)
    for step, done, total in calls:
        bar(step, done, total)
    bar.close()
    assert "build" in shown.getvalue() and "sync" in shown.getvalue()
    assert "2/2" in shown.getvalue()
    before = shown.getvalue()
    quiet = Progress()  # a StringIO is not a terminal: no bar
    quiet("sync", 1, 2)
    quiet.close()
    assert shown.getvalue() == before


def test_every_command_that_changes_the_index_answers_json(tmp_path: Path) -> None:
    import json

    table = make_table(tmp_path / "t")
    lock = ["--lock-url", table.config.get(LOCK_URL)]
    state = tmp_path / "state"

    def as_json(*args: str) -> dict[str, Any]:
        done = _indexer(state, *args, table.base_uri, "--json", *lock)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    scheduled = as_json("schedule", "--index-types", "files")
    assert scheduled["scheduled"] == ["files"] and scheduled["instant"]
    executed = as_json("execute")
    assert executed == {"instant": scheduled["instant"], "partitions": {"files": "completed"}}
    ran = as_json("run", "--index-types", "files,column_stats")
    assert ran["partitions"] == {"files": "completed", "column_stats": "completed"}
    assert as_json("run", "--index-types", "files")["instant"] is None  # nothing to build
    status = as_json("status")
    assert {i["state"] for i in status["indexing"]} == {"completed"}
    assert {p: row["layout"] for p, row in status["lag"].items()} == {
        "files": 2,
        "column_stats": 2,
    }
    assert as_json("drop", "--index-types", "column_stats") == {"dropped": ["column_stats"]}
    # a state an earlier release wrote (format 1: every partition at layout 1) is told apart
    state_file = Path(tmp_path / "t" / STATE_FILE)
    state_file.write_text(json.dumps({"version": 1, "completed": ["files"]}))
    text = _indexer(state, "status", table.base_uri, *lock)
    assert "layout 1 (an earlier release's: drop and build it again for layout 2)" in text.stdout
