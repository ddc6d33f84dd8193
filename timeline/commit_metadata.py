"""Commit metadata: the content of a completed write instant (docs/architecture.md §7.1), and plans that name
the file groups a pending table service will touch.

JSON field names follow Hudi (``partitionToWriteStats``, ``fileId``, ``prevCommit`` ...), so a Hudi
user and hudi-rs read them as they expect. Parsing errors name the instant file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from timeline.errors import CorruptInstantError

NULL_COMMIT = "null"


@dataclass(frozen=True)
class WriteStat:
    """What one write did to one file group (one data file)."""

    file_id: str
    path: str  # relative to the base path
    partition_path: str
    prev_commit: str = NULL_COMMIT  # the base instant of the slice this one replaces
    num_writes: int = 0  # records in the file
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    total_write_errors: int = 0
    file_size_in_bytes: int = 0

    _JSON: ClassVar[dict[str, str]] = {
        "file_id": "fileId",
        "path": "path",
        "partition_path": "partitionPath",
        "prev_commit": "prevCommit",
        "num_writes": "numWrites",
        "num_deletes": "numDeletes",
        "num_update_writes": "numUpdateWrites",
        "num_inserts": "numInserts",
        "total_write_bytes": "totalWriteBytes",
        "total_write_errors": "totalWriteErrors",
        "file_size_in_bytes": "fileSizeInBytes",
    }

    def to_json(self) -> dict[str, Any]:
        out = {self._JSON[f.name]: getattr(self, f.name) for f in fields(self)}
        out["minEventTime"] = None
        out["maxEventTime"] = None
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> WriteStat:
        kwargs = {name: value[key] for name, key in cls._JSON.items() if value.get(key) is not None}
        return cls(**kwargs)

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class CommitMetadata:
    """The content of ``T.commit`` / ``T.deltacommit`` / ``T.replacecommit``."""

    partition_to_write_stats: Mapping[str, tuple[WriteStat, ...]] = field(default_factory=dict)
    operation_type: str = "UNKNOWN"
    extra_metadata: Mapping[str, str] = field(default_factory=dict)
    partition_to_replace_file_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    compacted: bool = False

    @classmethod
    def of(
        cls,
        stats: Iterable[WriteStat],
        operation_type: str,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> CommitMetadata:
        grouped: dict[str, list[WriteStat]] = {}
        for stat in stats:
            grouped.setdefault(stat.partition_path, []).append(stat)
        return cls(
            {p: tuple(s) for p, s in sorted(grouped.items())},
            operation_type,
            dict(extra_metadata or {}),
        )

    @property
    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    def mutated_file_groups(self) -> set[tuple[str, str]]:
        """(partition path, file id) of every file group written or replaced."""
        mutated = {(s.partition_path, s.file_id) for s in self.write_stats}
        for partition, file_ids in self.partition_to_replace_file_ids.items():
            mutated.update((partition, f) for f in file_ids)
        return mutated

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "partitionToWriteStats": {
                p: [s.to_json() for s in stats]
                for p, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids:
            out["partitionToReplaceFileIds"] = {
                p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()
            }
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any], path: str = "<commit>") -> CommitMetadata:
        try:
            stats = {
                p: tuple(WriteStat.from_json(s) for s in items)
                for p, items in (value.get("partitionToWriteStats") or {}).items()
            }
            replaced = {
                p: tuple(ids) for p, ids in (value.get("partitionToReplaceFileIds") or {}).items()
            }
            return cls(
                stats,
                str(value.get("operationType") or "UNKNOWN"),
                dict(value.get("extraMetadata") or {}),
                replaced,
                bool(value.get("compacted", False)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise CorruptInstantError(path, f"not valid commit metadata ({e})") from e

    @classmethod
    def from_bytes(cls, data: bytes, path: str = "<commit>") -> CommitMetadata:
        if not data.strip():
            return cls()
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptInstantError(path, f"not valid JSON ({e})") from e
        if not isinstance(value, dict):
            raise CorruptInstantError(path, "content is not a JSON object")
        return cls.from_json(value, path)


@dataclass(frozen=True)
class FileGroupPlan:
    """The plan of a pending compaction or clustering: the file groups it will rewrite.

    JSON: ``{"operations": [{"partitionPath": p, "fileId": f}, ...]}`` (compaction) or
    ``{"inputGroups": [...]}`` (clustering); both name (partition, file id) pairs.
    """

    file_groups: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def from_bytes(cls, data: bytes, path: str = "<plan>") -> FileGroupPlan:
        if not data.strip():
            return cls()
        try:
            value = json.loads(data)
            items = value.get("operations") or value.get("inputGroups") or []
            return cls(frozenset((str(i["partitionPath"]), str(i["fileId"])) for i in items))
        except (AttributeError, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptInstantError(path, f"not a valid file group plan ({e})") from e

    def to_json(self, key: str = "operations") -> dict[str, Any]:
        return {key: [{"partitionPath": p, "fileId": f} for p, f in sorted(self.file_groups)]}
