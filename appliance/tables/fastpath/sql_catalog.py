"""PyIceberg's SqlCatalog, minus the work a 1-second commit repeats: metadata read once per location,
a commit staged without deep copies and swapped in with one compare-and-set SQL statement (SQLite, PostgreSQL)."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

import sqlalchemy.exc
from pyiceberg.catalog import StagedTable
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.utils.properties import property_as_bool
from sqlalchemy import text

from appliance.core.failpoints import failpoint
from appliance.core.wal import use_wal
from appliance.tables.fastpath import fieldsets
from appliance.tables.fastpath.files import delete_file
from appliance.tables.fastpath.metadatafile import MetadataWriter
from appliance.tables.fastpath.transactions import staged_metadata

_CURRENT = ("SELECT metadata_location FROM iceberg_tables"
            " WHERE catalog_name = :catalog AND table_namespace = :namespace AND table_name = :name")
_TABLES_ONLY = " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"  # as PyIceberg's `_iceberg_type_filter`
# The compare-and-set of a commit: it changes the row only if nobody moved the table since it was read.
_SWAP = ("UPDATE iceberg_tables SET metadata_location = :new, previous_metadata_location = :old"
         " WHERE catalog_name = :catalog AND table_namespace = :namespace AND table_name = :name"
         " AND metadata_location = :old")
_REPOINT = ("UPDATE iceberg_tables SET previous_metadata_location = metadata_location, metadata_location = :new"
            " WHERE catalog_name = :catalog AND table_namespace = :namespace AND table_name = :name")

log = logging.getLogger(__name__)


class FloeSqlCatalog(SqlCatalog):
    """PyIceberg's SqlCatalog, minus the work a 1-second commit repeats.

    A metadata file never changes once written, so the metadata read for a location is
    kept (each table's newest): a commit, which loads the table to check it is still current,
    and the engine's reloads read the file that the last commit wrote only once, if at
    all. Staging a commit skips PyIceberg's defensive deep copy (see `transactions`), and
    writing it serialises only the new snapshot (see `metadatafile`).
    """

    # Every table a running stream commits to: with fewer than the tables committing in turn, each
    # commit and each reload parses the table's whole metadata file again (up to max_snapshots entries).
    # The streams' runners hold these same objects, so keeping them costs little more. One version a
    # table: older ones were kept too (2048 versions of a busy table: its snapshot lists again and again,
    # the engine's memory growing by about 150 KB a commit at 2,000 snapshots, `scripts/soak`).
    CACHED = 2048

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._newest: dict[Any, str] = {}  # table uuid -> the location of its version kept
        self._cache_lock = threading.Lock()
        self._writer = MetadataWriter()
        # The commit's two statements go straight to SQLite: through SQLAlchemy's ORM they cost more
        # than the rest of a stream's commit. Other databases (PostgreSQL) run the same two statements
        # through SQLAlchemy Core, in a transaction of their own.
        self._sqlite = self.engine.url.database if self.engine.dialect.name == "sqlite" else None
        # A swap that changed no row says the table moved only where the driver counts rows reliably (SQLite's,
        # PostgreSQL's): elsewhere every commit reads the table first.
        self._sane_rowcount = bool(self._sqlite) or bool(self.engine.dialect.supports_sane_rowcount)
        self._db: sqlite3.Connection | None = None  # opened by the first commit
        self._inode = 0  # of the file it opened
        self._db_lock = threading.Lock()
        self._held = threading.local()  # this thread's commits held for `together`
        self._ios: dict[tuple, FileIO] = {}  # by properties and scheme: see `_load_file_io`

    def create_tables(self) -> None:
        """PyIceberg's, beside another opener of the same new catalog (`floe query` as `floe demo` starts on a new
        home): it looks for each table, then creates it, and a table the other made in between raised 'already
        exists'. Again then: it finds what was made. An error that is not that race raises again each time."""
        for attempt in range(3):
            try:
                return super().create_tables()
            except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.IntegrityError):
                if attempt == 2:
                    raise

    @contextmanager
    def together(self) -> Iterator[None]:
        """The commits made in this block (by this thread) swap in at its end, in one SQL transaction:
        every table moves, or none does. Each commit's metadata file is written at once, but no
        reader sees it before the block ends; one that can no longer swap (another writer moved its
        table) rolls them all back and raises CommitFailedException."""
        held: list[tuple[dict, CommitTableResponse, TableMetadata]] = []
        self._held.swaps = held
        try:
            yield
        finally:
            self._held.swaps = None
        failpoint("catalog_before_swap")
        if not held:
            return
        if not self._sql_all([_SWAP] * len(held), [args for args, _, _ in held]):
            raise CommitFailedException("a table committed together with others was updated by another process")
        for _, response, base in held:
            self._remember(response.metadata_location, response.metadata)
            self._drop_old_versions(base, response)

    def _load_file_io(self, properties: dict[str, str] | None = None, location: str | None = None) -> FileIO:
        """PyIceberg's FileIO for these properties and the location's scheme, made once: PyIceberg makes one
        (and its filesystem, at the first file it opens) for every table loaded and every commit."""
        scheme = location.split("://", 1)[0] if location and "://" in location else bool(location)
        key = (tuple(sorted((properties or {}).items())), scheme)
        found = self._ios.get(key)
        if found is None:
            found = super()._load_file_io(properties or {}, location)
            if len(self._ios) >= self.CACHED:
                self._ios.clear()
            self._ios[key] = found
        return found

    def _write_metadata(self, metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:
        self._writer.write(metadata, io, metadata_path)

    def _remember(self, location: str, metadata: TableMetadata) -> None:
        with self._cache_lock:  # every stream's worker thread commits through this catalog
            older = self._newest.get(metadata.table_uuid)
            if older is not None and older != location:
                kept = self._metadata.get(older)
                if kept is not None and kept.last_updated_ms > metadata.last_updated_ms:
                    return  # a reload of a version older than the one kept
                self._metadata.pop(older, None)
            self._newest[metadata.table_uuid] = location
            self._metadata[location] = metadata
            self._metadata.move_to_end(location)
            while len(self._metadata) > self.CACHED:
                _, gone = self._metadata.popitem(last=False)
                self._newest.pop(gone.table_uuid, None)

    def _cached(self, location: str) -> TableMetadata | None:
        with self._cache_lock:
            found = self._metadata.get(location)
            if found is not None:
                self._metadata.move_to_end(location)
            return found

    def load_table(self, identifier: str | tuple[str, ...]) -> Table:
        """PyIceberg's, without its ORM session: one indexed statement and the metadata kept for the location it
        names (the maintenance scheduler loads hundreds of tables at each check; through the ORM, a statement
        cost more than the rest of a cached load). A table the statement does not find, and other databases,
        go through PyIceberg's own, with its errors."""
        if not self._sqlite:
            return super().load_table(identifier)
        name = self.identifier_to_tuple(identifier)
        found = self.location(name)
        return self._table_at(name, found) if found else super().load_table(identifier)

    def _convert_orm_to_iceberg(self, orm_table) -> Table:
        location = orm_table.metadata_location
        metadata = self._cached(location) if location else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)
            fieldsets.share_snapshots(table.metadata.snapshots, table.metadata.snapshot_log)
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
        session (a third of a stream commit's CPU); creating a table goes through PyIceberg.

        A table as this catalog last committed or read it is staged on as it is and swapped in at once: the
        swap's compare-and-set is what says whether it is still current, and it nearly always is (each
        stream's worker commits its own tables). Only when the swap finds the table moved is it read, as
        PyIceberg does, and the commit staged again on it (the file staged first deleted: nothing names it)."""
        namespace, name = ".".join(table.name()[:-1]), table.name()[-1]
        held = getattr(self._held, "swaps", None)
        if held is None and self._sane_rowcount and self._is_newest(table):
            try:
                response = self._stage_and_swap(table, requirements, updates, namespace, name, None, optimistic=True)
            except CommitFailedException:
                response = None  # a requirement the table as known fails: judged on the table as it is now
            if response is not None:
                return response
        found = self._sql(_CURRENT, {"catalog": self.name, "namespace": namespace, "name": name}, rows=True)
        if not found:
            response = super().commit_table(table, requirements, updates)
            self._remember(response.metadata_location, response.metadata)
            return response
        current = self._table_at(table.name(), found[0][0])
        response = self._stage_and_swap(current, requirements, updates, namespace, name, held)
        if response is None:
            raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
        return response

    def _is_newest(self, table: Table) -> bool:
        """Whether `table` is the version of it this catalog committed or read last."""
        with self._cache_lock:
            return self._newest.get(table.metadata.table_uuid) == table.metadata_location

    def _stage_and_swap(self, current: Table, requirements, updates, namespace: str, name: str,
                        held: list | None, optimistic: bool = False) -> CommitTableResponse | None:
        """The commit staged on `current`, its metadata file written and swapped in (or held for `together`);
        None, and the file deleted, when the table is no longer at `current`. `optimistic`: `current` was not read
        from the catalog, so a commit that changes nothing is None too (PyIceberg answers it with the table as the
        catalog has it, or refuses it on that)."""
        staged = self._update_and_stage_table(current, current.name(), requirements, updates)
        if staged.metadata == current.metadata:
            if optimistic:
                return None
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        self._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
        args = {"new": staged.metadata_location, "old": current.metadata_location,
                "catalog": self.name, "namespace": namespace, "name": name}
        response = CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)
        if held is not None:
            held.append((args, response, current.metadata))
            return response
        if self._sql(_SWAP, args) < 1:
            _delete_metadata(staged.io, staged.metadata_location)
            return None
        self._remember(staged.metadata_location, staged.metadata)
        self._drop_old_versions(current.metadata, response)
        return response

    @staticmethod
    def _delete_old_metadata(io: FileIO, base: TableMetadata, metadata: TableMetadata) -> None:
        """Nothing: PyIceberg calls this after a commit with the committing Table's metadata as the base, and a
        maintenance job's Table is often older than the catalog's (the stream committed since). Its metadata log
        then names files deleted long before, each "failed to delete" in the log, and misses the ones this
        commit pushed out of the window. `commit_table` deletes those, from the metadata it committed on."""

    def _drop_old_versions(self, base: TableMetadata, response: CommitTableResponse) -> None:
        """PyIceberg's `_delete_old_metadata`: the metadata files this commit pushed out of the log, deleted if
        the table says so; each failure a warning, as PyIceberg's."""
        metadata = response.metadata
        if not property_as_bool(metadata.properties, TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED,
                                TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT):
            return
        kept = {entry.metadata_file for entry in metadata.metadata_log}
        gone = [entry.metadata_file for entry in base.metadata_log if entry.metadata_file not in kept]
        if not gone:
            return
        io = self._load_file_io(metadata.properties, response.metadata_location)
        for location in gone:
            _delete_metadata(io, location)

    def drop_table(self, identifier: str | tuple[str, ...]) -> None:
        """PyIceberg's, and the table's versions kept here forgotten (a table made again under the name is
        another table, with another uuid, but the metadata of the one dropped would only wait for the LRU)."""
        location = self.location(self.identifier_to_tuple(identifier)) if self._sqlite else None
        super().drop_table(identifier)
        if location is not None:
            with self._cache_lock:
                gone = self._metadata.pop(location, None)
                if gone is not None and self._newest.get(gone.table_uuid) == location:
                    del self._newest[gone.table_uuid]

    def repoint(self, identifier: tuple[str, ...], location: str) -> None:
        """Point the table at the metadata file `location`, wherever it points now: a recovery's, never a
        commit's (`floe recover`, with no engine running)."""
        self._sql(_REPOINT, {"new": location, "catalog": self.name, "namespace": ".".join(identifier[:-1]),
                             "name": identifier[-1]})

    def location(self, identifier: tuple[str, ...]) -> str | None:
        """Where the table's current metadata is: one indexed query, to tell whether a cached
        table is still current. Views (another engine's rows of the same catalog) are not tables."""
        views_out = _TABLES_ONLY if self._schema_version == "v1" else ""
        found = self._sql(_CURRENT + views_out, {"catalog": self.name, "namespace": ".".join(identifier[:-1]),
                                                 "name": identifier[-1]}, rows=True)
        return found[0][0] if found else None

    def _sql(self, statement: str, args: dict, rows: bool = False):
        """One statement in a transaction of its own: its rows, or how many rows it changed."""
        if not self._sqlite:
            with self.engine.begin() as connection:
                result = connection.execute(text(statement), args)
                return [tuple(r) for r in result.fetchall()] if rows else result.rowcount
        with self._db_lock:
            with self._sqlite_db() as db:
                cursor = db.execute(statement, args)
                return cursor.fetchall() if rows else cursor.rowcount

    def _sql_all(self, statements: list[str], args: list[dict]) -> bool:
        """Statements in one transaction, each of which must change a row: all of them, or none."""
        if not self._sqlite:
            with self.engine.connect() as connection:
                with connection.begin() as tx:
                    if all(connection.execute(text(s), a).rowcount >= 1 for s, a in zip(statements, args)):
                        return True
                    tx.rollback()
                    return False
        with self._db_lock:
            try:
                with self._sqlite_db() as db:  # commits at the end, rolls back on an exception
                    for s, a in zip(statements, args):
                        if db.execute(s, a).rowcount < 1:
                            raise _RolledBack()
                return True
            except _RolledBack:
                return False
            except sqlite3.Error as exc:  # as SQLAlchemy would raise it: a catalog's error, not the state database's
                raise sqlalchemy.exc.OperationalError(statements[0], None, exc) from exc

    def _sqlite_db(self) -> sqlite3.Connection:
        """The commits' own SQLite connection, opened by the first; the caller holds `_db_lock`. As a
        context manager it is one transaction."""
        if self._db is None:
            db = sqlite3.connect(self._sqlite, timeout=30, check_same_thread=False)
            # Hundreds of streams' commits queue on this one connection: a commit in WAL mode is one fsync
            # (about a third of a rollback journal's time here), and readers never wait for it.
            use_wal(db)
            self._db, self._inode = db, os.stat(self._sqlite).st_ino
        elif not _same_file(self._sqlite, self._inode):
            # A rollback journal refuses to write a file deleted or replaced under it; WAL would go on
            # committing into the lost file. Refuse as it did: the streams fail, and say so.
            raise sqlite3.OperationalError(f"attempt to write a readonly database: {self._sqlite} was deleted or "
                                           "replaced while the engine ran (floe recover rebuilds it)")
        return self._db

    def _table_at(self, identifier: tuple[str, ...], location: str) -> Table:
        metadata = self._cached(location)
        if metadata is None:
            metadata = FromInputFile.table_metadata(self._load_file_io(location=location).new_input(location))
            fieldsets.share_snapshots(metadata.snapshots, metadata.snapshot_log)
            self._remember(location, metadata)
        return Table(identifier=identifier, metadata=metadata, metadata_location=location,
                     io=self._load_file_io(metadata.properties, location), catalog=self)


class _RolledBack(Exception):
    """One statement of `_sql_all` changed nothing: the transaction is rolled back."""


def _delete_metadata(io: FileIO, location: str) -> None:
    """A metadata file no reader is given any more, deleted; a failure a warning, as PyIceberg's."""
    try:
        delete_file(io, location)
    except OSError:
        log.warning("Failed to delete metadata file %s", location)


def _same_file(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False
