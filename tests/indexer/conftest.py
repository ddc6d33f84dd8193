"""One local SparkSession for the whole test run (starting one takes ~8 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from timeline.spark import spark_session

    session = spark_session("local[2]", {"spark.default.parallelism": "4"})
    yield session
    session.stop()
