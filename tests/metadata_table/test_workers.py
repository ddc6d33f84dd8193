"""Worker processes read with their caller's Arrow memory pool (the commands' jemalloc, or the
one a library user chose), and start from a fork server that can be started ahead of the
work; work done in parallel on the threads a process keeps comes back in order."""

from __future__ import annotations

import gc
import threading

import pyarrow as pa

from metadata_table.workers import DEFAULT_WORKERS, in_parallel, map_chunks, start_processes


def _pool_name(context: object, chunk: int) -> str:
    return str(pa.default_memory_pool().backend_name)


def _collecting(context: object, chunk: int) -> bool:
    return gc.isenabled()


def test_a_worker_process_works_on_a_chunk_with_the_cyclic_collector_paused() -> None:
    """A chunk's objects live until its records are made: the collector is paused for it, so it
    does not go over them again and again (a quarter of a worker's time), and on after it."""
    done = list(map_chunks(_collecting, None, [1, 2, 3, 4], 2, processes=True))
    assert done == [False] * 4
    assert gc.isenabled()  # (the caller's collector is its own)


def test_worker_processes_allocate_with_their_callers_pool() -> None:
    before = pa.default_memory_pool()
    try:
        for pool in (pa.system_memory_pool(), pa.jemalloc_memory_pool()):
            pa.set_memory_pool(pool)
            start_processes(__name__)  # ahead of the work; then map_chunks finds it running
            names = list(map_chunks(_pool_name, None, [1, 2, 3], 2, processes=True))
            assert names == [pool.backend_name] * 3
    finally:
        pa.set_memory_pool(before)


def test_work_in_parallel_keeps_its_order_and_runs_work_it_asks_for_in_its_own_thread() -> None:
    """in_parallel's results come in the items' order; work that itself asks for work in
    parallel (more of it than there are threads) gets it done in its own thread, where waiting
    for the threads it occupies would never end."""

    def inner(_: int) -> str:
        return threading.current_thread().name

    def outer(item: int) -> tuple[int, str, list[str]]:
        return item, threading.current_thread().name, in_parallel(inner, [1, 2, 3])

    done = in_parallel(outer, list(range(3 * DEFAULT_WORKERS)))
    assert [item for item, _, _ in done] == list(range(3 * DEFAULT_WORKERS))
    for _, thread, nested in done:
        assert thread != threading.main_thread().name
        assert nested == [thread] * 3
    assert in_parallel(inner, [1]) == [threading.current_thread().name]  # one item: no thread
