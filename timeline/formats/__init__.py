"""Apache Hudi's file formats that no Python library reads or writes: HFile (the base files and
log blocks of Hudi's metadata table) and the metadata table's records (``HoodieMetadataRecord``:
keys, routing to file groups, values)."""
