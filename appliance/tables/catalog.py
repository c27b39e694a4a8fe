"""The Iceberg catalog: Floe's SQLite catalog by default, or any PyIceberg catalog `[catalog]` names (a SQL
catalog on PostgreSQL, a REST catalog...), with the warehouse on disk or S3."""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from contextlib import contextmanager
from typing import Iterator

import requests
import sqlalchemy.exc
from pyiceberg.catalog import Catalog as IcebergCatalog
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    OAuthError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from appliance.config.catalog import SECRET_PROPERTY
from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.errors import CatalogAccessDenied, CatalogUnavailable, FloeError, TableConflict, TableNotFound
from appliance.core.secrets import URI_PASSWORD, has_reference, scrub
from appliance.model.names import check_table_name
from appliance.model.partitioning import Partitioning
from appliance.tables.commits import commit_lock
from appliance.tables.fastpath.rest_catalog import TimedRestCatalog
from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog
from appliance.tables.fastpath.transactions import transaction
from appliance.tables.iceberg_schemas import same_columns
from appliance.tables.storage import describe, storage_errors

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


def open_catalog(settings: Settings) -> IcebergCatalog:
    """The catalog, its secret references resolved now: Floe's fast SQL catalog for SQLite and
    PostgreSQL, PyIceberg's own for the rest (a REST catalog commits through its service)."""
    props = settings.catalog_properties()
    name = settings.catalog.name
    try:
        if settings.catalog.kind == "sql":
            return FloeSqlCatalog(name, **props)
        if settings.catalog.kind == "rest":
            return TimedRestCatalog(name, **props)
        return load_catalog(name, **props)
    except FloeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a driver's or HTTP client's error: one line, secrets removed
        if isinstance(typed := catalog_error(settings, exc), CatalogAccessDenied):
            raise typed from None
        raise CatalogUnavailable(f"{settings.catalog.describe()} cannot be reached: "
                                 f"{_quiet(settings, exc)}") from None


def _quiet(settings: Settings, exc: BaseException) -> str:
    """An exception's first line with every secret of the catalog's settings masked (see `secrets.scrub`):
    the values its references resolved to, secret-named values and passwords written inside URIs, in
    any form and any piece a driver's message may show of them."""
    text = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
    clear = [*settings.catalog.properties, ("s3.access-key-id", settings.s3.access_key_id),
             ("s3.secret-access-key", settings.s3.secret_access_key)]
    secrets = [v for k, v in clear if SECRET_PROPERTY.search(k) and not has_reference(v)]
    secrets += [m.group(2) for _, v in clear for m in URI_PASSWORD.finditer(v) if not has_reference(m.group(2))]
    return scrub(text, secrets)[:300]


@contextmanager
def warehouse_io(settings: Settings, what: str) -> Iterator[None]:
    """Storage failures as one line naming the warehouse (and its endpoint), never its keys."""
    with storage_errors(describe(settings.warehouse, settings.s3_properties().get("s3.endpoint", "")), what):
        yield


# A catalog's drivers say it is down in their own words: a database that refuses connections or is locked
# (SQLAlchemy's errors, which Floe's own SQLite commits raise too), a REST service that does not answer or answers 5xx (requests, PyIceberg).
_DOWN = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, requests.exceptions.ConnectionError,
         requests.exceptions.Timeout, ServerError, ServiceUnavailableError)

# What a database says when it refuses Floe's credentials: a person must fix them, waiting will not help.
_REFUSED = re.compile(r"authentication failed|access denied|permission denied|no pg_hba.conf entry", re.I)

# What SQLite says when its file cannot be written for now: another writer holds it, its disk is full or
# read-only. The catalog waits for it as for a server that is down.
_SQLITE_WAITS = re.compile(r"locked|full|readonly|disk I/O", re.I)


def catalog_error(settings: Settings, exc: BaseException) -> BaseException:
    """A catalog driver's failure as Floe's one-line error, secrets masked: an outage (CatalogUnavailable) or
    refused credentials (CatalogAccessDenied); any other exception as it is."""
    if isinstance(exc, (UnauthorizedError, ForbiddenError, OAuthError)) or \
            isinstance(exc, sqlalchemy.exc.OperationalError) and _REFUSED.search(str(exc)):
        return CatalogAccessDenied(f"{settings.catalog.describe()} refused Floe: {_quiet(settings, exc)}")
    if isinstance(exc, sqlalchemy.exc.OperationalError) and isinstance(exc.orig, sqlite3.Error) \
            and not _SQLITE_WAITS.search(str(exc.orig)):
        return exc  # a damaged file, a bad statement: no outage
    if isinstance(exc, _DOWN):
        return CatalogUnavailable(f"{settings.catalog.describe()} failed: {_quiet(settings, exc)}")
    return exc


class Catalog:
    """The catalog, opened at its first use: an engine starts while the catalog is down, and each use
    tries to open it again until it opens (`CatalogUnavailable` meanwhile)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._iceberg: IcebergCatalog | None = None
        self._opening = threading.Lock()

    @property
    def iceberg(self) -> IcebergCatalog:
        if self._iceberg is None:
            with self._opening:
                if self._iceberg is None:
                    self._iceberg = open_catalog(self.settings)
        return self._iceberg

    def table(self, name: str) -> Table:
        return self.iceberg.load_table(name)

    def current(self, table: Table) -> Table:
        """`table` itself while nobody has committed to it since; otherwise as it is now."""
        if not isinstance(self.iceberg, FloeSqlCatalog):
            fresh = self.iceberg.load_table(table.name())
            return table if fresh.metadata_location == table.metadata_location else fresh
        if self.iceberg.location(table.name()) == table.metadata_location:
            return table
        return self.iceberg.load_table(table.name())

    def location(self, name: str) -> str | None:
        """Where the table's current metadata is (it moves with every commit); None if there is no table."""
        if isinstance(self.iceberg, FloeSqlCatalog):
            return self.iceberg.location(tuple(name.split(".")))
        try:
            return self.iceberg.load_table(name).metadata_location
        except NoSuchTableError:
            return None

    def exists(self, name: str) -> bool:
        return self.iceberg.table_exists(name)

    def check_exists(self, name: str) -> str:
        """`name`, if the catalog has that table; a one-line TableNotFound otherwise."""
        check_table_name(name)
        if not self.exists(name):
            raise TableNotFound(f"no table named {name} in the catalog (see `{hints.LIST_TABLES}`)")
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

    def ensure_table(self, name: str, schema: Schema, partitioning: Partitioning | None = None
                     ) -> tuple[Table, bool]:
        """The table, created with `partitioning` if it does not exist (an existing one keeps its own)."""
        namespace, _ = check_table_name(name)
        try:
            self.iceberg.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        if self.check_can_create(name, schema):
            # `schema` may be an Arrow schema, as PyIceberg's create_table takes it, when unpartitioned
            spec = partitioning.spec(schema) if partitioning else UNPARTITIONED_PARTITION_SPEC
            with warehouse_io(self.settings, f"create table {name}"):
                properties = {"format-version": "2", **table_properties(self.settings)}
                return self.iceberg.create_table(name, schema, partition_spec=spec, properties=properties), True
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
