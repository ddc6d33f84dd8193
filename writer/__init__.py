"""writer package (see DESIGN.md)."""
