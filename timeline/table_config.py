"""``hoodie.properties``: the table config and the metadata partitions state.

The file is Java properties (see :mod:`timeline.properties`). Required keys follow Hudi 0.x table
version 6 (REFERENCE §1). The metadata partitions state is two disjoint comma lists:

* ``hoodie.table.metadata.partitions``: completed partitions, which readers use;
* ``hoodie.table.metadata.partitions.inflight``: partitions being built, which writers update and
  readers ignore.

Updates rewrite the file atomically (write ``hoodie.properties.backup``, replace
``hoodie.properties``, delete the backup, as Hudi does); a reader that finds the main file missing
or failing its checksum falls back to the backup.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from timeline import properties
from timeline.errors import TableConfigError

PROPERTIES_FILE = ".hoodie/hoodie.properties"
BACKUP_FILE = ".hoodie/hoodie.properties.backup"

TABLE_VERSION = 6
TIMELINE_LAYOUT_VERSION = 1

NAME = "hoodie.table.name"
DATABASE = "hoodie.database.name"
TYPE = "hoodie.table.type"
VERSION = "hoodie.table.version"
LAYOUT_VERSION = "hoodie.timeline.layout.version"
RECORD_KEY_FIELDS = "hoodie.table.recordkey.fields"
PARTITION_FIELDS = "hoodie.table.partition.fields"
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
KEY_GENERATOR = "hoodie.table.keygenerator.class"
BASE_FILE_FORMAT = "hoodie.table.base.file.format"
POPULATE_META_FIELDS = "hoodie.populate.meta.fields"
CHECKSUM = "hoodie.table.checksum"
TIMEZONE = "hoodie.table.timeline.timezone"
HIVE_STYLE_PARTITIONING = "hoodie.datasource.write.hive_style_partitioning"
ARCHIVELOG_FOLDER = "hoodie.archivelog.folder"
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"

REQUIRED_KEYS = (NAME, TYPE, VERSION, LAYOUT_VERSION, RECORD_KEY_FIELDS, BASE_FILE_FORMAT, CHECKSUM)

_PARTITION_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class TableType(enum.StrEnum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"


def table_checksum(table_name: str, database: str = "") -> int:
    """Hudi's checksum: CRC32 of the UTF-8 ``"<database>.<table name>"``."""
    return zlib.crc32(f"{database}.{table_name}".encode())


def _split_list(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _key_generator(record_keys: tuple[str, ...], partition_fields: tuple[str, ...]) -> str:
    if not partition_fields:
        return "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    if len(record_keys) == 1 and len(partition_fields) == 1:
        return "org.apache.hudi.keygen.SimpleKeyGenerator"
    return "org.apache.hudi.keygen.ComplexKeyGenerator"


@dataclass(frozen=True)
class TableConfig:
    """The parsed ``hoodie.properties``; immutable, ``with_*`` methods return updated copies."""

    props: Mapping[str, str] = field(default_factory=dict)

    # --- construction ----------------------------------------------------------------------------

    @classmethod
    def new(
        cls,
        name: str,
        record_key_fields: Iterable[str],
        partition_fields: Iterable[str] = (),
        precombine_field: str | None = None,
        table_type: TableType = TableType.COPY_ON_WRITE,
        database: str = "",
        extra: Mapping[str, str] | None = None,
    ) -> TableConfig:
        record_keys = tuple(record_key_fields)
        partitions = tuple(partition_fields)
        if not name or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise TableConfigError(
                PROPERTIES_FILE, f"invalid table name {name!r} (letters, digits, _)"
            )
        if not record_keys or any(not k for k in record_keys):
            raise TableConfigError(PROPERTIES_FILE, "at least one record key field is required")
        props: dict[str, str] = {
            NAME: name,
            TYPE: TableType(table_type).value,
            VERSION: str(TABLE_VERSION),
            LAYOUT_VERSION: str(TIMELINE_LAYOUT_VERSION),
            RECORD_KEY_FIELDS: ",".join(record_keys),
            PARTITION_FIELDS: ",".join(partitions),
            KEY_GENERATOR: _key_generator(record_keys, partitions),
            BASE_FILE_FORMAT: "PARQUET",
            POPULATE_META_FIELDS: "true",
            TIMEZONE: "UTC",
            HIVE_STYLE_PARTITIONING: "false",
            ARCHIVELOG_FOLDER: "archived",
            METADATA_PARTITIONS: "",
            METADATA_PARTITIONS_INFLIGHT: "",
            CHECKSUM: str(table_checksum(name, database)),
        }
        if precombine_field:
            props[PRECOMBINE_FIELD] = precombine_field
        if database:
            props[DATABASE] = database
        props.update(extra or {})
        config = cls(props)
        config.validate(PROPERTIES_FILE)
        return config

    @classmethod
    def parse(cls, data: bytes, path: str = PROPERTIES_FILE) -> TableConfig:
        """Parse and validate; raises :class:`TableConfigError` naming ``path``."""
        try:
            text = data.decode("latin-1")
            config = cls(properties.loads(text))
        except ValueError as e:
            raise TableConfigError(path, f"not a valid properties file: {e}") from e
        config.validate(path)
        return config

    def validate(self, path: str = PROPERTIES_FILE) -> None:
        missing = [k for k in REQUIRED_KEYS if not self.props.get(k)]
        if missing:
            raise TableConfigError(path, f"missing required keys: {', '.join(missing)}")
        if self.props[VERSION] != str(TABLE_VERSION):
            raise TableConfigError(
                path, f"{VERSION}={self.props[VERSION]} is not supported (only {TABLE_VERSION})"
            )
        if self.props[LAYOUT_VERSION] != str(TIMELINE_LAYOUT_VERSION):
            raise TableConfigError(
                path,
                f"{LAYOUT_VERSION}={self.props[LAYOUT_VERSION]} is not supported "
                f"(only {TIMELINE_LAYOUT_VERSION})",
            )
        try:
            TableType(self.props[TYPE])
        except ValueError:
            raise TableConfigError(
                path, f"{TYPE}={self.props[TYPE]!r} is not a table type"
            ) from None
        expected = table_checksum(self.name, self.database)
        if self.props[CHECKSUM] != str(expected):
            raise TableConfigError(
                path, f"checksum {self.props[CHECKSUM]} does not match the table name ({expected})"
            )
        completed, inflight = set(self.metadata_partitions), set(self.metadata_partitions_inflight)
        for name in completed | inflight:
            if not _PARTITION_NAME.match(name):
                raise TableConfigError(path, f"invalid metadata partition name {name!r}")
        if completed & inflight:
            raise TableConfigError(
                path,
                f"metadata partitions both completed and inflight: {sorted(completed & inflight)}",
            )

    def to_bytes(self) -> bytes:
        stamp = dt.datetime.now(dt.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
        return properties.dumps(self.props, comment=f"Updated at {stamp}").encode("latin-1")

    # --- accessors -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.props[NAME]

    @property
    def database(self) -> str:
        return self.props.get(DATABASE, "")

    @property
    def table_type(self) -> TableType:
        return TableType(self.props[TYPE])

    @property
    def record_key_fields(self) -> tuple[str, ...]:
        return _split_list(self.props.get(RECORD_KEY_FIELDS))

    @property
    def partition_fields(self) -> tuple[str, ...]:
        return _split_list(self.props.get(PARTITION_FIELDS))

    @property
    def precombine_field(self) -> str | None:
        return self.props.get(PRECOMBINE_FIELD) or None

    @property
    def metadata_partitions(self) -> tuple[str, ...]:
        """Completed metadata partitions: readers may use them."""
        return _split_list(self.props.get(METADATA_PARTITIONS))

    @property
    def metadata_partitions_inflight(self) -> tuple[str, ...]:
        """Metadata partitions being built: writers update them, readers do not use them."""
        return _split_list(self.props.get(METADATA_PARTITIONS_INFLIGHT))

    # --- updates ---------------------------------------------------------------------------------

    def with_metadata_partitions(
        self,
        *,
        add_inflight: Iterable[str] = (),
        complete: Iterable[str] = (),
        remove: Iterable[str] = (),
    ) -> TableConfig:
        """The config after moving metadata partitions between states.

        ``add_inflight`` skips partitions already completed or inflight; ``complete`` requires the
        partition to be inflight (or already completed: idempotent); ``remove`` drops it from both.
        """
        completed = list(self.metadata_partitions)
        inflight = list(self.metadata_partitions_inflight)
        for name in add_inflight:
            if name not in completed and name not in inflight:
                inflight.append(name)
        for name in complete:
            if name in completed:
                continue
            if name not in inflight:
                raise TableConfigError(
                    PROPERTIES_FILE,
                    f"metadata partition {name!r} is not inflight, cannot complete it",
                )
            inflight.remove(name)
            completed.append(name)
        dropped = set(remove)
        props = dict(self.props)
        props[METADATA_PARTITIONS] = ",".join(sorted(p for p in completed if p not in dropped))
        props[METADATA_PARTITIONS_INFLIGHT] = ",".join(
            sorted(p for p in inflight if p not in dropped)
        )
        updated = TableConfig(props)
        updated.validate()
        return updated
