"""Validation of the index against the data, in the spirit of Hudi's HoodieMetadataTableValidator:
every completed partition, as readers see it, compared record for record with a rebuild from the
data files at the same snapshot. Read-only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metadata_table.index_types import index_type
from metadata_table.maintenance import build_records
from metadata_table.table import MetadataTable
from timeline.table import Table


@dataclass(frozen=True)
class PartitionReport:
    """How one completed partition differs from its rebuild (keys are the index's keys)."""

    partition: str
    lost: str | None = None  # why its files cannot be read
    unapplied: list[str] = field(default_factory=list)  # completed instants it does not reflect
    missing: list[str] = field(default_factory=list)  # in the rebuild, not in the index
    stale: list[str] = field(default_factory=list)  # in the index, not in the rebuild
    wrong: list[str] = field(default_factory=list)  # in both, with other values

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unapplied or self.missing or self.stale or self.wrong)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "ok": self.ok,
            "lost": self.lost,
            "unapplied": self.unapplied,
            "missing": self.missing,
            "stale": self.stale,
            "wrong": self.wrong,
        }


def validate(
    table: Table, progress: Callable[[int, int], None] | None = None
) -> list[PartitionReport]:
    """One report per completed partition, all at one snapshot of the data timeline;
    ``progress(done, total)`` is called as partitions are compared."""
    state = table.reload_index_state()
    timeline = table.timeline.load()
    reader = MetadataTable(table).reader(timeline)
    reports: list[PartitionReport] = []
    for partition in state.completed:
        if progress is not None:
            progress(len(reports), len(state.completed))
        kind = index_type(partition)
        columns = list(state.column_stats_columns) or None if kind.takes_columns else None
        ours = {r["key"]: r for r in kind.comparable(reader.read(partition))}
        rebuilt = {
            r["key"]: r for r in kind.comparable(build_records(table, timeline, partition, columns))
        }
        lost = reader.lost(partition)
        behind = [] if lost else reader.unapplied(partition)
        reports.append(
            PartitionReport(
                partition,
                lost=lost,
                unapplied=[f"{i.timestamp}.{i.action}" for i in behind],
                missing=sorted(rebuilt.keys() - ours.keys()),
                stale=sorted(ours.keys() - rebuilt.keys()),
                wrong=sorted(k for k in ours.keys() & rebuilt.keys() if ours[k] != rebuilt[k]),
            )
        )
    if progress is not None:
        progress(len(reports), len(state.completed))
    return reports
