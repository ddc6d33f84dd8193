"""The SparkSession every Spark job of this project runs in (the index build, the Spark write
engine). pyspark is imported lazily, inside the function: the kernel itself needs no JVM.

Quiet by default: everything the driver JVM writes to stderr (Spark's start-up lines, its log,
the JVM's own warnings, and the Python workers it forks) goes to ``spark.log`` in the state
folder (``$AIX_STATE_DIR``, else ``$XDG_STATE_HOME/async-indexer``, else
``~/.local/state/async-indexer``), not to the terminal; the command-line tools name that file when
a command fails. ``-v`` (which sets ``AIX_SPARK_VERBOSE=1``) leaves it on stderr, as does running
under spark-submit."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VERBOSE_ENV = "AIX_SPARK_VERBOSE"
#: The Spark log of the session this process started quietly, if any.
session_log: Path | None = None


def state_dir() -> Path:
    """Where this project keeps per-user state (logs)."""
    explicit = os.environ.get("AIX_STATE_DIR")
    if explicit:
        return Path(explicit)
    root = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(root) / "async-indexer"


@contextlib.contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``log`` while the Spark JVM starts: the JVM (and the Python
    workers it forks later) keep writing their stderr there; ours is restored at once."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(2)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def spark_session(master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession whose Python workers run this interpreter (so they can import pyarrow and
    this project) unless ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` names another (PySpark
    reads only the environment variable, so the setting is copied there). The master is
    ``master``, else the one spark-submit configured (under spark-submit), else local[*]."""
    python = (conf or {}).get("spark.pyspark.python")
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    under_submit = under_spark_submit() and master is None
    builder = (
        SparkSession.builder.appName("async-indexer")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if not under_submit:
        builder = builder.master(master or "local[*]")
    if not under_submit and (master or "local").startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    global session_log
    quiet = os.environ.get(VERBOSE_ENV) != "1" and not under_submit and not _gateway_running()
    if quiet:
        session_log = state_dir() / "spark.log"  # named on failure, a failed start included
        with _stderr_to(session_log):
            session = builder.getOrCreate()
    else:
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def under_spark_submit() -> bool:
    """Whether spark-submit (or a PySpark shell) started this process: it configured Spark."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _gateway_running() -> bool:
    """Whether this process already has a Spark JVM (its options are fixed by then)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None
