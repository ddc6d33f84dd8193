"""indexer package (see DESIGN.md)."""
