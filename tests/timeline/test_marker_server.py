"""The timeline-server marker service: endpoints, validation, batching, restart, concurrency."""

from __future__ import annotations

import collections
import itertools
import threading
from pathlib import Path
from urllib.parse import urlencode

import pytest
import urllib3

from timeline import Table
from timeline.config import Config
from timeline.errors import MarkerAlreadyExistsError
from timeline.markers import IOType, Marker, read_markers
from timeline.markers.client import TimelineServerMarkers
from timeline.markers.server import API, MarkerServer, MarkerServerConfig
from timeline.storage import Storage

T = "20261121101500123"
FOLDER = f".hoodie/.temp/{T}"


def _table(storage: Storage) -> Table:
    explicit = {"indexer.lock.url": "inprocess"}
    explicit.update({f"indexer.storage.{k}": v for k, v in storage.options.items()})
    return Table.create(storage.base_uri, "t", ["id"], config=Config.resolve(explicit=explicit))


def _marker(i: int, io: IOType = IOType.CREATE, partition: str = "p") -> Marker:
    return Marker(partition, f"f{i:05d}-0_{i}-0-0_{T}.parquet", io)


def _call(url: str, method: str, endpoint: str, **params: str) -> tuple[int, object]:
    import json

    response = urllib3.PoolManager().request(method, f"{url}{API}/{endpoint}?{urlencode(params)}")
    return response.status, json.loads(response.data)


def test_endpoints(storage: Storage) -> None:
    table = _table(storage)
    with MarkerServer(table) as server:
        client = TimelineServerMarkers(server.url, storage, T)
        assert _call(server.url, "GET", "dir/exists", markerdirpath=FOLDER) == (200, False)
        client.create(_marker(1))
        client.create(_marker(2, IOType.MERGE))
        client.create(_marker(3, IOType.APPEND))
        with pytest.raises(MarkerAlreadyExistsError):
            client.create(_marker(1))  # a duplicate answers false
        full = storage.uri(FOLDER)  # the full path is accepted like the relative one
        status, names = _call(server.url, "GET", "all", markerdirpath=full)
        assert status == 200 and names == [
            _marker(i, io).name
            for i, io in [(1, IOType.CREATE), (2, IOType.MERGE), (3, IOType.APPEND)]
        ]
        assert _call(server.url, "GET", "create-and-merge", markerdirpath=FOLDER)[1] == names[:2]
        assert _call(server.url, "GET", "dir/exists", markerdirpath=FOLDER) == (200, True)
        assert storage.read(f"{FOLDER}/MARKERS.type") == b"TIMELINE_SERVER_BASED"
        assert [m.name for m in read_markers(storage, T)] == names
        assert _call(server.url, "POST", "dir/delete", markerdirpath=FOLDER) == (200, True)
        assert storage.list(FOLDER) == []
        assert _call(server.url, "GET", "dir/exists", markerdirpath=FOLDER) == (200, False)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"markername": "p/x.parquet.marker.CREATE"}, "markerdirpath is required"),
        ({"markerdirpath": FOLDER}, "markername is required"),
        (
            {"markerdirpath": "/etc/.hoodie/.temp/" + T, "markername": "p/x.marker.CREATE"},
            "not under this table",
        ),
        (
            {"markerdirpath": "s3://other/t/.hoodie/.temp/" + T, "markername": "p/x.marker.CREATE"},
            "not under this table",
        ),
        (
            {"markerdirpath": ".hoodie/.temp/../../etc", "markername": "p/x.marker.CREATE"},
            "is not .hoodie/.temp/<instant time>",
        ),
        (
            {"markerdirpath": ".hoodie/.temp/notatime", "markername": "p/x.marker.CREATE"},
            "instant time",
        ),
        (
            {"markerdirpath": FOLDER, "markername": "../../x.parquet.marker.CREATE"},
            "stay inside the table",
        ),
        (
            {"markerdirpath": FOLDER, "markername": "/abs/x.parquet.marker.CREATE"},
            "invalid marker name",
        ),
        (
            {"markerdirpath": FOLDER, "markername": "p/x.parquet.marker.DELETE"},
            "unknown marker IO type",
        ),
        ({"markerdirpath": FOLDER, "markername": "p/x.parquet"}, "not a marker name"),
        (
            {"markerdirpath": FOLDER, "markername": "p/" + "x" * 1100 + ".marker.CREATE"},
            "longer than 1024",
        ),
    ],
)
def test_bad_requests_get_400_with_a_reason(
    tmp_path: Path, params: dict[str, str], reason: str
) -> None:
    storage = Storage(str(tmp_path))
    with MarkerServer(_table(storage)) as server:
        status, body = _call(server.url, "POST", "create", **params)
        assert status == 400
        assert reason in body["error"]  # type: ignore[index]
    assert storage.list(".hoodie/.temp", recursive=True) == [], "nothing was written"


def test_restart_reloads_lazily_and_keeps_newline_files(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    table = _table(storage)
    config = MarkerServerConfig(threads=3)
    with MarkerServer(table, config=config) as server:
        client = TimelineServerMarkers(server.url, storage, T)
        for i in range(12):
            client.create(_marker(i))
    with MarkerServer(table, config=config) as server:
        client = TimelineServerMarkers(server.url, storage, T)
        assert len(_call(server.url, "GET", "all", markerdirpath=FOLDER)[1]) == 12  # type: ignore[arg-type]
        with pytest.raises(MarkerAlreadyExistsError):
            client.create(_marker(5))  # known after the restart
        for i in range(12, 20):
            client.create(_marker(i))
    lines = []
    for entry in storage.list(FOLDER):
        if entry.name.startswith("MARKERS") and entry.name != "MARKERS.type":
            text = storage.read(entry.path).decode()
            assert text.endswith("\n") and "," not in text
            lines.extend(text.splitlines())
    assert sorted(lines) == sorted(_marker(i).name for i in range(20))


def test_requests_are_batched_and_answered_after_the_flush(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    with MarkerServer(_table(storage), config=MarkerServerConfig(batch_interval=0.05)) as server:
        client = TimelineServerMarkers(server.url, storage, T)
        seen_on_storage: list[bool] = []

        def create(i: int) -> None:
            client.create(_marker(i))
            seen_on_storage.append(_marker(i) in read_markers(storage, T))

        threads = [threading.Thread(target=create, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen_on_storage == [True] * 100, "an answer came before its marker was on storage"
        assert (
            server.storage.requests["overwrite"] == server.batches < 50
        )  # 100 markers, few writes


@pytest.mark.slow
@pytest.mark.parametrize(
    "per_thread", [250, pytest.param(1000, marks=pytest.mark.soak)], ids=["250", "1000"]
)
def test_sixteen_threads_many_markers_each(tmp_path: Path, per_thread: int) -> None:
    """16 client threads create ``per_thread`` markers each (CI: 250; make soak: 1,000)."""
    storage = Storage(str(tmp_path))
    config = MarkerServerConfig(batch_interval=0.002, threads=8, record_slot_writes=True)
    threads_n = 16
    with MarkerServer(_table(storage), config=config) as server:
        errors: list[BaseException] = []

        def run(n: int) -> None:
            client = TimelineServerMarkers(server.url, storage, T)
            try:
                for i in range(per_thread):
                    client.create(
                        Marker(f"t{n:02d}", f"f{i:05d}-0_{n}-0-0_{T}.parquet", IOType.CREATE)
                    )
            except BaseException as e:
                errors.append(e)

        workers = [threading.Thread(target=run, args=(n,)) for n in range(threads_n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == []
        writes = list(server.slot_writes)
        violations = server.slot_violations
    lines = []
    for entry in storage.list(FOLDER):
        if entry.name.startswith("MARKERS") and entry.name != "MARKERS.type":
            lines.extend(storage.read(entry.path).decode().splitlines())
    assert len(lines) == per_thread * threads_n, "a marker was lost"
    assert len(set(lines)) == len(lines), "a marker was written twice"
    # no MARKERS<i> file was written by two threads at once: per slot, write intervals never overlap
    assert violations == 0
    by_slot: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    for _folder, slot, _thread, start, end in writes:
        by_slot[slot].append((start, end))
    concurrent_slots = 0
    for spans in by_slot.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, "two writes of one MARKERS file overlapped"
    # and several slots were in use at the same time (the check above was not vacuous)
    events = sorted([(s, 1) for *_x, s, _e in writes] + [(e, -1) for *_x, _s, e in writes])
    running = 0
    for _, step in events:
        running += step
        concurrent_slots = max(concurrent_slots, running)
    assert len(by_slot) > 1 and concurrent_slots > 1
