"""Shared by the reliability suites: the soak switch and the crash matrix printed at the end.

``AIX_SOAK=1`` (``make soak``) runs the long versions: every crash point instead of a sample,
and the concurrency runs for ``AIX_SOAK_SECONDS`` (default 300) instead of 60 seconds.
"""

from __future__ import annotations

import os
from typing import Any

SOAK = os.environ.get("AIX_SOAK") == "1"
CONCURRENCY_SECONDS = float(
    os.environ.get("AIX_CONCURRENCY_SECONDS")
    or (os.environ.get("AIX_SOAK_SECONDS", "300") if SOAK else 60)
)

#: (component, point, outcome) of every crash the matrix ran, in order
MATRIX: list[tuple[str, str, str]] = []
#: one line per suite run worth reporting (operations replayed, faults injected)
SUMMARY: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARY:
        terminalreporter.section("reliability: counts")
        for line in SUMMARY:
            terminalreporter.write_line(line)
    if not MATRIX:
        return
    width = max(len(point) for _, point, _ in MATRIX)
    terminalreporter.section("crash matrix: points x outcome")
    for component, point, outcome in MATRIX:
        terminalreporter.write_line(f"{component:<14} {point:<{width}}  {outcome}")
    by_component: dict[str, int] = {}
    for component, _, _ in MATRIX:
        by_component[component] = by_component.get(component, 0) + 1
    terminalreporter.write_line(
        "points killed: " + ", ".join(f"{c} {n}" for c, n in by_component.items())
    )
