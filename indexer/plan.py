"""The indexing plan: the content of ``Ti.indexing.requested`` and ``Ti.indexing`` (docs/architecture.md §5)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from metadata_table.layout import check_partition
from timeline.errors import CorruptInstantError

PLAN_VERSION = 1
#: Apache Hudi writes its own indexing plans (HoodieIndexer's) as Avro container files; ours are
#: JSON. The two share the ``indexing`` action on the data timeline.
AVRO_MAGIC = b"Obj\x01"


def is_hudi_plan(content: bytes) -> bool:
    """Whether an indexing instant's content is Apache Hudi's (Avro), not one of our plans."""
    return content.startswith(AVRO_MAGIC)


@dataclass(frozen=True)
class PartitionPlan:
    partition: str
    index_upto: str  # t: the base files cover data instants up to it
    columns: tuple[str, ...] = ()  # column_stats: the indexed columns (empty: all)
    file_groups: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "metadataPartitionPath": self.partition,
            "indexUptoInstant": self.index_upto,
            "columns": list(self.columns),
            "fileGroups": self.file_groups,
        }


@dataclass(frozen=True)
class IndexPlan:
    partitions: tuple[PartitionPlan, ...]
    version: int = PLAN_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [p.partition for p in self.partitions]

    @property
    def index_upto(self) -> str:
        return self.partitions[0].index_upto

    def with_index_upto(self, instant: str) -> IndexPlan:
        return replace(
            self, partitions=tuple(replace(p, index_upto=instant) for p in self.partitions)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "indexPartitionInfos": [p.to_json() for p in self.partitions],
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, value: Any, path: str) -> IndexPlan:
        try:
            if value.get("version") != PLAN_VERSION:
                raise ValueError(f"plan version {value.get('version')!r} is not {PLAN_VERSION}")
            infos = value["indexPartitionInfos"]
            if not isinstance(infos, list) or not infos:
                raise ValueError("indexPartitionInfos must be a non-empty list")
            parts = tuple(
                PartitionPlan(
                    check_partition(str(i["metadataPartitionPath"])),
                    str(i["indexUptoInstant"]),
                    tuple(i.get("columns") or ()),
                    int(i.get("fileGroups") or 1),
                )
                for i in infos
            )
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise CorruptInstantError(path, f"not a valid indexing plan ({e})") from e
        return cls(parts)

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> IndexPlan:
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptInstantError(path, f"not valid JSON ({e})") from e
        return cls.from_json(value, path)
