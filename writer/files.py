"""One file group's new base file: merge the incoming rows (or deletes) into the current base file,
add the Hudi meta columns, and encode it as Parquet with a bloom filter on the record key.

Shared by both write engines: the local engine calls it in the writing process; the Spark engine
calls it in executors, one file group at a time. Nothing here touches markers or the timeline:
the caller creates the marker first and stores the bytes after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata_table.bloom import BloomSizing
from metadata_table.records import DataFileInfo, changed_rows, info_from_bytes, with_record_keys
from timeline.commit_metadata import NULL_COMMIT, WriteStat
from timeline.errors import BadRecordsError, FileAlreadyExistsError
from timeline.fs_view import PARTITION_METADATA_FILE, BaseFile, base_file_name, read_parquet
from timeline.keys import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    FILE_NAME,
    META_COLUMNS,
    PARTITION_PATH,
    RECORD_KEY,
    KeyGenerator,
)
from timeline.markers import IOType, Marker
from timeline.storage import Storage
from writer.parquet_layout import Node, conform_layout
from writer.schema import conform


@dataclass
class FileGroupWrite:
    """One file group a write produces a new base file for."""

    partition: str
    file_id: str
    io_type: IOType
    base: BaseFile | None = None
    incoming: pa.Table | None = None  # rows to insert or update
    incoming_keys: list[str] = field(default_factory=list)
    delete_keys: set[str] = field(default_factory=set)
    #: keys an upsert moves to another partition (a global index): dropped from this group
    move_keys: set[str] = field(default_factory=set)

    def marker(self, write_token: str, instant_time: str) -> Marker:
        name = base_file_name(self.file_id, write_token, instant_time)
        return Marker(self.partition, name, self.io_type)


@dataclass(frozen=True)
class FileLayout:
    """What a commit's files look like: ``schema``, the data columns after this commit's schema
    evolution (None for a delete: each file keeps its own), and ``template``, the Parquet schema
    of the table's newest file, whose list and map layout new files take (None: pyarrow's)."""

    schema: pa.Schema | None = None
    template: Node | None = None
    #: the newest file has Hudi's meta columns: a table without meta fields keeps them in its
    #: files as Hudi's writer left them (null but the file name)
    meta_columns: bool = True
    #: the newest file has Hudi's bloom filter footer (``indexer.write.hudi_bloom_footer=auto``
    #: writes it then)
    hudi_bloom_footer: bool = False


@dataclass(frozen=True)
class EncodedFile:
    """A base file ready to store at ``path``, with its write stat and index information."""

    path: str
    data: bytes
    stat: WriteStat
    info: DataFileInfo


def ensure_partition_metadata(storage: Storage, partition: str, instant_time: str) -> None:
    """Create the partition's ``.hoodie_partition_metadata`` unless it exists."""
    path = f"{partition}/{PARTITION_METADATA_FILE}" if partition else PARTITION_METADATA_FILE
    depth = len(partition.split("/")) if partition else 0
    body = f"#partition metadata\ncommitTime={instant_time}\npartitionDepth={depth}\n"
    with contextlib.suppress(FileAlreadyExistsError):
        storage.create(path, body.encode())


def encode_file_group(
    storage: Storage,
    instant_time: str,
    target: FileGroupWrite,
    marker: Marker,
    precombine: str | None,
    bloom: BloomSizing,
    seq_prefix: int,
    seq_start: int = 0,
    layout: FileLayout | None = None,
    virtual: KeyGenerator | None = None,
) -> EncodedFile:
    """The new base file of ``target`` (named by ``marker``), in ``layout``. Commit sequence
    numbers are ``<T>_<seq_prefix>_<seq_start + i>``. With ``virtual`` (a table without meta
    fields) the file holds the data columns alone, sorted by their record keys (made by that
    key generator), as Hudi writes such tables (with the meta columns, null but the file name,
    where the table's newest file has them); its bloom filter goes to the index only."""
    name = marker.file_name
    rows, counts, changes = _merged_rows(
        storage, instant_time, target, precombine, seq_prefix, seq_start, virtual
    )
    rows = rows.set_column(
        rows.schema.get_field_index(FILE_NAME),
        FILE_NAME,
        pa.array([name] * rows.num_rows, pa.string()),
    )
    rows = rows.sort_by(RECORD_KEY)
    sink = pa.BufferOutputStream()
    if virtual is not None:
        keys = rows.column(RECORD_KEY)
        if layout is not None and layout.meta_columns:  # as the table's files hold them
            for column in (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH):
                at = rows.schema.get_field_index(column)
                rows = rows.set_column(at, column, pa.nulls(rows.num_rows, pa.string()))
        else:
            rows = rows.drop_columns(list(META_COLUMNS))
        pq.write_table(rows, sink, compression="snappy")
    else:
        footer = bloom.hudi_footer_metadata(
            rows.column(RECORD_KEY).to_pylist(),
            layout is not None and layout.hudi_bloom_footer,
        )
        if footer:
            rows = rows.replace_schema_metadata({**(rows.schema.metadata or {}), **footer})
        pq.write_table(
            rows,
            sink,
            compression="snappy",
            bloom_filter_options={RECORD_KEY: bloom.parquet_options(rows.num_rows)},
        )
    data = sink.getvalue().to_pybytes()
    if layout is not None and layout.template is not None:
        data = conform_layout(data, layout.template)
    stat = WriteStat(
        file_id=target.file_id,
        path=marker.data_path,
        partition_path=target.partition,
        prev_commit=target.base.instant_time if target.base else NULL_COMMIT,
        num_writes=rows.num_rows,
        num_deletes=counts["deletes"],
        num_update_writes=counts["updates"],
        num_inserts=counts["inserts"],
        total_write_bytes=len(data),
        file_size_in_bytes=len(data),
    )
    info = info_from_bytes(target.partition, name, instant_time, data)
    if virtual is not None:  # no key column in the file: the filter is built from the keys
        values = [k for k in keys.to_pylist() if k is not None]
        info.bloom = bytes(bloom.build(values).bitset)
    info.rows, info.replaced = changed_rows(*changes, instant_time)
    return EncodedFile(marker.data_path, data, stat, info)


def with_meta(
    rows: pa.Table,
    keys: Sequence[str],
    partition: str,
    instant_time: str,
    seq_prefix: int,
    seq_start: int = 0,
) -> pa.Table:
    """``rows`` with the Hudi meta columns in front (the file name is filled in later)."""
    n = rows.num_rows
    t = instant_time
    meta = [
        pa.array([t] * n, pa.string()),
        pa.array([f"{t}_{seq_prefix}_{seq_start + i}" for i in range(n)], pa.string()),
        pa.array(list(keys), pa.string()),
        pa.array([partition] * n, pa.string()),
        pa.array([""] * n, pa.string()),
    ]
    return pa.Table.from_arrays(
        meta + list(rows.columns), names=[*META_COLUMNS, *rows.column_names]
    )


#: what a file group's write changed, for the indexes keyed by record key: the rows written,
#: which of them update a record in place, the stored rows deleted, and the stored rows superseded
Changes = tuple[pa.Table, pa.Array, pa.Table, pa.Table]


def _merged_rows(
    storage: Storage,
    instant_time: str,
    target: FileGroupWrite,
    precombine: str | None,
    seq_prefix: int,
    seq_start: int,
    virtual: KeyGenerator | None = None,
) -> tuple[pa.Table, dict[str, int], Changes]:
    counts = {"inserts": 0, "updates": 0, "deletes": 0}
    incoming = None
    if target.incoming is not None:
        incoming = with_meta(
            target.incoming,
            target.incoming_keys,
            target.partition,
            instant_time,
            seq_prefix,
            seq_start,
        )
    if target.base is None:
        assert incoming is not None
        counts["inserts"] = incoming.num_rows
        nothing = _changed(incoming.slice(0, 0))
        in_place = pa.repeat(pa.scalar(False), incoming.num_rows)
        return incoming, counts, (_changed(incoming), in_place, nothing, nothing)
    existing = with_record_keys(read_parquet(storage, target.base.path), virtual, target.base.path)
    existing_keys = existing.column(RECORD_KEY)
    deleted = moved = existing.slice(0, 0)
    if target.delete_keys or target.move_keys:
        gone = pa.array(sorted(target.delete_keys | target.move_keys), pa.string())
        hit = pc.is_in(existing_keys, value_set=gone)
        counts["deletes"] = pc.sum(hit).as_py() or 0
        removed = existing.filter(hit)
        doomed = pc.is_in(
            removed.column(RECORD_KEY), value_set=pa.array(sorted(target.delete_keys), pa.string())
        )
        deleted, moved = removed.filter(doomed), removed.filter(pc.invert(doomed))
        existing = existing.filter(pc.invert(hit))
        existing_keys = existing.column(RECORD_KEY)
    if incoming is None:
        nothing = _changed(existing.slice(0, 0))
        no_flags = pa.array([], pa.bool_())
        return existing, counts, (nothing, no_flags, _changed(deleted), _changed(moved))
    incoming = _drop_stale(existing, incoming, precombine)
    replaced = pc.is_in(existing_keys, value_set=incoming.column(RECORD_KEY))
    in_place = pc.is_in(incoming.column(RECORD_KEY), value_set=existing_keys)
    counts["updates"] = pc.sum(replaced).as_py() or 0
    counts["inserts"] = incoming.num_rows - counts["updates"]
    superseded = pa.concat_tables([existing.filter(replaced), moved])
    # the stored rows take the commit's schema (new columns null, promoted types)
    kept = conform(existing.filter(pc.invert(replaced)), incoming.schema)
    changes = (_changed(incoming), in_place, _changed(deleted), _changed(superseded))
    return pa.concat_tables([kept, incoming]), counts, changes


def _changed(rows: pa.Table) -> pa.Table:
    """Rows as the index's changes take them: the record key and the data columns."""
    return rows.drop_columns(
        [c for c in META_COLUMNS if c != RECORD_KEY and c in rows.column_names]
    )


def _drop_stale(existing: pa.Table, incoming: pa.Table, precombine: str | None) -> pa.Table:
    """Drop incoming rows whose stored version has a larger precombine value."""
    if not precombine or precombine not in existing.column_names:
        return incoming
    stored = dict(
        zip(
            existing.column(RECORD_KEY).to_pylist(),
            existing.column(precombine).to_pylist(),
            strict=True,
        )
    )
    keep = [
        key not in stored or not_less(value, stored[key])
        for key, value in zip(
            incoming.column(RECORD_KEY).to_pylist(),
            incoming.column(precombine).to_pylist(),
            strict=True,
        )
    ]
    return incoming.filter(pa.array(keep, pa.bool_()))


def dedupe(
    keys: Sequence[tuple[str, str]],
    precombine_values: Sequence[object] | None,
    allow_duplicates: bool = False,
) -> list[int]:
    """Row indices to keep: one per (partition, key), the largest precombine value (the last one
    on ties). Without a precombine field nothing says which duplicate wins, so duplicates are an
    error unless ``allow_duplicates`` (deletes: any copy names the same record)."""
    best: dict[tuple[str, str], int] = {}
    for i, key in enumerate(keys):
        j = best.get(key)
        if j is not None and precombine_values is None and not allow_duplicates:
            raise BadRecordsError(
                None,
                f"record key {key[1]!r} appears more than once in the batch and the table has "
                "no precombine field to choose between the copies",
            )
        if (
            j is None
            or precombine_values is None
            or not_less(precombine_values[i], precombine_values[j])
        ):
            best[key] = i
    return sorted(best.values())


def not_less(a: object, b: object) -> bool:
    """a >= b for precombine values; None sorts first."""
    if b is None:
        return True
    if a is None:
        return False
    try:
        return not (a < b)  # type: ignore[operator]
    except TypeError:
        return True
