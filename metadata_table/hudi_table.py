"""Apache Hudi 0.15's own metadata table (``.hoodie/metadata``), read as Hudi's readers read it:
each partition's latest file slices, their base HFile and the log blocks that count, merged per
key. The codecs are the kernel's (:mod:`timeline.formats`); this module is the protocol.

What counts, as Hudi 0.15 decides it:

* a partition is readable when the data table's ``hoodie.properties`` lists it in
  ``hoodie.table.metadata.partitions`` (``files`` first: without it nothing is);
* a file group's latest slice is its newest base file whose instant (a compaction, ``<t>001``,
  or a partition's initialization) completed on the metadata table's timeline, with the log
  files written on it (or, before any compaction, the log files alone);
* a log block counts when its instant is a completed deltacommit of the metadata table that is
  either a completed data instant (a data commit's mirror, same time) or one of the metadata
  table's own suffixed instants (``<t>0NN``: compaction, indexing, initialization...), or the
  initial ``00000000000000`` ones; a rollback command block removes its target's earlier blocks.

Records then merge per key, newest last: a partition's file list adds and removes files (a file
listed twice keeps its larger size, as an appended log file grows), column stats and bloom
filters are replaced by newer records (a deleted one stays as a tombstone), and a record-index
entry is replaced or removed by a delete block.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from timeline.errors import StorageFileNotFoundError
from timeline.formats import metadata_records as records
from timeline.formats.hfile import HFileReader
from timeline.log_format import BlockType, LogFileName, effective_blocks, read_blocks
from timeline.table import Table
from timeline.table_config import METADATA_PARTITIONS

FOLDER = ".hoodie/metadata"
_INSTANT = re.compile(
    r"^(?P<time>\d{14,23})\.(?P<action>[a-z_]+)(?P<state>\.requested|\.inflight)?$"
)
_COMPLETED_ACTIONS = ("deltacommit", "commit")
_SOLO = "00000000000000"


@dataclass(frozen=True)
class FileSlice:
    """A file group's latest slice: its base HFile (or None) and log files, oldest first."""

    file_group: int
    base: str | None
    logs: tuple[str, ...]


class HudiMetadataTable:
    """One snapshot of Hudi's metadata table of ``table`` (listed on first use)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.storage = table.storage

    @cached_property
    def partitions(self) -> tuple[str, ...]:
        """The partitions Hudi's readers may use (``hoodie.table.metadata.partitions``)."""
        value = self.table.reload_table_config().props.get(METADATA_PARTITIONS, "")
        return tuple(p for p in value.split(",") if p)

    @property
    def present(self) -> bool:
        return "files" in self.partitions

    @cached_property
    def _completed(self) -> frozenset[str]:
        """Instant times of the metadata table's completed deltacommits and compactions."""
        try:
            entries = self.storage.list(f"{FOLDER}/.hoodie")
        except StorageFileNotFoundError:
            return frozenset()
        found = set()
        for entry in entries:
            match = _INSTANT.match(entry.name)
            if match and not match["state"] and match["action"] in _COMPLETED_ACTIONS:
                found.add(match["time"])
        return frozenset(found)

    @cached_property
    def _data_completed(self) -> frozenset[str]:
        return frozenset(i.timestamp for i in self.table.timeline.load().completed())

    def counts(self, instant: str) -> bool:
        """Whether a log block written at ``instant`` counts (see the module docstring)."""
        if instant not in self._completed:
            return False
        suffixed = len(instant) > 17
        return suffixed or instant in self._data_completed or instant.startswith(_SOLO)

    def slices(self, partition: str) -> list[FileSlice]:
        """The latest slice of each file group of ``partition``, by file group."""
        prefix = records.FILE_GROUP_PREFIXES[partition]
        bases: dict[int, tuple[str, str]] = {}
        logs: dict[int, list[tuple[LogFileName, str]]] = defaultdict(list)
        for entry in self.storage.list(f"{FOLDER}/{partition}"):
            name = entry.name
            parsed = LogFileName.parse(name)
            if parsed is not None and parsed.file_id.startswith(prefix):
                logs[_group(parsed.file_id, prefix)].append((parsed, name))
            elif name.startswith(prefix) and name.endswith(".hfile"):
                instant = name.removesuffix(".hfile").rsplit("_", 1)[1]
                group = _group(name.split("_", 1)[0], prefix)
                if instant in self._completed and (group not in bases or bases[group][0] < instant):
                    bases[group] = (instant, name)
        out = []
        for group in sorted(set(bases) | set(logs)):
            since = bases[group][0] if group in bases else ""
            kept = sorted((p.order, n) for p, n in logs.get(group, []) if p.base_instant >= since)
            base = bases[group][1] if group in bases else None
            out.append(FileSlice(group, base, tuple(n for _, n in kept)))
        return out

    def records(self, partition: str) -> dict[str, dict[str, Any]]:
        """Every live record of ``partition`` by key, merged as Hudi merges them."""
        merged: dict[str, dict[str, Any]] = {}
        for key, record in self._cells(partition):
            if record is None:
                merged.pop(key, None)
            else:
                merged[key] = _merge(merged.get(key), record)
        return merged

    def _cells(self, partition: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """(key, record) in merge order; a None record deletes the key."""
        folder = f"{FOLDER}/{partition}"
        for piece in self.slices(partition):
            if piece.base is not None:
                path = f"{folder}/{piece.base}"
                reader = HFileReader(self.storage.read(path), self.storage.uri(path))
                for row, value in reader:
                    yield row.decode(), records.decode(row.decode(), value)
            files = [read_blocks(self.storage.read(f"{folder}/{name}")) for name in piece.logs]
            for block in effective_blocks(files, self.counts):
                if block.block_type == BlockType.HFILE_DATA:
                    for row, value in HFileReader(
                        block.content, f"{folder} ({block.instant_time})"
                    ):
                        yield row.decode(), records.decode(row.decode(), value)
                elif block.block_type == BlockType.DELETE:
                    for deleted in block.deletes():
                        yield str(deleted.record_key), None

    def file_listing(self) -> dict[str, dict[str, int]]:
        """Data partition path -> its files (name -> size), as the ``files`` partition lists
        them ("" for a table without partitions)."""
        merged = self.records("files")
        listed = merged.get(records.ALL_PARTITIONS_KEY, {}).get("filesystemMetadata") or {}
        out: dict[str, dict[str, int]] = {}
        for identifier in listed:
            files = merged.get(identifier, {}).get("filesystemMetadata") or {}
            path = "" if identifier == records.NON_PARTITIONED else identifier
            out[path] = {name: int(info["size"]) for name, info in files.items()}
        return out


def _group(file_id: str, prefix: str) -> int:
    return int(file_id[len(prefix) :].split("-", 1)[0])


def _merge(older: dict[str, Any] | None, newer: dict[str, Any]) -> dict[str, Any]:
    if older is None:
        return _live_files(newer)
    listing = newer.get("filesystemMetadata")
    if listing is not None and older.get("filesystemMetadata") is not None:
        combined: dict[str, Mapping[str, Any]] = dict(older["filesystemMetadata"])
        for name, info in listing.items():
            if info["isDeleted"]:
                combined.pop(name, None)
            elif name not in combined or combined[name]["size"] < info["size"]:
                combined[name] = info
        return {**newer, "filesystemMetadata": combined}
    return newer


def _live_files(record: dict[str, Any]) -> dict[str, Any]:
    listing = record.get("filesystemMetadata")
    if listing is None:
        return record
    return {
        **record,
        "filesystemMetadata": {n: i for n, i in listing.items() if not i["isDeleted"]},
    }
