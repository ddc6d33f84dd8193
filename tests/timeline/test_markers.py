"""Markers: names, direct markers (write-once), reading every type from storage."""

from __future__ import annotations

import pytest

from timeline.errors import InvalidPathError, MarkerAlreadyExistsError
from timeline.markers import DirectMarkers, IOType, Marker, marker_folder, read_markers
from timeline.storage import Storage

T = "20261121101500123"
NAME = "f1-0_0-0-0_20261121101500123.parquet"


def test_marker_name_round_trip() -> None:
    marker = Marker("2026/11/21", NAME, IOType.CREATE)
    assert marker.name == f"2026/11/21/{NAME}.marker.CREATE"
    assert Marker.parse(marker.name) == marker
    assert marker.data_path == f"2026/11/21/{NAME}"
    assert marker.file_id == "f1-0"
    flat = Marker("", NAME, IOType.MERGE)
    assert flat.name == f"{NAME}.marker.MERGE" and Marker.parse(flat.name) == flat
    log = Marker("p", ".f2-0_20261121101500123.log.1_0-0-0", IOType.APPEND)
    assert log.file_id == "f2-0"


@pytest.mark.parametrize(
    "name",
    [
        "p/x.parquet",
        "p/x.parquet.marker.DELETE",
        "../x.parquet.marker.CREATE",
        "/abs/x.marker.CREATE",
        "p/../../x.marker.CREATE",
    ],
)
def test_bad_marker_names(name: str) -> None:
    with pytest.raises(InvalidPathError):
        Marker.parse(name)


def test_direct_markers_are_write_once(storage: Storage) -> None:
    markers = DirectMarkers(storage, T)
    a = Marker("p1", NAME, IOType.CREATE)
    b = Marker("p2", "g-0_1-0-0_20261121101500123.parquet", IOType.MERGE)
    markers.create(a)
    markers.create(b)
    with pytest.raises(MarkerAlreadyExistsError):
        markers.create(a)
    assert markers.all() == [a, b]
    assert markers.exists()
    markers.delete_all()
    assert markers.all() == [] and not markers.exists()


def test_read_markers_understands_timeline_server_files(tmp_path: str) -> None:
    storage = Storage(str(tmp_path))
    folder = marker_folder(T)
    storage.create(f"{folder}/MARKERS.type", b"TIMELINE_SERVER_BASED")
    storage.create(
        f"{folder}/MARKERS0",
        f"p1/{NAME}.marker.CREATE\np2/y-0_0-0-0_{T}.parquet.marker.MERGE\n".encode(),
    )
    storage.create(f"{folder}/MARKERS1", b"")
    assert [m.data_path for m in read_markers(storage, T)] == [
        f"p1/{NAME}",
        f"p2/y-0_0-0-0_{T}.parquet",
    ]
