"""The Iceberg catalog: PyIceberg's SqlCatalog on SQLite, with the warehouse on disk or S3."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator

from pyiceberg.catalog import StagedTable
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata

from appliance.config.settings import Settings
from appliance.core.errors import TableConflict, TableNotFound
from appliance.model.names import check_table_name
from appliance.tables.commits import commit_lock
from appliance.tables.metadatafile import MetadataWriter
from appliance.tables.schemas import same_columns
from appliance.tables.storage import describe, storage_errors
from appliance.tables.transactions import staged_metadata, transaction

log = logging.getLogger(__name__)


def table_properties(settings: Settings) -> dict[str, str]:
    """Properties every Floe table carries: a stream commits every second, and each commit
    writes a metadata file; without these they would pile up in the table's folder."""
    return {
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": str(settings.maintenance.metadata_versions),
        # Each append adds a manifest, and the manifest list that every commit rewrites
        # would list them all (hundreds between compactions): merge them every few dozen.
        "commit.manifest-merge.enabled": "true",
        "commit.manifest.min-count-to-merge": "32",
    }


_CURRENT = ("SELECT metadata_location FROM iceberg_tables"
            " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?")
_SWAP = ("UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?"
         " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?")


class FloeSqlCatalog(SqlCatalog):
    """PyIceberg's SqlCatalog, minus the work a 1-second commit repeats.

    A metadata file never changes once written, so the metadata read for a location is
    kept (the newest few): a commit, which loads the table to check it is still current,
    and the engine's reloads read the file that the last commit wrote only once, if at
    all. Staging a commit skips PyIceberg's defensive deep copy (see `transactions`), and
    writing it serialises only the new snapshot (see `metadatafile`).
    """

    CACHED = 16

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._writer = MetadataWriter()
        # The commit's two statements go straight to SQLite: through SQLAlchemy they cost more
        # than the rest of a stream's commit. Other databases take PyIceberg's way.
        self._sqlite = self.engine.url.database if self.engine.dialect.name == "sqlite" else None
        self._db: sqlite3.Connection | None = None  # opened by the first commit
        self._db_lock = threading.Lock()

    def _write_metadata(self, metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:
        self._writer.write(metadata, io, metadata_path)

    def _remember(self, location: str, metadata: TableMetadata) -> None:
        with self._cache_lock:  # every stream's worker thread commits through this catalog
            self._metadata[location] = metadata
            self._metadata.move_to_end(location)
            while len(self._metadata) > self.CACHED:
                self._metadata.popitem(last=False)

    def _cached(self, location: str) -> TableMetadata | None:
        with self._cache_lock:
            found = self._metadata.get(location)
            if found is not None:
                self._metadata.move_to_end(location)
            return found

    def _convert_orm_to_iceberg(self, orm_table) -> Table:
        location = orm_table.metadata_location
        metadata = self._cached(location) if location else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)
            self._remember(table.metadata_location, table.metadata)
            return table
        return Table(
            identifier=(*self.identifier_to_tuple(orm_table.table_namespace), orm_table.table_name),
            metadata=metadata, metadata_location=location,
            io=self._load_file_io(metadata.properties, location), catalog=self,
        )

    def _update_and_stage_table(self, current_table: Table | None, table_identifier, requirements,
                                updates) -> StagedTable:
        if current_table is None:
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = staged_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(identifier=table_identifier, metadata=metadata, metadata_location=location,
                           io=self._load_file_io(properties=metadata.properties, location=location), catalog=self)

    def commit_table(self, table: Table, requirements, updates) -> CommitTableResponse:
        """PyIceberg's commit of an existing table, in two plain SQL statements rather than its ORM
        session (a third of a stream commit's CPU); creating a table goes through PyIceberg."""
        namespace, name = ".".join(table.name()[:-1]), table.name()[-1]
        found = self._sql(_CURRENT, (self.name, namespace, name), rows=True) if self._sqlite else None
        if not found:
            response = super().commit_table(table, requirements, updates)
            self._remember(response.metadata_location, response.metadata)
            return response
        current = self._table_at(table.name(), found[0][0])
        staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        if staged.metadata == current.metadata:
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        self._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
        done = self._sql(_SWAP, (staged.metadata_location, current.metadata_location, self.name, namespace, name,
                                 current.metadata_location))
        if done < 1:
            raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
        self._remember(staged.metadata_location, staged.metadata)
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    def location(self, identifier: tuple[str, ...]) -> str | None:
        """Where the table's current metadata is: one indexed query, to tell whether a cached
        table is still current."""
        if not self._sqlite:
            return self.load_table(identifier).metadata_location
        found = self._sql(_CURRENT, (self.name, ".".join(identifier[:-1]), identifier[-1]), rows=True)
        return found[0][0] if found else None

    def _sql(self, statement: str, args: tuple, rows: bool = False):
        """One statement on this catalog's own connection, in a transaction of its own: its rows,
        or how many rows it changed."""
        with self._db_lock:
            if self._db is None:
                self._db = sqlite3.connect(self._sqlite, timeout=30, check_same_thread=False)
            with self._db:
                cursor = self._db.execute(statement, args)
                return cursor.fetchall() if rows else cursor.rowcount

    def _table_at(self, identifier: tuple[str, ...], location: str) -> Table:
        metadata = self._cached(location)
        if metadata is None:
            metadata = FromInputFile.table_metadata(self._load_file_io(location=location).new_input(location))
            self._remember(location, metadata)
        return Table(identifier=identifier, metadata=metadata, metadata_location=location,
                     io=self._load_file_io(metadata.properties, location), catalog=self)


def open_catalog(settings: Settings) -> SqlCatalog:
    return FloeSqlCatalog("floe", **settings.catalog_properties())


@contextmanager
def warehouse_io(settings: Settings, what: str) -> Iterator[None]:
    """Storage failures as one line naming the warehouse (and its endpoint), never its keys."""
    with storage_errors(describe(settings.warehouse, settings.s3.endpoint), what):
        yield


class Catalog:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.iceberg = open_catalog(settings)

    def table(self, name: str) -> Table:
        return self.iceberg.load_table(name)

    def current(self, table: Table) -> Table:
        """`table` itself while nobody has committed to it since; otherwise as it is now."""
        if self.iceberg.location(table.name()) == table.metadata_location:
            return table
        return self.iceberg.load_table(table.name())

    def exists(self, name: str) -> bool:
        return self.iceberg.table_exists(name)

    def check_exists(self, name: str) -> str:
        """`name`, if the catalog has that table; a one-line TableNotFound otherwise."""
        check_table_name(name)
        if not self.exists(name):
            raise TableNotFound(f"no table named {name} in the catalog (see `floe query \"show tables\"`)")
        return name

    def namespaces(self) -> list[str]:
        return sorted(".".join(ns) for ns in self.iceberg.list_namespaces())

    def check_can_create(self, name: str, schema: Schema) -> bool:
        """True when the table must be created, False when an existing one fits; raises otherwise."""
        check_table_name(name)
        try:
            with warehouse_io(self.settings, f"read table {name}"):
                existing = self.iceberg.load_table(name)
        except NoSuchTableError:
            return True
        if not same_columns(existing.schema(), schema):
            raise TableConflict(
                f"table {name} exists with other columns; choose another table or a mapping that matches it"
            )
        return False

    def ensure_table(self, name: str, schema: Schema) -> tuple[Table, bool]:
        namespace, _ = check_table_name(name)
        try:
            self.iceberg.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        if self.check_can_create(name, schema):
            with warehouse_io(self.settings, f"create table {name}"):
                properties = {"format-version": "2", **table_properties(self.settings)}
                return self.iceberg.create_table(name, schema, properties=properties), True
        with warehouse_io(self.settings, f"read table {name}"):
            return self.iceberg.load_table(name), False

    def ensure_properties(self, table: Table) -> Table:
        """`table` with Floe's table properties, set now if an older Floe created it without them."""
        wanted = table_properties(self.settings)
        if all(table.metadata.properties.get(k) == v for k, v in wanted.items()):
            return table
        with commit_lock(self.settings, ".".join(table.name())):
            with transaction(table) as tx:
                tx.set_properties(wanted)
        return table.refresh()

    def drop(self, name: str) -> None:
        try:
            self.iceberg.purge_table(name)
        except NoSuchTableError:
            pass

    def list_tables(self) -> list[str]:
        out = []
        for ns in self.iceberg.list_namespaces():
            out += [".".join(t) for t in self.iceberg.list_tables(ns)]
        return sorted(out)
