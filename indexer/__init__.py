"""indexer package (docs/architecture.md §1)."""
