"""Record keys and partition paths, exactly as Apache Hudi 0.x's key generators make them.

The generator is the table's ``hoodie.table.keygenerator.class`` (Hudi's Spark, Avro and Flink
class names alike; absent, it is inferred as Hudi infers it):

* **Simple**: one key field, its value as a string; one partition field;
* **Complex**: keys ``f1:v1,f2:v2`` (a null value ``__null__``, an empty one ``__empty__``), but
  Simple's for one key field (what Hudi 0.15 writes); partition values joined with ``/``;
* **NonPartitioned**: the key as Simple's (Complex's for several fields); partition ``""``;
* **TimestampBased**: the partition is the field's time formatted with
  ``hoodie.keygen.timebased.*`` (``timestamp.type``, ``input.dateformat``, ``output.dateformat``,
  ``timezone``, ``input.timezone``, ``output.timezone``, ``timestamp.scalar.time.unit``);
* **Custom**: each partition field is ``field:SIMPLE`` or ``field:TIMESTAMP``; the key is
  Simple's for one field, Complex's for several.

Partition values: a null or empty value is ``__HIVE_DEFAULT_PARTITION__``; hive-style tables
write ``field=value``; URL encoding escapes as Hive's ``escapePathName`` (``:`` becomes ``%3A``).
Values become strings as Java prints them (``1.0``, ``true``, ``2024-03-01``; a timestamp is its
Avro long).

Hudi does not store every setting in ``hoodie.properties`` (0.15 keeps neither the
``timestamp.type`` nor a Custom generator's field types): those come from the writer's
configuration (``--conf hoodie.keygen.timebased.timestamp.type=EPOCHMILLISECONDS``,
``--conf hoodie.datasource.write.partitionpath.field=part:SIMPLE,ts:TIMESTAMP``), and a table that
needs one names it in the error. :meth:`KeyGenerator.verify` checks the settings against rows
already stored, so a wrong guess is refused instead of writing a second copy of a record.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timeline.errors import BadRecordsError, TableConfigError
from timeline.table_config import (
    HIVE_STYLE_PARTITIONING,
    KEY_GENERATOR,
    PARTITION_FIELDS,
    PROPERTIES_FILE,
    RECORD_KEY_FIELDS,
    TableConfig,
)

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NULL_KEY = "__null__"
EMPTY_KEY = "__empty__"
URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode"
WRITE_PARTITION_FIELDS = "hoodie.datasource.write.partitionpath.field"
TIMEBASED = "hoodie.keygen.timebased."

#: the five columns Hudi's writers put first in every base file (``hoodie.populate.meta.fields``)
COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
META_COLUMNS = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)

_KINDS = {
    "SimpleKeyGenerator": "simple",
    "SimpleAvroKeyGenerator": "simple",
    "ComplexKeyGenerator": "complex",
    "ComplexAvroKeyGenerator": "complex",
    "NonpartitionedKeyGenerator": "nonpartitioned",
    "NonpartitionedAvroKeyGenerator": "nonpartitioned",
    "TimestampBasedKeyGenerator": "timestamp",
    "TimestampBasedAvroKeyGenerator": "timestamp",
    "CustomKeyGenerator": "custom",
    "CustomAvroKeyGenerator": "custom",
}
_TYPES = {"SIMPLE": "simple", "COMPLEX": "complex", "NON_PARTITION": "nonpartitioned"}
_TYPES |= {"TIMESTAMP": "timestamp", "CUSTOM": "custom"}
# Hive's escapePathName: control characters and these
_ESCAPED = {chr(c) for c in range(1, 32)} | set("\"#%'*/:=?\\\x7f{[]^")


def escape_path_name(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


# --- values as Java prints them ------------------------------------------------------------------


def _java_double(v: float, single: bool = False) -> str:
    """``Double.toString`` (``Float.toString`` when ``single``): the shortest digits that read
    back, plain between 10^-3 and 10^7 (``1.0``, ``0.001``), else ``1.0E7``, ``1.5E-4``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    number = Decimal(str(np.float32(v)) if single else repr(v))
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        text = format(number, "f")
        return text if "." in text else text + ".0"
    sign, digits, exp = number.normalize().as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits))
    return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{exp + len(ds) - 1}"


def _strings(values: pa.ChunkedArray | pa.Array, name: str) -> list[str | None]:
    """The values of one column as Hudi makes strings of them (None for null)."""
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        plain: list[str | None] = values.to_pylist()
        return plain
    if pa.types.is_boolean(t):
        return [None if v is None else ("true" if v else "false") for v in values.to_pylist()]
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return [None if v is None else str(v) for v in values.to_pylist()]
    if pa.types.is_floating(t):
        single = pa.types.is_float32(t)
        return [None if v is None else _java_double(v, single) for v in values.to_pylist()]
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        dates: list[str | None] = pc.cast(values.cast(pa.date32()), pa.string()).to_pylist()
        return dates
    if pa.types.is_timestamp(t):
        return [None if v is None else str(v) for v in _avro_longs(values)]
    raise BadRecordsError(name, f"type {t} cannot be a record key or partition value")


def _avro_longs(values: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """A timestamp column as the Avro long Hudi sees: micros for us/ns, millis for s/ms."""
    unit = values.type.unit
    target = "us" if unit in ("us", "ns") else "ms"
    out: list[int | None] = pc.cast(
        values.cast(pa.timestamp(target), safe=False), pa.int64()
    ).to_pylist()
    return out


def _column(data: pa.Table, path: str) -> pa.ChunkedArray:
    """A field of the rows, ``a.b`` for a field of a struct column (as Hudi's nested keys)."""
    head, _, rest = path.partition(".")
    if head not in data.column_names:
        raise BadRecordsError(path, f"missing (columns are {', '.join(data.column_names)})")
    values = data.column(head)
    for part in rest.split(".") if rest else []:
        if not pa.types.is_struct(values.type) or values.type.get_field_index(part) < 0:
            raise BadRecordsError(path, f"no field {part!r} in {values.type}")
        values = pc.struct_field(values, part)
    return values


# --- Java date patterns ---------------------------------------------------------------------------

_TOKEN = re.compile(r"'[^']*'|''|([A-Za-z])\1*|[^A-Za-z']+")


def _java_tokens(pattern: str) -> list[str]:
    return [m.group(0) for m in _TOKEN.finditer(pattern)]


def _format_token(token: str, t: dt.datetime, pattern: str) -> str:
    letter, n = token[0], len(token)
    if token.startswith("'"):
        return "'" if token == "''" else token[1:-1]
    if not letter.isalpha():
        return token
    simple = {
        "y": t.year if n != 2 else t.year % 100,
        "M": t.month,
        "d": t.day,
        "H": t.hour,
        "m": t.minute,
        "s": t.second,
        "D": t.timetuple().tm_yday,
        "k": t.hour or 24,
        "h": (t.hour % 12) or 12,
        "K": t.hour % 12,
    }
    if letter == "M" and n >= 3:
        return t.strftime("%b" if n == 3 else "%B")
    if letter == "E":
        return t.strftime("%a" if n <= 3 else "%A")
    if letter == "a":
        return t.strftime("%p")
    if letter == "S":
        return f"{t.microsecond:06d}"[:n].ljust(n, "0")
    if letter == "Z":
        offset = t.strftime("%z")
        return offset if n == 1 else f"{offset[:3]}:{offset[3:]}"
    if letter in simple:
        return str(simple[letter]).zfill(n)
    raise ValueError(f"pattern letter {letter!r} of {pattern!r} is not supported")


def format_java(t: dt.datetime, pattern: str) -> str:
    """``t`` formatted with a Java (Joda) date pattern such as ``yyyy/MM/dd`` or
    ``yyyy-MM-dd'T'HH``."""
    return "".join(_format_token(token, t, pattern) for token in _java_tokens(pattern))


_PARSE = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "M": "%m", "dd": "%d", "d": "%d", "HH": "%H"}
_PARSE |= {"H": "%H", "mm": "%M", "ss": "%S", "MMM": "%b", "SSS": "%f", "Z": "%z", "a": "%p"}
_PARSE |= {"hh": "%I", "ZZ": "%z", "S": "%f", "SSSSSS": "%f", "EEE": "%a", "D": "%j", "DDD": "%j"}


def _strptime_format(pattern: str) -> str:
    out = []
    for token in _java_tokens(pattern):
        if token == "''":
            out.append("'")
        elif token.startswith("'"):
            out.append(token[1:-1].replace("%", "%%"))
        elif token[0].isalpha():
            if token not in _PARSE:
                raise ValueError(f"input pattern {pattern!r}: {token!r} is not supported")
            out.append(_PARSE[token])
        else:
            out.append(token.replace("%", "%%"))
    return "".join(out)


# --- the generator ---------------------------------------------------------------------------------


def _zone(name: str) -> dt.tzinfo:
    if not name or name.upper() in ("UTC", "GMT", "Z"):
        return dt.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"unknown time zone {name!r}") from e


_UNIT_MILLIS = {
    "NANOSECONDS": 1e-6,
    "MICROSECONDS": 1e-3,
    "MILLISECONDS": 1,
    "SECONDS": 1000,
    "MINUTES": 60_000,
    "HOURS": 3_600_000,
    "DAYS": 86_400_000,
}


@dataclass(frozen=True)
class TimestampFormat:
    """``hoodie.keygen.timebased.*``: how a time field becomes a partition value."""

    timestamp_type: str
    output_format: str
    output_zone: str = "UTC"
    input_formats: tuple[str, ...] = ()
    input_zone: str = "UTC"
    scalar_unit: str = "SECONDS"

    @classmethod
    def of(cls, settings: Mapping[str, str], where: str) -> TimestampFormat:
        def get(key: str, default: str = "") -> str:
            return settings.get(TIMEBASED + key, "").strip() or default

        kind = get("timestamp.type").upper()
        if not kind:
            raise TableConfigError(
                where,
                f"{TIMEBASED}timestamp.type is not set (Hudi does not keep it in "
                "hoodie.properties): pass it with --conf, e.g. "
                f"{TIMEBASED}timestamp.type=EPOCHMILLISECONDS",
            )
        valid = ("UNIX_TIMESTAMP", "EPOCHMILLISECONDS", "EPOCHMICROSECONDS", "SCALAR")
        if kind not in (*valid, "DATE_STRING", "MIXED"):
            raise TableConfigError(where, f"{TIMEBASED}timestamp.type={kind} is not one of Hudi's")
        output = get("output.dateformat")
        if not output:
            raise TableConfigError(where, f"{TIMEBASED}output.dateformat is not set")
        zone = get("timezone", "UTC")
        delimiter = get("input.dateformat.list.delimiter.regex", ",")
        inputs = tuple(p.strip() for p in re.split(delimiter, get("input.dateformat")) if p.strip())
        if kind in ("DATE_STRING", "MIXED") and not inputs:
            raise TableConfigError(where, f"{TIMEBASED}input.dateformat is not set for {kind}")
        unit = get("timestamp.scalar.time.unit", "SECONDS").upper()
        if unit not in _UNIT_MILLIS:
            raise TableConfigError(where, f"{TIMEBASED}timestamp.scalar.time.unit={unit} unknown")
        fmt = cls(
            kind,
            output,
            get("output.timezone", zone),
            inputs,
            get("input.timezone", zone),
            unit,
        )
        try:  # every setting is checked now, not at the first row that needs it
            for zone in (fmt.output_zone, fmt.input_zone):
                _zone(zone)
            format_java(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), output)
            for pattern in inputs:
                _strptime_format(pattern)
        except ValueError as e:
            raise TableConfigError(where, f"{TIMEBASED}*: {e}") from e
        return fmt

    def _millis(self, value: object, column: str) -> float:
        if isinstance(value, str):
            if self.timestamp_type not in ("DATE_STRING", "MIXED"):
                raise BadRecordsError(
                    column, f"{value!r} is a string but timestamp.type is {self.timestamp_type}"
                )
            for pattern in self.input_formats:
                try:
                    parsed = dt.datetime.strptime(value, _strptime_format(pattern))
                except ValueError:
                    continue
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=_zone(self.input_zone))
                return parsed.timestamp() * 1000
            raise BadRecordsError(
                column, f"{value!r} matches no input.dateformat ({', '.join(self.input_formats)})"
            )
        number = int(value)  # type: ignore[call-overload]  # Java's longValue()
        factor = {
            "UNIX_TIMESTAMP": 1000,
            "EPOCHMILLISECONDS": 1,
            "EPOCHMICROSECONDS": 1e-3,
            "SCALAR": _UNIT_MILLIS[self.scalar_unit],
            "MIXED": 1000,
        }.get(self.timestamp_type)
        if factor is None:
            raise BadRecordsError(column, f"a number, but timestamp.type is {self.timestamp_type}")
        return float(number * factor)

    def format(self, value: object, column: str) -> str:
        """The partition value of one time value (a null one is epoch + 1 ms, as in Hudi)."""
        millis = 1.0 if value is None else self._millis(value, column)
        when = dt.datetime.fromtimestamp(math.floor(millis) / 1000, tz=_zone(self.output_zone))
        return format_java(when, self.output_format)


@dataclass(frozen=True)
class PartitionField:
    name: str
    timestamp: TimestampFormat | None = None  # None: the value itself


@dataclass(frozen=True)
class KeyGenerator:
    """One table's record keys and partition paths (picklable: Spark tasks use it)."""

    kind: str
    key_fields: tuple[str, ...]
    partition_fields: tuple[PartitionField, ...] = ()
    hive_style: bool = False
    url_encode: bool = False

    @classmethod
    def of(cls, config: TableConfig, settings: Mapping[str, str] | None = None) -> KeyGenerator:
        """The generator of a table: ``hoodie.properties`` first, then ``settings`` (the writer's
        configuration) for what Hudi does not store there."""
        where = PROPERTIES_FILE
        props = {**config.props, **(settings or {})}
        keys = config.record_key_fields
        if not keys:
            raise TableConfigError(
                where,
                f"{RECORD_KEY_FIELDS} is not set: a keyless table (Hudi generates its keys), "
                "which this writer does not write",
            )
        class_name = config.props.get(KEY_GENERATOR, "")
        kind = _KINDS.get(class_name.rpartition(".")[2])
        if class_name and kind is None:
            raise TableConfigError(
                where,
                f"{KEY_GENERATOR}={class_name} is not supported (Simple, Complex, "
                "NonPartitioned, TimestampBased and Custom key generators are)",
            )
        if kind is None:
            kind = _TYPES.get(config.props.get("hoodie.table.keygenerator.type", "").upper())
        names = config.partition_fields
        if kind is None:  # inferred as Hudi infers it
            kind = (
                "nonpartitioned"
                if not names
                else "simple"
                if len(keys) == 1 == len(names)
                else "complex"
            )
        hive = props.get(HIVE_STYLE_PARTITIONING, "false").lower() == "true"
        encode = props.get(URL_ENCODE, "false").lower() == "true"
        fields: tuple[PartitionField, ...]
        if kind == "nonpartitioned":
            fields = ()
        elif kind == "timestamp":
            if len(names) != 1:
                raise TableConfigError(
                    where, f"TimestampBasedKeyGenerator takes one {PARTITION_FIELDS}"
                )
            fields = (PartitionField(names[0], TimestampFormat.of(props, where)),)
        elif kind == "custom":
            fields = cls._custom_fields(names, props, where)
        else:
            fields = tuple(PartitionField(n) for n in names)
        if kind == "simple" and (len(keys) != 1 or len(fields) > 1):
            raise TableConfigError(
                where, "SimpleKeyGenerator takes one record key field and one partition field"
            )
        return cls(kind, keys, fields, hive, encode)

    @staticmethod
    def _custom_fields(
        names: Sequence[str], props: Mapping[str, str], where: str
    ) -> tuple[PartitionField, ...]:
        typed = [n for n in names if ":" in n]
        if not typed and names:
            given = [
                p.strip() for p in props.get(WRITE_PARTITION_FIELDS, "").split(",") if p.strip()
            ]
            if [g.partition(":")[0] for g in given] != list(names):
                raise TableConfigError(
                    where,
                    f"CustomKeyGenerator: hoodie.properties names the partition fields "
                    f"({','.join(names)}) but not their types; pass them with --conf "
                    f"{WRITE_PARTITION_FIELDS}=" + ",".join(f"{n}:SIMPLE|TIMESTAMP" for n in names),
                )
            names = given
        fields = []
        for spec in names:
            name, _, kind = spec.partition(":")
            kind = kind.upper()
            if kind == "SIMPLE":
                fields.append(PartitionField(name))
            elif kind == "TIMESTAMP":
                fields.append(PartitionField(name, TimestampFormat.of(props, where)))
            else:
                raise TableConfigError(
                    where, f"CustomKeyGenerator field {spec!r}: SIMPLE or TIMESTAMP"
                )
        return tuple(fields)

    # --- keys -----------------------------------------------------------------------------------

    def record_keys(self, data: pa.Table) -> list[str]:
        columns = [_strings(_column(data, f), f) for f in self.key_fields]
        if len(self.key_fields) > 1:  # Complex with one field makes Simple's keys (Hudi 0.15)
            return self._complex_keys(columns)
        name = self.key_fields[0]
        out = columns[0]
        bad = sum(1 for v in out if not v)
        if bad:
            raise BadRecordsError(name, f"{bad} record(s) have a null or empty record key")
        return out  # type: ignore[return-value]

    def _complex_keys(self, columns: list[list[str | None]]) -> list[str]:
        keys = []
        for row in zip(*columns, strict=True):
            if all(v is None or v == "" for v in row):
                raise BadRecordsError(
                    ",".join(self.key_fields), "a record has every record key field null or empty"
                )
            keys.append(
                ",".join(
                    f"{f}:{NULL_KEY if v is None else EMPTY_KEY if v == '' else v}"
                    for f, v in zip(self.key_fields, row, strict=True)
                )
            )
        return keys

    # --- partitions -----------------------------------------------------------------------------

    def _values(self, data: pa.Table, part: PartitionField) -> list[str]:
        values = _column(data, part.name)
        if part.timestamp is not None:
            fmt = part.timestamp
            raw = _avro_longs(values) if pa.types.is_timestamp(values.type) else values.to_pylist()
            cache: dict[object, str] = {}
            strings = []
            for v in raw:
                if v not in cache:
                    cache[v] = fmt.format(v, part.name)
                strings.append(cache[v])
        else:
            strings = [v or DEFAULT_PARTITION for v in _strings(values, part.name)]
        if self.url_encode:
            strings = [escape_path_name(s) for s in strings]
        elif part.timestamp is None:
            # Hudi would make a deeper folder of a value with a slash: refused, as '.' and '..'
            for v in set(strings):
                if v in (".", "..") or "/" in v or "\\" in v or "\x00" in v:
                    raise BadRecordsError(
                        part.name, f"partition value {v!r} cannot be a folder name"
                    )
        if self.hive_style:
            strings = [f"{part.name}={s}" for s in strings]
        return strings

    def partition_paths(self, data: pa.Table) -> list[str]:
        if not self.partition_fields:
            return [""] * data.num_rows
        parts = [self._values(data, p) for p in self.partition_fields]
        paths = ["/".join(p) for p in zip(*parts, strict=True)]
        for path in set(paths):
            if any(s in ("", ".", "..") or "\\" in s or "\x00" in s for s in path.split("/")):
                raise BadRecordsError(
                    ",".join(p.name for p in self.partition_fields),
                    f"partition path {path!r} cannot be a folder",
                )
        return paths

    # --- checked against the table --------------------------------------------------------------

    def verify(self, stored: pa.Table, where: str) -> None:
        """Refuse these settings when they do not make the keys and partition paths of rows Hudi
        (or we) already stored: an upsert would then write a second copy of each record."""
        if stored.num_rows == 0:
            return
        try:
            keys = self.record_keys(stored)
            paths = self.partition_paths(stored)
        except BadRecordsError as e:
            raise TableConfigError(where, f"the key generator cannot key stored rows: {e}") from e
        have_keys = stored.column("_hoodie_record_key").to_pylist()
        have_paths = stored.column("_hoodie_partition_path").to_pylist()
        for mine, theirs, what in (
            (keys, have_keys, "record key"),
            (paths, have_paths, "partition path"),
        ):
            for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                if b is not None and a != b:
                    raise TableConfigError(
                        where,
                        f"the {self.kind} key generator's settings make {what} {a!r} for a row "
                        f"stored as {b!r} (row {i}); check the table's key generator settings "
                        "(hoodie.keygen.timebased.*, hoodie.datasource.write.partitionpath.*)",
                    )

    def key_columns(self) -> list[str]:
        """The top-level columns record keys are made from."""
        return sorted({n.partition(".")[0] for n in self.key_fields})

    def fields(self) -> list[str]:
        """The top-level columns keys and partition paths are made from."""
        names = [*self.key_fields, *(p.name for p in self.partition_fields)]
        return sorted({n.partition(".")[0] for n in names})
