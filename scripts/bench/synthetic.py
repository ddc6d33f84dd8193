"""A table of N small data files, fast: Parquet files written directly (in parallel processes)
plus valid commits naming them (one, or ``--commits`` of about equal size), for benchmarks from
2,000 to 1,000,000 files.

The files are what the writer writes (Hudi meta columns first, sorted by record key, a Parquet
bloom filter on the key), and the commit carries their write stats, so the indexer, prune() and
Apache Hudi's own readers take the table as any other. What it skips is the writer's per-commit
machinery (markers, locks, tagging), which is not what these benchmarks measure.

Keys are sequential (``k-0000000042``: each file holds a narrow range) unless ``random_keys``,
which spreads each file's keys over the whole key space as UUID-like keys do (so key ranges rule
no file out and every lookup leans on bloom filters or the record index).

    python -m scripts.bench.synthetic /tmp/t100k --files 100000 --rows 20 --partitions 100 \
        --commits 50 --random-keys
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from metadata_table.bloom import BloomSizing
from timeline.commit_metadata import NULL_COMMIT, CommitMetadata, WriteStat
from timeline.config import Config
from timeline.instant import Action
from timeline.keys import META_COLUMNS, RECORD_KEY
from timeline.table import Table
from timeline.table_config import TableType
from writer.avro import avro_schema
from writer.files import ensure_partition_metadata

CATEGORIES = ["alpha", "beta", "gamma", "delta", "epsilon"]
TOKEN = "0-0-0"


#: values of the ``tag`` column (when asked for): each about ten times in the table, scattered
#: over files, so that no file's min and max rule one out (a secondary index's case)
TAGS = 1_000_000


#: an odd multiplier: i -> i * GOLDEN mod 2**64 is a bijection, so random-looking keys stay unique
GOLDEN = 0x9E3779B97F4A7C15


def _key(i: int, random_keys: bool) -> str:
    return f"{(i * GOLDEN) % (1 << 64):016x}" if random_keys else f"k-{i:010d}"


def _rows(
    first: int, rows: int, partition: str, scattered: bool = False, random_keys: bool = False
) -> pa.Table:
    ids = range(first, first + rows)
    if random_keys:  # a file is sorted by record key, as the writer writes it
        ids = sorted(ids, key=lambda i: _key(i, True))  # type: ignore[assignment]
    part = {"part": [partition] * rows} if partition else {}
    tag = {"tag": pa.array([(i * 2654435761) % TAGS for i in ids], pa.int64())} if scattered else {}
    return pa.table(
        {
            "key": [_key(i, random_keys) for i in ids],
            **part,
            "ts": pa.array(ids, pa.int64()),  # clustered by file: range predicates prune
            "value": pa.array([(i % 997) * 0.5 for i in ids], pa.float64()),
            "category": [CATEGORIES[i % len(CATEGORIES)] for i in ids],
            "n": pa.array([i % 1000 for i in ids], pa.int32()),
            **tag,
        }
    )


def _write_files(
    base: str,
    instant: str,
    start: int,
    stop: int,
    rows: int,
    parts: int,
    scattered: bool = False,
    random_keys: bool = False,
) -> list[dict[str, object]]:
    """Files ``start..stop`` of the table; their write stats as JSON."""
    stats = []
    for n in range(start, stop):
        partition = f"p{n % parts:04d}" if parts else ""
        file_id = f"{uuid.UUID(int=n + 1)}-0"
        name = f"{file_id}_{TOKEN}_{instant}.parquet"
        data = _rows(n * rows, rows, partition, scattered, random_keys)
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
            bloom_filter_options={RECORD_KEY: BloomSizing().parquet_options(rows)},
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
    commits: int = 1,
    random_keys: bool = False,
) -> Table:
    """Create a local table at ``base`` with ``files`` files of ``rows`` rows in ``commits``
    commits of about equal size (``partitions`` partitions, 0: unpartitioned; with
    ``scattered``, a ``tag`` column whose values are scattered over files; with
    ``random_keys``, keys spread over the key space)."""
    fields = ["part"] if partitions else []
    table = Table.create(
        str(base), "synthetic", ["key"], fields, table_type=table_type, config=config
    )
    partition_names = [f"p{i:04d}" for i in range(partitions)] if partitions else [""]
    for partition in partition_names:
        if partition:
            (base / partition).mkdir(parents=True, exist_ok=True)
    workers = max(1, os.cpu_count() or 1)
    commits = max(1, min(commits, files))
    with ProcessPoolExecutor(workers) as pool:
        for c in range(commits):
            first, last = files * c // commits, files * (c + 1) // commits
            _commit(table, pool, workers, first, last, rows, partitions, scattered, random_keys)
    return table


def _commit(
    table: Table,
    pool: ProcessPoolExecutor,
    workers: int,
    first: int,
    last: int,
    rows: int,
    partitions: int,
    scattered: bool,
    random_keys: bool,
) -> None:
    """One commit of files ``first..last``."""
    timeline = table.timeline
    instant = timeline.create_requested(Action.COMMIT)
    partition_names = [f"p{i:04d}" for i in range(partitions)] if partitions else [""]
    for partition in partition_names:
        ensure_partition_metadata(table.storage, partition, instant.timestamp)
    chunk = max(1, -(-(last - first) // (workers * 8)))
    jobs = [
        pool.submit(
            _write_files,
            table.storage.uri(),
            instant.timestamp,
            s,
            min(last, s + chunk),
            rows,
            partitions,
            scattered,
            random_keys,
        )
        for s in range(first, last, chunk)
    ]
    stats: list[dict[str, object]] = []
    for job in jobs:
        stats.extend(job.result())
    # the schema of the rows, as a writer records it (Apache Hudi's writers read it from here)
    names = [p for p in partition_names if p] or [""]
    schema = avro_schema(_rows(0, 1, names[0], scattered, random_keys).schema, "synthetic")
    metadata = CommitMetadata.of(
        [WriteStat.from_json(s) for s in stats], "INSERT", {"schema": schema}
    )
    inflight = timeline.transition_to_inflight(
        instant, json.dumps(metadata.to_json(), sort_keys=True).encode()
    )
    timeline.complete(inflight, metadata.to_json())


def hudi_table(base: Path) -> Any:
    """A table :func:`make_table` made, as the test harness's Hudi peer is told about it."""
    from tests.hudi_peer.peer import HudiTable

    return HudiTable(
        str(base),
        name="synthetic",
        record_key=("key",),
        partition_fields=("part",),
        precombine=None,
    )


def hudi_index_seconds(peer: Any, base: Path, index_types: Sequence[str]) -> float:
    """Apache Hudi's HoodieIndexer building ``index_types`` on a table :func:`make_table` made,
    through the test harness's peer (a JVM of its own): seconds, JVM start included."""
    seconds: float = peer.index(hudi_table(base), list(index_types))["wall_seconds"]
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="a new local table folder")
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--rows", type=int, default=20, help="rows per file (default 20)")
    parser.add_argument("--partitions", type=int, default=0, help="0: unpartitioned")
    parser.add_argument("--commits", type=int, default=1, help="commits (default 1)")
    parser.add_argument(
        "--random-keys", action="store_true", help="keys spread over the key space (UUID-like)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    make_table(
        Path(args.base),
        args.files,
        args.rows,
        args.partitions,
        commits=args.commits,
        random_keys=args.random_keys,
    )
    print(f"{args.files} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
