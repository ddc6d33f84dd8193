"""``python -m writer``: write a file of records to a table, for scripts and demos."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from timeline.cli import (
    EXIT_OK,
    Parser,
    add_common_options,
    add_spark_options,
    config_from_args,
    run,
    spark_conf_from_args,
    spark_master_from_args,
)
from timeline.commit_metadata import CommitMetadata
from timeline.errors import InputFileError
from timeline.instant import Instant
from timeline.table import Table
from writer.client import Operation, WriteClient, WriteOptions

JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")


def read_input(path: str) -> pa.Table:
    """A .parquet, .csv or .json (one JSON object per line) file as an Arrow table."""
    if not os.path.isfile(path):
        raise InputFileError(path, "no such file")
    suffix = os.path.splitext(path)[1].lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)  # a path: Arrow's own file, no Python buffer to release
        if suffix == ".csv":
            import pyarrow.csv as pcsv

            return pcsv.read_csv(path)
        if suffix in JSON_SUFFIXES:
            import pyarrow.json as pjson

            return pjson.read_json(path)
    except (pa.ArrowException, OSError) as e:
        raise InputFileError(path, str(e).splitlines()[0]) from e
    raise InputFileError(path, f"unknown format {suffix!r} (use .parquet, .csv or .json)")


def _write(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    table = Table.open(args.base, config)
    options = WriteOptions.from_config(config)
    if args.early_conflict_detection:
        options = dataclasses.replace(options, early_conflict_detection=True)
    if args.markers:
        options = dataclasses.replace(options, markers=args.markers)
    if args.marker_server:
        options = dataclasses.replace(options, marker_server_url=args.marker_server)
    operation = Operation(args.operation)
    if args.engine == "spark":
        instant = _write_spark(args, table, options, operation)
    else:
        data = read_input(args.input)
        with WriteClient(table, options) as client:
            instant = client.write(operation, data)
    if args.json:
        print(json.dumps(_outcome(table, instant, operation)))
    else:
        print(instant.timestamp)
    table.close()
    return EXIT_OK


def _outcome(table: Table, instant: Instant, operation: Operation) -> dict[str, Any]:
    """What a commit wrote, from its commit metadata (the write stats both engines record)."""
    timeline = table.timeline
    completed = timeline.load().get(instant.timestamp, instant.action)
    assert completed is not None and completed.is_completed
    stats = CommitMetadata.from_bytes(
        timeline.read_content(completed), timeline.path(completed)
    ).write_stats
    return {
        "instant": instant.timestamp,
        "action": instant.action.value,
        "operation": operation.value,
        "files": len(stats),
        "inserts": sum(s.num_inserts for s in stats),
        "updates": sum(s.num_update_writes for s in stats),
        "deletes": sum(s.num_deletes for s in stats),
        "bytes": sum(s.total_write_bytes for s in stats),
    }


def _write_spark(
    args: argparse.Namespace, table: Table, options: WriteOptions, operation: Operation
) -> Instant:
    """The Spark engine: Parquet input is read by Spark itself (any path Spark reads: a file, a
    folder, s3a://...); .csv and .json are read here and handed to Spark."""
    from pyspark.sql import SparkSession

    from timeline.spark import spark_session
    from writer.spark import SparkWriteClient, arrow_frame

    callers = SparkSession.getActiveSession()  # main() called in a process that has a session
    spark = spark_session(spark_master_from_args(args), spark_conf_from_args(args))
    try:
        if args.input.lower().endswith(".csv") or args.input.lower().endswith(JSON_SUFFIXES):
            frame = arrow_frame(spark, read_input(args.input))
        else:
            frame = spark.read.parquet(args.input)
        with SparkWriteClient(table, spark, options) as client:
            return client.write(operation, frame)
    finally:
        if callers is None:  # the session is ours; the caller's one is left running
            spark.stop()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="indexer-write",
        description=(
            "Write the records of a file to a table as one commit (insert, upsert or delete) and "
            "print the instant time it committed. Exit 1 with a message on a write conflict or "
            "bad input; the failed write is rolled back."
        ),
        epilog=(
            "Tables Apache Hudi wrote: keys and partition paths are made by the table's key "
            "generator (hoodie.properties). Give the settings Hudi does not store there as you "
            "give them to Hudi, e.g. --conf hoodie.keygen.timebased.timestamp.type=EPOCHMILLISECONDS "
            "or --conf hoodie.datasource.write.partitionpath.field=part:SIMPLE,ts:TIMESTAMP. A "
            "commit takes Hudi's own metadata table down (indexer.write.hudi_metadata_table=drop; "
            "=refuse fails instead). See docs/hudi.md."
        ),
    )
    parser.add_argument("base", help="table base path (local, file://, s3://)")
    parser.add_argument(
        "--input",
        required=True,
        help="records: .parquet, .csv or .json (lines). With --engine spark, Parquet input may "
        "also be a folder or any path Spark reads",
    )
    parser.add_argument(
        "--engine",
        choices=["local", "spark"],
        default="local",
        help="local: this process writes the files; spark: Spark executors write them, the "
        "driver (this process) commits (default local)",
    )
    parser.add_argument(
        "--operation", required=True, choices=[o.value for o in Operation], help="write operation"
    )
    parser.add_argument(
        "--markers",
        choices=["direct", "timeline-server"],
        help="write markers: direct (one storage object per file) or timeline-server (batched "
        "through a marker server; embedded unless --marker-server is given). Default: "
        "hoodie.write.markers.type, direct",
    )
    parser.add_argument("--marker-server", metavar="URL", help="a running marker server's URL")
    parser.add_argument(
        "--early-conflict-detection",
        action="store_true",
        help="stop at the first file group another live writer is writing, not at commit",
    )
    parser.add_argument("--help-config", action="store_true", help="list configuration keys")
    add_common_options(
        parser,
        json_help='print {"instant", "action", "operation", "files", "inserts", "updates", '
        '"deletes", "bytes"} instead of the instant time',
    )
    add_spark_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(_write, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
