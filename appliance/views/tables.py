"""The catalog's tables: their numbers, snapshots and schema, and which stream writes each."""

from __future__ import annotations

import datetime as dt
import sqlite3
from dataclasses import dataclass, field

from appliance.config.settings import Settings
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.snapshots import SnapshotInfo, snapshot_infos, totals


@dataclass(frozen=True)
class SchemaVersion:
    """One schema the table has had: what changed from the one before, and when it was first
    committed with (None: no commit since the change)."""

    schema_id: int
    changes: tuple[str, ...]
    first_used: dt.datetime | None
    current: bool


@dataclass
class TableView:
    name: str
    rows: int
    data_files: int
    size_bytes: int
    snapshots: list[SnapshotInfo]
    schema: list[tuple[str, str]]
    location: str
    schema_versions: list[SchemaVersion] = field(default_factory=list)  # newest first


def schema_versions(table) -> list[SchemaVersion]:
    """Every schema of the table, each told as its changes by field id: added, dropped, renamed, retyped."""
    meta = table.metadata
    first: dict[int, int] = {}
    for snap in sorted(meta.snapshots, key=lambda x: x.timestamp_ms):
        if snap.schema_id is not None:
            first.setdefault(snap.schema_id, snap.timestamp_ms)
    out, before = [], {}
    for schema in sorted(meta.schemas, key=lambda x: x.schema_id):
        fields = {f.field_id: (f.name, str(f.field_type)) for f in schema.fields}
        if not before:
            changes = [f"created with {len(fields)} columns"]
        else:
            changes = [f"added {n} ({t})" for i, (n, t) in fields.items() if i not in before]
            changes += [f"dropped {n}" for i, (n, _) in before.items() if i not in fields]
            changes += [f"renamed {before[i][0]} to {n}" for i, (n, _) in fields.items()
                        if i in before and before[i][0] != n]
            changes += [f"{n}: {before[i][1]} to {t}" for i, (n, t) in fields.items()
                        if i in before and before[i][1] != t]
        used = first.get(schema.schema_id)
        out.append(SchemaVersion(schema.schema_id, tuple(changes or ["no column change"]),
                                 dt.datetime.fromtimestamp(used / 1000, dt.timezone.utc) if used else None,
                                 schema.schema_id == meta.current_schema_id))
        before = fields
    out.reverse()
    return out


@dataclass(frozen=True)
class Writer:
    stream: str | None  # None: the stream was deleted, its table kept
    dead_letters: bool  # the table is a dead-letter table


@dataclass
class Catalogue:
    names: list[str]  # `namespace.table`, sorted
    writers: dict[str, Writer]  # table -> the stream that writes it (or wrote it: a dead-letter table)


def table_names(settings: Settings) -> list[str]:
    return Catalog(settings).list_tables()


def catalogue(settings: Settings) -> Catalogue:
    """Every table, and the streams that write them (the catalog is the truth; streams only label)."""
    names = table_names(settings)
    writers: dict[str, Writer] = {}
    try:
        with StateStore(settings.state_db) as state:
            for s in state.streams():
                writers[s.table] = Writer(s.name, False)
                writers[s.dead_letter_table] = Writer(s.name, True)
    except sqlite3.Error:  # only labels: the tables are worth listing without them
        writers = {}
    for name in names:  # a deleted stream's dead-letter table stays one
        if name not in writers and name.endswith(settings.dead_letter_suffix):
            writers[name] = Writer(None, True)
    return Catalogue(names, writers)


def table_view(settings: Settings, name: str) -> TableView:
    table = Catalog(settings).table(name)
    now = totals(table)
    return TableView(
        name=name,
        rows=now.rows,
        data_files=now.data_files,
        size_bytes=now.size_bytes,
        snapshots=snapshot_infos(table),
        schema=[(f.name, str(f.field_type)) for f in table.schema().fields],
        location=table.location(),
        schema_versions=schema_versions(table),
    )
