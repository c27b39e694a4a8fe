"""The Iceberg catalog: PyIceberg's SqlCatalog on SQLite, with the warehouse on disk or S3."""

from __future__ import annotations

import logging
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator

from pyiceberg.catalog import StagedTable
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
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
        self._writer = MetadataWriter()

    def _write_metadata(self, metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:
        self._writer.write(metadata, io, metadata_path)

    def _remember(self, location: str, metadata: TableMetadata) -> None:
        self._metadata[location] = metadata
        self._metadata.move_to_end(location)
        while len(self._metadata) > self.CACHED:
            self._metadata.popitem(last=False)

    def _convert_orm_to_iceberg(self, orm_table) -> Table:
        location = orm_table.metadata_location
        metadata = self._metadata.get(location) if location else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)
            self._remember(table.metadata_location, table.metadata)
            return table
        self._metadata.move_to_end(location)
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
        response = super().commit_table(table, requirements, updates)
        self._remember(response.metadata_location, response.metadata)
        return response


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
