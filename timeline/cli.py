"""``python -m timeline``: create a table and look at its timeline.

Also the small pieces every command line of the project shares: ``--conf`` and
``--storage-option`` options, logging set-up, and turning errors into a message and exit code 1.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from timeline import spark
from timeline.config import STORAGE_PREFIX, Config, describe, parse_assignments
from timeline.config_file import ConfigFile
from timeline.errors import TableError
from timeline.memory_pool import use_project_pool
from timeline.table import Table
from timeline.table_config import TableType

EXIT_OK = 0
EXIT_ERROR = 1


class Progress:
    """Progress bars (tqdm) on stderr for long steps, one bar per step, called as
    ``progress(step, done, total)`` ("build" in tasks: Spark's, or without Spark chunks of data
    files read and file groups written; "catch-up", "sync", "compact" and "validate" in
    instants, file groups or partitions; "resync" as a build; "scan" in data files); nothing
    when stderr is not a terminal or the output is JSON."""

    UNITS: ClassVar[dict[str, str]] = {
        "build": "task",
        "compact": "file group",
        "catch-up": "instant",
        "sync": "instant",
        "resync": "task",
        "validate": "partition",
        "scan": "file",
    }

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._step: str | None = None
        self._bar: Any = None

    def __call__(self, step: str, done: int, total: int) -> None:
        if not self.enabled or not total:
            return
        if step != self._step:
            self.close()
            self._step = step
            # imported when a bar is first drawn: tqdm's import takes 0.1 s (its version
            # lookup), which every command would pay, terminal or not
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(
                total=total, desc=step, unit=self.UNITS.get(step, "it"), file=sys.stderr
            )
        self._bar.total = total
        self._bar.n = done
        self._bar.refresh()

    def step(self, step: str) -> Callable[[int, int], None]:
        return lambda done, total: self(step, done, total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar, self._step = None, None


class Parser(argparse.ArgumentParser):
    """An argument parser that takes no abbreviated options (``--conf`` is never ``--config``);
    its subcommand parsers are of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def add_common_options(parser: argparse.ArgumentParser, json_help: str | None = None) -> None:
    """The options every command takes: ``--config``, ``--conf``, ``--storage-option``, ``-v`` and
    ``--json`` (``json_help`` says what it prints)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the TOML config file (the daemon's service.toml): its [spark] section and the "
        "[[tables]] entry of this table (lock_url, storage_options, conf) apply",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value (repeatable); overrides the environment. Keys: see --help-config",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec storage option, e.g. endpoint_url=http://127.0.0.1:9000 for S3 (repeatable)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=json_help or "print the outcome as one JSON object (no progress bar)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log state changes to stderr")


def add_spark_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-master",
        metavar="URL",
        help="any master Spark accepts: local[N], spark://HOST:PORT, yarn, k8s://... "
        "(default: the config file's [spark] master, else local[*]; under spark-submit, the "
        "session spark-submit configured)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=2g (repeatable; over the config file's)",
    )


def config_file_from_args(args: argparse.Namespace) -> ConfigFile | None:
    """The ``--config`` file, read once per command."""
    path = getattr(args, "config", None)
    if not path:
        return None
    cached: ConfigFile | None = getattr(args, "_config_file", None)
    if cached is None:
        cached = ConfigFile.load(path)
        args._config_file = cached
    return cached


def spark_master_from_args(args: argparse.Namespace) -> str | None:
    file = config_file_from_args(args)
    return getattr(args, "spark_master", None) or (file.spark_master if file else None)


def spark_conf_from_args(args: argparse.Namespace) -> dict[str, str]:
    file = config_file_from_args(args)
    conf = dict(file.spark_conf) if file else {}
    conf.update(parse_assignments(getattr(args, "spark_conf", []) or [], "--spark-conf"))
    return conf


def config_from_args(args: argparse.Namespace, explicit: Mapping[str, Any] | None = None) -> Config:
    """defaults < the ``--config`` file's entry for ``args.base`` < environment < ``--conf`` and
    ``--storage-option`` (and ``explicit``)."""
    values: dict[str, Any] = parse_assignments(args.conf, "--conf")
    for key, value in parse_assignments(args.storage_option, "--storage-option").items():
        values[STORAGE_PREFIX + key] = value
    values.update(explicit or {})
    file = config_file_from_args(args)
    file_values = file.require_table(args.base).file_values() if file else None
    return Config.resolve(file_values=file_values, explicit=values)


def help_config() -> str:
    lines = ["Configuration keys (defaults < file < environment < --conf):", ""]
    for key, env, default, doc in describe():
        lines.append(f"  {key}  (env {env}, default {default})")
        lines.append(f"      {doc}")
    lines.append("")
    lines.append("  indexer.storage.<option>  (env INDEXER_STORAGE_<OPTION>)")
    lines.append("      fsspec/s3fs options, e.g. endpoint_url, key, secret, region_name")
    return "\n".join(lines)


def run(
    main: Callable[[argparse.Namespace], int],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
) -> int:
    """Parse, set up logging, run. An :class:`TableError` becomes one line ``error: ...`` and
    exit 1; so does any other error unless ``-v`` asks for its traceback. Either names Spark's
    log file when this process started Spark quietly. A reader that closes stdout early (a pipe
    into ``head``) ends the command quietly with exit 0. The process's own command (``argv``
    None) runs with the objects the collector tracks frozen (:func:`gc.freeze`): the modules
    before it, everything after it, so the collector's passes skip them while it runs and the
    interpreter's at exit skip them all (0.2 s of an `indexer status` of 0.7 s)."""
    args = parser.parse_args(argv)
    if getattr(args, "help_config", False):
        print(help_config())
        return EXIT_OK
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if getattr(args, "verbose", False):
        os.environ[spark.VERBOSE_ENV] = "1"  # Spark's own log on stderr too
    use_project_pool()
    if argv is None:
        gc.freeze()
    try:
        code = main(args)
        sys.stdout.flush()  # a reader gone since the last write shows here
        return code
    except BrokenPipeError as e:
        if _stdout_closed():
            return _reader_gone()
        return _unexpected(e, args)  # a socket of ours, not the reader
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        _name_spark_log()
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        return _unexpected(e, args)
    finally:
        if argv is None:
            gc.freeze()


def _unexpected(e: Exception, args: argparse.Namespace) -> int:
    """A Spark job's failure or a bug: one line, the traceback with ``-v``."""
    if getattr(args, "verbose", False):
        raise e
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    print(f"error: {type(e).__name__}: {first} (run with -v for details)", file=sys.stderr)
    _name_spark_log()
    return EXIT_ERROR


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader is gone (poll answers POLLERR on its write end)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _reader_gone() -> int:
    """The reader of stdout closed it (``... | head -1``): the output it wanted is out, so exit 0
    as ``cat`` and ``grep`` do under ``set -o pipefail``; stdout is pointed at /dev/null so that
    the interpreter's own flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


def _name_spark_log() -> None:
    if spark.session_log is not None:
        print(f"Spark's log: {spark.session_log}", file=sys.stderr)


def _init(args: argparse.Namespace) -> int:
    table = Table.create(
        args.base,
        name=args.table_name,
        record_key_fields=[k.strip() for k in args.record_key.split(",")],
        partition_fields=[p.strip() for p in args.partition_field.split(",")]
        if args.partition_field
        else [],
        precombine_field=args.precombine_field,
        table_type=TableType(args.table_type),
        database=args.database,
        config=config_from_args(args),
    )
    if args.json:
        print(json.dumps({"created": table.table_config.name, "base": table.base_uri}))
    else:
        print(f"created table {table.table_config.name} at {table.base_uri}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    from timeline.health import timeline_problems

    table = Table.open(args.base, config_from_args(args))
    timeline = table.timeline.load()
    problems = timeline_problems(table)
    by_file = {p.path: p for p in problems}
    rows = [
        {
            "timestamp": i.timestamp,
            "action": i.action.value,
            "state": i.state.value,
            "completion_time": table.timeline.completion_time(i) if i.is_completed else None,
            "problem": getattr(by_file.get(table.timeline.path(i)), "what", None),
        }
        for i in timeline
    ]
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_ERROR if problems else EXIT_OK
    cfg, state = table.table_config, table.reload_index_state()
    print(f"table {cfg.name} ({cfg.table_type.value}) at {table.base_uri}")
    print(
        f"record key: {','.join(cfg.record_key_fields)}  partition fields: "
        f"{','.join(cfg.partition_fields) or '(none)'}"
    )
    print(
        f"metadata partitions: completed={','.join(state.completed) or '-'} "
        f"inflight={','.join(state.inflight) or '-'}"
    )
    if not rows:
        print("timeline: empty")
        return EXIT_OK
    print(f"{'TIMESTAMP':<18} {'ACTION':<14} {'STATE':<10} COMPLETION TIME")
    for row in rows:
        mark = f"  ! {row['problem']}" if row["problem"] else ""
        print(
            f"{row['timestamp']:<18} {row['action']:<14} {row['state']:<10} "
            f"{row['completion_time'] or '-'}{mark}"
        )
    return EXIT_ERROR if problems else EXIT_OK


def _clean(args: argparse.Namespace) -> int:
    from timeline.clean import CleanPlanner, clean, cleans_left
    from timeline.config import HEARTBEAT_INTERVAL_MS, HEARTBEAT_TOLERABLE_MISSES
    from timeline.removals import index_removal_hook
    from timeline.rollback import clean_failed_writes, pending_writes

    table = Table.open(args.base, config_from_args(args))
    hook = index_removal_hook(table)  # the index's update, inside each critical section
    rolled_back = [] if args.versions_only else clean_failed_writes(table, hook)
    left = [] if args.versions_only else pending_writes(table)
    planner = CleanPlanner(table)
    cleaned = [] if args.failed_writes_only else clean(table, hook, planner, force=True)
    others = [] if args.failed_writes_only else cleans_left(table)
    if args.json:
        print(
            json.dumps(
                {
                    "rolled_back": [
                        {"timestamp": i.timestamp, "action": i.action.value, "state": i.state.value}
                        for i in rolled_back
                    ],
                    "pending": [p.to_json() for p in left],
                    "cleaned": [
                        {
                            "timestamp": c.instant.timestamp,
                            "files_deleted": c.files_deleted,
                            "partitions": len(c.plan.files),
                            "earliest_commit_to_retain": c.plan.earliest_to_retain.timestamp
                            if c.plan.earliest_to_retain
                            else None,
                        }
                        for c in cleaned
                    ],
                    "cleans_left": [
                        {"timestamp": i.timestamp, "state": i.state.value, "why": why}
                        for i, why in others
                    ],
                    "policy": planner.policy.describe(),
                }
            )
        )
        table.close()
        return EXIT_OK
    for instant in rolled_back:
        print(f"rolled back {instant.timestamp} ({instant.action.value}, {instant.state.value})")
    for pending in left:
        what = f"{pending.instant.action.value}, {pending.instant.state.value}"
        print(f"left {pending.instant.timestamp} ({what}): {pending.why}")
    if any(p.heartbeat_age is not None for p in left):
        interval, misses = HEARTBEAT_INTERVAL_MS, HEARTBEAT_TOLERABLE_MISSES
        print(
            f"(a writer counts as dead {table.heartbeat_expiry_seconds:g} s after its last "
            f"beat: {interval.key}={table.config.get(interval)} x "
            f"{misses.key}={table.config.get(misses)}; give clean the writers' own settings, "
            "with --conf or the --config file, if they run with others)"
        )
    if not args.versions_only and not rolled_back and not left:
        print("no failed writes, and no pending write")
    for done in cleaned:
        kept = done.plan.earliest_to_retain
        print(
            f"cleaned {done.instant.timestamp}: {done.files_deleted} old file versions deleted "
            f"in {len(done.plan.files)} partitions"
            + (f" (commits from {kept.timestamp} on stay readable)" if kept else "")
        )
    for instant, why in others:
        print(f"left clean {instant.timestamp} ({instant.state.value}): {why}")
    if not args.failed_writes_only and not cleaned and not others:
        print(f"no old file versions to delete ({planner.policy.describe()})")
    table.close()
    return EXIT_OK


def _marker_server(args: argparse.Namespace) -> int:
    import signal
    import threading

    from timeline.config import (
        ASYNC_CONFLICT_PERIOD_MS,
        MARKER_BATCH_INTERVAL_MS,
        MARKER_THREADS,
    )
    from timeline.markers.server import MarkerServer, MarkerServerConfig

    config = config_from_args(args)
    table = Table.open(args.base, config)
    batch_ms = args.batch_interval_ms or config.get(MARKER_BATCH_INTERVAL_MS)
    period_ms = args.conflict_check_interval_ms
    if args.early_conflict_detection and not period_ms:
        period_ms = config.get(ASYNC_CONFLICT_PERIOD_MS)
    server = MarkerServer(
        table,
        host=args.host,
        port=args.port,
        config=MarkerServerConfig(
            batch_interval=batch_ms / 1000,
            threads=args.threads or config.get(MARKER_THREADS),
            conflict_check_interval=period_ms / 1000 if period_ms else None,
            check_commits=args.check_commits,
        ),
    ).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.json:
        print(json.dumps({"serving": table.base_uri, "url": server.url}), flush=True)
    else:
        print(f"serving markers for {table.base_uri} at {server.url}", flush=True)
    stop.wait()
    server.stop()
    requests = dict(sorted(server.storage.requests.items()))
    if args.json:
        print(json.dumps({"stopped": True, "batches": server.batches, "requests": requests}))
    else:
        counts = " ".join(f"{verb}={n}" for verb, n in requests.items())
        print(
            f"stopped; {server.batches} batches; storage requests: {counts or 'none'}", flush=True
        )
    table.close()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="indexer-table",
        description="Create a Hudi 0.x table (table version 6) and inspect its timeline.",
    )
    parser.add_argument("--help-config", action="store_true", help="list configuration keys")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    init = sub.add_parser(
        "init",
        help="create a table (writes .hoodie/hoodie.properties)",
        description="Create an empty table. Fails if one exists at BASE.",
    )
    init.add_argument("base", help="table base path: a local path, file://, s3:// or memory://")
    init.add_argument("--table-name", required=True, help="hoodie.table.name")
    init.add_argument("--record-key", required=True, help="record key field(s), comma-separated")
    init.add_argument("--partition-field", default="", help="partition field(s), comma-separated")
    init.add_argument("--precombine-field", help="field whose largest value wins among duplicates")
    init.add_argument(
        "--table-type",
        default=TableType.COPY_ON_WRITE.value,
        choices=[t.value for t in TableType],
        help="hoodie.table.type (default COPY_ON_WRITE); indexer-write and the indexer refuse "
        "MERGE_ON_READ tables, which only Apache Hudi's writers write",
    )
    init.add_argument("--database", default="", help="hoodie.database.name (optional)")
    add_common_options(init, json_help='print {"created": name, "base": uri}')
    init.set_defaults(func=_init)

    show = sub.add_parser(
        "show",
        help="list the instants of the timeline",
        description="List instants with action, state and completion time.",
    )
    show.add_argument("base", help="table base path")
    add_common_options(
        show, json_help="print a JSON list of {timestamp, action, state, completion_time}"
    )
    show.set_defaults(func=_show)

    clean = sub.add_parser(
        "clean",
        help="roll back failed writes, then delete old file versions (Hudi's clean)",
        description=(
            "Two jobs, each reported. 1. Failed writes: finish interrupted rollbacks, then roll "
            "back every pending commit or deltacommit whose writer's heartbeat expired: delete "
            "the files its markers name, write a rollback instant listing them, remove its "
            "markers and heartbeat. On a merge-on-read table failed deltacommits are left to "
            "Apache Hudi's own rollback (their log appends need rollback command blocks). Then "
            "lists the pending writes it left and why: a writer alive or not yet provably dead "
            "(with the time until its heartbeat expires), no heartbeat file. A writer counts as "
            "dead after hoodie.client.heartbeat.interval_in_ms x "
            "hoodie.client.heartbeat.tolerable.misses (2 minutes by default): give clean the "
            "writers' own settings (--conf, or the --config file's entry for the table, as the "
            "writers read it). 2. Old file versions: finish any interrupted clean (one Apache Hudi "
            "scheduled once indexer.clean.adopt.seconds old), then delete "
            "the file versions the cleaner policy no longer keeps (hoodie.cleaner.policy, "
            "KEEP_LATEST_COMMITS with hoodie.cleaner.commits.retained=10 by default; never a "
            "version a savepoint, a pending write or a snapshot opened within "
            "indexer.clean.grace.seconds can read), as a clean instant in Apache Hudi's format. "
            "The table's index, if it has one, is updated inside each critical section, and so is "
            "Apache Hudi's own metadata table when the table has one "
            "(indexer.write.hudi_metadata_table=maintain, the default; with drop or refuse such "
            "a table is left to Hudi's cleaner)."
        ),
    )
    clean.add_argument("base", help="table base path")
    only = clean.add_mutually_exclusive_group()
    only.add_argument(
        "--failed-writes-only", action="store_true", help="only job 1: roll back failed writes"
    )
    only.add_argument(
        "--versions-only", action="store_true", help="only job 2: delete old file versions"
    )
    add_common_options(
        clean,
        json_help='print {"rolled_back": [...], "pending": [...], "cleaned": [{timestamp, '
        'files_deleted, partitions, earliest_commit_to_retain}], "policy": ...}',
    )
    clean.set_defaults(func=_clean)

    server = sub.add_parser(
        "marker-server",
        help="serve timeline-server-based markers for a table",
        description=(
            "Serve write markers over HTTP: requests are batched every interval into MARKERS<i> "
            "files (one per worker thread) and answered once on storage. Stops on SIGTERM/SIGINT."
        ),
    )
    server.add_argument("base", help="table base path")
    server.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    server.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    server.add_argument("--batch-interval-ms", type=int, help="flush interval (default 50)")
    server.add_argument("--threads", type=int, help="worker threads = MARKERS files (default 20)")
    server.add_argument(
        "--early-conflict-detection",
        action="store_true",
        help="check each marker folder against other live writers periodically",
    )
    server.add_argument(
        "--conflict-check-interval-ms", type=int, help="period of that check (default 30000)"
    )
    server.add_argument(
        "--check-commits", action="store_true", help="also check commits since a folder appeared"
    )
    add_common_options(
        server, json_help='print {"serving", "url"} at start and {"batches", "requests"} at stop'
    )
    server.set_defaults(func=_marker_server)
    return parser


def run_subcommands(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Run the subcommand whose parser set ``func``; print help (exit 2) when none was given."""

    def dispatch(args: argparse.Namespace) -> int:
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        result: int = args.func(args)
        return result

    return run(dispatch, parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_subcommands(build_parser(), argv)
