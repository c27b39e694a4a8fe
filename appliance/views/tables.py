"""The catalog's tables: their numbers, snapshots and schema, and which stream writes each."""

from __future__ import annotations

import datetime as dt
import sqlite3
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFileContent

from appliance.config.settings import Settings
from appliance.model.partitioning import Partitioning
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_entries
from appliance.tables.snapshots import SnapshotInfo, snapshot_infos, totals
from appliance.tables.system import NAMESPACE as SYSTEM_NAMESPACE


@dataclass(frozen=True)
class SchemaVersion:
    """One schema the table has had: what changed from the one before, and when it was first
    committed with (None: no commit since the change)."""

    schema_id: int
    changes: tuple[str, ...]
    first_used: dt.datetime | None
    current: bool


@dataclass(frozen=True)
class SpecVersion:
    """One partition spec the table has had, and how many of its live data files are in it."""

    spec_id: int
    partitioning: str  # as `--partition-by` writes it
    current: bool
    files: int


@dataclass(frozen=True)
class PartitionStats:
    """One partition's live data: its values (as Iceberg's paths show them), rows, files, bytes."""

    partition: str
    spec_id: int
    rows: int
    files: int
    size_bytes: int
    delete_files: int  # position-delete files naming its rows (upsert tables)


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
    partitioning: str = "none"
    specs: list[SpecVersion] = field(default_factory=list)  # oldest first
    partitions: list[PartitionStats] = field(default_factory=list)
    delete_files: int = 0
    position_deletes: int = 0  # rows the delete files remove: `rows` counts them until compaction


def partition_stats(table) -> tuple[list[SpecVersion], list[PartitionStats]]:
    """Each spec's live files, and each partition's rows, files and sizes (from the manifests)."""
    meta, schema = table.metadata, table.schema()
    specs = meta.specs()
    groups: dict[tuple[int, str], list[int]] = {}
    per_spec: dict[int, int] = {}
    for entry in live_entries(table):
        f = entry.data_file
        spec = specs[f.spec_id]
        where = spec.partition_to_path(f.partition, schema) if spec.fields else "(unpartitioned)"
        found = groups.setdefault((f.spec_id, where), [0, 0, 0, 0])
        if f.content == DataFileContent.DATA:
            found[0] += f.record_count
            found[1] += 1
            found[2] += f.file_size_in_bytes
            per_spec[f.spec_id] = per_spec.get(f.spec_id, 0) + 1
        else:
            found[3] += 1
    versions = [SpecVersion(i, str(Partitioning.of(spec, schema)), i == meta.default_spec_id, per_spec.get(i, 0))
                for i, spec in sorted(specs.items())]
    return versions, [PartitionStats(where, spec_id, *numbers) for (spec_id, where), numbers in sorted(groups.items())]


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
    names: list[str]  # `namespace.table`, the user's first (`table_names`)
    writers: dict[str, Writer]  # table -> the stream that writes it (or wrote it: a dead-letter table)


def users_first(names: list[str]) -> list[str]:
    """Sorted, with Floe's own system tables (the `floe` namespace) after the user's: a list opens on
    what the user made, not on `floe.audit`."""
    return sorted(names, key=lambda n: (n.partition(".")[0] == SYSTEM_NAMESPACE, n))


def table_names(settings: Settings) -> list[str]:
    """Every table of the catalog, the user's first."""
    return users_first(Catalog(settings).list_tables())


def catalogue(settings: Settings) -> Catalogue:
    """Every table, and the streams that write them (the catalog is the truth; streams only label)."""
    names = table_names(settings)
    writers: dict[str, Writer] = {}
    try:
        with StateStore(settings.state_db) as state:
            for s in state.table_writers():
                writers[s.table] = Writer(s.name, False)
                writers[s.dead_letter_table] = Writer(s.name, True)
    except sqlite3.Error:  # only labels: the tables are worth listing without them
        writers = {}
    for name in names:  # a deleted stream's dead-letter table stays one
        if name not in writers and name.endswith(settings.dead_letter_suffix):
            writers[name] = Writer(None, True)
    return Catalogue(names, writers)


def table_view(settings: Settings, name: str, partitions: bool = True) -> TableView:
    """The table's numbers, snapshots, schema versions and (`partitions`: reading its manifests) its
    partitioning with each partition's rows, files and bytes."""
    table = Catalog(settings).table(name)
    now = totals(table)
    specs, stats = partition_stats(table) if partitions else ([], [])
    return TableView(
        name=name,
        rows=now.rows,
        data_files=now.data_files,
        size_bytes=now.size_bytes,
        snapshots=snapshot_infos(table),
        schema=[(f.name, str(f.field_type)) for f in table.schema().fields],
        location=table.location(),
        schema_versions=schema_versions(table),
        partitioning=str(Partitioning.of(table.spec(), table.schema())),
        specs=specs,
        partitions=stats,
        delete_files=now.delete_files,
        position_deletes=now.position_deletes,
    )
