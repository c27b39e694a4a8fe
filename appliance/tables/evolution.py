"""A stream table's schema as the single source of truth, and changing it safely.

The table's schema says which columns there are, their names and types; its property
`floe.sources` says, by field id, which message field fills each column (so a column that
any Iceberg client renames keeps its source, and one it drops leaves its source ignored, not
re-added). A column with no recorded source, added by another client, is filled from the
message field of its own name. The stream's mapping is read off the table before each
batch (`mapping_of`).

Schema changes are committed as Iceberg schema updates, under Floe's commit lock and
retried on fresh metadata, since PyIceberg does not retry a schema-only commit that loses
a race with another writer. Each carries the new columns' sources in the same commit.
"""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import StagedTable, Table

from appliance.config.settings import Settings
from appliance.core.errors import CommitConflict, MappingError
from appliance.core.failpoints import failpoint
from appliance.core.retry import retrying
from appliance.model.changes import Evolution
from appliance.model.columns import RESERVED_COLUMNS
from appliance.model.mapping import Column, Mapping
from appliance.model.partitioning import Partitioning
from appliance.model.types import UnknownType, of_iceberg, parse_type, widens
from appliance.tables.commits import commit_lock
from appliance.tables.fastpath.transactions import transaction

log = logging.getLogger(__name__)

SOURCES_KEY = "floe.sources"


@dataclass(frozen=True)
class Binding:
    source: tuple[str, ...]
    as_json: bool = False  # the column holds the field's JSON text (an Iceberg string)


def bindings(table: Table) -> dict[int, Binding] | None:
    """The sources recorded in the table, by field id; None when it records none (an older table)."""
    text = table.metadata.properties.get(SOURCES_KEY)
    if text is None:
        return None
    return {int(k): Binding(tuple(v["source"]), bool(v.get("json"))) for k, v in json.loads(text).items()}


def _dump(binds: dict[int, Binding]) -> str:
    return json.dumps({str(k): {"source": list(b.source), **({"json": True} if b.as_json else {})}
                       for k, b in sorted(binds.items())}, separators=(",", ":"))


def _by_name(table: Table, mapping: Mapping) -> dict[int, Binding]:
    ids = {f.name: f.field_id for f in table.schema().fields}
    return {ids[c.name]: Binding(c.source, c.type == "json") for c in mapping.columns if c.name in ids}


def mapping_of(table: Table, fallback: Mapping | None = None) -> Mapping:
    """The stream's mapping as the table's schema makes it, in table order."""
    binds = bindings(table)
    if binds is None:
        binds = _by_name(table, fallback) if fallback else {}
    columns = []
    schema = table.schema()
    for f in schema.fields:
        if f.name in RESERVED_COLUMNS:
            continue
        bound = binds.get(f.field_id)
        try:
            ctype = "json" if bound and bound.as_json else of_iceberg(f.field_type).name
        except UnknownType:
            continue  # a type no message fills (a struct added by hand): left NULL
        columns.append(Column(f.name, ctype, bound.source if bound else (f.name,)))
    ids = {f.field_id for f in schema.fields}
    ignored = [b.source for fid, b in binds.items() if fid not in ids]
    return Mapping.of_table(columns, ignored)


def _commit(settings: Settings, table: Table, change) -> tuple[Table, list[str]]:
    """Apply `change(tx, table) -> descriptions` in one commit, on fresh metadata, until it lands."""
    name = ".".join(table.name())
    try:
        with commit_lock(settings, name):
            for attempt in retrying(CommitFailedException, f"schema change of {name}", attempts=8):
                with attempt:
                    table = table.refresh()
                    tx = transaction(table)
                    done = change(tx, table)
                    if not done:
                        return table, []
                    failpoint("schema_commit")
                    return tx.commit_transaction(), done
    except CommitFailedException:
        raise CommitConflict(f"table {name}: schema change lost 8 races in a row") from None


def ensure_bindings(settings: Settings, table: Table, mapping: Mapping) -> Table:
    """Record the sources of `mapping`'s columns in the table, if it records none yet."""
    if bindings(table) is not None:
        return table

    def change(tx, current: Table) -> list[str]:
        if bindings(current) is not None:
            return []
        tx.set_properties({SOURCES_KEY: _dump(_by_name(current, mapping))})
        return ["sources recorded"]

    return _commit(settings, table, change)[0]


def evolve(settings: Settings, table: Table, evolution: Evolution, fallback: Mapping) -> tuple[Table, list[str]]:
    """Add the new columns (with their sources) and widen the columns `evolution` asks for, in one
    schema update; what was done, one line each. Already done (by a rerun, or a race): nothing."""
    return _commit(settings, table, _evolution(evolution, fallback))


def evolved(table: Table, evolution: Evolution, fallback: Mapping) -> tuple[Table, list[str]]:
    """The table as `evolve` would make it, committed nowhere (a dry run decodes against it): a staged
    copy of `table`, and what would change, one line each."""
    tx = transaction(table)
    done = _evolution(evolution, fallback)(tx, table)
    if not done:
        return table, []
    return StagedTable(identifier=table.name(), metadata=tx.table_metadata, metadata_location=table.metadata_location,
                       io=table.io, catalog=table.catalog), done


def _evolution(evolution: Evolution, fallback: Mapping):
    """The schema update `evolution` asks for, as a change `_commit` applies: (transaction, table) -> lines."""

    def change(tx, current: Table) -> list[str]:
        mapping = mapping_of(current, fallback)
        taken, known = {f.name for f in current.schema().fields}, mapping.sources()
        adds = [c for c in evolution.add if c.source not in known]
        widen = []
        for name, wider in evolution.widen:
            col = next((c for c in mapping.columns if c.name == name), None)
            if col is not None and widens(col.ctype, parse_type(wider)):
                widen.append((name, col.type, wider))
        if not adds and not widen:
            return []
        binds = bindings(current) if bindings(current) is not None else _by_name(current, mapping)
        names, done = {}, []
        ids = itertools.count(10_000)  # placeholders: PyIceberg gives nested fields fresh ids
        with tx.update_schema() as update:
            for col in adds:
                name, n = col.name, 2
                while name in taken:
                    name, n = f"{col.name}_{n}", n + 1
                taken.add(name)
                names[name] = col
                update.add_column(name, col.ctype.iceberg(lambda: next(ids)), required=False)
                done.append(f"added column {name} ({col.type}) for new field {'.'.join(col.source)}")
            for name, old, wider in widen:
                update.update_column(name, field_type=parse_type(wider).iceberg(lambda: next(ids)))
                done.append(f"widened column {name} from {old} to {wider}")
        schema = tx.table_metadata.schema()
        for name, col in names.items():
            binds[schema.find_field(name).field_id] = Binding(col.source, col.type == "json")
        tx.set_properties({SOURCES_KEY: _dump(binds)})
        return done

    return change


# ---- by hand: `floe table alter` ------------------------------------------------------------------


def _check_column(table: Table, name: str) -> None:
    if name in RESERVED_COLUMNS:
        raise MappingError(f"column {name!r} is Floe's own (Kafka metadata): it cannot be changed")
    if name not in {f.name for f in table.schema().fields}:
        raise MappingError(f"table {'.'.join(table.name())} has no column {name!r}")


def add_column(settings: Settings, table: Table, name: str, type_: str, source: tuple[str, ...] | None) -> Table:
    try:
        ctype = parse_type(type_)
    except UnknownType as exc:
        raise MappingError(f"column {name!r}: {exc}") from None
    if name in {f.name for f in table.schema().fields}:
        raise MappingError(f"table {'.'.join(table.name())} already has a column {name!r}")

    def change(tx, current: Table) -> list[str]:
        binds = bindings(current) or {}
        with tx.update_schema() as update:
            ids = itertools.count(10_000)
            update.add_column(name, ctype.iceberg(lambda: next(ids)), required=False)
        if source:
            binds[tx.table_metadata.schema().find_field(name).field_id] = Binding(source, ctype.kind == "json")
            tx.set_properties({SOURCES_KEY: _dump(binds)})
        return [f"added column {name} ({ctype})"]

    return _commit(settings, table, change)[0]


def drop_column(settings: Settings, table: Table, name: str) -> Table:
    _check_column(table, name)

    def change(tx, current: Table) -> list[str]:
        with tx.update_schema() as update:
            update.delete_column(name)
        return [f"dropped column {name}"]

    return _commit(settings, table, change)[0]


def rename_column(settings: Settings, table: Table, old: str, new: str) -> Table:
    _check_column(table, old)
    if new in {f.name for f in table.schema().fields}:
        raise MappingError(f"table {'.'.join(table.name())} already has a column {new!r}")

    def change(tx, current: Table) -> list[str]:
        with tx.update_schema() as update:
            update.rename_column(old, new)
        return [f"renamed column {old} to {new}"]

    return _commit(settings, table, change)[0]



# ---- partitioning -----------------------------------------------------------------------------------


def set_partitioning(settings: Settings, table: Table, partitioning: Partitioning) -> tuple[Table, str]:
    """Partition evolution: the table's spec becomes `partitioning` (files written before keep theirs;
    writers take the new one from their next batch). A line saying what changed."""
    partitioning.check(table.schema())

    def change(tx, current: Table) -> list[str]:
        before = Partitioning.of(current.spec(), current.schema())
        if before == partitioning:
            return []
        with tx.update_spec() as update:
            for field in current.spec().fields:
                update.remove_field(field.name)
            for field in partitioning.fields:
                update.add_field(field.column, field.iceberg(), field.name)
        return [f"partitioning {before} -> {partitioning}"]

    table, done = _commit(settings, table, change)
    return table, done[0] if done else f"partitioning is already {partitioning}"
