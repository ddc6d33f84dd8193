"""A build's records per file group, held in memory up to a budget and spilled to local disk
beyond it, as Spark's shuffle spills: an index build without Spark then holds about the budget
plus the file groups being written, whatever the table's size."""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict

import pyarrow as pa


class GroupRecords:
    """Each file group's records of a local build, held in memory up to ``budget`` bytes and
    beyond that appended to one Arrow IPC file per file group in a temporary folder (deleted on
    exit): what :meth:`take` gives back is the group's parts, read whole from its file."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.spilled = 0
        self._parts: dict[tuple[int, int], list[pa.Table]] = defaultdict(list)
        self._writers: dict[tuple[int, int], pa.ipc.RecordBatchStreamWriter] = {}
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> GroupRecords:
        return self

    def __exit__(self, *exc: object) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        self._parts.clear()
        if self._folder is not None:
            self._folder.cleanup()

    def add(self, key: tuple[int, int], table: pa.Table) -> None:
        """Hold ``table`` (all of a group's tables have one schema)."""
        self._parts[key].append(table)
        self.held += table.nbytes
        if self.held > self.budget:
            self._spill()

    def _spill(self) -> None:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="aix-build-")
        for key, tables in self._parts.items():
            for table in tables:
                self._writer(key, table.schema).write_table(table)
                self.spilled += table.nbytes
        self._parts.clear()
        self.held = 0

    def _writer(self, key: tuple[int, int], schema: pa.Schema) -> pa.ipc.RecordBatchStreamWriter:
        writer = self._writers.get(key)
        if writer is None:
            writer = self._writers[key] = pa.ipc.new_stream(self._path(key), schema)
        return writer

    def _path(self, key: tuple[int, int]) -> str:
        assert self._folder is not None
        return os.path.join(self._folder.name, f"{key[0]}-{key[1]}.arrow")

    def take(self, key: tuple[int, int]) -> list[pa.Table]:
        """The group's parts (those spilled first, read back whole); its file is deleted."""
        parts = self._parts.pop(key, [])
        writer = self._writers.pop(key, None)
        if writer is None:
            return parts
        writer.close()
        path = self._path(key)
        with pa.OSFile(path) as source:
            spilled = pa.ipc.open_stream(source).read_all()
        os.remove(path)
        return [spilled, *parts]


__all__ = ["GroupRecords"]
