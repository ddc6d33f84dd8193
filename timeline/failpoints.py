"""Named failure points for tests of the indexer's recovery (``AIX_FAILPOINT=<name>[:mode]``).

At a point whose name matches, the process raises :class:`InjectedFailure` (``<name>``), raises
only the first time (``<name>:once``), kills itself with SIGKILL (``<name>:kill``), or stalls for
N seconds (``<name>:sleep=N``). Unset in production; checking is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time

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


def failpoint(name: str) -> None:
    spec = os.environ.get(ENV)
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
