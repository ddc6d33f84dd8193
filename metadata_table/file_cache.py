"""Decoded metadata files kept across the snapshots of one process.

A metadata file is written once (create-if-absent) under a name that carries its file group and
instant, and never changes after. A process that opens snapshot after snapshot (the daemon's
ticks, a query service answering after every commit) would otherwise decode the same base files
again for every snapshot, though a commit only adds a log file. So the records read from a file
(one projection and key prefix of it) are kept, least recently used first out, up to a byte
budget (``indexer.read.cache.max.mb``), the way Iceberg keeps decoded manifests
(``io.manifest.cache-*``).

An entry is keyed by the file's URI, size and modification time as the metadata partition's
listing reports them (nothing is kept when it reports no modification time), so a file deleted
by a rollback and written again under the same name (a retried log file) is not answered from
its old content. Arrow tables are immutable: readers share an entry without copying it.

A few facts of other files that never change once written are kept beside them, so that a new
snapshot of an unchanged table reads nothing again
(:meth:`~metadata_table.reader.MetadataReader.kept`): the newest base file a completed write's
commit metadata names, keyed by the instant file's URI, and the schema of a data file and whether
its keys are made from the key fields, keyed by its URI and size.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import pyarrow as pa

Entry = tuple[pa.Table, str | None]
T = TypeVar("T")


class DecodedFiles:
    """A least-recently-used map from a file's version and projection to what was read from it
    (its records, or facts from its footer), bounded by their bytes; safe to share between
    threads."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def get(self, key: Hashable, read: Callable[[], T], size: Callable[[T], int]) -> T:
        """The value of ``key``, read (outside the lock) and kept when absent; a value larger
        than the whole budget is returned but not kept."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                value: T = found[0]
                return value
            self.misses += 1
        value = read()
        bytes_ = size(value)
        if bytes_ > self.max_bytes:
            return value
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, bytes_)
                self._bytes += bytes_
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
        return value

    def records(self, key: Hashable, read: Callable[[], Entry]) -> Entry:
        """:meth:`get` of a file's records and watermark, counted by the records' Arrow bytes."""
        return self.get(key, read, lambda entry: entry[0].nbytes)

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            while self._bytes > self.max_bytes and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


#: the process's cache; its budget follows the configuration of the last reader made
_PROCESS = DecodedFiles(0)


def process_cache(max_bytes: int) -> DecodedFiles:
    """The process's cache of decoded metadata files, with a budget of ``max_bytes``."""
    if _PROCESS.max_bytes != max_bytes:
        _PROCESS.resize(max_bytes)
    return _PROCESS
