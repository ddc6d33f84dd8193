"""The table lock taken by the protocol of Apache Hudi's FileSystemBasedLockProvider
(hoodie.write.lock.provider): one lock file our writers and Hudi's exclude each other with."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.hudi_peer.peer import HudiPeer, HudiPeerError, HudiTable
from tests.hudi_peer.rows import make_rows
from timeline import Table
from timeline.config import Config
from timeline.errors import ConfigError, LockTimeoutError
from timeline.locks import HudiFileSystemLockProvider, hudi_lock_provider
from timeline.locks.hudi_filesystem import HUDI_PROVIDER_CLASS
from timeline.storage import Storage

#: what Hudi 0.15 writes in its lock file (LockInfo, pretty-printed by Jackson)
HUDI_LOCK_INFO = {
    "lockCreateTime": "2026-11-27 18:00:00.000",
    "lockThreadName": "main",
    "lockStacksInfo": ["org.apache.hudi.client.transaction.lock.LockManager.lock (...)"],
}


def _provider(tmp_path: Path, expire: int = 0) -> HudiFileSystemLockProvider:
    return HudiFileSystemLockProvider(Storage(str(tmp_path)), ".hoodie", expire, lease_seconds=1)


def test_one_lock_file_excludes_and_is_gone_after_release(tmp_path: Path) -> None:
    lock_file = tmp_path / ".hoodie" / "lock"
    first, second = _provider(tmp_path), _provider(tmp_path)
    with first.acquire("table:a", "ours-1", timeout=2) as handle:
        assert lock_file.exists()
        assert json.loads(lock_file.read_text())["lockThreadName"]  # Hudi's fields for its logs
        with pytest.raises(LockTimeoutError) as err:
            second.acquire("table:b", "ours-2", timeout=0.3)  # one lock per table, any name
        assert err.value.holder == "ours-1"
        time.sleep(1.2)  # renewed past its lease: Hudi's lock does not expire by itself
        handle.ensure_valid()
    assert not lock_file.exists()
    (tmp_path / ".hoodie" / ".lock.crc").write_bytes(b"crc")  # as Hadoop leaves beside it
    with second.acquire("table:b", "ours-2", timeout=1):
        pass
    assert not (tmp_path / ".hoodie" / ".lock.crc").exists()


def test_a_lock_file_hudi_wrote_blocks_us_and_names_hudi(tmp_path: Path) -> None:
    lock_file = tmp_path / ".hoodie" / "lock"
    lock_file.parent.mkdir(parents=True)
    lock_file.write_text(json.dumps(HUDI_LOCK_INFO, indent=2))
    provider = _provider(tmp_path)
    with pytest.raises(LockTimeoutError) as err:
        provider.acquire("table:a", "ours", timeout=0.3)
    assert "Apache Hudi writer" in str(err.value.holder)
    assert lock_file.exists()  # not ours to delete
    lock_file.unlink()  # Hudi's writer releases
    with provider.acquire("table:a", "ours", timeout=1):
        pass


def test_an_expired_lock_is_taken_over_only_with_an_expiry(tmp_path: Path) -> None:
    lock_file = tmp_path / ".hoodie" / "lock"
    lock_file.parent.mkdir(parents=True)
    lock_file.write_text(json.dumps(HUDI_LOCK_INFO))
    two_minutes_ago = time.time() - 120
    os.utime(lock_file, (two_minutes_ago, two_minutes_ago))
    with pytest.raises(LockTimeoutError):
        _provider(tmp_path, expire=0).acquire("t", "ours", timeout=0.2)
    with pytest.raises(LockTimeoutError):
        _provider(tmp_path, expire=3).acquire("t", "ours", timeout=0.2)
    with _provider(tmp_path, expire=1).acquire("t", "ours", timeout=1) as handle:
        assert handle.owner == "ours"
        assert lock_file.stat().st_mtime > two_minutes_ago + 100


def test_threads_of_several_providers_never_overlap(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    overlaps: list[int] = []
    inside = threading.Semaphore(1)

    def work() -> None:
        provider = _provider(tmp_path)
        for _ in range(15):
            with provider.acquire("t", timeout=30):
                if not inside.acquire(blocking=False):
                    overlaps.append(1)
                value = int(counter.read_text())
                time.sleep(0.002)
                counter.write_text(str(value + 1))
                inside.release()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not overlaps
    assert counter.read_text() == "60"


def test_hudis_config_keys_choose_it(tmp_path: Path) -> None:
    def table(**conf: str) -> Table:
        config = Config.resolve(explicit=conf)
        return Table.create(
            str(tmp_path / f"t{len(list(tmp_path.iterdir()))}"),
            "t",
            ["id"],
            [],
            None,
            config=config,
        )

    chosen = table(**{"hoodie.write.lock.provider": HUDI_PROVIDER_CLASS}).lock_provider
    assert isinstance(chosen, HudiFileSystemLockProvider)
    assert chosen.path == ".hoodie/lock"
    elsewhere = table(
        **{
            "hoodie.write.lock.provider": HUDI_PROVIDER_CLASS,
            "hoodie.write.lock.filesystem.path": str(tmp_path / "locks"),
            "hoodie.write.lock.filesystem.expire": "5",
        }
    ).lock_provider
    assert isinstance(elsewhere, HudiFileSystemLockProvider)
    assert elsewhere.expire_minutes == 5
    with elsewhere.acquire("x", timeout=1):
        assert (tmp_path / "locks" / "lock").exists()
    with pytest.raises(ConfigError, match="not both"):
        _ = table(
            **{"hoodie.write.lock.provider": HUDI_PROVIDER_CLASS, "indexer.lock.url": "inprocess"}
        ).lock_provider
    with pytest.raises(ConfigError, match="DynamoDBBasedLockProvider"):  # the supported ones
        hudi_lock_provider(
            "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider",
            Storage(str(tmp_path)),
            Config.resolve(explicit={}),
            "t",
        )


def test_hudis_writer_waits_for_our_lock(hudi: HudiPeer, tmp_path: Path) -> None:
    """Apache Hudi 0.15's writer under its FileSystemBasedLockProvider cannot commit while our
    writer's side holds the lock (it gives up after its retries), and commits once we release."""
    written = HudiTable(
        path=str(tmp_path / "t"),
        extra={
            "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
            "hoodie.cleaner.policy.failed.writes": "LAZY",
            "hoodie.write.lock.provider": HUDI_PROVIDER_CLASS,
            "hoodie.write.lock.num_retries": "2",
            "hoodie.write.lock.wait_time_ms_between_retry": "200",
            "hoodie.write.lock.client.num_retries": "2",
            "hoodie.write.lock.client.wait_time_ms_between_retry": "200",
        },
    )
    hudi.write(written, "insert", make_rows(range(10)))
    config = Config.resolve(explicit={"hoodie.write.lock.provider": HUDI_PROVIDER_CLASS})
    table = Table.open(written.path, config=config)
    with (
        table.lock("a commit of ours"),
        pytest.raises(HudiPeerError, match=r"Unable to acquire lock"),
    ):
        hudi.write(written, "upsert", make_rows(range(5), ts=2))
    hudi.write(written, "upsert", make_rows(range(5), ts=3))
    rows = {r["id"]: r["ts"] for r in hudi.read(written, columns=["id", "ts"]).to_pylist()}
    assert rows == {i: 3 if i < 5 else 1 for i in range(10)}
