"""The one way the audit reads a stream's rows from a table: DuckDB's `iceberg_scan` of its current
metadata, only the rows ingested since the stream began."""

from __future__ import annotations

from appliance.model.columns import INGESTED_AT
from appliance.model.stream import StreamDef


def scan_sql(table, stream: StreamDef, columns: str, rest: str = "") -> str | None:
    """SQL selecting `columns` of the stream's rows (then `rest`); None while the table has no snapshot."""
    if table.current_snapshot() is None:
        return None
    location = table.metadata_location.replace("'", "''")
    # A reused table may hold an earlier stream's rows: only those ingested since this one began count.
    since = stream.created_at.replace("'", "''")
    return (f"SELECT {columns} FROM iceberg_scan('{location}') "
            f"WHERE {INGESTED_AT.name} >= TIMESTAMPTZ '{since}' {rest}")
