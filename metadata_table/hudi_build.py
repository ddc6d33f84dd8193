"""Apache Hudi 0.15's own metadata-table indexes, built from outside: the ``column_stats``,
``bloom_filters`` and ``record_index`` partitions of ``.hoodie/metadata``, made and written as
Hudi's asynchronous indexer (RFC-45, ``HoodieIndexer``) makes them, so that Hudi's Spark reader
(data skipping), its RECORD_INDEX writers and its bloom index use them; and on a table without
a metadata table (its writers ran with it off), the metadata table itself with ``files``, as
Hudi's writer initializes it. The protocol (schedule, build, catch-up, publication, abort) runs
in :mod:`indexer.hudi_format`; this module is what it builds through
(:class:`HudiPartitionWriter`).

What is written, for a build up to data instant ``t`` (Hudi's ``indexUptoInstant``):

* the plan, ``<Ti>.indexing.requested`` on the data timeline: Hudi's Avro ``HoodieIndexPlan``;
  and, so that this project tells its own builds from ``HoodieIndexer``'s (the plan has no room
  for it), a claim ``.hoodie/.async-indexer/hudi-builds/<Ti>.json`` made before the instant;
* per partition, its folder as Hudi's ``initializeFileGroups`` leaves it: the partition metadata
  file; per file group ``i`` (Hudi's counts: :meth:`HudiPartitionWriter.group_count`) a first log
  file holding an empty delete block at ``I = <t>004`` (the async indexer's suffix) and, when the
  group holds records, the base HFile ``<fileId>_0-0-0_<I>.hfile`` of its records in key order;
  then ``I.deltacommit`` on the metadata table's timeline (bulk insert);
* catch-up: each data instant completed after ``t`` (commits of Hudi's writers and ours,
  cleans, rollbacks) as a metadata deltacommit ``<instant>020`` (a suffix Hudi's readers count,
  and no Hudi writer uses) of the records Hudi's writer would have written for it (at
  ``<instant>`` itself, as Hudi's writer would, when the build creates the metadata table);
* publication, under the lock Hudi's writers take: the partitions added to
  ``hoodie.table.metadata.partitions`` (``hoodie.properties`` is changed there only), then
  ``<Ti>.indexing`` (Hudi's Avro ``HoodieIndexCommitMetadata``).

Until publication no writer writes to the partitions (they are in neither of Hudi's lists), so
the catch-up alone decides their content, in timeline order. What each data file gives, as
Hudi's initialization does: every committed base file up to ``t`` (older versions not yet
cleaned too, as Hudi lists storage) its column stats (:func:`hudi_column_stats`) and its
footer's bloom filter; the latest base file of each file group its record keys, located at the
file's group and instant. Log files give none (Hudi's initialization skips them too): a
merge-on-read file slice whose log files are not indexed is kept by Hudi's data skipping.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_table.hudi_table import (
    DENSE,
    FOLDER,
    LOG_WRITE_TOKEN,
    HudiColumnStatsCells,
    HudiMetadataTable,
    bloom_record,
    commit_records,
    removal_records,
    undo_deltacommit,
    write_deltacommit,
)
from metadata_table.records import RECORD_KEY, ROW_DELETED, info_of, read_record_keys, virtual_keys
from metadata_table.validate import PartitionReport, data_files_by_partition, hudi_files_report
from metadata_table.workers import chunked, map_chunks, start_processes, workers_for
from timeline.commit_metadata import NULL_COMMIT, CommitMetadata, WriteStat
from timeline.config import (
    BLOOM_FILTER_FILE_GROUPS,
    COLUMN_STATS_FILE_GROUPS,
    HUDI_RECORD_INDEX_GROWTH,
    HUDI_RECORD_INDEX_MAX_GROUP_BYTES,
    HUDI_RECORD_INDEX_MAX_GROUPS,
    HUDI_RECORD_INDEX_MIN_GROUPS,
)
from timeline.errors import StorageFileNotFoundError, TableError
from timeline.formats import metadata_records as records
from timeline.fs_view import (
    PARTITION_METADATA_FILE,
    BaseFile,
    FileSystemView,
    data_file_paths,
    file_id_of,
    parquet_metadata,
)
from timeline.hudi_avro import avro_file
from timeline.index_state import INDEX_FOLDER
from timeline.instant import Instant
from timeline.keys import KeyGenerator
from timeline.locks import LockHandle
from timeline.removals import REMOVAL_ACTIONS, Removal, parse_removal
from timeline.storage import Storage
from timeline.table import Table
from timeline.table_config import (
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    PROPERTIES_FILE,
    TableConfig,
    metadata_table_config,
)

logger = logging.getLogger(__name__)

FILES, COLUMN_STATS, BLOOM_FILTERS = "files", "column_stats", "bloom_filters"
RECORD_INDEX = "record_index"
#: the partitions made from the data files' footers and keys
FROM_DATA_FILES = (COLUMN_STATS, BLOOM_FILTERS, RECORD_INDEX)
#: the partitions this builds in Hudi's metadata table (``files`` only with the metadata table:
#: on a table that has none, which the build creates)
BUILDABLE = (FILES, *FROM_DATA_FILES)
#: the suffix of a partition's initialization by Hudi's async indexer (``<t>004``)
INDEXING_SUFFIX = "004"
#: the suffix of a catch-up deltacommit (``<data instant>020``)
CATCH_UP_SUFFIX = "020"
#: Hudi's writer configs that keep each partition (a writer without them deletes it; ``files``
#: needs the metadata table on alone)
WRITER_FLAGS = {
    COLUMN_STATS: "hoodie.metadata.index.column.stats.enable",
    BLOOM_FILTERS: "hoodie.metadata.index.bloom.filter.enable",
    RECORD_INDEX: "hoodie.metadata.record.index.enable",
}
#: Hudi's estimate of a record-index entry's bytes (``RECORD_INDEX_AVERAGE_RECORD_SIZE``)
RECORD_INDEX_ENTRY_BYTES = 48
CLAIMS = f"{INDEX_FOLDER}/hudi-builds"
PUBLISHED = f"{INDEX_FOLDER}/hudi-published.json"
#: data files a worker reads per chunk, and record keys (a chunk's are hashed, sorted by file
#: group and taken together) about at most: alternated runs of 100,000 files' column_stats and
#: bloom_filters took 11.3/10.7 s in chunks of 512 files, 16.3/12.2 in chunks of 64; 10M keys
#: in 1,000 files 4.2/4.3 s in chunks of 1M keys, 4.1/4.2 of 640,000, 5.1/4.7 of 2.5M
_CHUNK_FILES, _CHUNK_KEYS = 512, 1_000_000

Cell = tuple[bytes, bytes]
#: cells of a file group from some data files: their rows (keys) and values, as two Arrow binary
#: arrays (handed between processes as buffers, where a list of pairs is pickled pair by pair)
Cells = tuple[pa.Array, pa.Array]
#: a record-index group's entries from a chunk of data files: their keys, each key's value as
#: its position in the values (one a data file: a cell's value holds no key), and the values
Located = tuple[pa.Array, pa.Array, pa.Array]
#: what a file group of a new partition holds: cells, or (the record index) located keys
Content = list[Cells] | list[Located]
#: record-index entries from which the data files are read by worker processes
_PROCESS_MIN_KEYS = 1_000_000
#: data files of a record index's build from which the fork server starts with the listing,
#: before their footers tell whether there are :data:`_PROCESS_MIN_KEYS` keys (10M keys in
#: 1,000 files: the keys read in 1.8-2.0 s against 2.0-2.4 with the server started after)
_PROCESS_EARLY_FILES = 200
#: data files from which the files are read by worker processes: a footer costs about 250 us
#: here, so the fork server's half second of start pays back from about 5,000 files (measured:
#: at 2,000 files threads took 1.3 s against 1.7, at 5,000 both 2.3); the native build reads
#: less a file and forks from 2,000 (:data:`~metadata_table.workers.PROCESS_MIN_FILES`)
_PROCESS_MIN_FILES = 5_000


class SourceFile(NamedTuple):
    """A committed base file a build reads: whether it is its file group's latest at ``t``
    (its record keys go in the record index). Handed to worker processes as a plain tuple
    (:func:`_rows`), which pickles without a call per file."""

    partition_path: str
    name: str
    instant: str
    latest: bool

    @property
    def path(self) -> str:
        return f"{self.partition_path}/{self.name}" if self.partition_path else self.name


@dataclass(frozen=True)
class Claim:
    """A build of ours: its indexing instant, partitions, ``t``, and the metadata instants it
    wrote (the initialization and each catch-up), which an abort deletes."""

    instant: str
    partitions: tuple[str, ...]
    upto: str
    written: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        value = {
            "instant": self.instant,
            "partitions": list(self.partitions),
            "upto": self.upto,
            "written": list(self.written),
        }
        return json.dumps(value, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Claim:
        value = json.loads(data)
        return cls(
            str(value["instant"]),
            tuple(value["partitions"]),
            str(value["upto"]),
            tuple(value.get("written") or ()),
        )


# --- Hudi's plan and commit metadata -----------------------------------------------------------------


def index_plan(partitions: Iterable[str], upto: str) -> bytes:
    """``<Ti>.indexing.requested``: Hudi 0.15's Avro ``HoodieIndexPlan``."""
    return avro_file("index_plan", {"version": 1, "indexPartitionInfos": _infos(partitions, upto)})


def index_commit(partitions: Iterable[str], upto: str) -> bytes:
    """``<Ti>.indexing``: Hudi 0.15's Avro ``HoodieIndexCommitMetadata``."""
    value = {"version": 1, "operationType": None, "indexPartitionInfos": _infos(partitions, upto)}
    return avro_file("index_commit", value)


def _infos(partitions: Iterable[str], upto: str) -> list[dict[str, Any]]:
    return [
        {"version": 1, "metadataPartitionPath": p, "indexUptoInstant": upto} for p in partitions
    ]


# --- the records of data files -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Work:
    storage: Storage
    groups: Mapping[str, int]  # partition -> file groups
    stamp: str  # the initialization instant: bloom records' timestamp
    keygen: KeyGenerator | None


def _rows(files: list[SourceFile]) -> list[tuple[str, str, str, bool]]:
    """Source files as the plain tuples :func:`_cells_of` takes: 100,000 of them pickle and
    unpickle in 0.10 s, against 0.45 s as named tuples (0.53 as dataclasses)."""
    return [(f.partition_path, f.name, f.instant, f.latest) for f in files]


def _chunks(files: list[SourceFile], workers: int, keys: int) -> list[list[tuple[Any, ...]]]:
    """``files`` as :func:`_rows` in the chunks :func:`_cells_of` reads, as many for each of
    ``workers``: at most :data:`_CHUNK_FILES` files and, with ``keys`` record keys in the
    latest of them, about :data:`_CHUNK_KEYS` keys."""
    most = _CHUNK_FILES
    if keys:
        per_file = keys / max(1, sum(f.latest for f in files))
        most = max(1, min(most, int(_CHUNK_KEYS // per_file)))
    return chunked(_rows(files), workers, most)


def _cells_of(work: _Work, chunk: Sequence[Iterable[Any]]) -> dict[str, list[Content]]:
    """The records of a chunk of data files, by partition and file group: each file's footer
    read once for every partition; encoded cells, but for the record index the keys with
    their files' values (:data:`Located`); both routed to their groups together, with numpy,
    as Arrow arrays (cheap to hand between processes)."""
    out: dict[str, list[Content]] = {p: [[] for _ in range(n)] for p, n in work.groups.items()}
    blooms: tuple[list[str], list[bytes]] | None = ([], []) if BLOOM_FILTERS in out else None
    stats = HudiColumnStatsCells() if COLUMN_STATS in out else None
    record_keys: list[pa.Array] = []
    locations: list[bytes] = []  # the value of each array of record_keys
    for source in map(SourceFile._make, chunk):
        footer = parquet_metadata(work.storage, source.path)
        if blooms is not None:
            bloom = bloom_record(footer, source.partition_path, source.name, work.stamp)
            if bloom is not None:
                blooms[0].append(bloom["key"])
                blooms[1].append(records.encode(bloom))
        if stats is not None:
            stats.add(footer, source.partition_path, source.name)
        if RECORD_INDEX in out and source.latest:
            keys = read_record_keys(work.storage, source.path, work.keygen).column(RECORD_KEY)
            record_keys.extend(keys.cast(pa.large_string()).chunks)
            locations.extend(
                [records.encode(_location(source.partition_path, source.name, source.instant))]
                * keys.num_chunks
            )
    if record_keys:
        _route_keys(record_keys, locations, cast("list[list[Located]]", out[RECORD_INDEX]))
    if blooms is not None:
        made = pa.array(blooms[0], pa.string()), pa.array(blooms[1], pa.binary())
        _route_cells(*made, cast("list[list[Cells]]", out[BLOOM_FILTERS]))
    if stats is not None:
        _route_cells(*stats.cells(), cast("list[list[Cells]]", out[COLUMN_STATS]))
    return out


def _route_cells(keys: pa.Array, values: pa.Array, by_group: list[list[Cells]]) -> None:
    """Cells (string keys, binary values) added to the file groups that hold them."""
    rows = keys.cast(pa.large_binary())
    values = values.cast(pa.large_binary())
    routed = records.file_group_indexes(keys, len(by_group))
    for group in np.unique(routed):
        mask = pa.array(routed == group)
        by_group[group].append((rows.filter(mask), values.filter(mask)))


def _route_keys(
    keys_of: list[pa.Array], values: list[bytes], by_group: list[list[Located]]
) -> None:
    """Record keys (arrays of them, ``values`` the value of each array's keys) added to the
    record-index file groups that hold them: one hash, one stable sort by group and one take
    per group for a chunk of files (where a filter per file and group took twice as long)."""
    keys = pa.concat_arrays(keys_of)
    owners = np.repeat(np.arange(len(keys_of), dtype=np.int32), [len(k) for k in keys_of])
    groups = records.file_group_indexes(keys, len(by_group))
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(len(by_group) + 1))
    values_of = pa.array(values, pa.binary())
    for group in np.flatnonzero(np.diff(bounds)):
        taken = order[bounds[group] : bounds[group + 1]]  # copies: a slice pickles all its buffers
        by_group[group].append((keys.take(taken), pa.array(owners[taken]), values_of))


def _cells(content: Content, partition: str, table: str) -> Iterator[Cell]:
    """A group's content as (row, value) pairs (the record index's in key order)."""
    if partition == RECORD_INDEX:
        rows, values = _sorted_arrays(cast("list[Located]", content), table)
        yield from zip(rows.to_pylist(), values.to_pylist(), strict=True)
        return
    for rows, values in cast("list[Cells]", content):
        yield from zip(rows.to_pylist(), values.to_pylist(), strict=True)


def _as_cells(cells: list[Cell]) -> Cells:
    """(row, value) pairs as :data:`Cells`."""
    return (
        pa.array([row for row, _ in cells], pa.large_binary()),
        pa.array([value for _, value in cells], pa.large_binary()),
    )


@dataclass(frozen=True)
class _GroupWrite:
    storage: Storage
    partition: str
    stamp: str
    table: str  # for errors


def _write_group(work: _GroupWrite, item: tuple[int, Content]) -> list[WriteStat]:
    """One file group of a new partition: its first log file (an empty delete block at the
    stamp) and, when it holds records, its base HFile of them in key order."""
    group, content = item
    storage, partition, stamp = work.storage, work.partition, work.stamp
    folder, file_id = f"{FOLDER}/{partition}", records.file_group_id(partition, group)
    log = f".{file_id}_{stamp}.log.1_{LOG_WRITE_TOKEN}"
    empty = records.delete_block([], partition, stamp)
    storage.create(f"{folder}/{log}", empty)
    stats = [_stat(file_id, f"{partition}/{log}", partition, stamp, 0, len(empty))]
    if partition == RECORD_INDEX:
        rows, values = _sorted_arrays(cast("list[Located]", content), work.table)
    else:
        rows, values = _sorted_cell_arrays(cast("list[Cells]", content), partition, work.table)
    count = len(rows)
    if not count:
        data = b""
    elif partition == DENSE:  # its blocks are Huffman-coded: laid out cell by cell
        cells = list(zip(rows.to_pylist(), values.to_pylist(), strict=True))
        data = records.base_file_of_cells(cells, dense=True)
    else:  # up to millions of cells: laid out by Arrow
        data = records.base_file_of_arrays(rows, values)
    if count:
        name = f"{file_id}_{LOG_WRITE_TOKEN}_{stamp}.hfile"
        storage.create(f"{folder}/{name}", data)
        stats.append(
            _stat(file_id, f"{partition}/{name}", partition, NULL_COMMIT, count, len(data))
        )
    return stats


def _sorted_arrays(found: list[Located], table: str) -> tuple[pa.Array, pa.Array]:
    """Record-index cells of a group's keys (each chunk's with their values), in key order
    (:func:`_key_order`: by their UTF-8 bytes, as HBase compares cells), as two binary arrays
    (rows, values); a key in two files fails the build."""
    if not found:
        return pa.array([], pa.large_binary()), pa.array([], pa.binary())
    keys = pa.concat_arrays([k for k, _, _ in found])
    starts = np.cumsum([0] + [len(v) for _, _, v in found[:-1]])
    owner = np.concatenate(
        [o.to_numpy() + start for (_, o, _), start in zip(found, starts, strict=True)]
    )
    values = pa.concat_arrays([v for _, _, v in found])
    order = _key_order(keys)
    ordered = keys.take(pa.array(order))
    where = _repeated_at(ordered)
    if where is not None:
        raise TableError(
            f"record key {ordered[where].as_py()!r} is in two files of {table}: its "
            "record_index cannot be built (`indexer validate` names them)"
        )
    return ordered.cast(pa.large_binary()), values.take(pa.array(owner[order]))


def _sorted_cell_arrays(cells: list[Cells], partition: str, table: str) -> Cells:
    """Encoded cells in key order as two Arrow binary arrays (rows, values), sorted by
    :func:`_key_order` (a Python sort, with the HFile laid out cell by cell, took seconds at
    100,000 files); two cells of one key fail the build."""
    if not cells:
        return pa.array([], pa.large_binary()), pa.array([], pa.large_binary())
    rows = pa.concat_arrays([r for r, _ in cells])
    order = pa.array(_key_order(rows))
    rows = rows.take(order)
    where = _repeated_at(rows)
    if where is not None:
        key = rows[where].as_py().decode()
        raise TableError(f"{partition} of {table}: two records of key {key!r}")
    return rows, pa.concat_arrays([v for _, v in cells]).take(order)


def _key_order(keys: pa.Array) -> np.ndarray:
    """The positions of ``keys`` (binary or string, no nulls) in the order of their bytes
    compared unsigned, as HBase compares rows: keys of one length (every column-stats and
    bloom-filter key, many record keys) by numpy's stable lexsort of their big-endian 8-byte
    words (550,000 keys of 48 bytes: 99 ms against Arrow's sort_indices' 223), others by
    Arrow (stable too)."""
    lengths = pc.min_max(pc.binary_length(keys))
    width = lengths["min"].as_py()
    if not width or width != lengths["max"].as_py() or keys.null_count:
        return np.asarray(pc.sort_indices(keys).to_numpy())
    large = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
    kind = np.dtype(np.int64 if large else np.int32)
    first = np.frombuffer(keys.buffers()[1], kind, 1, keys.offset * kind.itemsize)
    data = np.frombuffer(keys.buffers()[2], np.uint8, len(keys) * width, int(first[0]))
    words = -(-width // 8)
    padded = np.zeros((len(keys), words * 8), np.uint8)  # zeros after: order kept
    padded[:, :width] = data.reshape(len(keys), width)
    columns = padded.view(">u8")
    return np.lexsort(columns.T[::-1])  # the last key given sorts first


def _repeated_at(ordered: pa.Array) -> int | None:
    """The first position of sorted ``ordered`` whose value the next one repeats, or None."""
    if len(ordered) < 2:
        return None
    same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
    if not pc.any(same).as_py():
        return None
    return int(np.flatnonzero(same.to_numpy(zero_copy_only=False))[0])


def _location(partition_path: str, name: str, instant: str) -> dict[str, Any]:
    """A record-index record's value: the key lives in ``name``'s file group, written at
    ``instant`` (the same for every key of a file: a cell's value holds no key)."""
    location = records.RecordLocation(
        records.partition_identifier(partition_path),
        file_id_of(name) or name,
        records.instant_millis(instant),
    )
    return {
        "key": "",
        "type": records.RecordType.RECORD_INDEX,
        "recordIndexMetadata": records.record_index_value(location),
    }


class HudiPartitionWriter:
    """Hudi's metadata-table partitions of a table, built and kept from outside (the ``hudi``
    format of ``indexer run``): every file this format writes is written here. A build is
    named by its indexing instant; what it is (partitions, ``t``, the metadata instants it
    wrote) is its claim, on storage, so a build resumed by another process finds it."""

    #: the partitions this format builds, and those it drops (``files`` goes with the whole
    #: metadata table: a Hudi writer with it off deletes it)
    BUILDABLE, DROPPABLE = BUILDABLE, FROM_DATA_FILES

    def __init__(self, table: Table) -> None:
        self.table = table

    @staticmethod
    def writer_configs(partitions: Iterable[str]) -> list[str]:
        """The configs every Hudi writer of the table must carry to keep these partitions."""
        return writer_configs(partitions)

    def plan(self, instant_time: str, partitions: Sequence[str], upto: str) -> bytes:
        """Claim a new build at ``instant_time`` (before its instant exists: an Avro indexing
        instant without a claim is HoodieIndexer's) and return Hudi's plan for its
        ``.indexing.requested``."""
        self.claim(Claim(instant_time, tuple(partitions), upto))
        return index_plan(partitions, upto)

    def commit_metadata(self, instant_time: str, upto: str) -> bytes:
        """Hudi's commit metadata of a completed build (``Ti.indexing``), caught up to
        ``upto``; its claim is released once the instant completed (:meth:`release`)."""
        return index_commit(self.require(instant_time).partitions, upto)

    def require(self, instant_time: str) -> Claim:
        claim = self.claimed(instant_time)
        if claim is None:
            raise TableError(f"indexing instant {instant_time} is not a build of this project's")
        return claim

    def restart(self, instant_time: str) -> Claim:
        """Before a build (or its resumption) writes anything: delete what an earlier attempt
        of it left, and forget the metadata instants it wrote."""
        claim = self.require(instant_time)
        self.discard(claim)
        fresh = Claim(claim.instant, claim.partitions, claim.upto)
        self.claim(fresh)
        return fresh

    # --- what there is -----------------------------------------------------------------------

    def hudi(self) -> HudiMetadataTable:
        return HudiMetadataTable(self.table)

    def refusal(self, partitions: Sequence[str]) -> str | None:
        """Why these partitions cannot be built in Hudi's metadata table, or None."""
        unknown = [p for p in partitions if p not in BUILDABLE]
        if unknown:
            return (
                f"--format hudi builds {', '.join(BUILDABLE)} in Apache Hudi's metadata table, "
                f"not {', '.join(unknown)}"
            )
        if FILES not in partitions and FILES not in self.hudi().partitions:
            return (
                f"{self.table.base_uri} has no Apache Hudi metadata table with a completed files "
                "partition: add files to --index-types to create it with them (or run one Hudi "
                "write with hoodie.metadata.enable=true first, or build --format native)"
            )
        return None

    def states(self) -> dict[str, str]:
        """Hudi's metadata partitions and their state (completed, inflight)."""
        hudi = self.hudi()
        return {p: "completed" for p in hudi.partitions} | {p: "inflight" for p in hudi.inflight}

    def group_count(self, partition: str, keys: int) -> int:
        """File groups of a new partition, as Hudi 0.15 counts them: column_stats and
        bloom_filters by config; the record index for its keys (``estimateFileGroupCount``:
        the keys times the growth factor, at most ``max.filegroup.size`` bytes of 48-byte
        entries a group, between the configured fewest and most)."""
        config = self.table.config
        if partition == FILES:
            return 1
        if partition == COLUMN_STATS:
            return config.get(COLUMN_STATS_FILE_GROUPS)
        if partition == BLOOM_FILTERS:
            return config.get(BLOOM_FILTER_FILE_GROUPS)
        fewest, most = (
            config.get(HUDI_RECORD_INDEX_MIN_GROUPS),
            config.get(HUDI_RECORD_INDEX_MAX_GROUPS),
        )
        if fewest == most:
            return fewest
        expected = math.ceil(keys * config.get(HUDI_RECORD_INDEX_GROWTH))
        per_group = config.get(HUDI_RECORD_INDEX_MAX_GROUP_BYTES) // RECORD_INDEX_ENTRY_BYTES
        estimated = expected // max(per_group, 1)
        return max(1, min(most, max(fewest, estimated)))

    def source_files(
        self, upto: str, listed: Callable[[int], None] | None = None
    ) -> list[SourceFile]:
        """The committed base files up to ``upto``, each marked latest of its group or not: from
        a listing of the data folders by name alone (:func:`data_file_paths`: no stat a file;
        a build reads no size from the listing, each footer gives its own). ``listed`` is told
        the listing's count of files before the base files are worked out of it."""
        paths = data_file_paths(self.table.storage)
        if listed is not None:
            listed(paths.num_rows)
        timeline = self.table.timeline.load()
        view = FileSystemView(self.table.timeline, timeline, as_of=upto, listing=lambda: paths)
        committed = view.committed_base_table(upto)

        def path(files: pa.Table) -> pa.Array:
            columns = (files.column("partition_path"), files.column("file_name"))
            return pc.binary_join_element_wise(*columns, "/").combine_chunks()

        # the latest at upto, found by Arrow (a set of 100,000 pairs took a quarter second)
        latest = pc.is_in(path(committed), value_set=path(view.latest_base_table)).to_pylist()
        columns = [committed.column(c).to_pylist() for c in ("partition_path", "file_name")]
        rows = zip(*columns, committed.column("instant_time").to_pylist(), latest, strict=True)
        return list(map(SourceFile._make, rows))

    def _keys(self, files: Sequence[SourceFile]) -> int:
        """The record keys of the latest of ``files``, from their footers."""
        storage = self.table.storage
        return sum(parquet_metadata(storage, f.path).num_rows for f in files if f.latest)

    # --- claims: which pending Avro indexing instants are ours ----------------------------------

    def claim(self, claim: Claim) -> None:
        self.table.storage.overwrite(f"{CLAIMS}/{claim.instant}.json", claim.to_bytes())

    def claimed(self, instant: str) -> Claim | None:
        try:
            return Claim.from_bytes(self.table.storage.read(f"{CLAIMS}/{instant}.json"))
        except StorageFileNotFoundError:
            return None

    def claims(self) -> list[Claim]:
        try:
            names = sorted(self.table.storage.file_names(CLAIMS))
        except StorageFileNotFoundError:
            return []
        found = [self.claimed(n.removesuffix(".json")) for n in names if n.endswith(".json")]
        return [c for c in found if c is not None]

    def release(self, instant: str) -> None:
        path = f"{CLAIMS}/{instant}.json"
        if self.table.storage.exists(path):
            self.table.storage.delete(path)

    # --- build --------------------------------------------------------------------------------

    def build(
        self,
        partitions: Sequence[str],
        upto: str,
        workers: int = 0,
        progress: Callable[[int, int], None] | None = None,
        spark_for: Callable[[int], Any] | None = None,
    ) -> tuple[str, list[WriteStat]]:
        """Each partition's files up to ``upto``, from every data file read once: its folder
        (what an earlier attempt left there deleted first) with its first log files and base
        HFiles at ``<upto>004``; ``files`` from the listing of the data files (the metadata
        table created first, :meth:`create_metadata_table`). Read and written in this process
        and its workers (from :data:`~metadata_table.workers.PROCESS_MIN_FILES` files on), or
        as a Spark job when ``spark_for`` (given the number of data files) returns a session
        (:func:`metadata_table.spark_build.run_grouped`: the same functions on the executors,
        so both engines write the same bytes). Returns that instant and the write stats of its
        deltacommit, which :meth:`complete_initialization` writes. A partition Hudi's metadata
        table lists already (a Hudi writer built it since the build was scheduled) fails the
        build before anything is written."""
        stamp = upto + INDEXING_SUFFIX
        states = self.states()
        taken = [p for p in partitions if p in states]
        if taken:
            raise TableError(
                f"{', '.join(taken)} became {states[taken[0]]} in Apache Hudi's metadata table "
                "after this build was scheduled (a Hudi writer with the index enabled and "
                "hoodie.metadata.index.async=false builds it itself)"
            )
        if FILES in partitions:
            self.create_metadata_table()
        reads = any(p in FROM_DATA_FILES for p in partitions)

        def listed(count: int) -> None:
            # enough files for worker processes: their fork server starts on another core
            # while the base files are worked out of the listing (it takes a second)
            enough = _PROCESS_EARLY_FILES if RECORD_INDEX in partitions else _PROCESS_MIN_FILES
            if count >= enough and workers_for(count, workers)[0] > 1:
                start_processes(__name__)

        files = self.source_files(upto, listed) if reads else []
        keys = self._keys(files) if RECORD_INDEX in partitions else 0
        groups = {p: self.group_count(p, keys) for p in partitions}
        from_files = {p: n for p, n in groups.items() if p in FROM_DATA_FILES}
        work = _Work(self.table.storage, from_files, stamp, virtual_keys(self.table))
        contents: dict[str, list[Content]] = {p: [[] for _ in range(n)] for p, n in groups.items()}
        if FILES in partitions:
            contents[FILES][0] = [self._listing_cells(upto)]
        for partition in partitions:
            self._start_partition(partition, stamp)
        spark = spark_for(len(files)) if spark_for is not None else None
        if spark is not None:
            stats = self._build_on_spark(spark, work, files, contents, progress)
        else:
            stats = self._build_here(work, files, contents, workers, keys, progress)
        logger.info(
            "built %s of %s up to %s from %d data files (%d keys)%s",
            ",".join(partitions),
            self.table.base_uri,
            upto,
            len(files),
            keys,
            " on Spark" if spark is not None else "",
        )
        return stamp, stats

    def _build_here(
        self,
        work: _Work,
        files: list[SourceFile],
        contents: dict[str, list[Content]],
        workers: int,
        keys: int,
        progress: Callable[[int, int], None] | None,
    ) -> list[WriteStat]:
        """The build in this process: the files' records read on worker threads, or processes
        when there is enough to read to pay for the fork server's start (from
        :data:`_PROCESS_MIN_FILES` files, or a record index of :data:`_PROCESS_MIN_KEYS` keys),
        gathered here; then each partition's groups written on threads: sorting, laying out
        and deflating a group's cells runs in Arrow and ISA-L, outside the GIL (10 groups of
        a record index of 10M keys: 1.0 s on two threads, where processes, given the keys
        through pipes, took 2.4 s)."""
        count = workers_for(len(files), workers)[0]
        processes = count > 1 and (len(files) >= _PROCESS_MIN_FILES or keys >= _PROCESS_MIN_KEYS)
        chunks = _chunks(files, count, keys)
        done = 0
        for part, chunk in zip(
            map_chunks(_cells_of, work, chunks, count, processes), chunks, strict=True
        ):
            for partition, by_group in part.items():
                for group, found in enumerate(by_group):
                    cast("list[Any]", contents[partition][group]).extend(found)  # of one kind
            done += len(chunk)
            if progress is not None:
                progress(done, len(files))
        stats: list[WriteStat] = []
        for partition in list(contents):
            items = list(enumerate(contents.pop(partition)))  # the items hold the contents now
            count = workers_for(len(items), workers)[0]
            write = self._group_write(partition, work.stamp)
            for written in map_chunks(_write_group, write, items, count, False):
                stats.extend(written)
        return stats

    def _build_on_spark(
        self,
        spark: Any,
        work: _Work,
        files: list[SourceFile],
        contents: dict[str, list[Content]],
        progress: Callable[[int, int], None] | None,
    ) -> list[WriteStat]:
        """The build as one Spark job: tasks read the files' records (:func:`_cells_of`), a
        shuffle gives each task one file group (with what the driver made: ``files``), which
        it writes (:func:`_write_group`)."""
        from metadata_table.spark_build import run_grouped  # imports pyspark

        slots = [(p, g) for p, by_group in contents.items() for g in range(len(by_group))]
        seeded = {
            (p, g): c for p, by_group in contents.items() for g, c in enumerate(by_group) if c
        }
        writes = {p: self._group_write(p, work.stamp) for p in contents}

        def write(slot: tuple[str, int], content: Content) -> list[WriteStat]:
            return _write_group(writes[slot[0]], (slot[1], content))

        def read(chunk: list[SourceFile]) -> dict[str, list[Content]]:
            return _cells_of(work, chunk)

        return run_grouped(spark, files, read, slots, seeded, write, progress)

    def _group_write(self, partition: str, stamp: str) -> _GroupWrite:
        return _GroupWrite(self.table.storage, partition, stamp, self.table.base_uri)

    def create_metadata_table(self) -> None:
        """Apache Hudi's metadata table, as Hudi 0.15's writer creates it
        (``HoodieBackedTableMetadataWriter.initializeMetaClient``): its ``hoodie.properties``.
        Hudi's readers and writers take it for theirs once ``files`` is published; until then
        Hudi's writers leave it alone (with the metadata table off) or, with it on, start it
        again themselves, as they do any folder without a completed ``files`` partition."""
        storage = self.table.storage
        if storage.exists(FOLDER):  # a build deletes what was there first (discard)
            raise TableError(f"{self.table.base_uri}/{FOLDER} appeared while this build ran")
        config = metadata_table_config(self.table.table_config.name)
        storage.create(f"{FOLDER}/{PROPERTIES_FILE}", config.to_bytes())

    def _listing_cells(self, upto: str) -> Cells:
        """The ``files`` partition at ``upto``, as Hudi's initialization lists it: the data
        partitions, then each one's files and sizes (:func:`data_files_by_partition`)."""
        completed = {i.timestamp for i in self.table.timeline.load().completed()}
        listed = data_files_by_partition(self.table, completed, upto)
        made = [
            records.partition_list_record(sorted(listed)),
            *(records.file_list_record(p, names) for p, names in sorted(listed.items())),
        ]
        return _as_cells([(str(r["key"]).encode(), records.encode(r)) for r in made])

    def _start_partition(self, partition: str, stamp: str) -> None:
        """A new partition's folder (what an earlier attempt left deleted first) with its
        partition metadata; its file groups are written next (:func:`_write_group`)."""
        storage, folder = self.table.storage, f"{FOLDER}/{partition}"
        if storage.exists(folder):
            storage.delete(folder, recursive=True)
        body = f"#partition metadata\ncommitTime={stamp}\npartitionDepth=1\n"
        storage.create(f"{folder}/{PARTITION_METADATA_FILE}", body.encode())

    def complete_initialization(self, lock: LockHandle, stamp: str, stats: list[WriteStat]) -> None:
        """``<stamp>.deltacommit`` on the metadata table (requested, inflight, completed: Hudi's
        bulk insert of a new partition), under the table lock."""
        committed = CommitMetadata.of(stats, "BULK_INSERT", {"schema": records.SCHEMA_JSON})
        timeline = f"{FOLDER}/.hoodie/{stamp}.deltacommit"
        storage = self.table.storage
        lock.ensure_valid()
        for path, content in (
            (f"{timeline}.requested", b""),
            (f"{timeline}.inflight", b""),
            (timeline, json.dumps(committed.to_json(), indent=2).encode()),
        ):
            storage.overwrite(path, content)

    # --- catch-up -----------------------------------------------------------------------------

    def catch_up(self, lock: LockHandle, instant_time: str, instant: Instant) -> bool:
        """Make sure a completed data instant reached the partitions of build ``instant_time``
        (built, not published), under the table lock: unless done before, the records Hudi's
        writer would have written for it, as metadata deltacommit ``<instant>020`` (Hudi's
        writers may write ``<instant>`` for the partitions they keep); at the instant's own
        time when the build makes ``files`` (no Hudi writer writes to a metadata table without
        ``files``: it is all this build's), the deltacommit Hudi's writer would have written.
        A rollback or restore first takes out the catch-up of what it undid. Returns whether it
        was applied now."""
        claim = self.require(instant_time)
        stamp = self._stamp(claim, instant.timestamp)
        if stamp in claim.written:
            return False
        undone: frozenset[str] = frozenset()
        if instant.action in REMOVAL_ACTIONS:
            claim, undone = self._undo_rolled_back(lock, claim, instant)
        made, removed = self._records_of(instant, claim.partitions, undone)
        updated = Claim(claim.instant, claim.partitions, claim.upto, (*claim.written, stamp))
        self.claim(updated)  # first: an abort deletes what it wrote
        write_deltacommit(self.table, self.hudi(), stamp, claim.partitions, made, removed, lock)
        return True

    @staticmethod
    def _stamp(claim: Claim, data_instant: str) -> str:
        """The metadata instant a build's catch-up of ``data_instant`` is written at."""
        return data_instant if FILES in claim.partitions else data_instant + CATCH_UP_SUFFIX

    def _undo_rolled_back(
        self, lock: LockHandle, claim: Claim, instant: Instant
    ) -> tuple[Claim, frozenset[str]]:
        """A rollback or restore of data instants this build caught up: their catch-up
        deltacommits taken out of its partitions, as Hudi's writer rolls back the metadata
        deltacommit of the instant it rolls back (else the record index would keep the keys of
        a rolled-back commit, located in files that are gone). Returns the claim without them,
        and the data instants undone."""
        undone = frozenset(
            i for i in self._removal(instant).rolled_back if self._stamp(claim, i) in claim.written
        )
        if not undone:
            return claim, undone
        stamps = {self._stamp(claim, i) for i in undone}
        for stamp in sorted(stamps):
            undo_deltacommit(self.table, stamp, lock, claim.partitions)
        kept = tuple(w for w in claim.written if w not in stamps)
        updated = Claim(claim.instant, claim.partitions, claim.upto, kept)
        self.claim(updated)
        return updated, undone

    def _removal(self, instant: Instant) -> Removal:
        timeline, storage = self.table.timeline, self.table.storage
        content = timeline.read_content(instant)
        return parse_removal(instant, content, storage.uri(timeline.path(instant)))

    def _records_of(
        self, instant: Instant, partitions: Sequence[str], undone: frozenset[str] = frozenset()
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]:
        """The records Hudi's writer would have written for a data instant, by partition, and
        the record-index keys it deletes. A removal's base files written by ``undone`` instants
        (whose records a build took out again) get no bloom-filter or column-stats tombstone:
        the records they would delete are not there."""
        removed: dict[str, list[str]] = {}
        if instant.action in REMOVAL_ACTIONS:
            removal = self._removal(instant)
            made = removal_records(self.table, removal, [p for p in partitions if p == FILES])
            if undone:
                removal = replace(
                    removal,
                    deleted={
                        p: frozenset(n for n in names if _written_at(n) not in undone)
                        for p, names in removal.deleted.items()
                    },
                )
            others = [p for p in partitions if p != FILES]
            return made | removal_records(self.table, removal, others), removed
        timeline = self.table.timeline
        content = timeline.read_content(instant)
        metadata = CommitMetadata.from_bytes(content, timeline.path(instant))
        made = commit_records(self.table, instant.timestamp, metadata, partitions)
        if RECORD_INDEX in partitions:
            placed, gone = self._key_changes(instant.timestamp, metadata)
            made[RECORD_INDEX] = [
                {**_location(partition, name, instant.timestamp), "key": key}
                for key, (partition, name) in sorted(placed.items())
            ]
            removed[RECORD_INDEX] = sorted(gone)
        return made, removed

    def _key_changes(
        self, instant: str, metadata: CommitMetadata
    ) -> tuple[dict[str, tuple[str, str]], set[str]]:
        """What a commit did to record keys' locations, as Hudi's writer reports it to the
        record index: keys a base file holds that the version it replaced did not (inserted, or
        moved in) at that file; keys the replaced version held and it does not, and keys a log
        file deletes, gone (unless placed elsewhere)."""
        storage, keygen = self.table.storage, virtual_keys(self.table)
        placed: dict[str, tuple[str, str]] = {}
        gone: set[str] = set()
        for stat in metadata.write_stats:
            name = stat.path.rsplit("/", 1)[-1]
            if name.endswith(".parquet"):
                new = set(
                    read_record_keys(storage, stat.path, keygen).column(RECORD_KEY).to_pylist()
                )
                old: set[str] = set()
                previous = self._previous_version(stat)
                if previous is not None:
                    old = set(
                        read_record_keys(storage, previous, keygen).column(RECORD_KEY).to_pylist()
                    )
                placed.update((k, (stat.partition_path, name)) for k in new - old)
                gone |= old - new
            else:
                info = info_of(
                    storage,
                    stat.partition_path,
                    name,
                    stat.file_size_in_bytes,
                    instant,
                    lambda at: at == instant,
                    bloom=False,
                    rows=[],
                    keygen=keygen,
                )
                if info is not None and info.rows is not None:
                    rows = info.rows.filter(info.rows.column(ROW_DELETED))
                    gone.update(rows.column(RECORD_KEY).to_pylist())
        return placed, gone - set(placed)

    def _previous_version(self, stat: WriteStat) -> str | None:
        if stat.prev_commit in (NULL_COMMIT, "", None):
            return None
        folder = stat.partition_path
        suffix = f"_{stat.prev_commit}.parquet"
        for name in self.table.storage.file_names(folder):
            if name.startswith(f"{stat.file_id}_") and name.endswith(suffix):
                return f"{folder}/{name}" if folder else name
        return None

    # --- publication, abort -------------------------------------------------------------------

    def publish(self, lock: LockHandle, partitions: Sequence[str]) -> None:
        """Add the partitions to ``hoodie.table.metadata.partitions`` (sorted, as Hudi writes the
        list), under the table lock: Hudi's readers and writers use them from here on."""

        def published(config: TableConfig) -> TableConfig:
            props = dict(config.props)
            done = {p for p in props.get(METADATA_PARTITIONS, "").split(",") if p}
            props[METADATA_PARTITIONS] = ",".join(sorted(done | set(partitions)))
            inflight = [p for p in props.get(METADATA_PARTITIONS_INFLIGHT, "").split(",") if p]
            if METADATA_PARTITIONS_INFLIGHT in props:
                props[METADATA_PARTITIONS_INFLIGHT] = ",".join(
                    p for p in inflight if p not in partitions
                )
            return TableConfig(props)

        self.remember(partitions)  # first: a crash between leaves no published partition unknown
        self.table.update_table_config(lock, published)

    def remember(self, partitions: Iterable[str]) -> None:
        """Record partitions as built here (what :meth:`deleted_by_writers` looks for)."""
        history = self.published()
        history.update(dict.fromkeys(partitions, True))
        self.table.storage.overwrite(PUBLISHED, json.dumps(sorted(history)).encode())

    def published(self) -> dict[str, bool]:
        """The partitions this project built in Hudi's metadata table (and has not dropped)."""
        try:
            return dict.fromkeys(json.loads(self.table.storage.read(PUBLISHED)), True)
        except StorageFileNotFoundError:
            return {}

    def forget(self, partitions: Iterable[str]) -> None:
        history = {p: True for p in self.published() if p not in set(partitions)}
        self.table.storage.overwrite(PUBLISHED, json.dumps(sorted(history)).encode())

    def abandon(self, instant_time: str) -> None:
        """Delete what build ``instant_time`` wrote and did not publish (its claim stays until
        :meth:`release`, after its instant is deleted)."""
        claim = self.claimed(instant_time)
        if claim is not None:
            self.discard(claim)

    def discard(self, claim: Claim) -> None:
        """Delete what a build of the claim wrote and did not publish: its partitions' folders
        (those not in Hudi's completed list) and its metadata instants; the whole metadata
        table when the build made it (``files``, not completed)."""
        storage = self.table.storage
        completed = set(self.hudi().partitions)
        if FILES in claim.partitions and FILES not in completed:
            if storage.exists(FOLDER):
                logger.info(
                    "deleting %s/%s, a metadata table without a completed files partition (an "
                    "earlier attempt's, or a Hudi writer's that failed: Hudi's writers delete "
                    "it too)",
                    self.table.base_uri,
                    FOLDER,
                )
                storage.delete(FOLDER, recursive=True)
            return
        for partition in claim.partitions:
            if partition not in completed and storage.exists(f"{FOLDER}/{partition}"):
                storage.delete(f"{FOLDER}/{partition}", recursive=True)
        stamps = (claim.upto + INDEXING_SUFFIX, *claim.written)
        for stamp in stamps:
            for state in (".inflight", ".requested", ""):  # completed file first
                path = f"{FOLDER}/.hoodie/{stamp}.deltacommit{state}"
                if storage.exists(path):
                    storage.delete(path)

    def deleted_by_writers(self) -> list[str]:
        """Partitions this project built and published that Hudi's metadata table no longer
        lists: a Hudi writer without the partition's flag (or with the metadata table off)
        deleted them."""
        listed = set(self.hudi().partitions)
        return [p for p in self.published() if p not in listed]

    # --- drop, sync, validate ---------------------------------------------------------------

    def drop(self, lock: LockHandle, partitions: Sequence[str]) -> list[str]:
        """Remove partitions from Hudi's metadata table, as Hudi's ``dropIndex`` does, under the
        table lock: out of ``hoodie.properties`` (both lists) first, then their folders. Returns
        those that were there."""
        present = [p for p in partitions if p in self.states() or self._folder_exists(p)]

        def dropped(config: TableConfig) -> TableConfig:
            props = dict(config.props)
            for key in (METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT):
                if key in props:
                    kept = [p for p in props[key].split(",") if p and p not in partitions]
                    props[key] = ",".join(kept)
            return TableConfig(props)

        self.table.update_table_config(lock, dropped)
        for partition in present:
            if self._folder_exists(partition):
                self.table.storage.delete(f"{FOLDER}/{partition}", recursive=True)
        self.forget(partitions)
        return present

    def _folder_exists(self, partition: str) -> bool:
        return self.table.storage.exists(f"{FOLDER}/{partition}")

    def unapplied(self) -> list[Instant]:
        """The completed data instants Hudi's metadata table does not reflect, oldest first."""
        timeline = self.table.timeline.load()
        missing = set(self.hudi().unapplied(timeline))
        return [i for i in timeline.completed() if i.timestamp in missing]

    def apply(self, lock: LockHandle, instant: Instant) -> list[str]:
        """Write, under the table lock, the deltacommit Hudi's writer would have written for a
        completed data instant it missed (every partition of the metadata table, at the
        instant's own time). Returns those partitions."""
        hudi = self.hudi()
        targets = [p for p in hudi.partitions if p in records.FILE_GROUP_PREFIXES]
        made, removed = self._records_of(instant, targets)
        write_deltacommit(self.table, hudi, instant.timestamp, targets, made, removed, lock)
        return targets

    def validate(self, progress: Callable[[int, int], None] | None = None) -> list[PartitionReport]:
        """Each completed partition against its records made again from the data files: missing,
        stale and wrong keys (``files``: the data files on storage, with their sizes). A log
        file's column stats (Hudi's writer makes them from the records it wrote) are not made
        again and not compared; a date or decimal bound Hudi's reader of log blocks unwrapped
        into an int or bytes (and its compaction stored so) compares as the value it holds."""
        hudi = self.hudi()
        every = [p for p in BUILDABLE if p in hudi.partitions]
        if not every:
            return []
        behind = self.unapplied()
        if behind:
            stamps = [i.timestamp for i in behind]
            return [PartitionReport(p, unapplied=stamps) for p in every]
        reports = []
        if FILES in every:
            reports.append(hudi_files_report(self.table, hudi.file_listing(), FILES))
        partitions = [p for p in every if p in FROM_DATA_FILES]
        if not partitions:
            return reports
        timeline = self.table.timeline.load()
        newest = timeline.completed().last()
        upto = newest.timestamp if newest is not None else NULL_COMMIT
        files = self.source_files(upto)
        groups = dict.fromkeys(partitions, 1)
        work = _Work(self.table.storage, groups, upto, virtual_keys(self.table))
        count, processes = workers_for(len(files), 0)
        expected: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in partitions}
        keys = self._keys(files) if RECORD_INDEX in partitions else 0
        chunks = _chunks(files, count, keys)
        done = 0
        for part, chunk in zip(
            map_chunks(_cells_of, work, chunks, count, processes), chunks, strict=True
        ):
            for partition, (content,) in part.items():
                for key, value in _cells(content, partition, self.table.base_uri):
                    decoded = records.decode(key.decode(), value)
                    expected[partition][key.decode()] = _comparable(decoded)
            done += len(chunk)
            if progress is not None:
                progress(done, len(files))
        for partition in partitions:
            stored = {
                key: _comparable(record)
                for key, record in hudi.records(partition).items()
                if not _deleted(record) and not _of_log_file(record)
            }
            want = expected[partition]
            reports.append(
                PartitionReport(
                    partition,
                    missing=sorted(set(want) - set(stored)),
                    stale=sorted(set(stored) - set(want)),
                    wrong=sorted(k for k in want.keys() & stored.keys() if want[k] != stored[k]),
                )
            )
        return reports


def _written_at(name: str) -> str | None:
    """The instant that wrote a base file (None for a log file)."""
    base = BaseFile.parse("", name)
    return base.instant_time if base is not None else None


def _deleted(record: Mapping[str, Any]) -> bool:
    for field in ("ColumnStatsMetadata", "BloomFilterMetadata"):
        if record.get(field) is not None:
            return bool(record[field].get("isDeleted"))
    return False


def _of_log_file(record: Mapping[str, Any]) -> bool:
    stats = record.get("ColumnStatsMetadata")
    return stats is not None and ".log." in str(stats.get("fileName", ""))


def _comparable(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record as a rebuild must reproduce it: no meta fields or key, no bloom stamp or
    record-index instant (each build's own), bounds as the values they hold."""
    out = {k: v for k, v in record.items() if not k.startswith("_hoodie") and k != "key"}
    bloom = out.get("BloomFilterMetadata")
    if bloom is not None:
        out["BloomFilterMetadata"] = {**bloom, "timestamp": None}
    location = out.get("recordIndexMetadata")
    if location is not None:
        out["recordIndexMetadata"] = {**location, "instantTime": None}
    stats = out.get("ColumnStatsMetadata")
    if stats is not None:
        out["ColumnStatsMetadata"] = {
            **stats,
            "minValue": _bound(stats.get("minValue")),
            "maxValue": _bound(stats.get("maxValue")),
        }
    return out


def _bound(wrapped: Any) -> Any:
    """A bound as the value it holds: a date's days whether in a DateWrapper or an IntWrapper,
    a decimal's bytes of its scale-15 unscaled value whether in a DecimalWrapper or, as
    Hudi's log reader leaves it, a BytesWrapper."""
    found = records.unwrap(wrapped)
    if found is None:
        return None
    wrapper, value = found
    if wrapper == "DecimalWrapper":
        unscaled = int(value.scaleb(records.DECIMAL_SCALE))
        return unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)
    return value


def writer_configs(partitions: Iterable[str]) -> list[str]:
    """The configs every Hudi writer of the table must carry to keep these partitions."""
    flags = [f"{WRITER_FLAGS[p]}=true" for p in partitions if p in WRITER_FLAGS]
    return ["hoodie.metadata.enable=true", *flags]


def _stat(file_id: str, path: str, partition: str, prev: str, writes: int, size: int) -> WriteStat:
    return WriteStat(
        file_id=file_id,
        path=path,
        partition_path=partition,
        prev_commit=prev,
        num_writes=writes,
        num_inserts=writes,
        total_write_bytes=size,
        file_size_in_bytes=size,
    )
