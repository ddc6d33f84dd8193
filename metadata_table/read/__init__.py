"""The read side of the metadata table: filters, an indexed snapshot of a table (listings, data
skipping, key lookups), and the table scan that reads rows through the index."""
