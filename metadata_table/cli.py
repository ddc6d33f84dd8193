"""``python -m metadata_table``: look into the metadata table; try data skipping; read rows
through the index (``query``, ``changes``)."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from metadata_table.layout import PARTITIONS, check_partition
from metadata_table.maintenance import initialize
from metadata_table.read.scan import IndexedTable, TableScan
from metadata_table.read.snapshot import IndexedSnapshot
from metadata_table.records import python_value
from metadata_table.table import MetadataTable
from timeline.cli import (
    EXIT_OK,
    Parser,
    Progress,
    add_common_options,
    config_from_args,
    run_subcommands,
)
from timeline.errors import ConfigError
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
    snapshot = IndexedSnapshot(table)
    result = snapshot.prune(args.filter)
    if args.json:
        print(
            json.dumps(
                {
                    "candidates": [f.path for f in result.candidates],
                    "slices": [s.paths for s in result.slices],
                    "total": result.total,
                    "pruned": result.pruned,
                    "used_index": result.used_index,
                }
            )
        )
        return EXIT_OK
    for file_slice in result.slices:  # a base file, then its log files (merge-on-read)
        print(" ".join(file_slice.paths))
    note = "" if result.used_index else " (column_stats is not completed: nothing can be pruned)"
    unit = "file slices" if snapshot.merge_on_read else "files"
    print(
        f"{len(result.slices)} of {result.total} {unit} may match; {result.pruned} pruned{note}",
        file=sys.stderr,
    )
    return EXIT_OK


def _lookup(args: argparse.Namespace) -> int:
    keys = [k for k in args.keys.split(",") if k]
    if not keys:
        raise ConfigError("--keys", "name at least one record key")
    table = Table.open(args.base, config_from_args(args))
    snapshot = IndexedSnapshot(table)
    found = snapshot.lookup_keys(keys, args.partition)
    indexes = snapshot.key_indexes()
    if args.json:
        print(json.dumps({"keys": found, "indexes": indexes}))
        return EXIT_OK
    for key in keys:
        print(f"{key}: {' '.join(found[key]) or '(no file)'}")
    answered = ", ".join(indexes) if indexes else "no index completed: every latest file"
    print(f"answered by {answered}", file=sys.stderr)
    return EXIT_OK


#: rows a table printed to a terminal shows when no --limit is given
TABLE_ROWS = 20


def _scan(args: argparse.Namespace) -> TableScan:
    table = IndexedTable(Table.open(args.base, config_from_args(args)))
    columns = [c.strip() for c in (args.columns or "").split(",") if c.strip()] or ["*"]
    limit = args.limit
    shown = (
        args.format == "table" and not (args.json or args.explain or args.output) and limit is None
    )
    if shown:
        limit = TABLE_ROWS + 1  # one more, to say there are more
    if args.command == "changes":
        return table.changes(args.begin, args.end, args.filter or "", columns, limit)
    return table.scan(args.filter or "", columns, limit, args.as_of)


def _query(args: argparse.Namespace) -> int:
    """``query`` and ``changes``: rows (or, with --explain, the plan) in the chosen format."""
    scan = _scan(args)
    if args.explain:
        if args.json:
            print(json.dumps(scan.plan().to_json()))
        else:
            print(scan.explain())
        return EXIT_OK
    fmt = "json" if args.json else args.format
    if fmt == "parquet" and not args.output:
        raise ConfigError("--output", "--format parquet writes a file: name it with --output")
    bar = Progress()
    try:
        batches = scan.batches(bar.step("scan"))
        if fmt == "parquet":
            with pq.ParquetWriter(args.output, scan.output_schema) as out:
                for batch in batches:
                    out.write_batch(batch)
            return EXIT_OK
        out_file = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
        try:
            _write_rows(fmt, scan, batches, out_file, truncated=scan.limit == TABLE_ROWS + 1)
        finally:
            if args.output:
                out_file.close()
    finally:
        bar.close()
    return EXIT_OK


def _write_rows(
    fmt: str, scan: TableScan, batches: Iterator[pa.RecordBatch], out: IO[str], truncated: bool
) -> None:
    if fmt == "json":  # one JSON object per row
        for batch in batches:
            for row in batch.to_pylist():
                out.write(json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n")
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        def csv(rows: pa.Table, header: bool) -> str:
            sink = pa.BufferOutputStream()
            pcsv.write_csv(rows, sink, pcsv.WriteOptions(include_header=header))
            return str(sink.getvalue().to_pybytes().decode())

        first = True  # streamed batch by batch: memory bounded by a batch, not the result
        for batch in batches:
            out.write(csv(pa.Table.from_batches([batch], scan.output_schema), first))
            first = False
        if first:  # no rows: the header alone
            out.write(csv(scan.output_schema.empty_table(), True))
    else:
        rows = [r for batch in batches for r in batch.to_pylist()]
        more = truncated and len(rows) > TABLE_ROWS
        out.write(_text_table(scan.output_schema.names, rows[:TABLE_ROWS] if more else rows))
        if more:
            out.write(f"(first {TABLE_ROWS} rows: --limit N or another --format for more)\n")


def _text_table(names: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    cells = [[_cell(r[n]) for n in names] for r in rows]
    widths = [max([len(n), *(len(c[i]) for c in cells)]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})\n"


def _cell(value: Any) -> str:
    text = "null" if value is None else str(_json_value(value))
    return text if len(text) <= 40 else text[:37] + "..."


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


_QUERY_HELP = """Reads rows through the index: every completed index that can drop files does
(partition_stats drops whole partitions, column_stats files, bloom_filters files that cannot hold
a record key asked for by _hoodie_record_key = or IN), only the kept files and the needed
columns are read, and the filter is applied to every row. Files of instants an index does not
reflect yet are always read. --explain shows what each index dropped."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="indexer-metadata",
        description="Inspect the metadata table of a table, try data skipping against it, and "
        "read rows through it.",
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
    lookup = sub.add_parser(
        "lookup",
        help="the files that may hold record keys (bloom filters and key ranges)",
        description="For each record key, the files of the latest file slices that may hold "
        "it, narrowed by bloom_filters and by column_stats' record key ranges where they are "
        "completed (a merge-on-read slice: its base file and log files). Says which indexes "
        "answered; with none completed, every latest file is listed.",
    )
    lookup.add_argument("base", help="table base path")
    lookup.add_argument("--keys", required=True, help="comma-separated record keys")
    lookup.add_argument("--partition", help="only this data partition (default: all)")
    add_common_options(lookup, json_help='print {"keys": {key: [paths]}, "indexes": [...]}')
    lookup.set_defaults(func=_lookup)
    prune = sub.add_parser(
        "prune",
        help="the files a filter may match (data skipping); on a merge-on-read table the file "
        "slices, one a line: the base file, then its log files",
    )
    prune.add_argument("base", help="table base path")
    prune.add_argument(
        "--filter",
        required=True,
        help="e.g. \"fare > 10 AND city IN ('sf', 'la')\"; =, <, <=, >, >=, "
        "BETWEEN, IN, IS [NOT] NULL, AND, OR, parentheses",
    )
    add_common_options(
        prune, json_help='print {"candidates", "slices", "total", "pruned", "used_index"}'
    )
    prune.set_defaults(func=_prune)
    for name, text in (
        ("query", "rows of the table, read through its index (a scan)"),
        ("changes", "rows written by commits after an instant (an incremental read)"),
    ):
        query = sub.add_parser(name, help=text, description=_QUERY_HELP)
        query.add_argument("base", help="table base path")
        query.add_argument(
            "filter",
            nargs="?",
            default="",
            help="e.g. \"fare > 50 AND city IN ('sf', 'la')\"; =, !=, <, <=, >, >=, "
            "[NOT] BETWEEN, [NOT] IN, IS [NOT] NULL, AND, OR, NOT, parentheses (default: every row)",
        )
        if name == "changes":
            query.add_argument("--begin", required=True, metavar="T", help="after this instant")
            query.add_argument(
                "--end", metavar="T", help="up to this instant (default: the newest commit)"
            )
        else:
            query.add_argument(
                "--as-of", metavar="T", help="the table as it was at instant T (time travel)"
            )
        query.add_argument("--columns", help="comma-separated columns to return (default: all)")
        query.add_argument("--limit", type=int, help="at most this many rows")
        query.add_argument(
            "--format",
            choices=["table", "json", "csv", "parquet"],
            default="table",
            help=f"table (text; {TABLE_ROWS} rows unless --limit), json (one object per row), "
            "csv, parquet (needs --output)",
        )
        query.add_argument("--output", metavar="FILE", help="write the rows to FILE")
        query.add_argument(
            "--explain", action="store_true", help="print the plan (files, indexes) and no rows"
        )
        add_common_options(
            query, json_help="rows as one JSON object per line; with --explain, the plan"
        )
        query.set_defaults(func=_query)
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
