"""Changing a table's schema or partitioning by hand (`floe table alter`, the UI): what streams then follow.

The table is the stream's source of truth: a column added here is filled from the next batch
(from `--source`, or the message field of its name), a renamed one keeps its source, a
dropped one's field is left out from then on and not brought back by schema evolution.
"""

from __future__ import annotations

from appliance.config.settings import Settings
from appliance.control.audit import audited
from appliance.core.errors import MappingError
from appliance.core.vocabulary import EventKind
from appliance.model.names import check_identifier, check_table_name
from appliance.model.partitioning import Partitioning
from appliance.model.sources import parse_source, source_problem
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.evolution import add_column, drop_column, ensure_bindings, rename_column, set_partitioning
from appliance.tables.system import refuse_system

OPERATIONS = ("add-column", "drop-column", "rename-column", "partition-by")


@audited(lambda a: f"table alter {a['operation']}")
def alter_table(settings: Settings, name: str, operation: str, column: str, value: str | None = None,
                source: str | None = None) -> str:
    """Apply one schema change; a line saying what was done. `value`: the new type or the new name."""
    check_table_name(name)
    refuse_system(name)
    catalog = Catalog(settings)
    catalog.check_exists(name)
    with StateStore(settings.state_db) as state:
        writers = [s for s in state.table_writers() if s.table == name]
    with warehouse_io(settings, f"alter table {name}"):
        table = catalog.table(name)
        for stream in writers:  # a table from before sources were recorded: record them first
            table = ensure_bindings(settings, table, stream.mapping)
        if operation == "add-column":
            check_identifier(column, "column")
            path = parse_source(source) if source else None
            if path and (why := source_problem(column, value or "", path)):
                raise MappingError(why)
            add_column(settings, table, column, value or "", path)
            done = f"added column {column} ({value})" + (f" filled from field {source}" if source else "")
        elif operation == "drop-column":
            drop_column(settings, table, column)
            done = f"dropped column {column}"
        elif operation == "rename-column":
            check_identifier(value or "", "column")
            rename_column(settings, table, column, value or "")
            done = f"renamed column {column} to {value}"
        elif operation == "partition-by":  # `column` holds the partitioning, as written
            done = set_partitioning(settings, table, Partitioning.parse(column))[1]
        else:
            raise ValueError(f"unknown operation {operation!r}")
    with StateStore(settings.state_db) as state:
        for stream in writers:
            state.add_event(EventKind.TABLE_ALTERED, f"table {name}: {done}", stream.name)
    return done
