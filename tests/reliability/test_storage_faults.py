"""Storage faults on S3: transient errors (503 SlowDown, connection resets before and after the
request took effect, timeouts) injected by a proxy in front of moto at a configurable rate
(``AIX_FAULT_RATE``, default 0.1) while writers write and the indexer builds; retries succeed and
nothing is corrupt. Permanent errors (403 on a class of requests) make the indexer abort cleanly
and the writer roll back; once they stop, a retry completes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table.layout import PARTITIONS
from metadata_table.table import MetadataTable
from timeline import Table
from timeline.config import STORAGE_PREFIX, Config
from timeline.errors import FileAlreadyExistsError, IndexBuildAbortedError, StorageError
from timeline.storage import Storage
from writer.client import WriteClient

from ..conftest import BUCKET
from ..indexer.test_indexer import assert_exact
from ..metadata_table.test_metadata_table import keys, rows
from ..writer.test_failed_writes import hudi_rs, ours
from .conftest import SUMMARY
from .s3_faults import FaultyS3

RATE = float(os.environ.get("AIX_FAULT_RATE", "0.1"))
ALL = list(PARTITIONS)


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[FaultyS3]:
    faulty = FaultyS3(s3_endpoint, seed=7, stall_seconds=2.5).start()
    yield faulty
    faulty.stop()


def through(proxy: FaultyS3) -> dict[str, Any]:
    """s3fs options through the proxy, with botocore's standard retries and short timeouts."""
    return {
        "endpoint_url": proxy.url,
        "key": "testing",
        "secret": "testing",
        "config_kwargs": {
            "read_timeout": 1.0,
            "connect_timeout": 1.0,
            "retries": {"max_attempts": 10, "mode": "standard"},
        },
    }


def open_table(base: str, options: dict[str, Any], tmp: Path, create: bool = False) -> Table:
    explicit: dict[str, Any] = {"indexer.lock.url": f"sqlite:///{tmp / 'locks.sqlite'}"}
    explicit.update({STORAGE_PREFIX + k: v for k, v in options.items()})
    config = Config.resolve(explicit=explicit)
    if create:
        return Table.create(base, "trips", ["uuid"], ["city"], "ts", config=config)
    return Table.open(base, config)


def records_of(table: Table) -> dict[str, tuple[Any, ...]]:
    return {r["_hoodie_record_key"]: (r["ts"], r["fare"]) for r in ours(table)}


def test_transient_faults_are_retried_and_nothing_is_corrupt(
    proxy: FaultyS3, s3_options: dict[str, Any], tmp_path: Path, spark: Any
) -> None:
    base = f"s3://{BUCKET}/faults-{uuid.uuid4().hex}"
    proxy.rate = RATE
    table = open_table(base, through(proxy), tmp_path, create=True)
    client = WriteClient(table)
    client.insert(rows(keys(0, 60)))
    client.upsert(rows(keys(30, 90), ts=2))
    AsyncIndexer(table, IndexerOptions(retries=3, backoff=0.2), spark=spark).run(ALL)
    client.delete(rows(keys(0, 10)))
    client.upsert(rows(keys(80, 100), ts=3))
    proxy.rate = 0.0
    assert sum(proxy.injected.values()) >= 10, proxy.injected
    SUMMARY.append(
        f"storage faults at rate {RATE}: {proxy.requests} requests, injected {dict(proxy.injected)}"
    )

    clean = open_table(base, s3_options, tmp_path)  # straight to moto: what is really there
    want = {k: (1, float(int(k[1:]))) for k in keys(10, 30)}
    want.update({k: (2, float(int(k[1:]))) for k in keys(30, 80)})
    want.update({k: (3, float(int(k[1:]))) for k in keys(80, 100)})
    assert records_of(clean) == want
    theirs = {r["_hoodie_record_key"]: (r["ts"], r["fare"]) for r in hudi_rs(base, s3_options)}
    assert theirs == want
    assert not list(clean.timeline.load().pending())
    assert_exact(clean)


def test_permanent_errors_abort_the_build_cleanly(
    proxy: FaultyS3, s3_options: dict[str, Any], tmp_path: Path, spark: Any
) -> None:
    base = f"s3://{BUCKET}/denied-{uuid.uuid4().hex}"
    table = open_table(base, through(proxy), tmp_path, create=True)
    WriteClient(table).insert(rows(keys(0, 40)))
    # metadata base files cannot be written: every build attempt fails the same way
    proxy.deny = lambda method, path: (
        method == "PUT" and "/.hoodie/.async-indexer/" in path and (path.endswith(".parquet"))
    )
    indexer = AsyncIndexer(table, IndexerOptions(retries=1, backoff=0.1), spark=spark)
    with pytest.raises((IndexBuildAbortedError, StorageError), match="Access Denied"):
        indexer.run(ALL)  # the schedule's empty base files, or the build's, are refused
    state = table.reload_index_state()
    assert not state.completed and not state.inflight
    assert not list(table.timeline.load().pending())
    proxy.deny = None
    indexer.run(ALL)
    clean = open_table(base, s3_options, tmp_path)
    assert_exact(clean)
    assert not list(MetadataTable(clean).timeline.load().pending())


def test_a_permanent_error_rolls_a_write_back(
    proxy: FaultyS3, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    base = f"s3://{BUCKET}/denied-write-{uuid.uuid4().hex}"
    table = open_table(base, through(proxy), tmp_path, create=True)
    WriteClient(table).insert(rows(keys(0, 40)))
    before = records_of(table)
    proxy.deny = lambda method, path: method == "PUT" and path.endswith(".parquet")
    with pytest.raises(StorageError, match=r"\.parquet"):
        WriteClient(table).upsert(rows(keys(0, 40), ts=2))
    proxy.deny = None
    clean = open_table(base, s3_options, tmp_path)
    assert records_of(clean) == before
    assert not list(clean.timeline.load().pending())
    assert all(i.is_completed for i in clean.timeline.load())


@pytest.mark.parametrize("fault", ["reset_after", "stall_after"])
def test_a_create_whose_answer_was_lost_is_ours(
    proxy: FaultyS3, s3_options: dict[str, Any], fault: str
) -> None:
    """The first conditional PUT takes effect but its answer is lost; botocore retries, S3 says
    412. The create succeeded (it was ours); a create by someone else still fails."""
    root = f"s3://{BUCKET}/lost-answer-{uuid.uuid4().hex}"
    hits: list[str] = []

    def once(method: str, path: str) -> str | None:
        if method == "PUT" and path.endswith("/claim") and not hits:
            hits.append(path)
            return fault
        return None

    proxy.rule = once
    storage = Storage(root, through(proxy))
    storage.create("claim", b"mine")
    assert hits and Storage(root, s3_options).read("claim") == b"mine"
    with pytest.raises(FileAlreadyExistsError):
        storage.create("claim", b"someone else's")
