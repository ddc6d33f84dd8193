"""metadata_table package (docs/architecture.md §1): the index's partitions, their storage and
merged reads, and the read side (``metadata_table.read``) through which queries read rows:
``from metadata_table import load_table``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metadata_table.read.scan import IndexedTable, TableScan, load_table

__all__ = ["IndexedTable", "TableScan", "load_table"]


def __getattr__(name: str) -> Any:
    """The read side, imported when first named: a process that imports only a module of the
    package (a build's worker, a command that does not scan) does not load it."""
    if name in __all__:
        from metadata_table.read import scan

        return getattr(scan, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
