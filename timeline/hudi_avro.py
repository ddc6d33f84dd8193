"""The Avro instant metadata this kernel writes into tables Apache Hudi shares: a rollback's plan
(``T.rollback.requested``, Hudi's ``HoodieRollbackPlan``) and its metadata (``T.rollback``,
``HoodieRollbackMetadata``); a clean's plan (``T.clean.requested`` and ``T.clean.inflight``,
``HoodieCleanerPlan``) and its metadata (``T.clean``, ``HoodieCleanMetadata``); a compaction's
plan (``T.compaction.requested``, ``HoodieCompactionPlan``; the metadata table's own compactions).

Hudi 0.x writes rollback, clean and restore instants as Avro object container files (null codec,
the record's schema in the header) and reads them back with its own compiled schemas; its
archiver and cleaner deserialize every rollback instant they pass over, so an instant of ours in
any other format makes them fail. The schemas below are those of Hudi 0.15's
``hudi-common`` (``HoodieRollbackPlan.avsc``, ``HoodieRollbackMetadata.avsc``,
``HoodieCleanerPlan.avsc``, ``HoodieCleanMetadata.avsc``, ``HoodieCompactionOperation.avsc``
and ``HoodieCompactionPlan.avsc``, as compiled into its bundle): field names,
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

_STRINGS_BY_NAME = {"type": "map", "values": _STRING, "avro.java.string": "String"}

CLEAN_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanerPlan",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {
            "name": "earliestInstantToRetain",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "HoodieActionInstant",
                    "fields": [
                        {"name": "timestamp", "type": _STRING},
                        {"name": "action", "type": _STRING},
                        {"name": "state", "type": _STRING},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "lastCompletedCommitTimestamp", "type": _STRING, "default": ""},
        {"name": "policy", "type": _STRING},
        {
            "name": "filesToBeDeletedPerPartition",
            "type": [
                "null",
                {"type": "map", "values": _STRINGS, "avro.java.string": "String"},
            ],
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "filePathsToBeDeletedPerPartition",
            "type": [
                "null",
                {
                    "type": "map",
                    "values": {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "HoodieCleanFileInfo",
                            "fields": [
                                {"name": "filePath", "type": ["null", _STRING], "default": None},
                                {
                                    "name": "isBootstrapBaseFile",
                                    "type": ["null", "boolean"],
                                    "default": None,
                                },
                            ],
                        },
                    },
                    "avro.java.string": "String",
                },
            ],
            "doc": "This field replaces the field filesToBeDeletedPerPartition",
            "default": None,
        },
        {
            "name": "partitionsToBeDeleted",
            "type": ["null", _STRINGS],
            "doc": "partitions to be deleted",
            "default": None,
        },
        {
            "name": "extraMetadata",
            "type": ["null", {**_STRINGS_BY_NAME, "default": None}],
            "default": None,
        },
    ],
}

CLEAN_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanMetadata",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "startCleanTime", "type": _STRING},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": _STRING},
        {"name": "lastCompletedCommitTimestamp", "type": _STRING, "default": ""},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "HoodieCleanPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": _STRING},
                        {"name": "policy", "type": _STRING},
                        {"name": "deletePathPatterns", "type": _STRINGS},
                        {"name": "successDeleteFiles", "type": _STRINGS},
                        {"name": "failedDeleteFiles", "type": _STRINGS},
                        {
                            "name": "isPartitionDeleted",
                            "type": ["null", "boolean"],
                            "default": None,
                        },
                    ],
                },
                "avro.java.string": "String",
            },
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "bootstrapPartitionMetadata",
            "type": [
                "null",
                {
                    "type": "map",
                    "values": "HoodieCleanPartitionMetadata",
                    "avro.java.string": "String",
                    "default": None,
                },
            ],
            "default": None,
        },
        {
            "name": "extraMetadata",
            "type": ["null", {**_STRINGS_BY_NAME, "default": None}],
            "default": None,
        },
    ],
}

_STRINGS_OR_NULL = ["null", _STRINGS]
_STRING_OR_NULL = ["null", _STRING]

COMPACTION_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCompactionPlan",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {
            "name": "operations",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieCompactionOperation",
                        "fields": [
                            {"name": "baseInstantTime", "type": _STRING_OR_NULL},
                            {"name": "deltaFilePaths", "type": _STRINGS_OR_NULL, "default": None},
                            {"name": "dataFilePath", "type": _STRING_OR_NULL, "default": None},
                            {"name": "fileId", "type": _STRING_OR_NULL},
                            {"name": "partitionPath", "type": _STRING_OR_NULL, "default": None},
                            {
                                "name": "metrics",
                                "type": [
                                    "null",
                                    {
                                        "type": "map",
                                        "values": "double",
                                        "avro.java.string": "String",
                                    },
                                ],
                                "default": None,
                            },
                            {"name": "bootstrapFilePath", "type": _STRING_OR_NULL, "default": None},
                        ],
                    },
                },
            ],
            "default": None,
        },
        {"name": "extraMetadata", "type": ["null", _STRINGS_BY_NAME], "default": None},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "strategy",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "HoodieCompactionStrategy",
                    "fields": [
                        {"name": "compactorClassName", "type": _STRING_OR_NULL, "default": None},
                        {
                            "name": "strategyParams",
                            "type": ["null", _STRINGS_BY_NAME],
                            "default": None,
                        },
                        {"name": "version", "type": ["int", "null"], "default": 1},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "preserveHoodieMetadata", "type": ["boolean", "null"], "default": False},
    ],
}

#: Hudi 0.15's ``HoodieMergeArchiveFilePlan`` (``.hoodie/archived/mergeArchivePlan``: the archive
#: files a merge replaces, as full paths, and the file it writes)
MERGE_ARCHIVE_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieMergeArchiveFilePlan",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "candidate",
            "type": ["null", {"type": "array", "items": "string"}],
            "default": None,
        },
        {"name": "mergedArchiveFileName", "type": _STRING_OR_NULL, "default": None},
    ],
}

_INDEX_PARTITION_INFO = {
    "type": "record",
    "name": "HoodieIndexPartitionInfo",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "metadataPartitionPath", "type": _STRING_OR_NULL, "default": None},
        {"name": "indexUptoInstant", "type": _STRING_OR_NULL, "default": None},
    ],
}

_INDEX_PARTITION_INFOS = {
    "name": "indexPartitionInfos",
    "type": ["null", {"type": "array", "items": _INDEX_PARTITION_INFO}],
    "default": None,
}

#: ``T.indexing.requested`` and ``T.indexing.inflight`` (Hudi 0.15's ``HoodieIndexPlan.avsc``)
INDEX_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieIndexPlan",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        _INDEX_PARTITION_INFOS,
    ],
}

#: ``T.indexing`` (Hudi 0.15's ``HoodieIndexCommitMetadata.avsc``)
INDEX_COMMIT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieIndexCommitMetadata",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "operationType", "type": _STRING_OR_NULL, "default": None},
        _INDEX_PARTITION_INFOS,
    ],
}

_PARSED = {
    "merge_archive_plan": fastavro.parse_schema(MERGE_ARCHIVE_PLAN_SCHEMA),
    "plan": fastavro.parse_schema(ROLLBACK_PLAN_SCHEMA),
    "metadata": fastavro.parse_schema(ROLLBACK_METADATA_SCHEMA),
    "clean_plan": fastavro.parse_schema(CLEAN_PLAN_SCHEMA),
    "clean_metadata": fastavro.parse_schema(CLEAN_METADATA_SCHEMA),
    "compaction_plan": fastavro.parse_schema(COMPACTION_PLAN_SCHEMA),
    "index_plan": fastavro.parse_schema(INDEX_PLAN_SCHEMA),
    "index_commit": fastavro.parse_schema(INDEX_COMMIT_SCHEMA),
}


def avro_file(schema: str, record: Mapping[str, Any]) -> bytes:
    """One record as an Avro object container file, as Hudi serializes instant metadata
    (``schema``: "plan" or "metadata" of a rollback, "clean_plan" or "clean_metadata",
    "compaction_plan", "merge_archive_plan", "index_plan", "index_commit")."""
    sink = io.BytesIO()
    fastavro.writer(sink, _PARSED[schema], [dict(record)], codec="null")
    return sink.getvalue()


__all__ = [
    "CLEAN_METADATA_SCHEMA",
    "CLEAN_PLAN_SCHEMA",
    "COMPACTION_PLAN_SCHEMA",
    "INDEX_COMMIT_SCHEMA",
    "INDEX_PLAN_SCHEMA",
    "MERGE_ARCHIVE_PLAN_SCHEMA",
    "ROLLBACK_METADATA_SCHEMA",
    "ROLLBACK_PLAN_SCHEMA",
    "avro_file",
]
