"""metadata_table package (see DESIGN.md)."""
