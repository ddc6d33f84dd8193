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


def best_seconds(call: Callable[[], Any], times: int = 5) -> tuple[float, Any]:
    """The fewest seconds of ``times`` calls of ``call`` (all with the same cache state: run it
    once before when the first must not be the only cold one), and the last call's result."""
    best, result = float("inf"), None
    for _ in range(times):
        started = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - started)
    return best, result
