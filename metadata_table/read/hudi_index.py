"""Apache Hudi's own metadata table as the index of reads, on a table whose index of ours lacks
the partition: Hudi's ``column_stats`` prune files, its ``record_index`` answers key lookups
exactly, its ``bloom_filters`` drop base files that cannot hold a key. Used only when that
metadata table reflects every completed data instant of the snapshot (else nothing of it is
used, with a warning), and only for the partitions ``hoodie.table.metadata.partitions`` lists
(``indexer.read.hudi_metadata_table=false``: never).

What is decoded is kept for the snapshot: a column's stats records on first use (their keys
start with the column's hash: only those are decoded), bloom filters per file asked about, and
record locations per key (only the file groups that hold the asked keys are read).

A record is used only where its value means what our filters compare: Hudi stores a Parquet
footer's statistic in a wrapper of its physical type, so a value is taken when the wrapper
fits the column's type (integers, floating point, strings, booleans, dates in days; a timestamp
of micro- or milliseconds stored as a long; a decimal of scale 15 or less, which Hudi's
scale-15 wrapper holds exactly). Any other record is left out, which keeps the file for every
filter on that column, as an unindexed file is kept.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from metadata_table.hudi_table import HudiMetadataTable, KeySeek
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, RECORD_INDEX, VALUE_TYPE
from metadata_table.records import value_kind
from timeline.config import HUDI_METADATA_READ
from timeline.formats import metadata_records as mdt
from timeline.formats.hudi_bloom import HudiBloomFilter
from timeline.table import Table
from timeline.timeline import Timeline

logger = logging.getLogger(__name__)

#: the partitions of Hudi's metadata table reads can use
SERVED = (COLUMN_STATS, BLOOM_FILTERS, RECORD_INDEX)
SOURCE = "Apache Hudi's metadata table"

#: our value kind -> the wrappers whose value is that kind's value as is
_FITS = {
    "int": {"IntWrapper", "LongWrapper"},
    "float": {"FloatWrapper", "DoubleWrapper"},
    "string": {"StringWrapper"},
    "bool": {"BooleanWrapper"},
}
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)
_HUDI_DECIMAL_SCALE = 15


class HudiIndex:
    """The partitions of Hudi's metadata table one snapshot reads through (see the module
    docstring); :meth:`open` decides whether there are any."""

    def __init__(
        self, hudi: HudiMetadataTable, partitions: Sequence[str], schema: Callable[[], pa.Schema]
    ) -> None:
        self.hudi = hudi
        self.partitions = tuple(partitions)
        self._schema = schema
        self._columns: dict[str, pa.Table] = {}
        self._filters: dict[str, HudiBloomFilter | None] = {}
        self._locations: dict[str, tuple[str, str] | None] = {}

    @classmethod
    def open(
        cls,
        table: Table,
        timeline: Timeline,
        wanted: Iterable[str],
        schema: Callable[[], pa.Schema],
    ) -> HudiIndex | None:
        """The index over Hudi's metadata table of ``table`` for the ``wanted`` partitions it
        has completed, or None: none of them there, or that table does not reflect every
        completed data instant of ``timeline``, or cannot be read (both warned)."""
        asked = set(wanted) & set(SERVED)
        if not asked & set(table.table_config.hudi_metadata_partitions):
            return None  # (the table's config as opened: no read of it per snapshot)
        if not table.config.get(HUDI_METADATA_READ):
            return None
        hudi = HudiMetadataTable(table)
        served = [p for p in SERVED if p in asked and p in hudi.partitions]
        if not served or not hudi.present:
            return None
        try:
            behind = hudi.unapplied(timeline)
        except Exception as e:  # unreadable: not used, as any metadata the reader cannot trust
            logger.warning(
                "Apache Hudi's metadata table of %s cannot be read (%s): its indexes are not used",
                table.base_uri,
                e,
            )
            return None
        if behind:
            logger.warning(
                "Apache Hudi's metadata table of %s does not reflect %d completed instant(s) "
                "(%s): its indexes are not used",
                table.base_uri,
                len(behind),
                ", ".join(behind[:5]),
            )
            return None
        return cls(hudi, served, schema)

    # --- column_stats ----------------------------------------------------------------------------

    def column_records(self, column: str, partitions: Iterable[str]) -> pa.Table:
        """One column's live stats in the data ``partitions`` as our ``column_stats`` records
        hold them: ``column_name``, ``partition`` (``.`` for a table without partitions),
        ``file_name``, ``value_type``, ``min_value`` and ``max_value`` (VALUE_TYPE structs),
        ``null_count``, ``value_count``; records whose values do not fit the column's type are
        left out. Kept per column (a snapshot lists its partitions once)."""
        if column not in self._columns:
            self._columns[column] = self._column_records(column, partitions)
        return self._columns[column]

    def _column_records(self, column: str, partitions: Iterable[str]) -> pa.Table:
        schema = self._schema()
        at = schema.get_field_index(column)
        kind = value_kind(schema.field(at).type) if at >= 0 else None
        if kind is None:
            return _records(column, "int", [])
        # a record's key: the column's hash, its data partition's, its file's
        by_prefix = {mdt.column_stats_prefix(column, p).encode(): p for p in partitions}
        width = len(next(iter(by_prefix), b""))
        found = self.hudi.select(COLUMN_STATS, KeySeek(prefixes=tuple(by_prefix)))
        convert = _converter(kind, schema.field(at).type)
        rows = []
        for key, record in found.items():
            stats = record.get("ColumnStatsMetadata") or {}
            if stats.get("isDeleted") or stats.get("columnName") != column:
                continue
            low, high = convert(stats.get("minValue")), convert(stats.get("maxValue"))
            if low is _UNFIT or high is _UNFIT:
                continue
            partition = by_prefix[key.encode()[:width]] or mdt.NON_PARTITIONED
            rows.append(
                (partition, stats["fileName"], low, high, stats["nullCount"], stats["valueCount"])
            )
        return _records(column, kind, rows)

    # --- bloom_filters ---------------------------------------------------------------------------

    def bloom_matrix(
        self,
        partitions: Sequence[str],
        names: Sequence[str],
        keys: Sequence[str],
        only: np.ndarray | None = None,
    ) -> np.ndarray:
        """(len(keys), len(names)): whether the bloom filter of file ``partitions[i]/names[i]``
        may hold each key; files ``only`` leaves out, log files and files without a filter
        answer True. Each file's filter is tested on every key at once, and the keys are hashed
        once per filter size."""
        out = np.ones((len(keys), len(names)), dtype=bool)
        asked = (np.flatnonzero(only) if only is not None else np.arange(len(names))).tolist()
        self._load_filters([(partitions[i], names[i]) for i in asked])
        hashed: dict[tuple[int, int], np.ndarray] = {}
        for i in asked:
            found = self._filters.get(f"{partitions[i]}/{names[i]}")
            if found is not None:
                size = (found.hashes, found.bits)
                if size not in hashed:
                    hashed[size] = found.positions(keys)
                out[:, i] = found.might_contain(keys, hashed[size])
        return out

    def _load_filters(self, files: Sequence[tuple[str, str]]) -> None:
        missing = {
            mdt.bloom_filter_key(p, n).encode(): f"{p}/{n}"
            for p, n in files
            if n.endswith(".parquet") and f"{p}/{n}" not in self._filters
        }
        if not missing:
            return
        found = self.hudi.select(BLOOM_FILTERS, KeySeek(frozenset(missing)))
        for key, path in missing.items():
            meta = (found.get(key.decode()) or {}).get("BloomFilterMetadata") or {}
            text = meta.get("bloomFilter")
            if meta.get("isDeleted") or not text:
                self._filters[path] = None
                continue
            try:
                self._filters[path] = HudiBloomFilter.parse(text, str(meta.get("type")))
            except ValueError as e:  # a filter not read here: the file is kept
                logger.warning("Hudi's bloom filter of %s is not used: %s", path, e)
                self._filters[path] = None

    # --- record_index ----------------------------------------------------------------------------

    @cached_property
    def _record_groups(self) -> int:
        return len(self.hudi.slices(RECORD_INDEX))

    def locate(self, keys: Iterable[str]) -> pa.Table:
        """Where Hudi's ``record_index`` says each key lives (keys it does not hold left out):
        ``key``, ``partition`` (the data partition's path) and ``file_id``."""
        wanted = list(dict.fromkeys(keys))
        missing = [k for k in wanted if k not in self._locations]
        if missing and self._record_groups:
            asked = {k.encode() for k in missing}
            groups = {mdt.file_group_index(k, self._record_groups) for k in missing}
            found = self.hudi.select(RECORD_INDEX, KeySeek(frozenset(asked)), groups)
            for key in missing:
                info = (found.get(key) or {}).get("recordIndexMetadata")
                if info is None:
                    self._locations[key] = None
                else:
                    where = mdt.record_location(info)
                    self._locations[key] = (where.partition_path, where.file_id)
        rows = [(k, self._locations.get(k)) for k in wanted]
        held = [(k, where) for k, where in rows if where is not None]
        return pa.table(
            {
                "key": pa.array([k for k, _ in held], pa.string()),
                "partition": pa.array([w[0] for _, w in held], pa.string()),
                "file_id": pa.array([w[1] for _, w in held], pa.string()),
            }
        )


class _Unfit:
    """A value that does not fit its column's type (the record is left out)."""


_UNFIT: Any = _Unfit()


def _converter(kind: str, column_type: pa.DataType) -> Callable[[Any], Any]:
    """Hudi's wrapped min or max -> the value of our ``kind`` (None for null), or :data:`_UNFIT`."""
    fits = _FITS.get(kind, set())
    if kind == "int" and pa.types.is_unsigned_integer(column_type):
        fits = set()  # Parquet orders unsigned values unsigned, Hudi's wrappers are signed
    scale = 1
    if kind == "timestamp":
        units = {"us": 1, "ms": 1000}
        unit = getattr(column_type, "unit", "")
        if unit not in units:
            return lambda wrapped: _UNFIT
        scale = units[unit]
    decimal_ok = kind == "decimal" and getattr(column_type, "scale", 99) <= _HUDI_DECIMAL_SCALE
    date_ok = kind == "date" and pa.types.is_date32(column_type)

    def convert(wrapped: Any) -> Any:
        unwrapped = mdt.unwrap(wrapped)
        if unwrapped is None:
            return None
        wrapper, value = unwrapped
        if wrapper in fits:
            return value
        if kind == "timestamp" and wrapper in ("LongWrapper", "TimestampMicrosWrapper"):
            micros = int(value) * (scale if wrapper == "LongWrapper" else 1)
            return _EPOCH + dt.timedelta(microseconds=micros)
        if date_ok and wrapper == "DateWrapper":
            return _EPOCH_DAY + dt.timedelta(days=int(value))
        if decimal_ok and wrapper == "DecimalWrapper":
            return str(value)
        return _UNFIT

    return convert


def _records(column: str, kind: str, rows: list[tuple[str, str, Any, Any, int, int]]) -> pa.Table:
    """Our column-stats record columns for ``rows`` of (data partition, file name, min, max,
    null count, value count)."""
    field = VALUE_TYPE.field(kind)

    def struct(values: list[Any]) -> pa.StructArray:
        arrays = [
            pa.array(values, field.type) if f.name == kind else pa.nulls(len(values), f.type)
            for f in VALUE_TYPE
        ]
        return pa.StructArray.from_arrays(arrays, fields=list(VALUE_TYPE))

    n = len(rows)
    return pa.table(
        {
            "column_name": pa.array([column] * n, pa.string()),
            "partition": pa.array([r[0] for r in rows], pa.string()),
            "file_name": pa.array([r[1] for r in rows], pa.string()),
            "value_type": pa.array([kind] * n, pa.string()),
            "min_value": struct([r[2] for r in rows]),
            "max_value": struct([r[3] for r in rows]),
            "null_count": pa.array([r[4] for r in rows], pa.int64()),
            "value_count": pa.array([r[5] for r in rows], pa.int64()),
        }
    )
