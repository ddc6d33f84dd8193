"""The table lock taken by the protocol of Apache Hudi's DynamoDBBasedLockProvider (Amazon's
DynamoDB lock client): one item in a DynamoDB table (moto's server here) that our writers and
Hudi's exclude each other with."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.hudi_peer.peer import HudiPeer, HudiPeerError, HudiTable
from tests.hudi_peer.rows import make_rows
from timeline import Table
from timeline.config import Config
from timeline.errors import ConfigError, LockTimeoutError
from timeline.locks import HudiDynamoDBLockProvider, hudi_lock_provider
from timeline.locks.hudi_dynamodb import HUDI_DYNAMODB_PROVIDER_CLASS, DynamoDBLockSettings
from timeline.storage import Storage
from writer.client import WriteClient


def _conf(endpoint: str, table: str, **more: str) -> dict[str, str]:
    return {
        "hoodie.write.lock.provider": HUDI_DYNAMODB_PROVIDER_CLASS,
        "hoodie.write.lock.dynamodb.table": table,
        "hoodie.write.lock.dynamodb.endpoint_url": endpoint,
        "hoodie.write.lock.dynamodb.region": "us-east-1",
        "hoodie.aws.access.key": "testing",
        "hoodie.aws.secret.key": "testing",
        **more,
    }


@pytest.fixture
def lock_table() -> str:
    return f"locks_{uuid.uuid4().hex[:8]}"


def _provider(
    endpoint: str, table: str, key: str = "trips", lease: float = 1.0
) -> HudiDynamoDBLockProvider:
    settings = DynamoDBLockSettings(
        table=table,
        partition_key=key,
        endpoint_url=endpoint,
        access_key="testing",
        secret_key="testing",
    )
    return HudiDynamoDBLockProvider(settings, lease_seconds=lease)


def _item(provider: HudiDynamoDBLockProvider) -> dict[str, Any] | None:
    answer = provider.client.get_item(
        TableName=provider.settings.table,
        Key={"key": {"S": provider.settings.partition_key}},
        ConsistentRead=True,
    )
    return answer.get("Item")


def _hudis_item(provider: HudiDynamoDBLockProvider, version: str, lease_ms: int) -> None:
    """The item Hudi's lock client writes when it takes the lock (owner: host name and a UUID)."""
    provider.client.put_item(
        TableName=provider.settings.table,
        Item={
            "key": {"S": provider.settings.partition_key},
            "ownerName": {"S": f"spark-driver-1{uuid.uuid4()}"},
            "leaseDuration": {"S": str(lease_ms)},
            "recordVersionNumber": {"S": version},
        },
    )


def test_the_lock_is_one_item_in_hudis_table_shape_and_gone_after_release(
    s3_endpoint: str, lock_table: str
) -> None:
    # a lease of 5 s: with 2 s, a renewal delayed by a loaded machine (CI, both cores busy with
    # another test's Spark cluster) let it expire once, though the lock itself was fine
    first = _provider(s3_endpoint, lock_table, lease=5)
    second = _provider(s3_endpoint, lock_table, lease=5)
    with first.acquire("table:a", "ours-1", timeout=2) as handle:
        table = first.client.describe_table(TableName=lock_table)["Table"]
        assert table["KeySchema"] == [{"AttributeName": "key", "KeyType": "HASH"}]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        item = _item(first)
        assert item is not None
        assert item["ownerName"] == {"S": "ours-1"}
        assert item["leaseDuration"] == {"S": "5000"}  # our lease, in ms, as a string
        version = item["recordVersionNumber"]["S"]
        with pytest.raises(LockTimeoutError) as err:
            second.acquire("table:b", "ours-2", timeout=0.4)  # one lock per table, any name
        assert "ours-1" in str(err.value.holder)
        time.sleep(5.5)  # renewed past its lease: a new record version number each time
        handle.ensure_valid()
        renewed = _item(first)
        assert renewed is not None and renewed["recordVersionNumber"]["S"] != version
        with pytest.raises(LockTimeoutError):
            second.acquire("table:b", "ours-2", timeout=5.5)  # alive: never taken over
    assert _item(first) is None  # Hudi's client deletes the item on release
    with second.acquire("table:b", "ours-2", timeout=1):
        pass
    other_table = _provider(s3_endpoint, lock_table, key="another_table")
    with first.acquire("t", "ours", timeout=1), other_table.acquire("t", "ours", timeout=1):
        pass  # two Hudi tables, two items: they do not exclude each other


def test_hudis_lock_blocks_us_while_it_heartbeats_and_is_taken_over_when_it_stops(
    s3_endpoint: str, lock_table: str
) -> None:
    provider = _provider(s3_endpoint, lock_table)
    provider.acquire("t", "warm-up", timeout=1).release()  # creates the table
    _hudis_item(provider, "v0", lease_ms=1000)
    stop = threading.Event()

    def heartbeat() -> None:  # Hudi's client writes a new version every third of its lease
        n = 0
        while not stop.wait(0.3):
            n += 1
            _hudis_item(provider, f"v{n}", lease_ms=1000)

    beating = threading.Thread(target=heartbeat)
    beating.start()
    try:
        with pytest.raises(LockTimeoutError) as err:
            provider.acquire("t", "ours", timeout=2.5)
        assert "spark-driver-1" in str(err.value.holder)
    finally:
        stop.set()
        beating.join()
    started = time.monotonic()
    with provider.acquire("t", "ours", timeout=5) as handle:  # its heartbeat stopped
        waited = time.monotonic() - started
        item = _item(provider)
        assert item is not None and item["ownerName"] == {"S": "ours"}
        handle.ensure_valid()
    assert waited >= 0.9, waited  # the holder's whole lease, seen unchanged on our clock


def test_a_lease_taken_over_is_lost_and_not_released_by_its_old_holder(
    s3_endpoint: str, lock_table: str
) -> None:
    provider = _provider(s3_endpoint, lock_table, lease=30)
    handle = provider.acquire("t", "ours", timeout=1, renew=False)
    _hudis_item(provider, "hudi-took-it", lease_ms=60_000)  # as after our lease ran out
    assert not handle.renew_once()
    with pytest.raises(Exception, match="taken over"):
        handle.ensure_valid()
    handle.release()
    item = _item(provider)
    assert item is not None and item["recordVersionNumber"] == {"S": "hudi-took-it"}


def test_the_emulated_dynamodb_checks_and_writes_at_once(
    s3_endpoint: str, lock_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto reads the current item, checks the condition and writes with no lock between; the
    test server makes that atomic, as DynamoDB is, or the lock tests here could see two holders
    (CI did). The gap is widened here so that a race would show on every run."""
    from moto.dynamodb.models.table import Table as MotoTable

    read = MotoTable.get_item

    def slow_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = read(self, *args, **kwargs)
        time.sleep(0.05)
        return found

    monkeypatch.setattr(MotoTable, "get_item", slow_read)
    provider = _provider(s3_endpoint, lock_table)
    provider.holder("t")  # creates the table
    start = threading.Barrier(4)
    winners: list[str] = []

    def create(owner: str) -> None:
        start.wait()
        if provider._put(owner, uuid.uuid4().hex, "attribute_not_exists(#pk)", {}):
            winners.append(owner)

    threads = [threading.Thread(target=create, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1, winners


def test_threads_of_several_providers_never_overlap(s3_endpoint: str, lock_table: str) -> None:
    _provider(s3_endpoint, lock_table).acquire("t", timeout=5).release()
    inside = threading.Semaphore(1)
    overlaps: list[int] = []
    count = [0]

    def work() -> None:
        provider = _provider(s3_endpoint, lock_table, lease=5)
        for _ in range(8):
            with provider.acquire("t", timeout=30):
                if not inside.acquire(blocking=False):
                    overlaps.append(1)
                value = count[0]
                time.sleep(0.002)
                count[0] = value + 1
                inside.release()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not overlaps
    assert count[0] == 24


def test_hudis_config_keys_choose_it(s3_endpoint: str, lock_table: str, tmp_path: Path) -> None:
    def table(**conf: str) -> Table:
        return Table.create(
            str(tmp_path / f"t{len(list(tmp_path.iterdir()))}"),
            "trips_cow",
            ["id"],
            [],
            None,
            config=Config.resolve(explicit=conf),
        )

    chosen = table(**_conf(s3_endpoint, lock_table)).lock_provider
    assert isinstance(chosen, HudiDynamoDBLockProvider)
    assert chosen.settings.partition_key == "trips_cow"  # Hudi's default: the table's name
    with chosen.acquire("x", timeout=2):
        assert _item(chosen) is not None
    named = table(
        **_conf(s3_endpoint, lock_table, **{"hoodie.write.lock.dynamodb.partition_key": "k1"})
    ).lock_provider
    assert isinstance(named, HudiDynamoDBLockProvider)
    assert named.settings.partition_key == "k1"
    with pytest.raises(ConfigError, match=r"hoodie\.write\.lock\.dynamodb\.table"):
        hudi_lock_provider(
            HUDI_DYNAMODB_PROVIDER_CLASS,
            Storage(str(tmp_path)),
            Config.resolve(explicit={}),
            "trips",
        )
    with pytest.raises(ConfigError, match="billing_mode"):
        Config.resolve(explicit={"hoodie.write.lock.dynamodb.billing_mode": "FREE"})


def test_hudis_writer_and_ours_exclude_each_other(
    hudi: HudiPeer, s3_endpoint: str, lock_table: str, tmp_path: Path
) -> None:
    """Apache Hudi 0.15's own DynamoDBBasedLockProvider (hudi-aws, Amazon's lock client) and ours
    on one table: Hudi's writer cannot commit while we hold the lock, we cannot take it while
    Hudi's lock manager holds it, and each gets it once the other releases; our commit under it
    is read back by Hudi."""
    hudi_side = _conf(
        s3_endpoint,
        lock_table,
        **{
            "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
            "hoodie.cleaner.policy.failed.writes": "LAZY",
            "hoodie.write.lock.wait_time_ms": "2000",  # Hudi's lease, and its wait per try
            "hoodie.write.lock.num_retries": "1",
            "hoodie.write.lock.client.num_retries": "1",
        },
    )
    written = HudiTable(path=str(tmp_path / "t"), extra=hudi_side)
    hudi.write(written, "insert", make_rows(range(10)))  # Hudi creates the lock table
    ours = Config.resolve(
        explicit={**_conf(s3_endpoint, lock_table), "indexer.lock.lease_ms": "3000"}
    )
    table = Table.open(written.path, config=ours)
    assert isinstance(table.lock_provider, HudiDynamoDBLockProvider)

    with (
        table.lock("a commit of ours"),
        pytest.raises(HudiPeerError, match="Unable to acquire lock"),
    ):
        hudi.write(written, "upsert", make_rows(range(5), ts=2))
    hudi.write(written, "upsert", make_rows(range(5), ts=3))

    assert hudi.lock(written, wait_ms=2000)
    try:
        with pytest.raises(LockTimeoutError) as err:
            table.lock("a commit of ours", timeout=4)  # Hudi's lease is 2 s: it heartbeats
        assert err.value.holder and lock_table in err.value.holder
    finally:
        hudi.unlock(written)
    with WriteClient(table) as client:
        client.upsert(make_rows(range(8, 12), ts=4))
    rows = {r["id"]: r["ts"] for r in hudi.read(written, columns=["id", "ts"]).to_pylist()}
    assert rows == {i: 3 if i < 5 else 4 if i >= 8 else 1 for i in range(12)}
