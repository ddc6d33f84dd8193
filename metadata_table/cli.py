"""``python -m metadata_table``: look into the metadata table; try data skipping."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import sys
from collections.abc import Sequence
from typing import Any

from metadata_table.layout import PARTITIONS, check_partition
from metadata_table.maintenance import initialize
from metadata_table.reads import IndexedSnapshot
from metadata_table.records import python_value
from metadata_table.table import MetadataTable
from timeline.cli import EXIT_OK, Parser, add_common_options, config_from_args, run_subcommands
from timeline.table import Table


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def render(partition: str, row: dict[str, Any]) -> dict[str, Any]:
    """One merged record as plain JSON: typed min/max as values, bytes as base64."""
    out = dict(row)
    if partition == "column_stats":
        kind = row.get("value_type")
        out["min_value"] = python_value(kind, row.get("min_value"))
        out["max_value"] = python_value(kind, row.get("max_value"))
    return {k: _json_value(v) for k, v in out.items()}


def _dump(args: argparse.Namespace) -> int:
    table = Table.open(args.base, config_from_args(args))
    partition = check_partition(args.partition)
    reader = MetadataTable(table).reader(table.timeline.load())
    rows = reader.read(partition, include_deleted=args.include_deleted).to_pylist()
    index_state = table.reload_index_state()
    state = (
        "completed"
        if partition in index_state.completed
        else ("inflight" if partition in index_state.inflight else "absent")
    )
    if args.json:
        records = [render(partition, row) for row in rows]
        print(json.dumps({"partition": partition, "state": state, "records": records}))
    elif args.format == "jsonl":
        for row in rows:
            print(json.dumps(render(partition, row), sort_keys=True))
    else:
        print(f"{partition} ({state}): {len(rows)} records")
        for row in rows[: args.limit]:
            shown = render(partition, row)
            shown.pop("bloom_filter", None)
            print("  " + " ".join(f"{k}={v}" for k, v in shown.items() if k != "key"))
        if len(rows) > args.limit:
            print(f"  ... {len(rows) - args.limit} more (--limit, or --format jsonl for all)")
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    table = Table.open(args.base, config_from_args(args))
    result = IndexedSnapshot(table).prune(args.filter)
    if args.json:
        print(
            json.dumps(
                {
                    "candidates": [f.path for f in result.candidates],
                    "total": result.total,
                    "pruned": result.pruned,
                    "used_index": result.used_index,
                }
            )
        )
        return EXIT_OK
    for f in result.candidates:
        print(f.path)
    note = "" if result.used_index else " (column_stats is not completed: nothing can be pruned)"
    print(
        f"{len(result.candidates)} of {result.total} files may match; {result.pruned} pruned{note}",
        file=sys.stderr,
    )
    return EXIT_OK


def _init(args: argparse.Namespace) -> int:
    table = Table.open(args.base, config_from_args(args))
    columns = [c for c in (args.columns or "").split(",") if c] or None
    built = initialize(table, [check_partition(p) for p in args.partitions.split(",")], columns)
    if args.json:
        print(json.dumps({"built": built}))
    else:
        print(
            f"built {', '.join(built)}"
            if built
            else "nothing to build (already completed or inflight)"
        )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="indexer-metadata",
        description="Inspect the metadata table of a table, and try data skipping against it.",
    )
    parser.add_argument("--help-config", action="store_true", help="list configuration keys")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    dump = sub.add_parser("dump", help="print the merged records of one metadata partition")
    dump.add_argument("base", help="table base path")
    dump.add_argument("partition", choices=PARTITIONS)
    dump.add_argument(
        "--format",
        choices=["text", "jsonl"],
        default="text",
        help="jsonl: one JSON object per merged record (bytes as base64)",
    )
    dump.add_argument("--limit", type=int, default=20, help="records shown in text format")
    dump.add_argument("--include-deleted", action="store_true", help="also tombstones")
    add_common_options(
        dump, json_help='print {"partition", "state", "records": [...]} (bytes as base64)'
    )
    dump.set_defaults(func=_dump)
    prune = sub.add_parser("prune", help="the files a filter may match (data skipping)")
    prune.add_argument("base", help="table base path")
    prune.add_argument(
        "--filter",
        required=True,
        help="e.g. \"fare > 10 AND city IN ('sf', 'la')\"; =, <, <=, >, >=, "
        "BETWEEN, IN, IS [NOT] NULL, AND, OR, parentheses",
    )
    add_common_options(prune, json_help='print {"candidates", "total", "pruned", "used_index"}')
    prune.set_defaults(func=_prune)
    init = sub.add_parser(
        "init", help="build partitions now, holding the table lock (small tables)"
    )
    init.add_argument("base", help="table base path")
    init.add_argument("--partitions", default=",".join(PARTITIONS), help="comma-separated")
    init.add_argument("--columns", help="columns for column_stats (default: all)")
    add_common_options(init, json_help='print {"built": [partitions]}')
    init.set_defaults(func=_init)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_subcommands(build_parser(), argv)
