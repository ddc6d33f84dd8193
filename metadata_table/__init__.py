"""metadata_table package (docs/architecture.md §1): the index's partitions, their storage and
merged reads, and the read side (``metadata_table.read``) through which queries read rows:
``from metadata_table import load_table``."""

from metadata_table.read.scan import IndexedTable, TableScan, load_table

__all__ = ["IndexedTable", "TableScan", "load_table"]
