"""writer package (docs/architecture.md §1)."""
