"""The write planner both engines share: which file groups a batch's records go to, with one
file-id rule.

An engine finds, for every record, the file group that holds its key (tagging: the local engine
reads the keys of the files the bloom index keeps; the Spark engine joins with the keys of the
touched partitions' files), or sends it to a new file group, or to its bucket's. It then hands
each group's rows to :func:`plan_group`, which deduplicates them and says what the group's new
base file (or files) will be: a merge into the existing base file, a delete from it, or new
files of at most ``per_file`` records.

File ids: a new file group is ``<uuid4>-0``; when its records need more than one file, file n > 0
is ``<uuid5(first id/n)>-0``, derived from the first so that any task attempt plans the same
files; a bucket's file group is its zero-padded number followed by a fixed suffix, the same in
every commit so that writers of one bucket meet.
"""

from __future__ import annotations

import uuid

import pyarrow as pa

from timeline.errors import BadRecordsError
from timeline.fs_view import BaseFile
from timeline.markers import IOType
from writer.files import FileGroupWrite, dedupe


def bucket_file_id(bucket: int) -> str:
    """The file id of bucket ``bucket``: the same in every commit, so writers of one bucket meet."""
    return f"{bucket:08d}-0000-0000-0000-000000000000-0"


def new_file_id() -> str:
    return f"{uuid.uuid4()}-0"


def derived_file_id(file_id: str, n: int) -> str:
    """The id of file ``n`` of a new file group whose records need several files."""
    return file_id if n == 0 else f"{uuid.uuid5(uuid.NAMESPACE_URL, f'{file_id}/{n}')}-0"


def records_per_file(row_bytes: int, max_records: int, max_file_bytes: int) -> int:
    """How many records go into one new base file, from the records' average size in memory."""
    return max(1, min(max_records, max_file_bytes // max(1, row_bytes)))


def plan_group(
    partition: str,
    file_id: str,
    base: BaseFile | None,
    data: pa.Table,
    keys: list[str],
    *,
    deleting: bool,
    precombine: str | None,
    per_file: int | None = None,
) -> list[FileGroupWrite]:
    """What one file group's records become. ``data`` holds the records (without the engine's
    own columns), ``keys`` their record keys, ``base`` the group's latest base file (None: a new
    group, or a bucket not written yet). Duplicates of a key keep the largest precombine value
    (an error without a precombine field, except for deletes). A new group is split into files of
    at most ``per_file`` records (None: one file, as a bucket's group)."""
    values = None
    if precombine and not deleting:
        if precombine not in data.column_names:
            raise BadRecordsError(precombine, "the precombine field is missing")
        values = data.column(precombine).to_pylist()
    keep = dedupe([(partition, k) for k in keys], values, allow_duplicates=deleting)
    if len(keep) != len(keys):
        data = data.take(pa.array(keep, pa.int64()))
        keys = [keys[i] for i in keep]
    if deleting:
        if base is None:
            return []
        return [FileGroupWrite(partition, file_id, IOType.MERGE, base, delete_keys=set(keys))]
    if base is not None:
        return [FileGroupWrite(partition, file_id, IOType.MERGE, base, data, keys)]
    per = per_file or max(1, len(keys))
    return [
        FileGroupWrite(
            partition,
            derived_file_id(file_id, n),
            IOType.CREATE,
            None,
            data.slice(start, per),
            keys[start : start + per],
        )
        for n, start in enumerate(range(0, len(keys), per))
    ]
