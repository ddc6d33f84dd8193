"""Worker processes read with their caller's Arrow memory pool (the commands' jemalloc, or the
one a library user chose), and start from a fork server that can be started ahead of the
work."""

from __future__ import annotations

import pyarrow as pa

from metadata_table.workers import map_chunks, start_processes


def _pool_name(context: object, chunk: int) -> str:
    return str(pa.default_memory_pool().backend_name)


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
