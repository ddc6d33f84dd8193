"""The Avro instant metadata this kernel writes into tables Apache Hudi shares: a rollback's plan
(``T.rollback.requested``, Hudi's ``HoodieRollbackPlan``) and its metadata (``T.rollback``,
``HoodieRollbackMetadata``).

Hudi 0.x writes rollback, clean and restore instants as Avro object container files (null codec,
the record's schema in the header) and reads them back with its own compiled schemas; its
archiver and cleaner deserialize every rollback instant they pass over, so an instant of ours in
any other format makes them fail. The schemas below are those of Hudi 0.15's
``hudi-common`` (``HoodieRollbackPlan.avsc``, ``HoodieRollbackMetadata.avsc``): field names,
types, order and defaults matter to Hudi's schema resolution, so they are kept as Hudi declares
them. Files are written and read with ``fastavro``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import fastavro

_STRING = {"type": "string", "avro.java.string": "String"}
_STRINGS = {"type": "array", "items": _STRING}
_LONGS_BY_NAME = ["null", {"type": "map", "values": "long", "avro.java.string": "String"}]

_INSTANT_INFO = {
    "type": "record",
    "name": "HoodieInstantInfo",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [{"name": "commitTime", "type": _STRING}, {"name": "action", "type": _STRING}],
}

ROLLBACK_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackPlan",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {
            "name": "instantToRollback",
            "type": ["null", _INSTANT_INFO],
            "doc": "Hoodie instant that needs to be rolled back",
            "default": None,
        },
        {
            "name": "RollbackRequests",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieRollbackRequest",
                        "fields": [
                            {"name": "partitionPath", "type": _STRING},
                            {"name": "fileId", "type": ["null", _STRING], "default": None},
                            {
                                "name": "latestBaseInstant",
                                "type": ["null", _STRING],
                                "default": None,
                            },
                            {
                                "name": "filesToBeDeleted",
                                "type": {"type": "array", "items": _STRING, "default": []},
                                "default": [],
                            },
                            {
                                "name": "logBlocksToBeDeleted",
                                "type": _LONGS_BY_NAME,
                                "default": None,
                            },
                        ],
                    },
                },
            ],
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

ROLLBACK_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackMetadata",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "startRollbackTime", "type": _STRING},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": _STRINGS},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "HoodieRollbackPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": _STRING},
                        {"name": "successDeleteFiles", "type": _STRINGS},
                        {"name": "failedDeleteFiles", "type": _STRINGS},
                        {"name": "rollbackLogFiles", "type": _LONGS_BY_NAME, "default": None},
                        {
                            "name": "logFilesFromFailedCommit",
                            "type": _LONGS_BY_NAME,
                            "default": None,
                        },
                    ],
                },
                "avro.java.string": "String",
            },
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "instantsRollback",
            "type": {"type": "array", "items": _INSTANT_INFO, "default": []},
            "default": [],
        },
    ],
}

_PARSED = {
    "plan": fastavro.parse_schema(ROLLBACK_PLAN_SCHEMA),
    "metadata": fastavro.parse_schema(ROLLBACK_METADATA_SCHEMA),
}


def avro_file(schema: str, record: Mapping[str, Any]) -> bytes:
    """One record as an Avro object container file, as Hudi serializes instant metadata
    (``schema``: "plan" or "metadata")."""
    sink = io.BytesIO()
    fastavro.writer(sink, _PARSED[schema], [dict(record)], codec="null")
    return sink.getvalue()


__all__ = ["ROLLBACK_METADATA_SCHEMA", "ROLLBACK_PLAN_SCHEMA", "avro_file"]
