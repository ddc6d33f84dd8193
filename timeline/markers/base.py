"""Marker names and the reader every marker type shares."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from timeline.errors import InvalidPathError
from timeline.storage import Storage

MARKER_ROOT = ".hoodie/.temp"
MARKER_TYPE_FILE = "MARKERS.type"
_SUFFIX = ".marker."


class IOType(enum.StrEnum):
    CREATE = "CREATE"  # a new base file (insert)
    MERGE = "MERGE"  # a rewritten base file (update, delete)
    APPEND = "APPEND"  # an append to a log file


class MarkerWriter(Protocol):
    """What a write needs of its markers, whatever their type."""

    instant_time: str

    def create(self, marker: Marker) -> None: ...

    def all(self) -> list[Marker]: ...

    def exists(self) -> bool: ...

    def delete_all(self) -> None: ...


def marker_folder(instant_time: str) -> str:
    return f"{MARKER_ROOT}/{instant_time}"


@dataclass(frozen=True, order=True)
class Marker:
    """The marker of data file ``file_name`` in ``partition_path`` ("" when unpartitioned)."""

    partition_path: str
    file_name: str
    io_type: IOType

    def __post_init__(self) -> None:
        for part in [*self.partition_path.split("/"), self.file_name]:
            if part in (".", "..") or "\\" in part or "\x00" in part:
                raise InvalidPathError(self.name, "marker paths stay inside the table")
        if not self.file_name or "/" in self.file_name or self.partition_path.startswith("/"):
            raise InvalidPathError(self.name, "a marker names one data file in a partition")

    @property
    def name(self) -> str:
        """``<partition>/<file>.marker.<IOType>``: the marker's path inside its folder."""
        prefix = f"{self.partition_path}/" if self.partition_path else ""
        return f"{prefix}{self.file_name}{_SUFFIX}{self.io_type.value}"

    @property
    def is_metadata(self) -> bool:
        """A marker of a file under ``.hoodie/`` (the metadata table): not a data file, never a
        conflict and never finalized away, but rolled back with its instant."""
        return self.partition_path == ".hoodie" or self.partition_path.startswith(".hoodie/")

    @property
    def data_path(self) -> str:
        """The data file's path relative to the table's base path."""
        return f"{self.partition_path}/{self.file_name}" if self.partition_path else self.file_name

    @property
    def file_id(self) -> str:
        """The file group id of a base or log file name."""
        name = self.file_name.lstrip(".")
        return name.split("_", 1)[0]

    @classmethod
    def parse(cls, name: str) -> Marker:
        """From ``<partition>/<file>.marker.<IOType>``."""
        head, sep, io_type = name.rpartition(_SUFFIX)
        if not sep:
            raise InvalidPathError(name, "not a marker name (<file>.marker.<IOType>)")
        try:
            kind = IOType(io_type)
        except ValueError:
            raise InvalidPathError(name, f"unknown marker IO type {io_type!r}") from None
        partition, _, file_name = head.rpartition("/")
        return cls(partition, file_name, kind)


def read_markers(storage: Storage, instant_time: str) -> list[Marker]:
    """Every marker of ``instant_time``, read from storage (direct marker files, or the
    ``MARKERS<i>`` files of the timeline-server type), so it works with no server running."""
    folder = marker_folder(instant_time)
    entries = storage.list(folder, recursive=True)
    markers: set[Marker] = set()
    for entry in entries:
        rel = entry.path[len(folder) + 1 :]
        if rel == MARKER_TYPE_FILE:
            continue
        if "/" not in rel and rel.startswith("MARKERS"):
            text = storage.read(entry.path).decode()
            markers.update(Marker.parse(line) for line in text.splitlines() if line.strip())
        elif _SUFFIX in rel:
            markers.add(Marker.parse(rel))
    return sorted(markers)
