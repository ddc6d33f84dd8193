"""Bloom filters a warm writer keeps across its commits (:class:`KeptFilters`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.bloom import FiltersAt
from metadata_table.layout import data_partition

#: filters added to a partition's kept ones (a writer's own commits') before the next tag reads
#: the partition's filters from the index again, at most
TAIL_MOST = 1024

#: bytes of filters kept, at most, counting each filter twice (as read, and laid out for the
#: probe): the partitions kept longest are dropped first, but the last one is always kept
KEPT_BYTES_MOST = 256 << 20


@dataclass
class _Partition:
    #: every kept file's name, the filters read from the index first, then those added
    names: pa.Array
    #: the filters read from the index, laid out once (their first ``read`` names')
    read: FiltersAt
    read_count: int
    #: about what the read filters take (twice their bitsets: :data:`KEPT_BYTES_MOST`)
    nbytes: int
    #: the filters added since, as bitsets, and laid out (rebuilt on each addition: they are few)
    added: list[pa.Array] = field(default_factory=list)
    added_filters: FiltersAt | None = None


class KeptFilters:
    """The bloom filters of the files of a few partitions, kept by a warm writer from one
    commit to the next: a data file is written once, under a name no other file has, so its
    filter never changes, and a filter kept is what the ``bloom_filters`` index holds for that
    file for as long as the file lives. At a million files, reading a partition's 10,000
    filters from the index and laying them out again was a quarter of an upsert.

    A partition's filters come from one read of the index (:meth:`put`), plus those the
    writer's own commits wrote (:meth:`add_records`); a tag that meets a file with none of them
    reads the partition from the index again. Which files a tag asks about, and which of them
    must be read anyway (written by instants the index does not reflect), the caller works out
    from its own snapshot every time."""

    def __init__(self) -> None:
        self._partitions: dict[str, _Partition] = {}

    def positions(self, partition: str, names: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
        """Each of ``names``' position among the partition's kept filters (-1: none kept for
        it); None when the partition's are not kept."""
        kept = self._partitions.get(partition)
        if kept is None:
            return None
        found = pc.index_in(names, value_set=kept.names)
        return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    def put(self, partition: str, names: pa.Array, bitsets: pa.Array | pa.ChunkedArray) -> None:
        """Keep the partition's filters as one read of the index gave them (a null: a file
        without a filter), in place of any kept before."""
        self._partitions.pop(partition, None)
        self._partitions[partition] = _Partition(
            _combined(names), FiltersAt(bitsets), len(names), 2 * bitsets.nbytes
        )
        while (
            len(self._partitions) > 1
            and sum(p.nbytes for p in self._partitions.values()) > KEPT_BYTES_MOST
        ):
            self._partitions.pop(next(iter(self._partitions)))  # (never the one just kept)

    def add_records(self, records: pa.Table) -> None:
        """Keep the filters of the new files of kept partitions: the ``bloom_filters`` records a
        commit of this writer wrote to the index (tombstones are left out); a partition not
        kept is left to the next read."""
        live = records.filter(pc.invert(pc.fill_null(records.column("is_deleted"), False)))
        names = live.column("partition")
        for name in pc.unique(names).to_pylist():
            partition = data_partition(name)
            if partition in self._partitions:
                rows = live.filter(pc.equal(names, name))
                self._add(partition, rows.column("file_name"), rows.column("bloom_filter"))

    def _add(self, partition: str, names: pa.ChunkedArray, bitsets: pa.ChunkedArray) -> None:
        kept = self._partitions[partition]
        if len(kept.names) - kept.read_count + len(names) > TAIL_MOST:
            del self._partitions[partition]
            return
        kept.names = _combined(pa.chunked_array([kept.names, *names.cast(pa.string()).chunks]))
        kept.added.extend(bitsets.chunks)
        kept.added_filters = FiltersAt(pa.chunked_array(kept.added, bitsets.type))

    def might_contain_any(self, partition: str, hashes: np.ndarray, at: np.ndarray) -> np.ndarray:
        """For each position of ``at`` (:meth:`positions`; -1: may hold anything), whether the
        partition's kept filter there may hold the value of any of ``hashes``."""
        kept = self._partitions[partition]
        out = np.ones(len(at), dtype=bool)
        read = (at >= 0) & (at < kept.read_count)
        out[read] = kept.read.might_contain_any(hashes)[at[read]]
        added = at >= kept.read_count
        if kept.added_filters is not None and np.any(added):
            out[added] = kept.added_filters.might_contain_any(hashes)[at[added] - kept.read_count]
        return out


def _combined(names: pa.Array | pa.ChunkedArray) -> pa.Array:
    array = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    return array.cast(pa.string())
