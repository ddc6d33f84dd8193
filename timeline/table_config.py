"""``hoodie.properties``: the table config.

The file is Java properties (see :mod:`timeline.properties`) in Hudi 0.x table version 6's
vocabulary. We read tables Apache Hudi wrote, so optional keys default as Hudi defaults them (the
table type, the base file format, meta fields, the checksum, which is checked only when present).
We write the file only when we create a table, and never Hudi's ``hoodie.table.metadata.*`` keys:
those describe Hudi's own metadata table (``.hoodie/metadata``); ours keeps its state in a file of
its own (:mod:`timeline.index_state`).

A reader that finds the main file missing or failing its checksum falls back to
``hoodie.properties.backup``, which Hudi writes before it rewrites the main file.
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
# Hudi's own metadata table's partitions: its writers' and ``indexer run --format hudi``'s.
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"

REQUIRED_KEYS = (NAME, VERSION, LAYOUT_VERSION)
# Optional keys and the value Hudi 0.x assumes when they are absent.
DEFAULTS = {
    TYPE: "COPY_ON_WRITE",
    BASE_FILE_FORMAT: "PARQUET",
    POPULATE_META_FIELDS: "true",
    HIVE_STYLE_PARTITIONING: "false",
    ARCHIVELOG_FOLDER: "archived",
}
# Other table versions, named in the refusal.
_VERSION_NAMES = {
    "8": "Apache Hudi 1.x",
    "7": "Apache Hudi 1.0 beta",
    "5": "Apache Hudi 0.12 and 0.13",
    "4": "Apache Hudi 0.11",
}


class TableType(enum.StrEnum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"


def table_checksum(table_name: str, database: str = "") -> int:
    """Hudi's checksum: CRC32 of the UTF-8 ``"<database>.<table name>"``."""
    return zlib.crc32(f"{database}.{table_name}".encode())


def metadata_table_config(data_table_name: str) -> TableConfig:
    """The ``hoodie.properties`` of Apache Hudi 0.15's metadata table of a data table named
    ``data_table_name``, as Hudi's writer creates it (``HoodieBackedTableMetadataWriter``'s
    ``initializeMetaClient``; HUDI-MDT.md section 1.1)."""
    name = f"{data_table_name}_metadata"
    return TableConfig(
        {
            NAME: name,
            TYPE: "MERGE_ON_READ",
            VERSION: str(TABLE_VERSION),
            BASE_FILE_FORMAT: "HFILE",
            RECORD_KEY_FIELDS: "key",
            POPULATE_META_FIELDS: "false",
            KEY_GENERATOR: "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
            "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
            "hoodie.compaction.record.merger.strategy": "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
            ARCHIVELOG_FOLDER: "archived",
            LAYOUT_VERSION: str(TIMELINE_LAYOUT_VERSION),
            "hoodie.datasource.write.drop.partition.columns": "false",
            CHECKSUM: str(table_checksum(name)),
        }
    )


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
            raise TableConfigError(path, f"not a valid properties file: {e}", damaged=True) from e
        config.validate(path)
        return config

    def validate(self, path: str = PROPERTIES_FILE) -> None:
        missing = [k for k in REQUIRED_KEYS if not self.props.get(k)]
        if missing:
            raise TableConfigError(
                path, f"missing required keys: {', '.join(missing)}", damaged=True
            )
        version = self.props[VERSION]
        if version != str(TABLE_VERSION):
            which = f" ({_VERSION_NAMES[version]})" if version in _VERSION_NAMES else ""
            raise TableConfigError(
                path,
                f"{VERSION}={version}{which} is not supported: only table version "
                f"{TABLE_VERSION} (Apache Hudi 0.14 and 0.15)",
            )
        if self.props[LAYOUT_VERSION] != str(TIMELINE_LAYOUT_VERSION):
            raise TableConfigError(
                path,
                f"{LAYOUT_VERSION}={self.props[LAYOUT_VERSION]} is not supported "
                f"(only {TIMELINE_LAYOUT_VERSION})",
            )
        if self.get(TYPE) not in TableType.__members__:
            raise TableConfigError(path, f"{TYPE}={self.get(TYPE)!r} is not a table type")
        if self.get(BASE_FILE_FORMAT).upper() != "PARQUET":
            raise TableConfigError(
                path,
                f"{BASE_FILE_FORMAT}={self.get(BASE_FILE_FORMAT)} is not supported (only PARQUET)",
            )
        expected = table_checksum(self.name, self.database)
        if CHECKSUM in self.props and self.props[CHECKSUM] != str(expected):
            raise TableConfigError(
                path,
                f"checksum {self.props[CHECKSUM]} does not match the table name ({expected})",
                damaged=True,
            )

    def to_bytes(self) -> bytes:
        stamp = dt.datetime.now(dt.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
        return properties.dumps(self.props, comment=f"Updated at {stamp}").encode("latin-1")

    # --- accessors -------------------------------------------------------------------------------

    def get(self, key: str) -> str:
        """The value of ``key``, or Hudi's default for an optional key that is absent."""
        return self.props.get(key) or DEFAULTS.get(key, "")

    @property
    def name(self) -> str:
        return self.props[NAME]

    @property
    def database(self) -> str:
        return self.props.get(DATABASE, "")

    @property
    def table_type(self) -> TableType:
        return TableType(self.get(TYPE))

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
    def populate_meta_fields(self) -> bool:
        return self.get(POPULATE_META_FIELDS).lower() == "true"

    @property
    def hudi_metadata_partitions(self) -> tuple[str, ...]:
        """The partitions of Hudi's own metadata table (Hudi's key, read only)."""
        return _split_list(self.props.get(METADATA_PARTITIONS))
