"""How long `indexer schedule` holds the table lock, on a local table with many data files.

Builds a table of N data files (default 10,000, in 20 commits) with the writer, then schedules
all three index partitions and prints the lock hold time `schedule` measured around its critical
section. Target: under 1 s. Nothing under the lock lists or reads data files, so the figure
should not grow with N.

    python scripts/bench/schedule_lock.py [--files 10000] [--commits 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import pyarrow as pa

from indexer.indexer import AsyncIndexer
from metadata_table.layout import PARTITIONS
from timeline import Table
from timeline.config import Config
from writer.client import WriteClient, WriteOptions


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=20)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-schedule-")
    try:
        config = Config.resolve(
            explicit={"indexer.lock.url": f"sqlite:///{os.path.join(root, 'locks.sqlite')}"}
        )
        table = Table.create(os.path.join(root, "t"), "bench", ["id"], ["day"], config=config)
        client = WriteClient(table, WriteOptions(max_records_per_file=1))
        per_commit = args.files // args.commits
        started = time.monotonic()
        for c in range(args.commits):
            ids = [f"id-{c:03d}-{i:05d}" for i in range(per_commit)]
            client.insert(
                pa.table(
                    {
                        "id": ids,
                        "day": [f"d{i % 10}" for i in range(per_commit)],
                        "v": list(range(per_commit)),
                    }
                )
            )
        files = per_commit * args.commits
        print(
            f"wrote {files} data files in {args.commits} commits in {time.monotonic() - started:.0f}s"
        )
        result = AsyncIndexer(table).schedule(list(PARTITIONS))
        print(
            f"schedule of {','.join(result.scheduled)} on {files} data files: table lock held "
            f"{result.lock_seconds * 1000:.0f} ms (target < 1000 ms) [{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}]"
        )
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
