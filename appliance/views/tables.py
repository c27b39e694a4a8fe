"""The catalog's tables: their numbers, snapshots and schema, and which stream writes each."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.snapshots import SnapshotInfo, snapshot_infos, totals


@dataclass
class TableView:
    name: str
    rows: int
    data_files: int
    size_bytes: int
    snapshots: list[SnapshotInfo]
    schema: list[tuple[str, str]]
    location: str


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
    )
