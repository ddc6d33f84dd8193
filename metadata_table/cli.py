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

from metadata_table.layout import PARTITIONS, RECORD_INDEX, check_partition, data_partition
from metadata_table.maintenance import initialize
from metadata_table.read.filters import In
from metadata_table.read.scan import IndexedTable, TableScan
from metadata_table.read.snapshot import IndexedSnapshot, RecordLocation
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
from timeline.errors import ConfigError, FilterTypeError, InputFileError, UnknownColumnError
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
    if partition == RECORD_INDEX and args.format == "jsonl" and not args.json:
        return _dump_record_index(table, args.include_deleted)
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


def _dump_record_index(table: Table, include_deleted: bool) -> int:
    """``dump <base> record_index --format jsonl``: one line per key, with the instant of its
    file group's latest slice (null for a tombstone, or a group the listing no longer has),
    written batch by batch."""
    snapshot = IndexedSnapshot(table)
    records = snapshot.reader.read(RECORD_INDEX, include_deleted=include_deleted)
    slices = {
        (s.partition_path, s.file_id): s.base_instant for s in snapshot.view.latest_file_slices()
    }
    out = sys.stdout
    for batch in records.to_batches(max_chunksize=65_536):
        for key, name, file_id, deleted in zip(
            batch.column("key").to_pylist(),
            batch.column("partition").to_pylist(),
            batch.column("file_id").to_pylist(),
            batch.column("is_deleted").to_pylist(),
            strict=True,
        ):
            partition = data_partition(name)
            line = {
                "record_key": key,
                "partition_path": partition,
                "file_id": file_id,
                "instant": None if deleted else slices.get((partition, file_id)),
            }
            if include_deleted:
                line["is_deleted"] = deleted
            out.write(json.dumps(line) + "\n")
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
                    "dropped": result.dropped,
                    "unused": result.unused,
                    "unapplied": {k: list(v) for k, v in result.unapplied.items()},
                }
            )
        )
        return EXIT_OK
    for file_slice in result.slices:  # a base file, then its log files (merge-on-read)
        print(" ".join(file_slice.paths))
    unit = "file slices" if snapshot.merge_on_read else "files"
    print(
        f"{len(result.slices)} of {result.total} {unit} may match; {result.pruned} pruned",
        file=sys.stderr,
    )
    for index, count in result.dropped.items():
        print(f"  {index}: dropped {count}", file=sys.stderr)
    for index, why in result.unused.items():
        print(f"  {index}: not used ({why})", file=sys.stderr)
    return EXIT_OK


def _lookup(args: argparse.Namespace) -> int:
    by_key = args.keys is not None or args.key or args.keys_from is not None or args.where
    if bool(by_key) == (args.column is not None):
        raise ConfigError(
            "--key",
            "name record keys (--key, --keys, --keys-from or --where), or a column and values "
            "(--column, --values)",
        )
    table = Table.open(args.base, config_from_args(args))
    snapshot = IndexedSnapshot(table)
    if args.column is not None:
        return _lookup_values(snapshot, args)
    keys = _record_keys_of(args, table, snapshot)
    found = snapshot.lookup_keys(keys, args.partition)
    indexes = snapshot.key_indexes()
    exact = indexes == [RECORD_INDEX]
    located = snapshot.record_locations(keys) if RECORD_INDEX in indexes else {}
    if args.json:
        where = {k: _location(v) for k, v in located.items()}
        print(json.dumps({"keys": found, "indexes": indexes, "exact": exact, "locations": where}))
        return EXIT_OK
    for key in keys:
        at = located.get(key)
        place = f" [{at.partition_path or '.'}/{at.file_id} @ {at.instant}]" if at else ""
        print(f"{key}: {' '.join(found[key]) or '(no file)'}{place}")
    answered = ", ".join(indexes) if indexes else "no index completed: every latest file"
    kind = "exact" if exact else "the files that may hold them"
    print(f"answered by {answered} ({kind})", file=sys.stderr)
    return EXIT_OK


def _record_keys_of(args: argparse.Namespace, table: Table, snapshot: IndexedSnapshot) -> list[str]:
    """The record keys ``lookup`` is asked for, in the order given, each once: ``--key``
    (repeatable, taken whole), ``--keys`` (comma-separated, for keys without commas),
    ``--keys-from`` (one a line; ``-`` is stdin) and ``--where`` (a filter on the key fields,
    whose = and IN make keys as the table's key generator does)."""
    fields = table.table_config.record_key_fields
    keys: list[str] = list(args.key)
    if args.keys is not None:
        if len(fields) > 1:
            raise ConfigError(
                "--keys",
                f"this table's record keys hold commas ({','.join(f'{f}:...' for f in fields)}); "
                "give each key with --key, or one a line with --keys-from, or ask by the key "
                f'fields with --where "{" AND ".join(f"{f} = ..." for f in fields)}"',
            )
        keys += [k for k in args.keys.split(",") if k]
    if args.keys_from is not None:
        keys += _lines(args.keys_from)
    if args.where:
        asked, why = snapshot.asked_keys(snapshot.bind(args.where))
        if asked is None:
            raise ConfigError("--where", why)
        keys += asked
    if not keys:
        raise ConfigError("--key", "name at least one record key")
    return list(dict.fromkeys(keys))


def _lines(path: str) -> list[str]:
    """The non-empty lines of a file (``-``: stdin), without their line ends."""
    if path == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise InputFileError(path, e.strerror or str(e)) from e
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


def _duplicates(args: argparse.Namespace) -> int:
    """``duplicates``: the record keys in more than one file group, each copy with the instant
    that wrote it and which one is kept; ``--output`` writes the stale copies' rows."""
    from metadata_table.read.duplicates import find_duplicates

    table = Table.open(args.base, config_from_args(args))
    found = find_duplicates(table)
    if args.output and found.keys:
        pq.write_table(found.stale, args.output)
    if args.json:
        keys: dict[str, list[dict[str, Any]]] = {}
        for row in found.copies.to_pylist():
            keys.setdefault(row.pop("record_key"), []).append(row)
        print(json.dumps({"keys": keys, "count": found.keys, "stale_rows": found.stale.num_rows}))
        return EXIT_OK
    by_key: dict[str, list[str]] = {}
    for row in found.copies.to_pylist():
        kept = ", kept" if row["newest"] else ""
        where = f"{row['partition_path'] or '.'}/{row['file_id']} (written {row['instant']}{kept})"
        by_key.setdefault(row["record_key"], []).append(where)
    for key, places in by_key.items():
        print(f"{key}: {'; '.join(places)}")
    if not found.keys:
        written = f" ({args.output} not written)" if args.output else ""
        print(f"no record key is in more than one file group{written}", file=sys.stderr)
    elif args.output:
        print(
            f"{found.keys} record key(s) in more than one file group; the rows of "
            f"{found.stale.num_rows} stale copies are in {args.output}: delete them with "
            f"`indexer-write {args.base} --input {args.output} --operation delete`",
            file=sys.stderr,
        )
    else:
        print(
            f"{found.keys} record key(s) in more than one file group; --output FILE writes the "
            "rows of the copies not kept, for `indexer-write ... --operation delete`",
            file=sys.stderr,
        )
    return EXIT_OK


def _lookup_values(snapshot: IndexedSnapshot, args: argparse.Namespace) -> int:
    """``lookup --column c --values v1,v2``: the records holding each value, through the
    column's secondary index and the record index; without them, the files data skipping keeps
    (``c IN (...)``), which may hold them."""
    column = args.column
    texts = [v for v in (args.values or "").split(",") if v != ""]
    if not texts:
        raise ConfigError("--values", "name at least one value")
    schema = snapshot.table_schema
    if column not in schema.names:
        raise UnknownColumnError(column, schema.names)
    values = [_typed(schema.field(column).type, column, t) for t in texts]
    out: dict[str, Any] = {}
    if snapshot.secondary_index_used(column) is not None:
        indexes = [snapshot.secondary_index_used(column), RECORD_INDEX]
        for text, value in zip(texts, values, strict=True):
            found = snapshot.records_with(column, [value])
            out[text] = {k: _location(v) for k, v in sorted(found.items())}
        exact = not snapshot.record_index_touched()
    else:
        result = snapshot.prune(In(column, tuple(values)))
        indexes = ["column_stats"] if result.used_index else []
        paths = [p for s in result.slices for p in s.paths]
        out = {text: {"files": paths} for text in texts}
        exact = False
    if args.json:
        print(json.dumps({"column": column, "values": out, "indexes": indexes, "exact": exact}))
        return EXIT_OK
    for text in texts:
        found = out[text]
        if "files" in found:
            print(f"{column}={text}: may be in {' '.join(found['files']) or '(no file)'}")
            continue
        print(f"{column}={text}: {len(found)} record(s)")
        for key, where in found.items():
            print(
                f"  {key}: {' '.join(where['paths'])} [{where['partition_path'] or '.'}/{where['file_id']}]"
            )
    answered = ", ".join(i for i in indexes if i) or "no index completed: every latest file"
    print(
        f"answered by {answered} ({'exact' if exact else 'files that may hold them'})",
        file=sys.stderr,
    )
    return EXIT_OK


def _typed(kind: pa.DataType, column: str, text: str) -> Any:
    """A --values entry as a value of the column's type (numbers, booleans, dates, timestamps
    parsed; text as it is)."""
    try:
        return pa.scalar(text).cast(kind).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise FilterTypeError(column, str(kind), text) from e


def _location(where: RecordLocation) -> dict[str, Any]:
    return {
        "partition_path": where.partition_path,
        "file_id": where.file_id,
        "instant": where.instant,
        "paths": list(where.paths),
    }


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
    if scan.plan().note:
        print(f"note: {scan.plan().note}", file=sys.stderr)
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


_QUERY_HELP = """Reads rows through the index: every completed index that can drop files does,
in turn (partition_stats drops whole partitions, column_stats files, record_index the files
that hold none of the record keys asked for by = or IN on the key fields or on
_hoodie_record_key, a secondary index those without a value asked for, bloom_filters files
whose filter holds none of the keys), only the kept files and the needed columns are read, and
the filter is applied to every row. Files of instants an index does not reflect yet are always
read. --explain shows what each index dropped, and why any was not used. A quoted date or
timestamp compared with a date or timestamp column reads as one ('1995-01-31')."""


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
    dump.add_argument(
        "partition",
        help=f"{', '.join(PARTITIONS)}, or secondary_index_<column>",
    )
    dump.add_argument(
        "--format",
        choices=["text", "jsonl"],
        default="text",
        help="jsonl: one JSON object per merged record (bytes as base64); for record_index, "
        "one per key: record_key, partition_path, file_id and the instant of its file slice",
    )
    dump.add_argument("--limit", type=int, default=20, help="records shown in text format")
    dump.add_argument("--include-deleted", action="store_true", help="also tombstones")
    add_common_options(
        dump, json_help='print {"partition", "state", "records": [...]} (bytes as base64)'
    )
    dump.set_defaults(func=_dump)
    lookup = sub.add_parser(
        "lookup",
        help="where record keys, or the records holding column values, are",
        description="For each record key (--key, --keys, --keys-from, or the keys a --where "
        "filter on the key fields names): with record_index completed, exactly the "
        "files of the file slice that holds it (and its partition, file group and slice "
        "instant); otherwise the files of the latest slices that may hold it, narrowed by "
        "bloom_filters and by column_stats' record key ranges where they are completed (a "
        "merge-on-read slice: its base file and log files). For column values (--column, "
        "--values): the records holding each value, through the column's secondary index and "
        "record_index, or, without them, the files data skipping keeps. Says which indexes "
        "answered and whether the answer is exact.",
    )
    lookup.add_argument("base", help="table base path")
    lookup.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="KEY",
        help="a record key, taken whole (repeatable): a complex key generator's keys hold "
        "commas, e.g. --key 'l_orderkey:1,l_linenumber:2'",
    )
    lookup.add_argument("--keys", help="comma-separated record keys (keys without commas)")
    lookup.add_argument(
        "--keys-from", metavar="FILE", help="record keys, one a line, from FILE (- for stdin)"
    )
    lookup.add_argument(
        "--where",
        metavar="FILTER",
        help="the keys a filter on the record key fields names, made as the table's key "
        'generator makes them, e.g. "l_orderkey = 1 AND l_linenumber IN (1, 2)"',
    )
    lookup.add_argument("--column", help="a column with a secondary index (with --values)")
    lookup.add_argument("--values", help="comma-separated values of --column")
    lookup.add_argument("--partition", help="only this data partition (default: all; --keys)")
    add_common_options(
        lookup,
        json_help='print {"keys": {key: [paths]}, "indexes", "exact", "locations"} (--keys) or '
        '{"column", "values": {value: {key: location}}, "indexes", "exact"}',
    )
    lookup.set_defaults(func=_lookup)
    duplicates = sub.add_parser(
        "duplicates",
        help="record keys stored in more than one file group, and how to keep one copy",
        description="Keys are global once a table has a record index. Before, a writer tags a "
        "key within the partition its row goes to (as Apache Hudi's bloom index does), so an "
        "upsert that moves a key to another partition keeps the old copy; a record index build "
        "refuses such a table. This lists every such key, each copy with the instant that "
        "wrote it, and the copy kept: the largest precombine value, else the one written last. "
        "--output writes the other copies' rows, which `indexer-write --operation delete` "
        "removes (each from its own partition), leaving one copy of each key.",
    )
    duplicates.add_argument("base", help="table base path")
    duplicates.add_argument(
        "--output", metavar="FILE", help="write the rows of the copies not kept to a Parquet file"
    )
    add_common_options(
        duplicates,
        json_help='print {"keys": {key: [{partition_path, file_id, instant, newest}]}, "count", '
        '"stale_rows"}',
    )
    duplicates.set_defaults(func=_duplicates)
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
