"""A stream's committed offsets read straight from its table's metadata file, for `floe stream show`.

On Floe's own SQLite catalog with a local warehouse this is one SQL query and one JSON parse,
where loading the table through PyIceberg's catalog costs more than half a second of imports
(SQLAlchemy, PyIceberg's tables and file IO, pandas) for a command that should answer at once.
Anything else (another catalog, a warehouse on S3, a compressed metadata file) says "not here",
and the caller takes the catalog's way. The same keys and rule as `snapshots.committed_offsets`.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from appliance.config.settings import Settings

STREAM_KEY = "floe.stream-id"
OFFSETS_KEY = "floe.offsets"
NOT_HERE = object()  # the metadata is not where this reader can get it cheaply


def parse_offsets(text: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in json.loads(text).items()}


def _metadata_path(settings: Settings, table: str) -> Path | None:
    if not settings.catalog.own or settings.on_s3 or not settings.catalog_db.exists():
        return None
    namespace, _, name = table.rpartition(".")
    with closing(sqlite3.connect(f"file:{settings.catalog_db}?mode=ro", uri=True, timeout=5)) as con:
        row = con.execute("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ?"
                          " AND table_namespace = ? AND table_name = ?",
                          (settings.catalog.name, namespace, name)).fetchone()
    location = row[0] if row else None
    if not location or not location.endswith(".metadata.json"):
        return None
    if location.startswith("file://"):
        return Path(location.removeprefix("file://"))
    return Path(location) if location.startswith("/") else None


def committed_offsets_of(settings: Settings, table: str, stream_id: str):
    """The stream's next offsets per partition (None: it committed none yet), or NOT_HERE."""
    try:
        path = _metadata_path(settings, table)
    except sqlite3.Error:
        return NOT_HERE
    if path is None:
        return NOT_HERE
    metadata = json.loads(path.read_bytes())
    snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
    current = metadata.get("current-snapshot-id")
    while current in snapshots:  # the current snapshot and its ancestors, newest first
        snapshot = snapshots[current]
        summary = snapshot.get("summary", {})
        if summary.get(STREAM_KEY) == stream_id and OFFSETS_KEY in summary:
            return parse_offsets(summary[OFFSETS_KEY])
        current = snapshot.get("parent-snapshot-id")
    return None
