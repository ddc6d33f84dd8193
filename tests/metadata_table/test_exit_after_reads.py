"""A process that read Parquet from memory exits cleanly. A threaded Parquet read over a buffer
of Python ``bytes`` can leave the last reference to that buffer in one of Arrow's pool threads,
released after the read returned; its destructor takes the GIL, and during interpreter shutdown
that unwinds the thread through C++ and aborts the process (exit 134, "terminate called without
an active exception"; apache/arrow#33975). Every command that read a base file could fail after
printing its answer, the more often the later it exited after the read."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from metadata_table.layout import write_records
from timeline.storage import Storage

READS = """
import sys
from metadata_table.layout import read_records
from metadata_table.records import info_from_bytes, info_from_storage
from timeline.fs_view import read_parquet, read_parquet_schema
from timeline.storage import Storage

storage = Storage(sys.argv[1])
path = "base.parquet"
reads = {
    "read_records": lambda: read_records(storage, path, ["key"]),
    "read_parquet": lambda: read_parquet(storage, path),
    "read_parquet_schema": lambda: read_parquet_schema(storage, path),
    "info_from_bytes": lambda: info_from_bytes("", path, "1", storage.read(path)),
    "info_from_storage": lambda: info_from_storage(storage, "", path, storage.info(path).size, "1"),
}
reads[sys.argv[2]]()
sum(i * i for i in range(200_000))  # a little work holding the GIL, as a command does after
print("read")  # then exit: the abort came during shutdown
"""
PATHS = [
    "read_records",
    "read_parquet",
    "read_parquet_schema",
    "info_from_bytes",
    "info_from_storage",
]


@pytest.mark.slow
def test_a_process_that_read_parquet_from_memory_exits_0(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    records = pa.table({"key": [f"k{i}" for i in range(1000)], "_hoodie_record_key": ["x"] * 1000})
    write_records(storage, "base.parquet", records, covers_upto="1")
    runs = [name for name in PATHS for _ in range(12)]

    def one(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        return name, subprocess.run(
            [sys.executable, "-c", READS, str(tmp_path), name],
            capture_output=True,
            text=True,
            timeout=120,
        )

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(one, runs))
    assert all(d.stdout == "read\n" for _, d in done), [d.stderr for _, d in done]
    failed = sorted({(name, d.returncode) for name, d in done if d.returncode != 0})
    assert not failed, f"{len(failed)} kinds of read made the process exit non-zero: {failed}"
