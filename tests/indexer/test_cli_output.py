"""What an operator sees on a terminal: only our own lines. Spark's start-up lines, its log and
the JVM's warnings go to a log file in the state folder, which a failure names; ``-v`` brings
them back to stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from timeline.config import LOCK_URL

from .test_indexer import make_table


def _indexer(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIX_STATE_DIR": str(state)}
    env.pop("AIX_SPARK_VERBOSE", None)
    command = [sys.executable, "-m", "indexer", *args, "--spark-master", "local[1]"]
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
