"""The Arrow memory pool of the project's processes.

pyarrow's default pool (mimalloc in the wheels this project installs) hands freed pages back to
the system eagerly on this project's allocation pattern: every new snapshot allocates and drops
tables of the whole listing, and faulting those pages in again made a fresh snapshot's prune()
at 100,000 files take 260 to 740 ms, against 255 to 335 ms with jemalloc or the system allocator
(``make bench-scale``'s table, one process each; builds were not affected). The project's
commands therefore use jemalloc, which keeps memory per thread arena and returns it on a decay
timer: fit for a long-running daemon.

A user's choice wins: with ``ARROW_DEFAULT_MEMORY_POOL`` set (``jemalloc``, ``mimalloc`` or
``system``), pyarrow's pool is left as it chose. A process that reads through the index as a
library (a query engine) picks its own, with that variable or :func:`use_project_pool`.
"""

from __future__ import annotations

import logging
import os

import pyarrow as pa

logger = logging.getLogger(__name__)

ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_project_pool() -> str:
    """Make jemalloc the process's default Arrow pool unless ``ARROW_DEFAULT_MEMORY_POOL`` says
    otherwise, or pyarrow was built without it; the pool's backend name in use."""
    if not os.environ.get(ENV):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:
            logger.info(
                "pyarrow has no jemalloc; keeping %s", pa.default_memory_pool().backend_name
            )
    name = str(pa.default_memory_pool().backend_name)
    logger.info("Arrow memory pool: %s", name)
    return name
