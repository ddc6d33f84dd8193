"""Heartbeats: beating, expiry, a missing file, stop, and a writer's own check."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from timeline.errors import HeartbeatExpiredError
from timeline.heartbeat import Heartbeat, heartbeat_age, heartbeat_path, is_expired
from timeline.storage import Storage

T = "20261121101500123"


def test_background_thread_keeps_it_alive(storage: Storage) -> None:
    # 0.3 s beats with a 0.6 s window: on S3 (whole-second mtimes) this needs the resolution rule
    with Heartbeat(storage, T, interval=0.3, tolerable_misses=2) as heartbeat:
        for _ in range(8):  # 2.4 s, four expiry windows
            time.sleep(0.3)
            assert not heartbeat.is_expired()
        assert heartbeat.beats >= 6
        assert not heartbeat.is_expired()
        heartbeat.ensure_alive()
    assert not storage.exists(heartbeat_path(T)), "stop() deletes the heartbeat file"


def test_expires_after_tolerable_misses(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    heartbeat = Heartbeat(storage, T, interval=0.2, tolerable_misses=2).start()
    heartbeat.pause()  # the writer hangs: no more beats, the file stays
    assert not is_expired(storage, T, interval=0.2, tolerable_misses=2)
    time.sleep(0.5)
    assert is_expired(storage, T, interval=0.2, tolerable_misses=2)
    assert not is_expired(storage, T, interval=0.2, tolerable_misses=10)
    with pytest.raises(HeartbeatExpiredError) as err:
        heartbeat.ensure_alive()
    assert err.value.instant_time == T
    assert err.value.age_seconds is not None and err.value.age_seconds > 0.4


def test_expiry_uses_the_clock_against_mtime(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    Heartbeat(storage, T, interval=60).beat()
    now = time.time()
    assert not is_expired(storage, T, interval=60, tolerable_misses=2, clock=lambda: now + 119)
    assert is_expired(storage, T, interval=60, tolerable_misses=2, clock=lambda: now + 121)


def test_coarse_mtime_stores_allow_for_their_resolution(s3_storage: Storage) -> None:
    Heartbeat(s3_storage, T, interval=60).beat()
    mtime = s3_storage.mtime(heartbeat_path(T))
    assert mtime == int(mtime), "S3 LastModified has whole seconds"
    age = heartbeat_age(s3_storage, T, clock=lambda: mtime + 1.5)
    assert age == pytest.approx(0.5)


def test_missing_heartbeat_counts_as_expired(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    assert heartbeat_age(storage, T) is None
    assert is_expired(storage, T)
    with pytest.raises(HeartbeatExpiredError, match="missing"):
        Heartbeat(storage, T).ensure_alive()


def test_failed_beats_do_not_stop_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = Storage(str(tmp_path))
    heartbeat = Heartbeat(storage, T, interval=0.1)
    heartbeat.start()
    calls = {"n": 0}
    real = storage.overwrite

    def flaky(path: str, data: bytes, periodic: bool = False, durable: bool = True) -> None:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise OSError("throttled")
        real(path, data, periodic, durable)

    monkeypatch.setattr(storage, "overwrite", flaky)
    time.sleep(0.6)
    heartbeat.stop()
    assert calls["n"] >= 4, "the thread kept beating after failures"


def _expired_ages(heartbeat: Heartbeat, seconds: float) -> list[float]:
    """The ages at which ``heartbeat``, sampled for ``seconds``, was seen expired (none: it
    never was)."""
    expired: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if heartbeat.is_expired():
            expired.append(heartbeat_age(heartbeat.storage, heartbeat.instant_time) or -1.0)
        time.sleep(0.02)
    return expired


def test_a_slow_fsync_does_not_age_a_live_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mtime is taken when the bytes are written; an fsync before the rename would show the
    # beat 0.35 s old, and 0.3 s later it would pass the 0.6 s window (a loaded CI machine's disk
    # once made a live writer refuse its own commit that way).
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        time.sleep(0.35)
        real_fsync(fd)

    storage = Storage(str(tmp_path))
    monkeypatch.setattr(os, "fsync", slow_fsync)
    with Heartbeat(storage, T, interval=0.3, tolerable_misses=2) as heartbeat:
        assert _expired_ages(heartbeat, 2.5) == []
        assert heartbeat.beats >= 6


def test_slow_writes_do_not_push_the_beats_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each write lands at once and answers 0.4 s later: a whole interval's wait after each answer
    # would space the mtimes 0.7 s apart, past the 0.6 s window; on a fixed clock they are 0.4 s.
    storage = Storage(str(tmp_path))
    real = storage.overwrite

    def slow(path: str, data: bytes, periodic: bool = False, durable: bool = True) -> None:
        real(path, data, periodic, durable)
        time.sleep(0.4)

    monkeypatch.setattr(storage, "overwrite", slow)
    with Heartbeat(storage, T, interval=0.3, tolerable_misses=2) as heartbeat:
        assert _expired_ages(heartbeat, 2.5) == []


def test_invalid_settings() -> None:
    storage = Storage("memory://hb")
    with pytest.raises(ValueError):
        Heartbeat(storage, T, interval=0.01)
    with pytest.raises(ValueError):
        Heartbeat(storage, T, tolerable_misses=0)
    heartbeat = Heartbeat(storage, T).start()
    with pytest.raises(RuntimeError):
        heartbeat.start()
    heartbeat.stop()
