"""Named failure points for tests of recovery (``AIX_FAILPOINT=<name>[:mode]``).

At a point whose name matches, the process raises :class:`InjectedFailure` (``<name>``), raises
only the first time (``<name>:once``), kills itself with SIGKILL (``<name>:kill``), or stalls for
N seconds (``<name>:sleep=N``). Unset in production; checking is one dictionary lookup.

Spark tasks do not inherit the driver's environment on a cluster, so a job captures the spec on
the driver (:func:`current`) and passes it to its tasks, which call :func:`task_failpoint`: it
fires on a task's first attempt only, so the retry or speculative copy runs clean.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from timeline.errors import IndexerError

ENV = "AIX_FAILPOINT"

POINTS = (
    "schedule.before_plan",
    "schedule.after_plan",
    "execute.after_inflight",
    "build.mid",
    "execute.after_build",
    "catchup.mid",
    "complete.before",
    "complete.after_partitions",
    "abort.mid",
)


_fired: set[str] = set()


class InjectedFailure(IndexerError):
    def __init__(self, point: str) -> None:
        super().__init__(f"injected failure at {point}")
        self.point = point


def current() -> str | None:
    """The failpoint spec of this process (to hand to Spark tasks)."""
    return os.environ.get(ENV) or None


def armed(name: str, spec: str | None) -> bool:
    return bool(spec) and spec.partition(":")[0] == name  # type: ignore[union-attr]


def task_failpoint(
    name: str, spec: str | None, attempt: int, claim: Callable[[], bool] | None = None
) -> None:
    """In a Spark task: :func:`failpoint` with the driver's ``spec`` on a task's first attempt
    only, and, when ``claim`` is given, only in the one task whose claim succeeds (an atomic
    create on storage: once per job across all executors)."""
    if attempt == 0 and armed(name, spec) and (claim is None or claim()):
        failpoint(name, spec)


def failpoint(name: str, spec: str | None = None) -> None:
    spec = spec or os.environ.get(ENV)
    if not spec:
        return
    point, _, mode = spec.partition(":")
    if point != name:
        return
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode.startswith("sleep="):
        time.sleep(float(mode.split("=", 1)[1]))
        return
    if mode == "once":
        if name in _fired:
            return
        _fired.add(name)
    raise InjectedFailure(name)
