"""Writes archive files in the layout of Apache Hudi's archived timeline (a Hudi log of Avro data
blocks, see timeline/archived.py), for tests that need an archive Hudi did not write: a trimmed
one, or an instant archived ahead of older ones. Tests against Hudi itself use Hudi's archives."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro

from timeline.storage import Storage

_PARTITION_METADATA = {
    "type": "record",
    "name": "PartitionMetadata",
    "fields": [
        {"name": "partitionPath", "type": "string"},
        {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "isPartitionDeleted", "type": "boolean", "default": False},
    ],
}
_REMOVAL = {
    "type": "record",
    "name": "RemovalMetadata",
    "fields": [
        {"name": "partitionMetadata", "type": {"type": "map", "values": _PARTITION_METADATA}}
    ],
}
#: the fields of HoodieArchivedMetaEntry this project reads (JSON commit metadata kept as a map)
ENTRY_SCHEMA = {
    "type": "record",
    "name": "HoodieArchivedMetaEntry",
    "fields": [
        {"name": "commitTime", "type": "string"},
        {"name": "actionType", "type": "string"},
        {"name": "actionState", "type": "string"},
        {"name": "hoodieCleanMetadata", "type": ["null", _REMOVAL], "default": None},
        {
            "name": "hoodieCommitMetadata",
            "type": ["null", {"type": "map", "values": "string"}],
            "default": None,
        },
    ],
}


def clean_entry(timestamp: str, deleted: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """A completed clean that deleted ``deleted`` (partition -> file names)."""
    partitions = {
        p: {"partitionPath": p, "successDeleteFiles": list(n), "isPartitionDeleted": False}
        for p, n in deleted.items()
    }
    return {
        "commitTime": timestamp,
        "actionType": "clean",
        "actionState": "COMPLETED",
        "hoodieCleanMetadata": {"partitionMetadata": partitions},
        "hoodieCommitMetadata": None,
    }


def write_archive_file(storage: Storage, path: str, entries: Sequence[dict[str, Any]]) -> None:
    """One archive file holding one Avro data block of ``entries``."""
    schema = fastavro.parse_schema(ENTRY_SCHEMA)
    records = []
    for entry in entries:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, entry)
        records.append(out.getvalue())
    content = struct.pack(">ii", 1, len(records))
    content += b"".join(struct.pack(">i", len(r)) + r for r in records)
    schema_json = json.dumps(ENTRY_SCHEMA).encode()
    header = struct.pack(">iii", 1, 2, len(schema_json)) + schema_json
    footer = struct.pack(">i", 0)
    body = struct.pack(">ii", 1, 3) + header + struct.pack(">q", len(content)) + content + footer
    body += struct.pack(">q", len(body) + 14 + 8)
    storage.create(path, b"#HUDI#" + struct.pack(">q", len(body)) + body)
