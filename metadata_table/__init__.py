"""metadata_table package (docs/architecture.md §1)."""
