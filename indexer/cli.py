"""``indexer``: build metadata-table indexes while writers keep writing.

indexer schedule <base> --index-types column_stats,bloom_filters [--columns a,b]
indexer run <base> --index-types record_index,secondary_index --columns rider
indexer execute <base> [--instant T]        # default: the earliest pending plan
indexer run <base> --index-types ...         # schedule + execute, with --retry
indexer drop <base> --index-types ...        # while writers run
indexer status <base> [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from indexer.hudi_format import FORMATS, HudiFormatIndexer
from indexer.indexer import DEFAULT_TIMEOUT_SECONDS, ENGINES, AsyncIndexer, IndexerOptions
from indexer.status_page import footprint_lines
from metadata_table.partition_writer import HudiPartitionWriter
from timeline.cli import (
    EXIT_ERROR,
    EXIT_OK,
    Parser,
    Progress,
    add_common_options,
    add_spark_options,
    config_from_args,
    run_subcommands,
    spark_conf_from_args,
    spark_master_from_args,
)
from timeline.config import LOCAL_BUILD_MAX_FILES
from timeline.errors import TableError
from timeline.health import TimelineProblem
from timeline.index_state import LAYOUT
from timeline.table import Table

T = TypeVar("T")


def _list(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _indexer(args: argparse.Namespace, progress: Progress | None = None) -> AsyncIndexer:
    lock_url = getattr(args, "lock_url", None)
    explicit = {"indexer.lock.url": lock_url} if lock_url else None
    table = Table.open(args.base, config_from_args(args, explicit))
    options = IndexerOptions(
        spark_master=spark_master_from_args(args),
        spark_conf=spark_conf_from_args(args),
        parallelism=getattr(args, "parallelism", None),
        engine=getattr(args, "engine", "auto"),
        timeout=getattr(args, "timeout", DEFAULT_TIMEOUT_SECONDS),
        retries=getattr(args, "retry", 0),
        progress=progress,
    )
    if getattr(args, "format", "native") == "hudi":
        return HudiFormatIndexer(table, options)
    return AsyncIndexer(table, options)


def _partitions(indexer: AsyncIndexer) -> dict[str, str]:
    """The partitions a build command reports: Apache Hudi's metadata table's for --format
    hudi, the index's own otherwise."""
    if isinstance(indexer, HudiFormatIndexer):
        return indexer.hudi.states()
    partitions: dict[str, str] = indexer.status()["partitions"]
    return partitions


def _contract(indexer: AsyncIndexer, built: list[str]) -> None:
    """After a --format hudi build: what every Hudi writer of the table must carry."""
    built = [p for p in built if p in HudiPartitionWriter.BUILDABLE]
    if isinstance(indexer, HudiFormatIndexer) and built:
        print(
            "every Apache Hudi writer of this table must now carry "
            + " ".join(HudiPartitionWriter.writer_configs(built))
            + " (a writer without one deletes that partition; with hoodie.metadata.enable=false, "
            "the whole metadata table)"
        )


def _print_json(value: dict[str, Any]) -> int:
    print(json.dumps(value, indent=2))
    return EXIT_OK


def _schedule(args: argparse.Namespace) -> int:
    result = _indexer(args).schedule(_list(args.index_types), _list(args.columns))
    if args.json:
        return _print_json(
            {
                "instant": result.instant.timestamp if result.instant else None,
                "scheduled": list(result.scheduled),
                "skipped": dict(result.skipped),
                "lock_seconds": round(result.lock_seconds, 4),
            }
        )
    for partition, why in result.skipped.items():
        print(f"skipped {partition}: {why}")
    if result.instant is None:
        print("nothing to schedule")
        return EXIT_OK
    print(
        f"scheduled {result.instant.timestamp} for {', '.join(result.scheduled)} "
        f"(table lock held {result.lock_seconds * 1000:.0f} ms)"
    )
    return EXIT_OK


def _execute(args: argparse.Namespace) -> int:
    bar = Progress(enabled=False if args.json else None)
    indexer = _indexer(args, bar)
    try:
        done = indexer.execute(args.instant)
    finally:
        bar.close()
    partitions = _partitions(indexer)
    if args.json:
        return _print_json({"instant": done.timestamp, "partitions": partitions})
    print(f"completed {done.timestamp}: {', '.join(partitions)}")
    _contract(indexer, list(partitions))
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    bar = Progress(enabled=False if args.json else None)
    indexer = _indexer(args, bar)
    try:
        done = indexer.run(_list(args.index_types), _list(args.columns))
    finally:
        bar.close()
    caught_up = int(indexer.stats["catch_up_instants"])
    if args.json:
        return _print_json(
            {
                "instant": done.timestamp if done else None,
                "catch_up_instants": caught_up,
                "partitions": _partitions(indexer),
            }
        )
    if done is None:
        print("nothing to build: " + ", ".join(f"{p} {s}" for p, s in _partitions(indexer).items()))
    else:
        print(f"completed {done.timestamp} ({caught_up} instants caught up)")
        _contract(indexer, _list(args.index_types))
    return EXIT_OK


def _drop(args: argparse.Namespace) -> int:
    dropped = _indexer(args).drop(_list(args.index_types))
    if args.json:
        return _print_json({"dropped": list(dropped)})
    print(f"dropped {', '.join(dropped)}" if dropped else "nothing to drop")
    return EXIT_OK


def _checked(
    args: argparse.Namespace,
    found: list[TimelineProblem],
    action: Callable[[], T],
    **answer: Any,
) -> tuple[T | None, int | None]:
    """``action()``'s result; when it fails on a table whose timeline has problems, the
    problems and the error reported (as JSON with ``answer``'s fields too, with ``--json``) and
    the exit code instead."""
    try:
        return action(), None
    except TableError as e:
        if not found:
            raise
        if args.json:
            _print_json({**answer, "problems": [p.to_json() for p in found], "error": str(e)})
        return None, _problems(found, e)


def _problems(found: list[TimelineProblem], error: TableError | None = None) -> int:
    """Print what is wrong in the timeline (and the error it caused) on stderr; exit 1 when
    anything is."""
    for problem in found:
        print(f"problem: {problem}", file=sys.stderr)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
    return EXIT_ERROR if found or error is not None else EXIT_OK


def _sync(args: argparse.Namespace) -> int:
    bar = Progress(enabled=False if args.json else None)
    indexer = _indexer(args, bar)
    found = indexer.problems()
    try:
        result, failed = _checked(args, found, indexer.sync)
    finally:
        bar.close()
    if result is None:
        return failed or EXIT_ERROR
    if args.json:
        _print_json(
            {
                "rolled_back": result.rolled_back,
                "applied": result.applied,
                "resynced": result.resynced,
                "lost": result.lost,
                "problems": [p.to_json() for p in found],
            }
        )
        return EXIT_ERROR if found else EXIT_OK
    if not result and not found:
        print("in sync: every completed partition reflects every completed instant")
    for instant in result.rolled_back:
        print(f"rolled back {instant}: a failed write (its writer is dead)")
    by_reason: dict[str, list[str]] = {}
    for partition, why in result.resynced.items():
        by_reason.setdefault(why, []).append(partition)
    for why, partitions in by_reason.items():
        print(f"rebuilt {', '.join(partitions)} from storage: {why}")
    for instant, partitions in result.applied.items():
        print(f"applied {instant} to {', '.join(partitions)}")
    return _problems(found)


def _validate(args: argparse.Namespace) -> int:
    indexer = _indexer(args)
    found = indexer.problems(newest=None)  # every completed instant read
    bar = Progress(enabled=False if args.json else None)
    try:
        step = bar.step("validate")
        validate = (
            indexer.hudi.validate
            if isinstance(indexer, HudiFormatIndexer)
            else indexer.writer.validate
        )
        reports, failed = _checked(args, found, lambda: validate(step), ok=False)
    finally:
        bar.close()
    if reports is None:
        return failed or EXIT_ERROR
    ok = all(r.ok for r in reports) and not found
    if args.json:
        answer = {
            "ok": ok,
            "problems": [p.to_json() for p in found],
            "partitions": [r.to_json() for r in reports],
        }
        print(json.dumps(answer, indent=2))
        return EXIT_OK if ok else EXIT_ERROR
    _problems(found)
    if not reports:
        print("no completed metadata partition to validate")
    for report in reports:
        if report.ok:
            print(f"{report.partition}: ok")
            continue
        print(f"{report.partition}: differs from a rebuild from the data files")
        if report.lost:
            print(f"  lost: {report.lost} (`indexer sync`, or the daemon, rebuilds it)")
        if report.unapplied:
            print(
                f"  {len(report.unapplied)} completed instant(s) not applied "
                f"(`indexer sync` applies them): {', '.join(report.unapplied)}"
            )
        for kind in ("missing", "stale", "wrong"):
            keys = getattr(report, kind)
            if keys:
                shown = ", ".join(keys[:5]) + (
                    f" and {len(keys) - 5} more" if len(keys) > 5 else ""
                )
                print(f"  {len(keys)} {kind} record(s): {shown}")
    return EXIT_OK if ok else EXIT_ERROR


def _compact(args: argparse.Namespace) -> int:
    bar = Progress(enabled=False if args.json else None)
    try:
        indexer = _indexer(args, bar)
        compacted, skipped = indexer.compact(_list(args.index_types) or None)
        cleaned = indexer.clean_index()
    finally:
        bar.close()
    done = {p: i.timestamp for p, i in compacted.items()}
    if args.json:
        return _print_json(
            {
                "compacted": done,
                "skipped": skipped,
                "removed_files": cleaned.removed_files,
                "removed_bytes": cleaned.removed_bytes,
                "trimmed_instants": cleaned.trimmed_instants,
            }
        )
    for partition, instant in done.items():
        print(f"compacted {partition} into base files at {instant}")
    for partition in skipped:
        print(f"{partition}: nothing to compact (no logs to merge, or instants to sync first)")
    print(
        f"deleted {cleaned.removed_files} index files that earlier compactions replaced "
        f"({cleaned.removed_bytes / 1e6:.1f} MB), trimmed {cleaned.trimmed_instants} instants "
        "of the index's timeline (files a compaction replaced stay for indexer.clean.grace.seconds)"
    )
    return EXIT_OK


def _migrate(args: argparse.Namespace) -> int:
    result = _indexer(args).migrate()
    if args.json:
        state = result.state
        return _print_json(
            {
                "migrated": result.migrated,
                "files_copied": result.files_copied,
                "completed": list(state.completed) if state else [],
                "inflight": list(state.inflight) if state else [],
            }
        )
    if not result.migrated:
        print("nothing to migrate: no index of an earlier version in .hoodie/metadata")
    else:
        assert result.state is not None
        print(
            f"migrated the index to .hoodie/.async-indexer ({result.files_copied} files; "
            f"completed: {','.join(result.state.completed) or '-'}, "
            f"inflight: {','.join(result.state.inflight) or '-'})"
        )
    return EXIT_OK


def _lag_line(lag: dict[str, Any]) -> str:
    line = f"{lag['state']:<10} reflects up to {lag['reflects_upto'] or '-'}"
    if lag["unapplied_instants"]:
        line += (
            f"; {lag['unapplied_instants']} completed instant(s) not applied, oldest "
            f"{lag['oldest_unapplied_age_seconds']:.0f} s ago (`indexer sync`)"
        )
    line += f"; {lag['files']} files, {lag['bytes']} bytes; layout {lag['layout']}"
    if lag["layout"] < LAYOUT:
        line += f" (an earlier release's: drop and build it again for layout {LAYOUT})"
    return line


def _hudi_line(hudi: dict[str, Any]) -> str:
    """Apache Hudi's own metadata table in one line of ``indexer status``."""
    parts = ", ".join(f"{p} ({state})" for p, state in hudi["partitions"].items())
    behind = hudi["unapplied"]
    line = f"Apache Hudi's metadata table: {parts}; "
    if behind:
        line += (
            f"{len(behind)} completed instant(s) not in it (oldest {behind[0]}): reads list storage"
        )
    else:
        line += "reflects every completed instant: reads list files from it"
    line += f"; last compaction {hudi['last_compaction'] or '-'}"
    line += f", {hudi['deltacommits_since_compaction']} deltacommits since"
    kept = "kept by our writers" if hudi["kept_by_our_writers"] else "left to Hudi's writers"
    return f"{line}; {kept}"


def _status(args: argparse.Namespace) -> int:
    indexer = _indexer(args)
    found = indexer.problems()
    status, failed = _checked(args, found, indexer.status)
    if status is None:
        return failed or EXIT_ERROR
    status["problems"] = [p.to_json() for p in found]
    status.update(indexer.footprint())
    if args.json:
        _print_json(status)
        return EXIT_ERROR if found else EXIT_OK
    print(f"table {status['table']}")
    for line in footprint_lines(status["storage"], status["services"]):
        print(f"  {line}")
    width = max(map(len, status["lag"]), default=0)
    for partition, lag in status["lag"].items():
        print(f"  {partition:<{width}} {_lag_line(lag)}")
        if partition in status["columns"]:
            columns = ", ".join(status["columns"][partition]) or "(none yet: no data file)"
            print(f"  {'':<{width}} columns: {columns}")
        if partition in status["lost"]:
            lost = status["lost"][partition]
            print(f"  {'':<{width}} lost: {lost} (`indexer sync` rebuilds it)")
    if not status["partitions"]:
        print("  no metadata partitions")
    if status["legacy_index"]:
        print(
            "  an index built by an earlier version is in .hoodie/metadata: `indexer migrate`"
            " (or the next run) moves it to .hoodie/.async-indexer"
        )
    hudi = status["hudi_metadata_table"]
    if hudi is not None:
        print("  " + _hudi_line(hudi))
    for partition in status["hudi_deleted_by_writers"]:
        print(
            f"  WARNING: {partition}, built here in Apache Hudi's metadata table, is gone: a Hudi "
            f"writer without {' '.join(HudiPartitionWriter.writer_configs([partition]))} deleted it "
            f"(`indexer run --format hudi --index-types {partition}` builds it again)"
        )
    for item in status["indexing"]:
        if item["owner"] == "apache-hudi":
            print(f"  indexing {item['timestamp']} {item['state']:<10} Apache Hudi's own (ignored)")
            continue
        print(
            f"  indexing {item['timestamp']} {item['state']:<10} {','.join(item['partitions'])} "
            f"up to {item['index_upto_instant']}"
        )
    return _problems(found)


def _serve(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from indexer.http_api import start_api
    from indexer.service import IndexerService
    from indexer.service_config import load_service_config

    config = load_service_config(args.config)
    # "skipped: maximum number of running instances": by design, a table's job never overlaps
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    service = IndexerService(config)
    api = start_api(service)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    service.start()
    print(f"indexer daemon serving {len(config.tables)} tables; API at {api.url}", flush=True)
    stop.wait()
    print(
        "stopping: no new work; a build in progress is aborted cleanly unless completing",
        flush=True,
    )
    service.stop()
    api.stop()
    print("stopped", flush=True)
    return EXIT_OK


def _request(args: argparse.Namespace) -> int:
    from indexer.requests_store import RequestStore
    from indexer.service_config import load_service_config
    from metadata_table.layout import expand_index_types
    from timeline.errors import ConfigError
    from timeline.storage import normalize_base_uri

    config = load_service_config(args.config)
    base = normalize_base_uri(args.base)
    if config.table(base) is None:
        raise ConfigError("base", f"{args.base} is not a table of {args.config}")
    types = expand_index_types(_list(args.index_types), _list(args.columns))
    store = RequestStore(config.request_store)
    created = store.create(base, types, _list(args.columns))
    store.close()
    if args.json:
        print(json.dumps(created.to_json()))
    else:
        print(
            f"request {created.id}: {', '.join(types)} for {base} (pending; the daemon picks it up)"
        )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="indexer",
        description="Build metadata-table indexes (files, column_stats, bloom_filters, "
        "partition_stats, record_index, secondary indexes) of a Hudi 0.x table while writers "
        "keep writing. Exit 0 on success, 1 with a message otherwise.",
    )
    parser.add_argument("--help-config", action="store_true", help="list configuration keys")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(
        p: argparse.ArgumentParser,
        json: str,
        types: bool = False,
        spark: bool = False,
        formats: bool = False,
    ) -> None:
        p.add_argument("base", help="table base path (local, file://, s3://)")
        if types:
            p.add_argument(
                "--index-types",
                required=True,
                help="comma-separated: files, column_stats, bloom_filters, partition_stats, "
                "record_index (record key -> file group, exact key lookups, global keys for "
                "writers), secondary_index (one per --columns column: value -> records; needs "
                "record_index)",
            )
            p.add_argument(
                "--columns",
                help="columns for column_stats and partition_stats (default: all; both index "
                "the same columns, so an index of columns added later takes those of the one "
                "that exists); with secondary_index, the columns to build one for",
            )
        if types or spark or formats:
            p.add_argument(
                "--format",
                choices=FORMATS,
                default="native",
                help="native (default): this project's index, in .hoodie/.async-indexer; hudi: "
                "Apache Hudi's own metadata table (.hoodie/metadata: column_stats, "
                "bloom_filters, record_index, which Hudi's Spark reader and writers use; "
                "files too on a table without one, which it creates)",
            )
        if spark:
            add_spark_options(p)
            p.add_argument(
                "--engine",
                choices=ENGINES,
                default="auto",
                help="where the build runs: spark; local (this process and its worker processes, no JVM); auto: spark when "
                "a master is named (--spark-master, the config file, spark-submit), else local "
                f"up to {LOCAL_BUILD_MAX_FILES.key} data files ({LOCAL_BUILD_MAX_FILES.default}) "
                "and spark beyond (default auto)",
            )
            p.add_argument("--parallelism", type=int, help="build tasks (default 2 x cores)")
            p.add_argument(
                "--timeout",
                type=float,
                default=DEFAULT_TIMEOUT_SECONDS,
                help="abort when catch-up waits longer than this many seconds (900)",
            )
        p.add_argument("--lock-url", help="lock provider URL (see --help-config)")
        add_common_options(p, json_help=json)

    schedule = sub.add_parser("schedule", help="plan an index build (holds the table lock briefly)")
    common(schedule, '{"instant", "scheduled", "skipped", "lock_seconds"}', types=True)
    schedule.set_defaults(func=_schedule)
    execute = sub.add_parser("execute", help="build a scheduled plan (default: earliest pending)")
    common(execute, '{"instant", "partitions"}', spark=True)
    execute.add_argument("--instant", help="the indexing instant to execute")
    execute.set_defaults(func=_execute)
    runner = sub.add_parser("run", help="schedule and execute; resumes a pending plan first")
    common(runner, '{"instant", "catch_up_instants", "partitions"}', types=True, spark=True)
    runner.add_argument("--retry", type=int, default=0, help="retries after an aborted build")
    runner.set_defaults(func=_run)
    drop = sub.add_parser("drop", help="remove indexes (writers may keep running)")
    common(drop, '{"dropped": [partitions]}', formats=True)
    drop.add_argument(
        "--index-types",
        required=True,
        help="comma-separated partitions to drop (secondary_index: every secondary index; "
        "secondary_index_<column>: one)",
    )
    drop.set_defaults(func=_drop)
    sync = sub.add_parser(
        "sync",
        help="roll back failed writes whose writers are dead, then apply completed instants the "
        "index does not reflect (e.g. Apache Hudi's own commits)",
    )
    common(sync, '{"rolled_back": [instants], "applied": {instant: [partitions]}}', formats=True)
    sync.set_defaults(func=_sync)
    check = sub.add_parser(
        "validate",
        help="compare every completed partition with a rebuild from the data files (read-only; "
        "exit 1 when they differ)",
    )
    common(
        check,
        '{"ok": bool, "partitions": [{partition, ok, lost, unapplied, missing, stale, wrong}]}',
        formats=True,
    )
    check.set_defaults(func=_validate)
    compact = sub.add_parser(
        "compact",
        help="merge each metadata file group's log files into a new base file now, then delete "
        "the index files earlier compactions replaced (writers and the daemon do this by count: "
        "hoodie.metadata.compact.max.delta.commits)",
    )
    common(
        compact,
        '{"compacted": {partition: instant}, "skipped": [partitions], "removed_files", '
        '"removed_bytes", "trimmed_instants"}',
    )
    compact.add_argument(
        "--index-types", help="comma-separated partitions (default: every completed one)"
    )
    compact.set_defaults(func=_compact)
    migrate = sub.add_parser(
        "migrate",
        help="move an index built by an earlier version out of .hoodie/metadata (Hudi's folder)",
    )
    common(migrate, '{"migrated": bool, "files_copied", "completed", "inflight"}')
    migrate.set_defaults(func=_migrate)
    status = sub.add_parser("status", help="metadata partitions, their lag, and indexing instants")
    common(
        status,
        "{table, storage: {kind: {files, bytes}}, services: {clean, archive, compaction}, "
        "partitions: {name: state}, lag: {name: {state, reflects_upto, "
        "unapplied_instants, oldest_unapplied_age_seconds, files, bytes, layout}}, "
        "indexing: [...], "
        "unapplied, lost, legacy_index, columns, problems} (see docs/user-guide.md)",
    )
    status.set_defaults(func=_status)

    serve = sub.add_parser(
        "serve",
        help="run the daemon: desired indexes, requests, retries, compaction, failed-write rollback",
        description="Run the indexer daemon described by a TOML config (see docs/user-guide.md, "
        '"The daemon"). SIGTERM or '
        "SIGINT stops it gracefully; a restart resumes.",
    )
    serve.add_argument("--config", required=True, help="service.toml")
    serve.add_argument("-v", "--verbose", action="store_true", help="log state changes to stderr")
    serve.set_defaults(func=_serve)
    request = sub.add_parser("request", help="ask the daemon for an index build")
    request.add_argument("base", help="table base path (one of the config's tables)")
    request.add_argument("--index-types", required=True, help="comma-separated")
    request.add_argument(
        "--columns",
        help="columns for column_stats (default: all); with secondary_index, one index each",
    )
    request.add_argument(
        "--config", required=True, help="the daemon's service.toml (request store)"
    )
    request.add_argument("--json", action="store_true", help="print the request as JSON")
    request.add_argument("-v", "--verbose", action="store_true", help="log state changes to stderr")
    request.set_defaults(func=_request)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_subcommands(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
