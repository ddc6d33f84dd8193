"""The Spark write engine: a DataFrame written as one commit, data files written by executors.

The driver starts the write exactly as the local engine does (instant time, heartbeat,
``T.commit.requested``, the markers, and an embedded marker server listening on the driver's
host when timeline-server markers are used), then runs three small jobs and one write job:

1. keys: executors add ``_hoodie_record_key`` and ``_hoodie_partition_path`` to every row (and the
   bucket's file id in the bucket layout);
2. tagging, for upserts and deletes: the record keys of the latest base files in the touched
   partitions are read by executors and joined with the incoming keys (Hudi's simple index);
3. sizing: rows without a file group are counted per partition and the driver picks new file ids
   (``ceil(count / records per file)`` of them); executors spread the rows over them by key hash;
4. write: rows are shuffled by (partition, file group) and sorted by key; each task writes one
   base file per file group it holds: marker first, then the Parquet file, named with the write
   token ``<Spark partition id>-<stage id>-<task attempt id>`` so that retried and speculative
   attempts never write the same name. Tasks return the write stats and the index information.

Back on the driver, the stats of the successful attempts are the commit's. The driver waits for
the write stage's other attempts (speculative copies being killed) to end, then commits with OCC:
finalize deletes every data file that has a marker but is not in the stats, which is exactly the
partial files of failed attempts and the duplicates of speculative ones. An attempt that outlives
even that wait finds the instant completed or gone after writing and deletes its own file.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import pickle
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.bloom import BloomSizing
from metadata_table.records import DataFileInfo, read_record_keys
from timeline.arrow_types import as_stored
from timeline.commit_metadata import WriteStat
from timeline.errors import BadRecordsError, FileAlreadyExistsError, SparkWriteError, TableError
from timeline.failpoints import armed, current, task_failpoint
from timeline.fs_view import BaseFile
from timeline.hashing import buckets_of_keys
from timeline.instant import Action, Instant, State
from timeline.keys import META_COLUMNS, PARTITION_PATH, RECORD_KEY, KeyGenerator
from timeline.markers import IOType, MarkerWriter
from timeline.storage import Storage
from timeline.table import Table
from writer.client import Operation, WriteClient, WriteOptions, WriteTransaction
from writer.files import (
    FileGroupWrite,
    FileLayout,
    encode_file_group,
    ensure_partition_metadata,
)
from writer.planner import bucket_file_id, new_file_id, plan_group, records_per_file
from writer.schema import conform

logger = logging.getLogger(__name__)

FILE_ID = "_aix_file_id"
ROW_BYTES = "_aix_row_bytes"
#: a row that only says its key moves out of its group (global keys: an upsert into another
#: partition); the group's write task drops the key
MOVE_OUT = "_aix_move_out"
_RESULT_SCHEMA = "path string, stat string, info binary"
# failpoints of a write task's first attempt: die after writing half of its first file; stall
# after writing its first file (so a speculative copy starts)
PARTIAL = "spark.write.partial"
SLOW = "spark.write.slow"
FAILPOINT_CLAIMS = ".hoodie/.aux/failpoints"


def arrow_frame(spark: Any, data: pa.Table) -> Any:
    """An Arrow table as a Spark DataFrame, its columns first in the types a table stores
    (Spark takes no ``string_view`` or dictionary)."""
    return spark.createDataFrame(as_stored(data).to_pandas())


class SparkWriteClient(WriteClient):
    """A :class:`WriteClient` whose writes take Spark DataFrames and run on ``spark``.

    ``attempt_wait`` bounds how long the driver waits, after the write job, for killed speculative
    attempts to end before it commits."""

    def __init__(
        self,
        table: Table,
        spark: Any,
        options: WriteOptions | None = None,
        attempt_wait: float = 30.0,
    ) -> None:
        options = options or WriteOptions.from_config(table.config)
        if options.timeline_server_markers and not options.marker_server_url:
            # executors on other hosts reach the embedded server at the driver's address
            host = spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")
            options = dataclasses.replace(options, marker_server_host=host)
        if options.early_conflict_detection and not options.timeline_server_markers:
            logger.warning(
                "early conflict detection in the Spark engine runs in the marker server; "
                "with direct markers conflicts are found at commit"
            )
        super().__init__(table, options)
        self.spark = spark
        self.attempt_wait = attempt_wait
        #: how many files the last write's tagging read the keys of
        self.last_tag_files_read = 0

    def write(self, operation: Operation, data: Any) -> Instant:
        """Write the DataFrame ``data`` (or an Arrow table, handed to Spark) as one commit (see
        the module docstring)."""
        if isinstance(data, pa.Table):
            data = arrow_frame(self.spark, data)
        txn = self.start(operation)
        try:
            try:
                job = _SparkWrite(self, txn, data)
                job.run()
                self.last_tag_files_read = job.tag_files_read
            except TableError:
                raise
            except Exception as e:  # a failed Spark job: name the task's error
                raise SparkWriteError(txn.instant_time, _task_error(e)) from e
            return txn.commit()
        except BaseException:
            txn.abort()
            raise


class _SparkWrite:
    def __init__(self, client: SparkWriteClient, txn: WriteTransaction, df: Any) -> None:
        self.client = client
        self.txn = txn
        self.df = df
        self.spark = client.spark
        self.table = txn.table
        self.config = txn.table.table_config
        self.deleting = txn.operation is Operation.DELETE
        #: how many files tagging read the keys of (the bloom index keeps this low)
        self.tag_files_read = 0
        self.layout = FileLayout()

    def run(self) -> None:
        schema = self.df.limit(0).toArrow().schema
        clash = [n for n in schema.names if n in META_COLUMNS or n in (FILE_ID, ROW_BYTES)]
        if clash:
            raise BadRecordsError(clash[0], "input may not carry Hudi meta columns")
        keygen = self.client.keygen
        assert keygen is not None, "the client checked the table when the write started"
        self.layout = self.txn.prepare(None if self.deleting else schema)
        keyed = self._keyed(keygen)
        touched = sorted(r[0] for r in keyed.select(PARTITION_PATH).distinct().collect())
        if not touched:
            return
        moves: dict[tuple[str, str], list[str]] = {}
        if self.txn.global_keys:
            keyed, moves, located_in = self._located(keyed)
            touched = sorted(set(touched) | located_in)
        latest = self.txn.view.latest_base_files(touched)
        tagged = keyed if self.txn.global_keys else self._tagged(keyed, latest)
        new_groups, per_file = self._new_groups(tagged)
        tagged = self._assign_new(tagged, new_groups)
        if moves:
            from pyspark.sql import functions as F

            tagged = tagged.withColumn(MOVE_OUT, F.lit(False))
            tagged = tagged.unionByName(self._move_rows(keyed, moves))
        tasks = max(1, sum(len(v) for v in new_groups.values()) + len(latest))
        shuffled = tagged.repartition(tasks, PARTITION_PATH, FILE_ID).sortWithinPartitions(
            PARTITION_PATH, FILE_ID, RECORD_KEY
        )
        results = self._collect_writes(shuffled, latest, per_file)
        for stat, info in results:
            self.txn.add_written(stat, info)
        logger.info(
            "spark write %s: %d files from %d tasks", self.txn.instant_time, len(results), tasks
        )

    # --- jobs ------------------------------------------------------------------------------------

    def _keyed(self, keygen: KeyGenerator) -> Any:
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        buckets = self.client.options.bucket_count
        out = StructType(
            [
                *self.df.schema.fields,
                StructField(RECORD_KEY, StringType(), False),
                StructField(PARTITION_PATH, StringType(), False),
                StructField(FILE_ID, StringType(), True),
                StructField(ROW_BYTES, LongType(), False),
            ]
        )

        def keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                n = batch.num_rows
                rows = pa.Table.from_batches([batch])
                ks = keygen.record_keys(rows)
                fids: list[str | None] = [None] * n
                if buckets:
                    fids = [bucket_file_id(b) for b in buckets_of_keys(ks, buckets)]
                yield pa.RecordBatch.from_arrays(
                    [
                        *batch.columns,
                        pa.array(ks, pa.string()),
                        pa.array(keygen.partition_paths(rows), pa.string()),
                        pa.array(fids, pa.string()),
                        pa.array([batch.nbytes // max(1, n)] * n, pa.int64()),
                    ],
                    schema=pa.schema([*batch.schema, *_EXTRA_FIELDS]),
                )

        return self.df.mapInArrow(keys, out)

    def _located(self, keyed: Any) -> tuple[Any, dict[tuple[str, str], list[str]], set[str]]:
        """Global keys (the table has a record index): each incoming key's file group in the
        whole table, found on the driver as the local engine finds it
        (:meth:`WriteTransaction.locate`: record_index, else bloom filters and key reads).
        Returns the rows tagged with the group holding their key in their own partition (null:
        an insert there), deletes sent to wherever their key lives, the keys an upsert moves
        out of each group (stale moves dropped), and the partitions those groups are in."""
        from pyspark.sql import functions as F

        precombine = self.config.precombine_field
        carried = [RECORD_KEY, PARTITION_PATH]
        if precombine and precombine in keyed.columns and not self.deleting:
            carried.append(precombine)
        # one job: the batch's keys and partitions (and precombine values) come to the driver
        incoming = keyed.select(*carried).toArrow()
        located = self.txn.locate_table(pc.unique(incoming.column(RECORD_KEY).combine_chunks()))
        self.tag_files_read = sum(
            int(t.split()[0]) for t in self.txn.tagged_by if t.endswith("files read")
        )
        where = self.spark.createDataFrame(located.rename_columns(["_aix_k", "_aix_lp", "_aix_lf"]))
        # the batch's located keys, shipped whole to every task (no shuffle of the batch)
        joined = keyed.join(F.broadcast(where), keyed[RECORD_KEY] == where["_aix_k"], "left")
        found = F.col("_aix_lp").isNotNull()
        if self.deleting:
            asked = set(incoming.column(RECORD_KEY).to_pylist())
            self.txn.missed_deletes |= asked - set(located.column("record_key").to_pylist())
            joined = joined.where(found)
            joined = joined.withColumn(PARTITION_PATH, F.col("_aix_lp"))
            joined = joined.withColumn(FILE_ID, F.col("_aix_lf"))
            return joined.select(*keyed.columns), {}, set(located.column(1).to_pylist())
        same = found & (F.col("_aix_lp") == F.col(PARTITION_PATH))
        keep_bucket = F.col(FILE_ID) if self.client.options.bucket_count > 0 else F.lit(None)
        joined = joined.withColumn(FILE_ID, F.when(same, F.col("_aix_lf")).otherwise(keep_bucket))
        # keys moving to another partition, worked out on the driver (they are few)
        paired = incoming.join(located, RECORD_KEY, "record_key")
        moving = paired.filter(
            pc.not_equal(paired.column(PARTITION_PATH), paired.column("partition_path"))
        )
        moved = moving.to_pylist()
        stale = self.txn.stale_moves(
            {r[RECORD_KEY]: ((r["partition_path"], r["file_id"]), r[precombine]) for r in moved}
            if len(carried) == 3 and precombine
            else {}
        )
        if stale:
            joined = joined.where(~F.col(RECORD_KEY).isin(sorted(stale)))
        moves: dict[tuple[str, str], list[str]] = {}
        for r in moved:
            if r[RECORD_KEY] not in stale:
                moves.setdefault((r["partition_path"], r["file_id"]), []).append(r[RECORD_KEY])
        return joined.select(*keyed.columns), moves, {p for p, _ in moves}

    def _move_rows(self, keyed: Any, moves: dict[tuple[str, str], list[str]]) -> Any:
        """One row per key moving out of a group (to the group's write task, which drops it):
        the key, the group, the :data:`MOVE_OUT` flag, and nothing else."""
        from pyspark.sql import functions as F

        rows = [(k, p, f) for (p, f), keys in moves.items() for k in keys]
        names = {RECORD_KEY: "_aix_mk", PARTITION_PATH: "_aix_mp", FILE_ID: "_aix_mf"}
        frame = self.spark.createDataFrame(rows, "_aix_mk string, _aix_mp string, _aix_mf string")
        columns = []
        for field in keyed.schema.fields:
            if field.name in names:
                columns.append(F.col(names[field.name]).alias(field.name))
            elif field.name == ROW_BYTES:
                columns.append(F.lit(0).cast("long").alias(ROW_BYTES))
            else:
                columns.append(F.lit(None).cast(field.dataType).alias(field.name))
        moved = frame.select(*columns).withColumn(MOVE_OUT, F.lit(True))
        return moved

    def _tagged(self, keyed: Any, latest: list[BaseFile]) -> Any:
        """Rows with the file group holding their key (null: not in the table); deletes keep
        only found keys."""
        from pyspark.sql import functions as F

        if self.client.options.bucket_count > 0:
            if not self.deleting:
                return keyed
            existing = [f"{b.partition_path}/{b.file_id}" for b in latest]
            if not existing:
                return keyed.limit(0)
            return keyed.where(F.concat_ws("/", PARTITION_PATH, FILE_ID).isin(existing))
        if self.txn.operation is Operation.INSERT or not latest:
            return keyed.limit(0) if self.deleting else keyed
        storage = self.table.storage
        sc = self.spark.sparkContext
        candidates = self._bloom_candidates(keyed, latest)
        files = [(b.partition_path, b.file_id, b.path) for b in candidates]
        self.tag_files_read = len(files)
        logger.info(
            "spark write %s: tagging reads the keys of %d of %d files",
            self.txn.instant_time,
            len(files),
            len(latest),
        )
        if not files:
            return keyed.limit(0) if self.deleting else keyed

        virtual = self.client.virtual

        def read_keys(it: Iterator[tuple[str, str, str]]) -> Iterator[tuple[str, str, str]]:
            for partition, file_id, path in it:
                for key in read_record_keys(storage, path, virtual).column(0).to_pylist():
                    yield partition, key, file_id

        slices = max(1, min(len(files), sc.defaultParallelism * 2))
        existing_df = self.spark.createDataFrame(
            sc.parallelize(files, slices).mapPartitions(read_keys),
            "_aix_p string, _aix_k string, _aix_f string",
        )
        joined = keyed.drop(FILE_ID).join(
            existing_df,
            (keyed[PARTITION_PATH] == existing_df["_aix_p"])
            & (keyed[RECORD_KEY] == existing_df["_aix_k"]),
            "left",
        )
        joined = joined.withColumnRenamed("_aix_f", FILE_ID).drop("_aix_p", "_aix_k")
        if self.deleting:
            joined = joined.where(F.col(FILE_ID).isNotNull())
        return joined.select(*keyed.columns)

    def _bloom_candidates(self, keyed: Any, latest: list[BaseFile]) -> list[BaseFile]:
        """The files whose keys tagging must read: with ``bloom_filters`` completed, only those
        whose filter may hold an incoming key (probed on the executors against broadcast
        filters) and those without a usable filter; else every file."""
        filters: dict[tuple[str, str], bytes] = {}
        always: list[BaseFile] = []
        for partition in sorted({b.partition_path for b in latest}):
            files = [b for b in latest if b.partition_path == partition]
            found = self.txn.index.key_filters(partition, files)
            if found is None:
                return list(latest)
            for f in files:
                bloom = found[f.file_name]
                if bloom is None:
                    always.append(f)
                else:
                    filters[(partition, f.file_id)] = bytes(bloom.bitset)
        if not filters:
            return always
        by_partition: dict[str, list[tuple[str, bytes]]] = {}
        for (partition, file_id), bits in filters.items():
            by_partition.setdefault(partition, []).append((file_id, bits))
        shared = self.spark.sparkContext.broadcast(by_partition)

        def probe(rows: Iterator[Any]) -> Iterator[tuple[str, str]]:
            from metadata_table.bloom import SplitBlockBloomFilter, hash_value

            blooms = {
                p: [(fid, SplitBlockBloomFilter(bits)) for fid, bits in groups]
                for p, groups in shared.value.items()
            }
            hit: set[tuple[str, str]] = set()
            for partition, key in rows:
                h = hash_value(key)
                for fid, bloom in blooms.get(partition, ()):
                    if (partition, fid) not in hit and bloom.might_contain_hash(h):
                        hit.add((partition, fid))
            yield from hit

        pairs = keyed.select(PARTITION_PATH, RECORD_KEY).rdd.map(tuple).mapPartitions(probe)
        hits = set(pairs.distinct().collect())
        shared.unpersist()
        return always + [b for b in latest if (b.partition_path, b.file_id) in hits]

    def _new_groups(self, tagged: Any) -> tuple[dict[str, list[str]], dict[str, int]]:
        """New file ids per partition for the rows without a file group, and records per file."""
        from pyspark.sql import functions as F

        if self.deleting:
            return {}, {}
        options = self.client.options
        counts = (
            tagged.where(F.col(FILE_ID).isNull())
            .groupBy(PARTITION_PATH)
            .agg(F.count(F.lit(1)).alias("n"), F.sum(ROW_BYTES).alias("bytes"))
            .collect()
        )
        groups: dict[str, list[str]] = {}
        per_file: dict[str, int] = {}
        for row in counts:
            row_bytes = int(row["bytes"]) // max(1, int(row["n"]))
            per = records_per_file(row_bytes, options.max_records_per_file, options.max_file_size)
            per_file[row[PARTITION_PATH]] = per
            groups[row[PARTITION_PATH]] = [
                new_file_id() for _ in range(math.ceil(int(row["n"]) / per))
            ]
        return groups, per_file

    def _assign_new(self, tagged: Any, groups: dict[str, list[str]]) -> Any:
        if not groups:
            return tagged

        def assign(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                fids = batch.column(FILE_ID).to_pylist()
                if None not in fids:
                    yield batch
                    continue
                keys = batch.column(RECORD_KEY).to_pylist()
                parts = batch.column(PARTITION_PATH).to_pylist()
                for i, fid in enumerate(fids):
                    if fid is None:
                        ids = groups[parts[i]]
                        fids[i] = ids[buckets_of_keys([keys[i]], len(ids))[0]]
                index = batch.schema.get_field_index(FILE_ID)
                yield batch.set_column(index, FILE_ID, pa.array(fids, pa.string()))

        return tagged.mapInArrow(assign, tagged.schema)

    def _collect_writes(
        self, shuffled: Any, latest: list[BaseFile], per_file: dict[str, int]
    ) -> list[tuple[WriteStat, DataFileInfo]]:
        task = _WriteTask(
            storage=self.table.storage,
            markers=self.txn.markers,
            instant_time=self.txn.instant_time,
            operation=self.txn.operation,
            bases={(b.partition_path, b.file_id): b for b in latest},
            per_file=per_file,
            precombine=self.config.precombine_field,
            bloom=self.client.options.bloom,
            layout=self.layout,
            failpoint=current(),
            virtual=self.client.virtual,
        )
        sc = self.spark.sparkContext
        group = f"aix-write-{self.txn.instant_time}"
        sc.setJobGroup(group, f"write {self.txn.instant_time}")
        try:
            rows = shuffled.mapInArrow(task, _RESULT_SCHEMA).collect()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        self._wait_for_attempts(group)
        return [
            (WriteStat.from_json(_json(row["stat"])), pickle.loads(row["info"])) for row in rows
        ]

    def _wait_for_attempts(self, group: str) -> None:
        """Wait until no task attempt of the write's jobs runs (killed speculative copies)."""
        tracker = self.spark.sparkContext.statusTracker()
        deadline = time.monotonic() + self.client.attempt_wait
        while True:
            active = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else []:
                    stage = tracker.getStageInfo(stage_id)
                    active += stage.numActiveTasks if stage else 0
            if not active:
                return
            if time.monotonic() > deadline:
                logger.warning(
                    "spark write %s: %d task attempt(s) still running after %.0f s; a late "
                    "attempt deletes its own file",
                    self.txn.instant_time,
                    active,
                    self.client.attempt_wait,
                )
                return
            time.sleep(0.2)


_EXTRA_FIELDS = [
    pa.field(RECORD_KEY, pa.string(), False),
    pa.field(PARTITION_PATH, pa.string(), False),
    pa.field(FILE_ID, pa.string()),
    pa.field(ROW_BYTES, pa.int64(), False),
]


@dataclasses.dataclass
class _WriteTask:
    """The executor side of the write job (pickled into the tasks)."""

    storage: Storage
    markers: MarkerWriter
    instant_time: str
    operation: Operation
    bases: dict[tuple[str, str], BaseFile]
    per_file: dict[str, int]
    precombine: str | None
    bloom: BloomSizing
    layout: FileLayout
    failpoint: str | None
    virtual: KeyGenerator | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None, "a write task runs inside Spark"
        partition_id, attempt = ctx.partitionId(), ctx.attemptNumber()
        token = f"{partition_id}-{ctx.stageId()}-{ctx.taskAttemptId()}"
        written = 0
        for (partition, file_id), rows in _groups(batches):
            for target in self._targets(partition, file_id, rows):
                marker = target.marker(token, self.instant_time)
                self.markers.create(marker)
                ensure_partition_metadata(self.storage, partition, self.instant_time)
                encoded = encode_file_group(
                    self.storage,
                    self.instant_time,
                    target,
                    marker,
                    self.precombine,
                    self.bloom,
                    seq_prefix=partition_id,
                    seq_start=written,
                    layout=self.layout,
                    virtual=self.virtual,
                )
                written += encoded.stat.num_writes
                if attempt == 0 and armed(PARTIAL, self.failpoint) and self._claim(PARTIAL):
                    # a task that dies after writing part of its file (tests)
                    self.storage.create(encoded.path, encoded.data[: len(encoded.data) // 2])
                    task_failpoint(PARTIAL, self.failpoint, attempt)
                self.storage.create(encoded.path, encoded.data)
                task_failpoint(SLOW, self.failpoint, attempt, lambda: self._claim(SLOW))
                if self._late():
                    self.storage.delete(encoded.path)
                    continue
                yield pa.RecordBatch.from_pydict(
                    {
                        "path": [encoded.path],
                        "stat": [_dumps(encoded.stat.to_json())],
                        "info": [pickle.dumps(encoded.info)],
                    }
                )

    def _targets(self, partition: str, file_id: str, rows: pa.Table) -> list[FileGroupWrite]:
        moved: set[str] = set()
        if MOVE_OUT in rows.column_names:
            flag = pc.fill_null(rows.column(MOVE_OUT), False)
            moved = set(rows.filter(flag).column(RECORD_KEY).to_pylist())
            rows = rows.filter(pc.invert(flag)).drop_columns([MOVE_OUT])
        base = self.bases.get((partition, file_id))
        targets = []
        if rows.num_rows:
            data = rows.drop_columns([RECORD_KEY, PARTITION_PATH, FILE_ID, ROW_BYTES])
            if self.layout.schema is not None:
                data = conform(data, self.layout.schema)
            targets = plan_group(
                partition,
                file_id,
                base,
                data,
                rows.column(RECORD_KEY).to_pylist(),
                deleting=self.operation is Operation.DELETE,
                precombine=self.precombine,
                per_file=self.per_file.get(partition),
            )
        if moved and base is not None:  # keys an upsert moved to another partition
            merge = next((t for t in targets if t.base is not None), None)
            if merge is not None:
                merge.move_keys |= moved
            else:
                targets.append(
                    FileGroupWrite(partition, file_id, IOType.MERGE, base, move_keys=moved)
                )
        return targets

    def _claim(self, point: str) -> bool:
        """True in the one task attempt (of all executors) that claims ``point`` first."""
        try:
            self.storage.create(f"{FAILPOINT_CLAIMS}/{point}.{self.instant_time}")
            return True
        except FileAlreadyExistsError:
            return False

    def _late(self) -> bool:
        """True when the instant completed or was rolled back while this attempt wrote: its
        file can be in no commit (the stats of the winning attempt are)."""
        completed = Instant(self.instant_time, Action.COMMIT, State.COMPLETED)
        requested = Instant(self.instant_time, Action.COMMIT, State.REQUESTED)
        return self.storage.exists(f".hoodie/{completed.file_name}") or not self.storage.exists(
            f".hoodie/{requested.file_name}"
        )


def _groups(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[tuple[str, str], pa.Table]]:
    """Contiguous runs of (partition path, file id) over sorted batches, one table each."""
    current: tuple[str, str] | None = None
    pieces: list[pa.RecordBatch] = []
    for batch in batches:
        parts = batch.column(PARTITION_PATH).to_pylist()
        fids = batch.column(FILE_ID).to_pylist()
        start = 0
        for i in range(1, batch.num_rows + 1):
            if i < batch.num_rows and (parts[i], fids[i]) == (parts[start], fids[start]):
                continue
            key = (parts[start], fids[start])
            if current is not None and key != current:
                yield current, pa.Table.from_batches(pieces)
                pieces = []
            current = key
            pieces.append(batch.slice(start, i - start))
            start = i
    if current is not None and pieces:
        yield current, pa.Table.from_batches(pieces)


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _json(value: str) -> Any:
    import json

    return json.loads(value)


def _task_error(e: BaseException) -> str:
    """The Python error a failed task raised, from Spark's wrapped exception text."""
    text = str(e)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error:" in line or "Exception:" in line:
            return line[:500]
    return (lines[-1] if lines else type(e).__name__)[:500]
