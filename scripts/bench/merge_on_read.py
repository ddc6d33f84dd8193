"""Indexing merge-on-read tables: the index build over file slices with N log files each (N = 0, 4,
16) against the bound of reading what the build must read once (every base file's footer and
every log file's records), and prune() on them beside the same base files as a copy-on-write
table.

The tables are made to order: base files as scripts/bench/synthetic.py writes them, then N
deltacommits, each appending one log file to every file slice (one Avro data block, framed by
``timeline.log_format.encode_block``) that updates a share of the slice's rows: ``value`` moves
far outside every base file's range in one slice in ten. So a query on such a value must keep
those slices (their base files alone would say no row matches), and a range on ``ts`` (which
updates keep) keeps one slice.

    python scripts/bench/merge_on_read.py [--files 200] [--rows 2000] [--updates 200]

Run by `make bench` (a section of docs/benchmarks.md) and by `make bench-mor` alone (it prints
the section). Figures are medians of three; the machine is shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from indexer.indexer import AsyncIndexer, IndexerOptions  # noqa: E402
from metadata_table.layout import (  # noqa: E402
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    PARTITION_STATS,
)
from metadata_table.read.filters import col  # noqa: E402
from metadata_table.read.snapshot import IndexedSnapshot  # noqa: E402
from metadata_table.records import info_from_storage  # noqa: E402
from scripts.bench.synthetic import CATEGORIES, make_table  # noqa: E402
from scripts.bench.timing import median_seconds  # noqa: E402
from timeline import Table  # noqa: E402
from timeline.commit_metadata import CommitMetadata, WriteStat  # noqa: E402
from timeline.config import Config  # noqa: E402
from timeline.fs_view import FileSystemView  # noqa: E402
from timeline.instant import Action  # noqa: E402
from timeline.log_format import (  # noqa: E402
    BlockType,
    HeaderKey,
    avro_data_content,
    encode_block,
    read_log_file,
)
from timeline.table_config import TableType  # noqa: E402

LOG_COUNTS = (0, 4, 16)
PARTITIONS_COUNT = 10
#: the index types built from footers and log records (the record index is benched on its own)
FOOTER_INDEXES = [FILES, COLUMN_STATS, BLOOM_FILTERS, PARTITION_STATS]
FAR = 1e9  # an updated value no base file's range holds
TARGET_BOUND = 2.0  # the build at most this much slower than reading its inputs once

_NULLABLE = {"string": ["null", "string"], "long": ["null", "long"], "double": ["null", "double"]}
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "synthetic_record",
    "namespace": "hoodie.synthetic",
    "fields": [
        {"name": name, "type": _NULLABLE[kind], "default": None}
        for name, kind in [
            ("_hoodie_commit_time", "string"),
            ("_hoodie_commit_seqno", "string"),
            ("_hoodie_record_key", "string"),
            ("_hoodie_partition_path", "string"),
            ("_hoodie_file_name", "string"),
            ("key", "string"),
            ("part", "string"),
            ("ts", "long"),
            ("value", "double"),
            ("category", "string"),
        ]
    ]
    + [{"name": "n", "type": ["null", "int"], "default": None}],
}


def make_mor_table(base: Path, files: int, rows: int, logs: int, updates: int) -> Table:
    """Base files (one commit), then ``logs`` deltacommits each appending one log file to every
    slice, updating ``updates`` of its rows (in one slice in ten, to a value far outside every
    base file's range)."""
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{base}.db"})
    table = make_table(base, files, rows, PARTITIONS_COUNT, config, TableType.MERGE_ON_READ)
    slices = FileSystemView(table.timeline, table.timeline.load()).latest_base_files()
    for version in range(1, logs + 1):
        instant = table.timeline.create_requested(Action.DELTA_COMMIT)
        stats = []
        for number, base_file in enumerate(slices):
            first = int(base_file.file_id.split("-")[-2], 16) - 1  # synthetic's file number
            far = number % 10 == 0
            records = []
            for i in range(updates):
                row = first * rows + (i * 7 + version) % rows
                records.append(
                    {
                        "_hoodie_commit_time": instant.timestamp,
                        "_hoodie_commit_seqno": f"{instant.timestamp}_{number}_{i}",
                        "_hoodie_record_key": f"k-{row:010d}",
                        "_hoodie_partition_path": base_file.partition_path,
                        "_hoodie_file_name": base_file.file_id,
                        "key": f"k-{row:010d}",
                        "part": base_file.partition_path,
                        "ts": row,
                        "value": FAR + row if far else (row % 997) * 0.5 + version,
                        "category": CATEGORIES[row % len(CATEGORIES)],
                        "n": row % 1000,
                    }
                )
            header = {
                HeaderKey.INSTANT_TIME: instant.timestamp,
                HeaderKey.SCHEMA: json.dumps(SCHEMA),
            }
            block = encode_block(BlockType.AVRO_DATA, header, avro_data_content(records, SCHEMA))
            name = f".{base_file.file_id}_{base_file.instant_time}.log.{version}_0-0-0"
            path = f"{base_file.partition_path}/{name}"
            table.storage.create(path, block)
            stats.append(
                WriteStat(
                    file_id=base_file.file_id,
                    path=path,
                    partition_path=base_file.partition_path,
                    prev_commit=base_file.instant_time,
                    num_writes=updates,
                    num_update_writes=updates,
                    total_write_bytes=len(block),
                    file_size_in_bytes=len(block),
                )
            )
        metadata = CommitMetadata.of(stats, "UPSERT", {})
        body = json.dumps(metadata.to_json(), sort_keys=True).encode()
        inflight = table.timeline.transition_to_inflight(instant, body)
        table.timeline.complete(inflight, metadata.to_json())
    return table


def read_once(table: Table) -> float:
    """The bound: every base file's footer and every log file's records, read once."""
    view = FileSystemView(table.timeline, table.timeline.load())
    started = time.perf_counter()
    for b in view.all_base_files:
        info_from_storage(table.storage, b.partition_path, b.file_name, b.size, b.instant_time)
    for log in view.all_log_files:
        for block in read_log_file(table.storage, log.path):
            block.records()
    return time.perf_counter() - started


def measure(root: Path, files: int, rows: int, updates: int) -> list[dict[str, Any]]:
    results = []
    for logs in LOG_COUNTS:
        base = root / f"mor{logs}"
        table = make_mor_table(base, files, rows, logs, updates)
        label = f"merge-on-read, {logs} log files per slice"
        results.append(_measure_one(table, base, label, logs))
        if logs == 0:  # the same base files as a copy-on-write table
            cow = make_table(root / "cow", files, rows, PARTITIONS_COUNT, config=table.config)
            results.insert(0, _measure_one(cow, root / "cow", "copy-on-write", 0))
    return results


def _measure_one(table: Table, base: Path, label: str, logs: int) -> dict[str, Any]:
    bound = statistics.median(read_once(table) for _ in range(3))
    build_root = Path(tempfile.mkdtemp(prefix="mor-build-"))
    builds = []
    try:
        for attempt in range(3):  # a fresh copy each time: the build runs once per table
            copy = build_root / f"t{attempt}"
            shutil.copytree(base, copy)
            fresh = Table.open(str(copy), table.config)
            started = time.perf_counter()
            AsyncIndexer(fresh, IndexerOptions(engine="local")).run(FOOTER_INDEXES)
            builds.append(time.perf_counter() - started)
            indexed = fresh
        build = statistics.median(builds)
        far_value = FAR  # slice 0's updates: FAR + its rows
        range_expr = (col("ts") >= 0) & (col("ts") < 100)
        snapshot = IndexedSnapshot(indexed)
        kept_far = len(snapshot.prune(col("value") >= far_value).slices)
        kept_range = len(snapshot.prune(range_expr).slices)
        total = snapshot.prune(range_expr).total
        prune_ms = median_seconds(lambda: snapshot.prune(range_expr), 21) * 1000
        fresh_ms = median_seconds(lambda: IndexedSnapshot(indexed).prune(range_expr), 5) * 1000
    finally:
        shutil.rmtree(build_root, ignore_errors=True)
    return {
        "table": label,
        "logs": logs,
        "build_s": build,
        "bound_s": bound,
        "ratio": build / bound,
        "slices": total,
        "kept_far": kept_far,
        "kept_range": kept_range,
        "prune_ms": prune_ms,
        "prune_fresh_ms": fresh_ms,
    }


def section(root: Path, files: int, rows: int, updates: int) -> tuple[str, list[dict[str, Any]]]:
    """The report section (markdown) and its figures."""
    root.mkdir(parents=True, exist_ok=True)
    results = measure(root, files, rows, updates)
    plain = next(r for r in results if r["table"].startswith("merge-on-read") and not r["logs"])
    for r in results:  # what the log files add, against reading their records once
        added_read = r["bound_s"] - plain["bound_s"]
        r["log_ratio"] = (r["build_s"] - plain["build_s"]) / added_read if r["logs"] else None
    lines = [
        f"## Merge-on-read tables ({files} slices x {rows} rows, {updates} updates a log file)\n",
        "The index build (`indexer run`, every index type, this process) over file slices with "
        "N log files each, against the bound of reading its inputs once (base files' footers, "
        "log files' records); the time the log files add to the build, against the time reading "
        f"their records once takes (target: at most {TARGET_BOUND:.1f}x). prune() on the "
        "same base files as a copy-on-write table beside it. `value >= 1e9` matches only rows "
        "updates moved into log files (one slice in ten); `ts` in [0, 100) matches one slice. "
        "Medians of 3 (prune: 21 on one snapshot; fresh: 5 on a new snapshot each).\n",
        "| table | build | bound | build / bound | added by log files / their read | slices | "
        "kept: value >= 1e9 | kept: ts range | prune() | prune(), fresh snapshot |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['table']} | {r['build_s']:.2f} s | {r['bound_s']:.2f} s | {r['ratio']:.2f}x | "
            f"{'-' if r['log_ratio'] is None else format(r['log_ratio'], '.2f') + 'x'} | "
            f"{r['slices']} | {r['kept_far']} | {r['kept_range']} | {r['prune_ms']:.1f} ms | "
            f"{r['prune_fresh_ms']:.1f} ms |"
        )
    missed = [r["table"] for r in results if (r["log_ratio"] or 0) > TARGET_BOUND]
    lines.append(
        "\nTarget met for every table with log files."
        if not missed
        else f"\nTarget missed for: {'; '.join(missed)} (the build's own work per log file: "
        "each block's min/max per column and a bloom filter of its keys)."
    )
    return "\n".join(lines) + "\n", results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200, help="file slices (default 200)")
    parser.add_argument("--rows", type=int, default=2000, help="rows per base file (default 2000)")
    parser.add_argument("--updates", type=int, default=200, help="rows a log file updates")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-mor-"))
    try:
        text, results = section(root, args.files, args.rows, args.updates)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(text)
    far_ok = all(r["kept_far"] == (0 if r["logs"] == 0 else -(-r["slices"] // 10)) for r in results)
    if not far_ok:
        print("a slice whose log files hold value >= 1e9 was pruned", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
