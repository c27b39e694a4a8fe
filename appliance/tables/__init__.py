"""Iceberg tables: the catalog, the schemas of a stream's tables, data files, snapshots (and the offsets
in them), commits and schema evolution: Floe's table rules. `fastpath/` is how they are written fast."""
