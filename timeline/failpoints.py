"""Named failure points for tests of recovery (``AIX_FAILPOINT=<spec>[;<spec>...]``).

A spec is ``<name>[@N][:mode]``. At a point whose name matches (on its N-th hit in this process
when ``@N`` is given), the process raises :class:`InjectedFailure`, raises only the first time
(``:once``), kills itself with SIGKILL (``:kill``), stalls for N seconds (``:sleep=N``), or only
reports the hit on stderr (``:trace``, to enumerate the points a run passes). Before it fires, a
point says so on stderr (``failpoint <name>#<hit> <mode>: <detail>``), so a crash test can name the
state it killed. Unset in production; checking is one dictionary lookup.

``storage.write`` is hit before every create, overwrite and delete through the storage facade:
``storage.write@N:kill`` kills a process right before its N-th storage mutation, which enumerates
every crash state of a run.

Spark tasks do not inherit the driver's environment on a cluster, so a job captures the spec on
the driver (:func:`current`) and passes it to its tasks, which call :func:`task_failpoint`: it
fires on a task's first attempt only, so the retry or speculative copy runs clean. In Spark's
Python workers the environment is ignored for the same reason (locally they would inherit it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

from timeline.errors import InjectedFailure

ENV = "AIX_FAILPOINT"

#: the named points of an index build (others: "archive.read" before an archive file is read,
#: "resync.mid" once a sync's rebuild in place has begun)
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
_hits: Counter[str] = Counter()
_counting = threading.Lock()  # a build in this process hits points from several threads


def current() -> str | None:
    """The failpoint spec of this process (to hand to Spark tasks)."""
    return os.environ.get(ENV) or None


def _specs(spec: str) -> list[tuple[str, int | None, str]]:
    out = []
    for part in spec.split(";"):
        head, _, mode = part.strip().partition(":")
        name, _, nth = head.partition("@")
        out.append((name, int(nth) if nth else None, mode))
    return out


def armed(name: str, spec: str | None) -> bool:
    return bool(spec) and any(n == name for n, _, _ in _specs(spec or ""))


def task_failpoint(
    name: str, spec: str | None, attempt: int, claim: Callable[[], bool] | None = None
) -> None:
    """In a Spark task: :func:`failpoint` with the driver's ``spec`` on a task's first attempt
    only, and, when ``claim`` is given, only in the one task whose claim succeeds (an atomic
    create on storage: once per job across all executors)."""
    if attempt == 0 and armed(name, spec) and (claim is None or claim()):
        failpoint(name, spec)


def failpoint(name: str, spec: str | None = None, detail: str = "") -> None:
    if spec is None:
        spec = os.environ.get(ENV)
        if not spec or "PYTHON_WORKER_FACTORY_SECRET" in os.environ:  # a Spark Python worker
            return
    matching = [(nth, mode) for n, nth, mode in _specs(spec) if n == name]
    if not matching:
        return
    with _counting:
        _hits[name] += 1
        hit = _hits[name]
    for nth, mode in matching:
        if nth is not None and nth != hit:
            continue
        if mode == "once" and name in _fired:
            continue
        print(f"failpoint {name}#{hit} {mode or 'raise'}: {detail}", file=sys.stderr, flush=True)
        if mode == "trace":
            continue
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode.startswith("sleep="):
            time.sleep(float(mode.split("=", 1)[1]))
            continue
        _fired.add(name)
        raise InjectedFailure(name)
