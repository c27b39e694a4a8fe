"""Iceberg tables: the catalog, schemas, data files, snapshots (and the offsets in them), commits."""
