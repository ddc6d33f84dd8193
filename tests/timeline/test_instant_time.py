"""Instant times: 17 digits, monotonic in a process, unique across processes (claimed on storage)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import time
from typing import Any

import pytest

from timeline.instant import parse_instant_time, validate_timestamp
from timeline.instant_time import CLAIM_FOLDER, InstantTimeGenerator
from timeline.storage import Storage


def test_times_are_17_digits_utc_and_strictly_increasing(tmp_path: Any) -> None:
    generator = InstantTimeGenerator(Storage(str(tmp_path)))
    times = [generator.next() for _ in range(300)]
    for t in times:
        validate_timestamp(t)
        assert len(t) == 17
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    now = dt.datetime.now(dt.UTC)
    assert abs((parse_instant_time(times[-1]) - now).total_seconds()) < 60


def test_monotonic_when_the_clock_goes_back(tmp_path: Any) -> None:
    clock = iter([1_800_000_000.500, 1_800_000_000.100, 1_800_000_000.100])
    generator = InstantTimeGenerator(Storage(str(tmp_path)), clock=lambda: next(clock))
    a, b, c = generator.next(), generator.next(), generator.next()
    assert a < b < c


def test_a_time_claimed_by_another_host_is_skipped(tmp_path: Any) -> None:
    from timeline import instant_time

    storage = Storage(str(tmp_path))
    fixed = 1_900_000_000.000
    taken = InstantTimeGenerator(storage, clock=lambda: fixed).next()
    # Another host: same clock reading, none of this process's memory of issued times.
    instant_time._last_issued_ms.clear()
    other = InstantTimeGenerator(storage, clock=lambda: fixed).next()
    assert other > taken
    assert storage.exists(f"{CLAIM_FOLDER}/{taken}")
    assert storage.exists(f"{CLAIM_FOLDER}/{other}")


def _issue(base: str, count: int, start_at: float) -> list[str]:
    while time.time() < start_at:
        time.sleep(0.001)
    generator = InstantTimeGenerator(Storage(base))
    return [generator.next() for _ in range(count)]


def test_unique_across_processes(tmp_path: Any) -> None:
    base = str(tmp_path / "table")
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0
    with ctx.Pool(4) as pool:
        batches = pool.starmap(_issue, [(base, 150, start_at)] * 4)
    every = [t for batch in batches for t in batch]
    assert len(every) == 600
    assert len(set(every)) == 600, "two processes issued the same instant time"
    for batch in batches:
        assert batch == sorted(batch)


def test_unique_across_processes_on_s3(s3_storage: Storage) -> None:
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0
    with ctx.Pool(4) as pool:
        # the same Storage is pickled into each process
        batches = pool.starmap(_issue_on, [(s3_storage, 40, start_at)] * 4)
    every = [t for batch in batches for t in batch]
    assert len(set(every)) == len(every) == 160


def _issue_on(storage: Storage, count: int, start_at: float) -> list[str]:
    while time.time() < start_at:
        time.sleep(0.001)
    generator = InstantTimeGenerator(storage)
    return [generator.next() for _ in range(count)]


def test_prune_deletes_only_old_claims(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    clock = [1_800_000_000.0]
    generator = InstantTimeGenerator(storage, clock=lambda: clock[0])
    old = generator.next()
    clock[0] += 3 * 86400
    recent = generator.next()
    assert generator.prune(dt.timedelta(days=1)) == 1
    names = [f.name for f in storage.list(CLAIM_FOLDER)]
    assert names == [recent]
    assert old not in names


@pytest.mark.parametrize("bad", ["", "2026", "2026112110150012x"])
def test_validate_rejects(bad: str) -> None:
    from timeline.errors import InvalidInstantError

    with pytest.raises(InvalidInstantError):
        validate_timestamp(bad)


def test_next_after_a_newer_instant_jumps_past_it(tmp_path: Any) -> None:
    # a host whose clock lags behind instants already on the timeline
    generator = InstantTimeGenerator(Storage(str(tmp_path)), clock=lambda: 1_800_000_000.0)
    later = "20991231235959000"
    assert generator.next(after=later) == "20991231235959001"
    assert generator.next() > later  # and stays monotonic
