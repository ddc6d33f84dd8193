"""Reading many data files on every core without Spark: chunks of files handed to worker
processes or threads, results taken in chunk order.

A footer's statistics become Python objects (pyarrow's ``FileMetaData`` and the aggregates made
of it), so threads reading footers share one core through the GIL; from
:data:`PROCESS_MIN_FILES` data files on, the chunks go to worker processes. They are spawned, not
forked, so no lock or thread of the caller (a heartbeat, a lock client) is copied into them, and
each gets the work's shared context once, when it starts, not with every chunk.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

#: workers when none are configured: one per core, at most four
DEFAULT_WORKERS = min(4, os.cpu_count() or 1)

#: from this many data files on, worker processes: one starts in about a second (imports), which
#: reading this many footers on another core pays back; fewer files are read in threads
PROCESS_MIN_FILES = 2_000

Chunk = TypeVar("Chunk")
Result = TypeVar("Result")

#: a worker process's context, set once when it starts
_context: Any = None


def workers_for(files: int, configured: int = 0) -> tuple[int, bool]:
    """(workers, whether they are processes) for reading ``files`` data files; ``configured``
    0 is :data:`DEFAULT_WORKERS`."""
    workers = max(1, min(configured or DEFAULT_WORKERS, files))
    return workers, workers > 1 and files >= PROCESS_MIN_FILES


def map_chunks(
    work: Callable[[Any, Chunk], Result],
    context: Any,
    chunks: Iterable[Chunk],
    workers: int,
    processes: bool,
) -> Iterator[Result]:
    """``work(context, chunk)`` of each chunk, in order, on ``workers`` processes or threads.
    ``work`` must be a module-level function and, with processes, ``context``, the chunks and
    the results picklable (Arrow tables are); an error raised by ``work`` is raised here."""
    pool: Executor
    if processes:
        pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start,
            initargs=(context,),
        )
        call: Callable[[Chunk], Result] = functools.partial(_in_worker, work)
    else:
        pool = ThreadPoolExecutor(workers, "read")
        call = functools.partial(work, context)
    with pool:
        yield from pool.map(call, chunks)


def _start(context: Any) -> None:
    global _context
    _context = context


def _in_worker(work: Callable[[Any, Chunk], Result], chunk: Chunk) -> Result:
    return work(_context, chunk)


__all__ = ["DEFAULT_WORKERS", "PROCESS_MIN_FILES", "map_chunks", "workers_for"]
