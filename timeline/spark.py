"""The SparkSession every Spark job of this project runs in (the index build, the Spark write
engine). pyspark is imported lazily, inside the function: the kernel itself needs no JVM."""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_session(master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession whose Python workers run this interpreter (so they can import pyarrow and
    this project); local[*] unless ``master`` says otherwise."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName("async-indexer")
        .master(master or "local[*]")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if (master or "local").startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
