"""A table of N small data files, fast: Parquet files written directly (in parallel processes)
plus one valid commit naming them all, for benchmarks at 20,000 and 100,000 files.

The files are what the writer writes (Hudi meta columns first, sorted by record key, a Parquet
bloom filter on the key), and the commit carries their write stats, so the indexer, prune() and
Apache Hudi's own readers take the table as any other. What it skips is the writer's per-commit
machinery (markers, locks, tagging), which is not what these benchmarks measure.

    python -m scripts.bench.synthetic /tmp/t100k --files 100000 --rows 20 --partitions 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from timeline.commit_metadata import NULL_COMMIT, CommitMetadata, WriteStat
from timeline.config import Config
from timeline.instant import Action
from timeline.table import Table
from timeline.table_config import TableType
from writer.files import META_COLUMNS, RECORD_KEY, ensure_partition_metadata

CATEGORIES = ["alpha", "beta", "gamma", "delta", "epsilon"]
TOKEN = "0-0-0"


#: values of the ``tag`` column (when asked for): each about ten times in the table, scattered
#: over files, so that no file's min and max rule one out (a secondary index's case)
TAGS = 1_000_000


def _rows(first: int, rows: int, partition: str, scattered: bool = False) -> pa.Table:
    ids = range(first, first + rows)
    part = {"part": [partition] * rows} if partition else {}
    tag = {"tag": pa.array([(i * 2654435761) % TAGS for i in ids], pa.int64())} if scattered else {}
    return pa.table(
        {
            "key": [f"k-{i:010d}" for i in ids],
            **part,
            "ts": pa.array(ids, pa.int64()),  # clustered by file: range predicates prune
            "value": pa.array([(i % 997) * 0.5 for i in ids], pa.float64()),
            "category": [CATEGORIES[i % len(CATEGORIES)] for i in ids],
            "n": pa.array([i % 1000 for i in ids], pa.int32()),
            **tag,
        }
    )


def _write_files(
    base: str, instant: str, start: int, stop: int, rows: int, parts: int, scattered: bool = False
) -> list[dict[str, object]]:
    """Files ``start..stop`` of the table; their write stats as JSON."""
    stats = []
    for n in range(start, stop):
        partition = f"p{n % parts:04d}" if parts else ""
        file_id = f"{uuid.UUID(int=n + 1)}-0"
        name = f"{file_id}_{TOKEN}_{instant}.parquet"
        data = _rows(n * rows, rows, partition, scattered)
        keys = data.column("key")
        meta = [
            pa.array([instant] * rows, pa.string()),
            pa.array([f"{instant}_{n}_{i}" for i in range(rows)], pa.string()),
            keys,
            pa.array([partition] * rows, pa.string()),
            pa.array([name] * rows, pa.string()),
        ]
        table = pa.Table.from_arrays(meta + list(data.columns), [*META_COLUMNS, *data.column_names])
        path = f"{partition}/{name}" if partition else name
        full = os.path.join(base, path)
        pq.write_table(
            table,
            full,
            compression="snappy",
            bloom_filter_options={RECORD_KEY: {"ndv": rows, "fpp": 0.01}},
        )
        size = os.path.getsize(full)
        stats.append(
            WriteStat(
                file_id=file_id,
                path=path,
                partition_path=partition,
                prev_commit=NULL_COMMIT,
                num_writes=rows,
                num_deletes=0,
                num_update_writes=0,
                num_inserts=rows,
                total_write_bytes=size,
                file_size_in_bytes=size,
            ).to_json()
        )
    return stats


def make_table(
    base: Path,
    files: int,
    rows: int,
    partitions: int = 0,
    config: Config | None = None,
    table_type: TableType = TableType.COPY_ON_WRITE,
    scattered: bool = False,
) -> Table:
    """Create a local table at ``base`` with ``files`` files of ``rows`` rows in one commit
    (``partitions`` partitions, 0: unpartitioned; with ``scattered``, a ``tag`` column whose
    values are scattered over files)."""
    fields = ["part"] if partitions else []
    table = Table.create(
        str(base), "synthetic", ["key"], fields, table_type=table_type, config=config
    )
    timeline = table.timeline
    instant = timeline.create_requested(Action.COMMIT)
    partition_names = [f"p{i:04d}" for i in range(partitions)] if partitions else [""]
    for partition in partition_names:
        if partition:
            (base / partition).mkdir(parents=True, exist_ok=True)
        ensure_partition_metadata(table.storage, partition, instant.timestamp)
    workers = max(1, os.cpu_count() or 1)
    chunk = max(1, -(-files // (workers * 8)))
    stats: list[dict[str, object]] = []
    with ProcessPoolExecutor(workers) as pool:
        jobs = [
            pool.submit(
                _write_files,
                str(base),
                instant.timestamp,
                s,
                min(files, s + chunk),
                rows,
                partitions,
                scattered,
            )
            for s in range(0, files, chunk)
        ]
        for job in jobs:
            stats.extend(job.result())
    metadata = CommitMetadata.of([WriteStat.from_json(s) for s in stats], "INSERT", {})
    inflight = timeline.transition_to_inflight(
        instant, json.dumps(metadata.to_json(), sort_keys=True).encode()
    )
    timeline.complete(inflight, metadata.to_json())
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="a new local table folder")
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--rows", type=int, default=20, help="rows per file (default 20)")
    parser.add_argument("--partitions", type=int, default=0, help="0: unpartitioned")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    make_table(Path(args.base), args.files, args.rows, args.partitions)
    print(f"{args.files} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
