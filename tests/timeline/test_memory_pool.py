"""The project's commands allocate Arrow memory with jemalloc (timeline/memory_pool.py), unless
the user named a pool in ARROW_DEFAULT_MEMORY_POOL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa
import pytest

from timeline.memory_pool import ENV, use_project_pool


@pytest.fixture
def pool() -> Iterator[None]:
    before = pa.default_memory_pool()
    yield
    pa.set_memory_pool(before)


def test_jemalloc_unless_the_user_chose(pool: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    pa.set_memory_pool(pa.system_memory_pool())
    assert use_project_pool() == "jemalloc"
    assert pa.default_memory_pool().backend_name == "jemalloc"
    monkeypatch.setenv(ENV, "system")
    pa.set_memory_pool(pa.system_memory_pool())
    assert use_project_pool() == "system"


def test_a_command_runs_on_the_project_pool() -> None:
    """A subcommand's process (here `timeline show` of a folder that is no table) chose the
    pool before its work: its log says which."""
    done = subprocess.run(
        [sys.executable, "-m", "timeline", "show", "/nonexistent-table", "-v"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != ENV},
    )
    assert "Arrow memory pool: jemalloc" in done.stderr, done.stderr
