"""Reading many data files on every core without Spark: chunks of files handed to worker
processes or threads, results taken in chunk order.

A footer's statistics become Python objects (pyarrow's ``FileMetaData`` and the column statistics
taken from it), so threads reading footers share one core through the GIL; from
:data:`PROCESS_MIN_FILES` data files on, the chunks go to worker processes. They are forked from
multiprocessing's fork server, a clean process started once, with the work's module (pyarrow and
this project) imported before it forks: so no lock or thread of the caller (a heartbeat, a lock
client) is copied into them and a worker starts in milliseconds. multiprocessing would also run
the caller's main script again in each worker, which breaks a script without a ``__main__``
guard (a user's script calling the API): workers are started while ``__main__`` is hidden, since
the work runs functions of this project's modules only. Each gets the work's shared context
once, when it starts, and allocates with its caller's Arrow memory pool (the commands' jemalloc
kept each worker of a 100,000-file ``validate`` 33 MB smaller than pyarrow's default pool).

A reader decoding several index files at once (:func:`in_parallel`) uses threads the process
keeps: Parquet's decoding runs outside the GIL.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from itertools import pairwise
from multiprocessing import forkserver
from typing import Any, TypeVar

import pyarrow as pa

#: workers when none are configured: one per core, at most four
DEFAULT_WORKERS = min(4, os.cpu_count() or 1)

#: from this many data files on, worker processes (the fork server starts in about a second, once
#: per process, which reading this many footers on another core pays back); fewer: threads
PROCESS_MIN_FILES = 2_000

Item = TypeVar("Item")
Chunk = TypeVar("Chunk")
Result = TypeVar("Result")

#: a worker process's context, set once when it starts
_context: Any = None


def workers_for(files: int, configured: int = 0) -> tuple[int, bool]:
    """(workers, whether they are processes) for reading ``files`` data files; ``configured``
    0 is :data:`DEFAULT_WORKERS`."""
    workers = max(1, min(configured or DEFAULT_WORKERS, files))
    return workers, workers > 1 and files >= PROCESS_MIN_FILES


def chunked(items: list[Item], workers: int, most: int) -> list[list[Item]]:
    """``items`` in chunks of at most ``most`` whose sizes differ by one at most, in a multiple of
    ``workers`` chunks when there are enough items, so that every worker reads about as many
    (1,000 files in chunks of at most 136: eight of 125, not seven of 136 and one of 48)."""
    if not items:
        return []
    workers = max(1, workers)
    count = -(-len(items) // max(1, min(most, len(items))))
    count = min(len(items), -(-count // workers) * workers)
    size, larger = divmod(len(items), count)
    bounds = [i * size + min(i, larger) for i in range(count + 1)]
    return [items[a:b] for a, b in pairwise(bounds)]


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
        mp_context = multiprocessing.get_context("forkserver")
        # what the server imports before forking workers (only the first call's list counts:
        # the server starts once); not the default, the caller's main script
        mp_context.set_forkserver_preload([work.__module__])
        pool = ProcessPoolExecutor(
            workers,
            mp_context=mp_context,
            initializer=_start,
            initargs=(context, pa.default_memory_pool().backend_name),
        )
        call: Callable[[Chunk], Result] = functools.partial(_in_worker, work)
    else:
        pool = ThreadPoolExecutor(workers, "read")
        call = functools.partial(work, context)
    with pool:
        with _main_hidden() if processes else contextlib.nullcontext():
            results = pool.map(call, chunks)  # submits every chunk: every worker starts here
        yield from results


def start_processes(module: str) -> None:
    """Start the fork server :func:`map_chunks` forks its worker processes from, with
    ``module`` (the work's) imported, and return without waiting for it: its imports then run
    on another core while the caller lists the table, instead of delaying the first chunk
    (1.4 s from submitting the chunks of a 100,000-file build to the first chunk's records,
    most of it the server's start). Does nothing once the server runs."""
    multiprocessing.get_context("forkserver").set_forkserver_preload([module])
    with _main_hidden():  # the server would import the caller's main script too
        forkserver.ensure_running()


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """``__main__`` as an empty module, so a worker started meanwhile does not import the
    caller's main script again."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


#: pyarrow's memory pools by backend name
_POOLS: dict[str, Callable[[], pa.MemoryPool]] = {
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "system": pa.system_memory_pool,
}


#: the threads :func:`in_parallel` runs work on, started on first use and kept by the process
_DECODERS: list[ThreadPoolExecutor] = []
_DECODERS_LOCK = threading.Lock()
_DECODER_NAME = "index-decode"


def in_parallel(work: Callable[[Item], Result], items: Sequence[Item]) -> list[Result]:
    """``work`` of each of ``items``, in order, on threads the process keeps (one per core, at
    most four): for work that runs mostly outside the GIL, as decoding Parquet does. From one of
    those threads (work that itself asks for work in parallel), in the calling thread, so that
    no thread waits for a pool it occupies."""
    if len(items) < 2 or threading.current_thread().name.startswith(_DECODER_NAME):
        return [work(item) for item in items]
    with _DECODERS_LOCK:
        if not _DECODERS:
            _DECODERS.append(ThreadPoolExecutor(DEFAULT_WORKERS, _DECODER_NAME))
    return list(_DECODERS[0].map(work, items))


def _start(context: Any, pool: str) -> None:
    """A worker's set-up: the work's context, and its caller's Arrow memory pool."""
    global _context
    _context = context
    if pa.default_memory_pool().backend_name != pool and pool in _POOLS:
        pa.set_memory_pool(_POOLS[pool]())


def _in_worker(work: Callable[[Any, Chunk], Result], chunk: Chunk) -> Result:
    """``work`` of one chunk in a worker process, with Python's cyclic garbage collector paused:
    a chunk's objects (each footer, a tuple per column of every file) live until its records
    are made, and the collector went over them again and again as they piled up, about a
    quarter of a worker's time; what they leave in cycles is collected after the chunk."""
    gc.disable()
    try:
        return work(_context, chunk)
    finally:
        gc.enable()


__all__ = [
    "DEFAULT_WORKERS",
    "PROCESS_MIN_FILES",
    "chunked",
    "in_parallel",
    "map_chunks",
    "start_processes",
    "workers_for",
]
