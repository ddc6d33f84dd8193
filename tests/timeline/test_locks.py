"""Locks: mutual exclusion with real processes on every provider, lease expiry after SIGKILL,
lost-lease detection, bounded waits that name the holder."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from timeline.errors import ConfigError, LockLostError, LockTimeoutError
from timeline.locks import (
    InProcessLockProvider,
    LockProvider,
    SqlLockProvider,
    StorageLockProvider,
    lock_provider_for,
)
from timeline.storage import Storage

LOCK = "table:test"


@pytest.fixture(params=["sqlite", "postgres", "storage-local", "storage-s3"])
def lock_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Storage]:
    """(lock URL, table storage) for each provider that works across processes."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'locks.sqlite'}", Storage(str(tmp_path / "table"))
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url"), Storage(str(tmp_path / "table"))
    if request.param == "storage-local":
        return "storage", Storage(str(tmp_path / "table"))
    return "storage", request.getfixturevalue("s3_storage")


def _provider(url: str, storage: Storage, lease: float) -> LockProvider:
    provider = lock_provider_for(url, storage, lease_seconds=lease)
    if isinstance(provider, StorageLockProvider):
        provider.max_clock_skew = 0.5  # one machine: keep the tests quick
    return provider


# --- mutual exclusion under contention -----------------------------------------------------------


def _critical_sections(
    url: str, storage: Storage, counter: str, iterations: int, start_at: float
) -> list[tuple[float, float, int]]:
    provider = _provider(url, storage, lease=20.0)
    while time.time() < start_at:
        time.sleep(0.001)
    spans = []
    for _ in range(iterations):
        with provider.acquire(LOCK, timeout=120) as handle:
            handle.ensure_valid()
            entered = time.time()
            value = int(Path(counter).read_text())
            time.sleep(0.003)  # widen the window a missing lock would lose updates in
            Path(counter).write_text(str(value + 1))
            spans.append((entered, time.time(), handle.fence))
    provider.close()
    return spans


@pytest.mark.slow
def test_mutual_exclusion_across_processes(
    lock_target: tuple[str, Storage], tmp_path: Path
) -> None:
    url, storage = lock_target
    counter = tmp_path / "counter"
    counter.write_text("0")
    processes, iterations = 4, 8
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 4.0
    with ctx.Pool(processes) as pool:
        results = pool.starmap(
            _critical_sections,
            [(url, storage, str(counter), iterations, start_at)] * processes,
        )
    assert int(counter.read_text()) == processes * iterations, "an update was lost"
    spans = sorted(span for result in results for span in result)
    for (_, left_exit, left_fence), (right_enter, _, right_fence) in itertools.pairwise(spans):
        assert right_enter >= left_exit, "two holders were inside the critical section at once"
        assert right_fence > left_fence, "fence numbers must increase with every new holder"


# --- a holder that dies releases by lease expiry -------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time, pickle
    from timeline.locks import lock_provider_for
    from timeline.locks.storage_lock import StorageLockProvider
    url, storage, ready = pickle.loads(bytes.fromhex(sys.argv[1]))
    provider = lock_provider_for(url, storage, lease_seconds=2.0)
    if isinstance(provider, StorageLockProvider):
        provider.max_clock_skew = 0.5
    handle = provider.acquire("table:test", owner="doomed-holder", timeout=30)
    open(ready, "w").write(str(handle.fence))
    time.sleep(600)
    """
)


def test_sigkilled_holder_releases_by_lease_expiry(
    lock_target: tuple[str, Storage], tmp_path: Path
) -> None:
    import pickle

    url, storage = lock_target
    ready = tmp_path / "ready"
    arg = pickle.dumps((url, storage, str(ready))).hex()
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, arg])
    try:
        deadline = time.time() + 60
        while not ready.exists() or not ready.read_text():
            assert child.poll() is None, "the holder process died before taking the lock"
            assert time.time() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        provider = _provider(url, storage, lease=2.0)
        with pytest.raises(LockTimeoutError) as err:
            provider.acquire(LOCK, timeout=0.5)
        assert err.value.holder == "doomed-holder"
        assert err.value.lock_name == LOCK
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        with provider.acquire(LOCK, timeout=30) as handle:
            waited = time.monotonic() - killed_at
            assert handle.fence == int(ready.read_text()) + 1
        # the dead holder's lease (2 s, renewed every 0.67 s; plus 0.5 s skew for lock files)
        assert waited < 2.0 + 0.5 + 2.0
        provider.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --- a holder learns it lost the lease before it writes ------------------------------------------


@pytest.fixture(params=["sqlite", "storage", "inprocess"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> LockProvider:
    if request.param == "sqlite":
        return SqlLockProvider(f"sqlite:///{tmp_path / 'locks.sqlite'}", lease_seconds=1.0)
    if request.param == "storage":
        return StorageLockProvider(Storage(str(tmp_path)), lease_seconds=1.0, max_clock_skew=0.2)
    return InProcessLockProvider(lease_seconds=1.0)


def _unique(name: str, tmp_path: Path) -> str:
    return f"{name}:{tmp_path.name}"  # the in-process registry is shared by the whole test run


def test_lease_without_renewal_expires_and_is_detected(
    provider: LockProvider, tmp_path: Path
) -> None:
    name = _unique(LOCK, tmp_path)
    handle = provider.acquire(name, "a", timeout=5, renew=False)
    handle.ensure_valid()
    time.sleep(1.3)
    assert not handle.is_valid
    with pytest.raises(LockLostError, match="expired"):
        handle.ensure_valid()


def test_taken_over_lease_is_detected_on_renewal(provider: LockProvider, tmp_path: Path) -> None:
    name = _unique(LOCK, tmp_path)
    first = provider.acquire(name, "first", timeout=5, renew=False)
    time.sleep(1.5)  # the lease (and the clock-skew allowance) runs out
    second = provider.acquire(name, "second", timeout=5)
    assert second.fence > first.fence
    assert first.renew_once() is False
    with pytest.raises(LockLostError) as err:
        first.ensure_valid()
    assert "another holder" in err.value.reason
    second.ensure_valid()
    first.release()  # must not release the new holder's lock
    assert provider.holder(name) == "second"
    second.release()
    assert provider.holder(name) is None


def test_renewal_keeps_the_lock(provider: LockProvider, tmp_path: Path) -> None:
    name = _unique(LOCK, tmp_path)
    with provider.acquire(name, "keeper", timeout=5) as handle:
        time.sleep(2.5)  # 2.5 leases
        handle.ensure_valid()
        with pytest.raises(LockTimeoutError) as err:
            provider.acquire(name, "other", timeout=0.3)
        assert err.value.holder == "keeper"
    assert provider.acquire(name, "other", timeout=1).owner == "other"


def test_unreachable_store_loses_the_lock_after_the_lease(
    provider: LockProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _unique(LOCK, tmp_path)
    handle = provider.acquire(name, "a", timeout=5, renew=False)

    def unreachable(_lease: Any) -> bool:
        raise OSError("connection refused")

    monkeypatch.setattr(provider, "renew", unreachable)
    assert handle.renew_once() is False
    handle.ensure_valid()  # still within the lease we can prove
    time.sleep(1.1)
    assert handle.renew_once() is False
    with pytest.raises(LockLostError, match="connection refused"):
        handle.ensure_valid()


def test_released_handle_refuses_writes(provider: LockProvider, tmp_path: Path) -> None:
    handle = provider.acquire(_unique(LOCK, tmp_path), "a", timeout=5)
    handle.release()
    handle.release()  # idempotent
    with pytest.raises(LockLostError, match="released"):
        handle.ensure_valid()


def test_timeout_is_bounded(provider: LockProvider, tmp_path: Path) -> None:
    name = _unique(LOCK, tmp_path)
    with provider.acquire(name, "holder", timeout=5):
        started = time.monotonic()
        with pytest.raises(LockTimeoutError):
            provider.acquire(name, "waiter", timeout=0.4)
        assert 0.4 <= time.monotonic() - started < 1.5


def test_lock_url_dispatch(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    assert isinstance(lock_provider_for(None, storage), SqlLockProvider)
    assert isinstance(lock_provider_for("storage", storage), StorageLockProvider)
    assert isinstance(lock_provider_for("inprocess", storage), InProcessLockProvider)
    assert isinstance(lock_provider_for(f"file://{tmp_path}/locks", storage), StorageLockProvider)
    assert isinstance(
        lock_provider_for(None, Storage("s3://bucket/t", {"endpoint_url": "http://x"})),
        StorageLockProvider,
    )
    with pytest.raises(ConfigError, match="unknown lock URL"):
        lock_provider_for("zookeeper://x", storage)


def test_storage_lock_names_are_readable_folders(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    provider = StorageLockProvider(storage, lease_seconds=5)
    with provider.acquire("table:s3://bucket/trips", "me", timeout=1):
        folders = [f.name for f in storage.list(".hoodie/.aux/locks")]
    assert len(folders) == 1
    assert folders[0].startswith("table_s3___bucket_trips-")


def test_storage_lock_stale_contender_cannot_recreate_a_deleted_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ABA race: a contender judged generation 6 free long ago; since then 7 and 8 were
    taken and 6, 7 deleted. Its create of 7 succeeds, but 8 is held: it must not hold the lock."""
    storage = Storage(str(tmp_path))
    holder = StorageLockProvider(storage, lease_seconds=30, max_clock_skew=0)
    for _ in range(7):
        holder.acquire(LOCK, "earlier", timeout=1, renew=False).release()
    current = holder.acquire(LOCK, "current-holder", timeout=1, renew=False)
    assert current.fence == 8
    stale = StorageLockProvider(storage, lease_seconds=30, max_clock_skew=0)
    real_generations = stale._generations
    views = iter([[6]])  # what the contender listed long ago: generation 6, then released

    def stale_then_real(name: str) -> list[int]:
        return next(views, None) or real_generations(name)

    monkeypatch.setattr(stale, "_generations", stale_then_real)
    monkeypatch.setattr(
        stale,
        "_read",
        lambda name, gen: {"owner": "", "token": "", "expires_at": 0, "released": True},
    )
    assert stale.try_acquire(LOCK, "stale", "token") is None
    assert holder.holder(LOCK) == "current-holder"
    current.ensure_valid()
    assert holder._generations(LOCK) == [8]


def test_losing_the_lock_table_creation_race_is_not_an_error(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes that create the lock table at the same moment race in PostgreSQL's catalog even
    with IF NOT EXISTS; the loser got "type async_indexer_locks already exists" (a
    ProgrammingError, seen in CI) and failed its lock. Here the race is forced: the table exists,
    and the DDL, without IF NOT EXISTS, fails the way the loser's did."""
    import timeline.locks.sql as sql

    SqlLockProvider(postgres_url, lease_seconds=5).engine  # noqa: B018 - creates the table
    monkeypatch.setattr(sql, "_DDL", sql._DDL.replace("IF NOT EXISTS ", ""))
    loser = SqlLockProvider(postgres_url, lease_seconds=5)
    lease = loser.try_acquire("table:race", "loser", "t-1")
    assert lease is not None and lease.owner == "loser"
    loser.release(lease)
