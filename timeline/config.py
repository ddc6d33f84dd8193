"""Configuration keys, each declared once, and their resolution.

Resolution order is fixed: built-in defaults < a config file < environment < explicit values (CLI
``--conf key=value`` or code). An environment variable's name is the key upper-cased with ``.``
turned into ``_`` (``indexer.lock.url`` -> ``INDEXER_LOCK_URL``). Storage options for fsspec
(e.g. s3fs's ``endpoint_url``, ``key``, ``secret``) are keys under ``indexer.storage.``
(env ``INDEXER_STORAGE_ENDPOINT_URL``, ...). Unknown ``indexer.*`` keys are errors, so a typo is
reported at start with the key at fault; other ``hoodie.*`` keys are kept and passed along.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from timeline.errors import ConfigError

T = TypeVar("T")

STORAGE_PREFIX = "indexer.storage."


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{value!r} is not a boolean")


@dataclass(frozen=True)
class ConfigKey(Generic[T]):
    key: str
    parse: Callable[[str], T]
    default: T
    doc: str
    check: Callable[[T], bool] = lambda _value: True
    check_doc: str = ""

    @property
    def env(self) -> str:
        return self.key.upper().replace(".", "_")

    def coerce(self, value: Any) -> T:
        try:
            parsed = self.parse(value) if isinstance(value, str) else value
        except (TypeError, ValueError) as e:
            raise ConfigError(self.key, f"invalid value {value!r}: {e}") from e
        if not self.check(parsed):
            raise ConfigError(self.key, f"invalid value {value!r}: {self.check_doc}")
        return parsed


REGISTRY: dict[str, ConfigKey[Any]] = {}


def _key(key: ConfigKey[T]) -> ConfigKey[T]:
    if key.key in REGISTRY:
        raise ValueError(f"configuration key {key.key} declared twice")
    REGISTRY[key.key] = key
    return key


def _positive(value: float) -> bool:
    return value > 0


LOCK_URL: ConfigKey[str] = _key(
    ConfigKey(
        "indexer.lock.url",
        str,
        "",
        "Lock provider URL: sqlite:///..., postgresql://..., storage, file:///..., s3://..., "
        "inprocess. Empty: SQLite in the user state folder for local tables, lock files on the "
        "table's storage otherwise.",
    )
)
HUDI_LOCK_PROVIDER: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.provider",
        str,
        "",
        "Take the table lock by the protocol of Apache Hudi's lock provider of this class name, "
        "so that our commits and Hudi's writers exclude each other: "
        "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider (a lock file, "
        "hoodie.write.lock.filesystem.*) or "
        "org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider (an item in a DynamoDB "
        "table, hoodie.write.lock.dynamodb.*). Empty: indexer.lock.url.",
    )
)
HUDI_LOCK_FILESYSTEM_PATH: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.filesystem.path",
        str,
        "",
        "Folder of Hudi's filesystem lock file ('lock'). Empty: the table's .hoodie folder.",
    )
)
HUDI_LOCK_FILESYSTEM_EXPIRE: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.write.lock.filesystem.expire",
        int,
        0,
        "Minutes after which Hudi's filesystem lock file counts as abandoned and is taken over; "
        "0: never (a writer that died holding it blocks until the file is deleted).",
        lambda v: v >= 0,
        "must be 0 or more",
    )
)
HUDI_LOCK_DYNAMODB_TABLE: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.table",
        str,
        "",
        "DynamoDB table of Hudi's DynamoDB lock (created on first use, as Hudi creates it); the "
        "one Hudi's writers name. Required with DynamoDBBasedLockProvider.",
    )
)
HUDI_LOCK_DYNAMODB_PARTITION_KEY: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.partition_key",
        str,
        "",
        "The lock's item in that table (one per Hudi table). Empty: the table's name "
        "(hoodie.table.name), Hudi's default.",
    )
)
HUDI_LOCK_DYNAMODB_REGION: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.region",
        str,
        "",
        "AWS region of the lock table. Empty: AWS_REGION from the environment, else us-east-1.",
    )
)
HUDI_LOCK_DYNAMODB_ENDPOINT: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.endpoint_url",
        str,
        "",
        "DynamoDB endpoint (a local DynamoDB or moto server). Empty: the region's.",
    )
)
HUDI_LOCK_DYNAMODB_BILLING: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.billing_mode",
        str,
        "PAY_PER_REQUEST",
        "Billing of a lock table created here: PAY_PER_REQUEST or PROVISIONED.",
        lambda v: v in ("PAY_PER_REQUEST", "PROVISIONED"),
        "must be PAY_PER_REQUEST or PROVISIONED",
    )
)
HUDI_LOCK_DYNAMODB_READ_CAPACITY: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.read_capacity",
        int,
        20,
        "Read capacity units of a PROVISIONED lock table created here.",
        _positive,
        "must be positive",
    )
)
HUDI_LOCK_DYNAMODB_WRITE_CAPACITY: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.write_capacity",
        int,
        10,
        "Write capacity units of a PROVISIONED lock table created here.",
        _positive,
        "must be positive",
    )
)
HUDI_LOCK_DYNAMODB_CREATION_TIMEOUT_MS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.write.lock.dynamodb.table_creation_timeout",
        int,
        120_000,
        "How long to wait, in ms, for a lock table created here to become active.",
        _positive,
        "must be positive",
    )
)
HUDI_AWS_ACCESS_KEY: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.aws.access.key",
        str,
        "",
        "AWS access key for Hudi's DynamoDB lock. Empty: botocore's default credential chain "
        "(environment, profile, instance role).",
    )
)
HUDI_AWS_SECRET_KEY: ConfigKey[str] = _key(
    ConfigKey("hoodie.aws.secret.key", str, "", "AWS secret key for Hudi's DynamoDB lock.")
)
HUDI_AWS_SESSION_TOKEN: ConfigKey[str] = _key(
    ConfigKey("hoodie.aws.session.token", str, "", "AWS session token for Hudi's DynamoDB lock.")
)
LOCK_WAIT_MS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.write.lock.wait_time_ms",
        int,
        60_000,
        "How long to wait for the table lock before failing with LockTimeoutError.",
        _positive,
        "must be positive",
    )
)
LOCK_LEASE_MS: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.lock.lease_ms",
        int,
        30_000,
        "Lease of a held lock: a holder that dies blocks others at most this long. Renewed every "
        "third of it.",
        _positive,
        "must be positive",
    )
)
HEARTBEAT_INTERVAL_MS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.client.heartbeat.interval_in_ms",
        int,
        60_000,
        "How often a writer touches its heartbeat file.",
        lambda v: v >= 100,
        "must be at least 100 ms",
    )
)
HEARTBEAT_TOLERABLE_MISSES: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.client.heartbeat.tolerable.misses",
        int,
        2,
        "Missed heartbeats after which a writer counts as dead.",
        lambda v: v >= 1,
        "must be at least 1",
    )
)


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda value: value in choices


FAILED_WRITES_POLICY: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.cleaner.policy.failed.writes",
        str.upper,
        "EAGER",
        "How the table's writers clean up their failed writes, which says what a pending write "
        "without a heartbeat file is. EAGER (Apache Hudi's default for a single writer): its "
        "writer writes no heartbeat and rolls it back itself when it next starts, so it is never "
        "rolled back here; only writes whose heartbeat file expired are (this project's writers "
        "always heartbeat). LAZY (every writer heartbeats): a missing heartbeat counts as "
        "expired, as Hudi's own cleaner counts it. NEVER: no failed write is rolled back.",
        _one_of("EAGER", "LAZY", "NEVER"),
        "one of EAGER, LAZY, NEVER",
    )
)


# --- table services over a table's life: Apache Hudi's keys, Hudi 0.15's defaults ----------------

CLEANER_POLICY: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.cleaner.policy",
        str.upper,
        "KEEP_LATEST_COMMITS",
        "Which old file versions a clean deletes. KEEP_LATEST_COMMITS: every version a query "
        "over the last hoodie.cleaner.commits.retained commits can read is kept; "
        "KEEP_LATEST_FILE_VERSIONS: the newest hoodie.cleaner.fileversions.retained versions of "
        "each file group; KEEP_LATEST_BY_HOURS: every version a query over the last "
        "hoodie.cleaner.hours.retained hours can read.",
        _one_of("KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"),
        "one of KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS, KEEP_LATEST_BY_HOURS",
    )
)
CLEANER_COMMITS_RETAINED: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.cleaner.commits.retained",
        int,
        10,
        "KEEP_LATEST_COMMITS: how many of the latest commits a snapshot or time-travel query "
        "can still read at.",
        _positive,
        "must be > 0",
    )
)
CLEANER_FILE_VERSIONS_RETAINED: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.cleaner.fileversions.retained",
        int,
        3,
        "KEEP_LATEST_FILE_VERSIONS: how many versions of each file group are kept.",
        _positive,
        "must be > 0",
    )
)
CLEANER_HOURS_RETAINED: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.cleaner.hours.retained",
        int,
        24,
        "KEEP_LATEST_BY_HOURS: how many hours back a query can still read at.",
        _positive,
        "must be > 0",
    )
)
CLEAN_AUTOMATIC: ConfigKey[bool] = _key(
    ConfigKey(
        "hoodie.clean.automatic",
        _parse_bool,
        True,
        "Clean after each commit of this project's writers (as Apache Hudi's writers do); false "
        "leaves cleaning to `indexer-table clean`, the daemon or Hudi's own cleaner.",
    )
)
CLEAN_MAX_COMMITS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.clean.max.commits",
        int,
        1,
        "An automatic clean is planned once this many commits completed since the last clean.",
        _positive,
        "must be > 0",
    )
)
CLEANER_INCREMENTAL: ConfigKey[bool] = _key(
    ConfigKey(
        "hoodie.cleaner.incremental.mode",
        _parse_bool,
        True,
        "Plan a clean over the partitions written since the last clean's earliest retained "
        "commit only (KEEP_LATEST_COMMITS, KEEP_LATEST_BY_HOURS), not over every partition.",
    )
)
CLEAN_ADOPT_SECONDS: ConfigKey[float] = _key(
    ConfigKey(
        "indexer.clean.adopt.seconds",
        float,
        900.0,
        "A pending clean that another engine scheduled (Apache Hudi's writer or cleaner) is "
        "finished here only once its newest state file is this old. Hudi plans and carries out "
        "a clean in one call, under no lock it shares with this process, and its write fails "
        "when another process moves its clean on; a clean still pending after this long was "
        "abandoned. This project's own pending cleans are finished at once.",
        lambda v: v >= 0,
        "must be >= 0",
    )
)
CLEAN_GRACE_SECONDS: ConfigKey[float] = _key(
    ConfigKey(
        "indexer.clean.grace.seconds",
        float,
        60.0,
        "A file version (of the data, or of the index that a compaction replaced) is kept "
        "while a snapshot opened this many seconds ago can still read it, whatever the cleaner "
        "policy says: a scan that started before a clean finishes unless it runs longer than "
        "this. 0: the policy alone.",
        lambda v: v >= 0,
        "must be >= 0",
    )
)
ARCHIVE_AUTOMATIC: ConfigKey[bool] = _key(
    ConfigKey(
        "hoodie.archive.automatic",
        _parse_bool,
        True,
        "Archive the oldest instants of the active timeline after each commit of this "
        "project's writers (as Apache Hudi's writers do), keeping it between "
        "hoodie.keep.min.commits and hoodie.keep.max.commits completed writes.",
    )
)
KEEP_MIN_COMMITS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.keep.min.commits",
        int,
        20,
        "Archival leaves this many completed writes (and cleans, and rollbacks) active.",
        _positive,
        "must be > 0",
    )
)
ARCHIVE_MERGE_ENABLE: ConfigKey[bool] = _key(
    ConfigKey(
        "hoodie.archive.merge.enable",
        _parse_bool,
        True,
        "Merge the newest small archive files into one when there are enough of them, as Apache "
        "Hudi's archiver does (on here by default: our archivals never append to an archive "
        "file, so without it the archive folder gains a file per archival).",
    )
)
ARCHIVE_MERGE_BATCH: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.archive.merge.files.batch.size",
        int,
        10,
        "How many small archive files in a row (the newest) are merged at once.",
        lambda v: v >= 2,
        "must be at least 2",
    )
)
ARCHIVE_MERGE_SMALL_BYTES: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.archive.merge.small.file.limit.bytes",
        int,
        20 * 1024 * 1024,
        "An archive file at most this large is small (merged); a larger one is left as it is, "
        "and only newer files are merged.",
        _positive,
        "must be > 0",
    )
)
KEEP_MAX_COMMITS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.keep.max.commits",
        int,
        30,
        "Archival runs once more than this many completed writes (or cleans, or rollbacks) "
        "are active; must be greater than hoodie.keep.min.commits.",
        _positive,
        "must be > 0",
    )
)

INDEX_COMPACT_MAX_DELTA_COMMITS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.compact.max.delta.commits",
        int,
        10,
        "The index compacts a partition once it has applied this many data instants since its "
        "base files were written (as Apache Hudi counts its metadata table's deltacommits); "
        "with indexer.write.hudi_metadata_table=maintain, our writers compact Apache Hudi's own "
        "metadata table (its <t>001 instant) after this many deltacommits, as Hudi's writer does.",
        _positive,
        "must be > 0",
    )
)
INDEX_UPKEEP_AUTOMATIC: ConfigKey[bool] = _key(
    ConfigKey(
        "indexer.metadata.upkeep.automatic",
        _parse_bool,
        True,
        "After each commit of this project's writers, compact the index's partitions that "
        "reached hoodie.metadata.compact.max.delta.commits, delete the index files a compaction "
        "replaced once indexer.clean.grace.seconds have passed, and trim the index's own "
        "timeline. The daemon runs the same upkeep every compaction interval.",
    )
)

CONFLICT_STRATEGY: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.lock.conflict.resolution.strategy",
        str.lower,
        "simple",
        "How a committing write detects conflicts: simple (same file group), bucket (same bucket "
        "of a partition), prefer_writer (table services yield to ingestion).",
        _one_of("simple", "bucket", "prefer_writer"),
        "one of simple, bucket, prefer_writer",
    )
)


def marker_type(value: str) -> str:
    """``direct`` or ``timeline_server_based`` (also spelled timeline-server, timeline_server)."""
    canonical = value.strip().lower().replace("-", "_")
    if canonical in ("timeline_server", "timeline_server_based"):
        return "timeline_server_based"
    if canonical == "direct":
        return canonical
    raise ValueError(f"unknown marker type {value!r} (direct or timeline_server_based)")


MARKERS_TYPE: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.write.markers.type",
        marker_type,
        "direct",
        "Write markers: direct (one storage object per data file) or timeline_server_based "
        "(batched through a marker server, MARKERS<i> files).",
    )
)


def _hudi_metadata_choice(value: str) -> str:
    choice = value.strip().lower()
    if choice not in ("drop", "refuse", "maintain"):
        raise ValueError(f"{value!r} is not drop, refuse or maintain")
    return choice


HUDI_METADATA_TABLE: ConfigKey[str] = _key(
    ConfigKey(
        "indexer.write.hudi_metadata_table",
        _hudi_metadata_choice,
        "maintain",
        "What a write of ours does on a table with Apache Hudi's own metadata table: maintain "
        "(write each commit's, clean's and rollback's records into it as Hudi's writer would, "
        "and compact it as Hudi does), drop (take it down as a Hudi writer with the metadata "
        "table off does; Hudi's readers list files and Hudi's next writer rebuilds what its "
        "config enables) or refuse (fail the write before it writes anything).",
    )
)
HUDI_METADATA_READ: ConfigKey[bool] = _key(
    ConfigKey(
        "indexer.read.hudi_metadata_table",
        _parse_bool,
        True,
        "Let reads list files, prune and look keys up through Apache Hudi's own metadata table "
        "where our index lacks the partition (only while it reflects every completed instant). "
        "false: such reads list storage and read data files instead.",
    )
)
#: the same key (Hudi's name) counts the deltacommits between compactions of Apache Hudi's own
#: metadata table, which our writers keep with indexer.write.hudi_metadata_table=maintain
HUDI_METADATA_COMPACT_EVERY = INDEX_COMPACT_MAX_DELTA_COMMITS
HUDI_RECORD_INDEX_MIN_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.record.index.min.filegroup.count",
        int,
        10,
        "indexer run --format hudi: the fewest file groups of the record_index partition it "
        "builds in Apache Hudi's metadata table; more as the table's keys need, as Hudi counts "
        "them (its keys and defaults: this, .max.filegroup.count, .growth.factor, "
        ".max.filegroup.size).",
        _positive,
        "must be > 0",
    )
)
HUDI_RECORD_INDEX_MAX_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.record.index.max.filegroup.count",
        int,
        10000,
        "indexer run --format hudi: the most file groups of the record_index partition.",
        _positive,
        "must be > 0",
    )
)
HUDI_RECORD_INDEX_GROWTH: ConfigKey[float] = _key(
    ConfigKey(
        "hoodie.metadata.record.index.growth.factor",
        float,
        2.0,
        "indexer run --format hudi: the record_index partition is sized for this many times "
        "the table's keys.",
        _positive,
        "must be > 0",
    )
)
HUDI_RECORD_INDEX_MAX_GROUP_BYTES: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.record.index.max.filegroup.size",
        int,
        1024 * 1024 * 1024,
        "indexer run --format hudi: the bytes a record_index file group is sized to hold at "
        "most (48 bytes a key, as Hudi counts).",
        _positive,
        "must be > 0",
    )
)
MARKER_SERVER_URL: ConfigKey[str] = _key(
    ConfigKey(
        "indexer.markers.server.url",
        str,
        "",
        "URL of a running marker server (python -m timeline marker-server). Empty: each writer "
        "embeds one on 127.0.0.1.",
    )
)
MARKER_BATCH_INTERVAL_MS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.markers.timeline_server_based.batch.interval_ms",
        int,
        50,
        "How often the marker server flushes queued marker requests.",
        _positive,
        "must be positive",
    )
)
MARKER_THREADS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.markers.timeline_server_based.batch.num_threads",
        int,
        20,
        "Marker server worker threads, and MARKERS<i> files per marker folder.",
        _positive,
        "must be positive",
    )
)
ASYNC_CONFLICT_PERIOD_MS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.write.concurrency.async.conflict.detector.period_ms",
        int,
        30_000,
        "With timeline-server markers and early conflict detection: how often the marker server "
        "checks each folder against other live writers.",
        _positive,
        "must be positive",
    )
)
EARLY_CONFLICT_DETECTION: ConfigKey[bool] = _key(
    ConfigKey(
        "hoodie.write.concurrency.early.conflict.detection.enable",
        _parse_bool,
        False,
        "Check other live writers' markers before creating each marker, so an overlapping write "
        "stops at its first conflicting file instead of at commit.",
    )
)
EARLY_CONFLICT_CHECK_COMMITS: ConfigKey[bool] = _key(
    ConfigKey(
        "hoodie.write.concurrency.early.conflict.check.commit.conflict",
        _parse_bool,
        False,
        "Early conflict detection also checks commits completed since this write started.",
    )
)
EARLY_CONFLICT_TRANSACTIONAL: ConfigKey[bool] = _key(
    ConfigKey(
        "indexer.write.early.conflict.detection.transactional",
        _parse_bool,
        False,
        "Hold a lock per (partition, file group) around each early conflict check and marker "
        "creation, closing the window between the two.",
    )
)
MAX_FILE_SIZE: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.parquet.max.file.size",
        int,
        120 * 1024 * 1024,
        "Target size of a base file in bytes; inserts are split into files of about this size.",
        _positive,
        "must be positive",
    )
)
MAX_RECORDS_PER_FILE: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.write.max.records.per.file",
        int,
        1_000_000,
        "At most this many records go into one new base file.",
        _positive,
        "must be positive",
    )
)
BUCKET_COUNT: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.bucket.index.num.buckets",
        int,
        0,
        "Bucket layout when positive: a record goes to file group stable_hash(key) mod N, whose "
        "file id starts with the 8-digit bucket number. 0: no buckets.",
        lambda v: v >= 0,
        "must be 0 or positive",
    )
)
BLOOM_FILTER_FPP: ConfigKey[float] = _key(
    ConfigKey(
        "hoodie.index.bloom.fpp",
        float,
        0.000000001,
        "False-positive rate of the native Parquet bloom filter on the record key column, for "
        "files of up to hoodie.index.bloom.num_entries keys (Apache Hudi's default, 1e-9). Each "
        "filter an upsert probes may send it to read that file's keys: 1,000 keys against a "
        "partition of 10,000 files read about 10,000 x 1,000 x this rate files for nothing.",
        lambda v: 0 < v < 1,
        "must be between 0 and 1",
    )
)
BLOOM_FILTER_ENTRIES: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.index.bloom.num_entries",
        int,
        60_000,
        "A base file's bloom filter is sized for its keys at hoodie.index.bloom.fpp, but for at "
        "most this many (Apache Hudi's default): a file of more keys gets the filter of this "
        "many, and a higher rate. At 1e-9 that caps a filter at 1 MiB; a 20-key file's is 256 "
        "bytes.",
        _positive,
        "must be positive",
    )
)
HUDI_BLOOM_FOOTER: ConfigKey[str] = _key(
    ConfigKey(
        "indexer.write.hudi_bloom_footer",
        str,
        "auto",
        "Write Apache Hudi's bloom filter of the record keys and the first and last keys into "
        "each data file's footer, as Hudi's writer does, so that Hudi's bloom index "
        "(hoodie.index.type=BLOOM) can tag upserts against our files (Hudi 0.15 fails on a file "
        "without them). auto: when the table's newest base file has them (Hudi writes them into "
        "every file); true: always (about 431 KB a file at Hudi's default sizing); false: never.",
        lambda v: v in ("auto", "true", "false"),
        "auto, true or false",
    )
)
BLOOM_FILTER_TYPE: ConfigKey[str] = _key(
    ConfigKey(
        "hoodie.bloom.index.filter.type",
        str,
        "DYNAMIC_V0",
        "Type of Hudi's bloom filter in data file footers: DYNAMIC_V0 (rows of "
        "hoodie.index.bloom.num_entries keys) or SIMPLE.",
        lambda v: v in ("DYNAMIC_V0", "SIMPLE"),
        "DYNAMIC_V0 or SIMPLE",
    )
)
BLOOM_DYNAMIC_MAX_ENTRIES: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.bloom.index.filter.dynamic.max.entries",
        int,
        100_000,
        "Keys after which a DYNAMIC_V0 filter adds no more rows (Hudi's default).",
        _positive,
        "must be positive",
    )
)

FILES_FILE_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.files.file.group.count",
        int,
        1,
        "File groups of the metadata table's files partition (fixed when it is built).",
        _positive,
        "must be positive",
    )
)
COLUMN_STATS_FILE_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.index.column.stats.file.group.count",
        int,
        2,
        "File groups of the column_stats partition (fixed when it is built; with --format hudi "
        "exactly this many, as Apache Hudi).",
        _positive,
        "must be positive",
    )
)
BLOOM_FILTER_FILE_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.index.bloom.filter.file.group.count",
        int,
        4,
        "File groups of the bloom_filters partition (fixed when it is built; with --format hudi "
        "exactly this many, as Apache Hudi).",
        _positive,
        "must be positive",
    )
)
PARTITION_STATS_FILE_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.index.partition.stats.file.group.count",
        int,
        1,
        "File groups of the partition_stats partition (fixed when it is built).",
        _positive,
        "must be positive",
    )
)

RECORD_INDEX_FILE_GROUPS: ConfigKey[int] = _key(
    ConfigKey(
        "hoodie.metadata.record.index.file.group.count",
        int,
        0,
        "File groups of a new record_index or secondary index partition (fixed when it is built); "
        "0: one per indexer.record.index.keys.per.file.group keys of the table when the build is "
        "scheduled, at least one.",
        lambda v: v >= 0,
        "must be 0 (by the table's size) or positive",
    )
)

RECORD_INDEX_KEYS_PER_FILE_GROUP: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.record.index.keys.per.file.group",
        int,
        4_000_000,
        "With hoodie.metadata.record.index.file.group.count at 0: how many of the table's "
        "records (counted from the latest files' footers when the build is scheduled) make one "
        "file group of a record or secondary index.",
        _positive,
        "must be positive",
    )
)

LOCAL_BUILD_MAX_FILES: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.build.local.max.files",
        int,
        10_000_000,
        "With --engine auto (the default) and no Spark master named, an index build over at most "
        "this many data files runs in the indexer's own process instead of starting Spark "
        "local[*] on the same cores, which it beat at every size measured (its memory does not "
        "grow with the table: indexer.build.local.memory.mb). Name a Spark master to build on a "
        "cluster. 0: always Spark.",
        lambda v: v >= 0,
        "must be 0 or positive",
    )
)

LOCAL_BUILD_WORKERS: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.build.local.workers",
        int,
        0,
        "Workers of an index build without Spark and of validate's rebuild: processes reading "
        "the data files (threads below 2,000 files), then, for a build, threads writing the file "
        "groups. 0: one per core, at most 4, and up to twice as many writing. "
        "Lower it to leave cores to ingestion on a shared host; 1 also makes the build's "
        "storage writes come in one order.",
        lambda v: v >= 0,
        "must be 0 or positive",
    )
)

LOCAL_BUILD_MEMORY_MB: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.build.local.memory.mb",
        int,
        512,
        "Megabytes of index records an index build without Spark (and indexer validate's "
        "rebuild) holds in memory before it spills them, per file group, to Arrow files in the "
        "temporary folder (TMPDIR), so its memory does not grow with the table: each file group "
        "is then written (or compared) from its own records alone. 0: spill every chunk of "
        "data files read.",
        lambda v: v >= 0,
        "must be 0 or positive",
    )
)

DATA_FILES_PER_FILE_GROUP: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.metadata.data.files.per.file.group",
        int,
        100_000,
        "The indexes keyed by data file (column_stats, bloom_filters) get at least one file "
        "group per this many of the table's latest data files when they are built (more than "
        "their configured file.group.count on large tables), so no file group outgrows what one "
        "task writes: at 1,000,000 data files, 10 file groups of each.",
        _positive,
        "must be positive",
    )
)

FILES_WITH_OTHERS: ConfigKey[bool] = _key(
    ConfigKey(
        "indexer.index.files.with.others",
        _parse_bool,
        True,
        "A request for any index on a table without the files partition builds files too (as "
        "Hudi's metadata table requires): listings then come from the index, not from listing "
        "storage, and fresh snapshots pay no storage listing. false: build only what is asked.",
    )
)

READ_CACHE_MAX_MB: ConfigKey[int] = _key(
    ConfigKey(
        "indexer.read.cache.max.mb",
        int,
        2048,
        "Megabytes of decoded metadata files (index records) a process keeps between snapshots, "
        "least recently used out first: a new snapshot after a commit decodes only the files "
        "written since. What a prune() and a lookup decode grows with the table: about 140 MB "
        "at 100,000 data files, 1.3 GB at 1,000,000 (past the budget, every new snapshot "
        "decodes again). The indexed snapshot last planned on is kept beside them for each of "
        "up to 8 tables (2,000,000 data files listed in all), so a new table object of an "
        "unchanged table plans on it. 0: keep none, and each table object keeps its own "
        "snapshot.",
        lambda v: v >= 0,
        "must be 0 or positive",
    )
)

_BOOL: Callable[[str], bool] = _parse_bool


class Config:
    """Resolved configuration: typed values for registered keys, plus storage options."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {}
        self._storage: dict[str, Any] = {}
        self.extra: dict[str, str] = {}
        for key, value in (values or {}).items():
            self._set(key, value)

    def _set(self, key: str, value: Any) -> None:
        if key.startswith(STORAGE_PREFIX):
            option = key[len(STORAGE_PREFIX) :]
            if not option:
                raise ConfigError(key, "missing the storage option name after 'indexer.storage.'")
            self._storage[option] = _storage_value(value)
        elif key in REGISTRY:
            self._values[key] = REGISTRY[key].coerce(value)
        elif key.startswith("indexer."):
            raise ConfigError(key, "unknown key (indexer-table --help-config lists them)")
        else:
            self.extra[key] = str(value)

    @classmethod
    def resolve(
        cls,
        file_values: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        explicit: Mapping[str, Any] | None = None,
    ) -> Config:
        """defaults < file < environment < explicit."""
        config = cls(file_values)
        environ = os.environ if env is None else env
        for registered in REGISTRY.values():
            if registered.env in environ:
                config._set(registered.key, environ[registered.env])
        env_storage = "INDEXER_STORAGE_"
        for name, value in environ.items():
            if name.startswith(env_storage) and len(name) > len(env_storage):
                config._set(STORAGE_PREFIX + name[len(env_storage) :].lower(), value)
        for key, value in (explicit or {}).items():
            config._set(key, value)
        return config

    def get(self, key: ConfigKey[T]) -> T:
        value: T = self._values.get(key.key, key.default)
        return value

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self._storage)

    def fingerprint(self) -> tuple[tuple[str, str], ...]:
        """Every value set, as text: equal for two configurations that read a table alike."""
        values = {
            **self._values,
            **{STORAGE_PREFIX + k: v for k, v in self._storage.items()},
            **self.extra,
        }
        return tuple(sorted((k, repr(v)) for k, v in values.items()))

    @property
    def lock_timeout_seconds(self) -> float:
        return self.get(LOCK_WAIT_MS) / 1000

    @property
    def lock_lease_seconds(self) -> float:
        return self.get(LOCK_LEASE_MS) / 1000

    @property
    def heartbeat_interval_seconds(self) -> float:
        return self.get(HEARTBEAT_INTERVAL_MS) / 1000


def _storage_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return _BOOL(value)
    except ValueError:
        return value


def parse_assignments(items: Iterable[str], what: str = "--conf") -> dict[str, str]:
    """``["k=v", ...]`` from the command line into a dict; a clear error for a malformed item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, f"{what} takes key=value")
        out[key.strip()] = value
    return out


def describe() -> list[tuple[str, str, str, str]]:
    """(key, env, default, doc) of every registered key, for the docs and ``--help-config``."""
    return [(k.key, k.env, repr(k.default), k.doc) for k in REGISTRY.values()]
