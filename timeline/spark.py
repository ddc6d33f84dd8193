"""The SparkSession every Spark job of this project runs in (the index build, the Spark write
engine). pyspark is imported lazily, inside the function: the kernel itself needs no JVM."""

from __future__ import annotations

import os
import sys
from typing import Any


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

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ and master is None
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
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
