"""Timing helpers the benchmark scripts share."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(call: Callable[[], Any], times: int = 3) -> float:
    """Median seconds of ``times`` calls of ``call``."""
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)
