"""DuckDB over the catalog's Iceberg tables, each named `namespace.table`.

Extensions are loaded from their PyPI packages by file path, so nothing is
downloaded at run time; each table is a view over `iceberg_scan` of its current
metadata file, so a query sees the last committed snapshot. `run_query` is one
statement on a fresh connection (the CLI); `query.session` keeps one open (the UI).

A process has one DuckDB database per warehouse, with the extensions loaded once: DuckDB checks an
extension's signature at every `LOAD` (iceberg's 50 MB: 0.3-2 s a connection), and the check stays on.
A connection is a cursor of it with an in-memory database of its own attached and in use, where its
views go, so that connections see neither each other's views nor what a user creates; closing it
detaches that database.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import weakref

import duckdb
import pyarrow as pa

from appliance.config.settings import Settings
from appliance.core.errors import QueryError
from appliance.core.extensions import extension_path
from appliance.query.names import named_tables
from appliance.tables.catalog import open_catalog, warehouse_io

EXTENSIONS = ("avro", "iceberg", "httpfs")  # avro before iceberg: iceberg reads Avro manifests

# DuckDB's SHOW TABLES lists the default schema only, where Floe puts nothing: each table is a view in its
# namespace's schema. So `show tables` lists every table, named as a query names it (`ingest.orders`).
_SHOW_TABLES = re.compile(r"\s*show\s+tables\s*;?\s*", re.IGNORECASE)
EVERY_TABLE = ("SELECT schema || '.' || name AS name FROM (SHOW ALL TABLES)"
               " WHERE NOT temporary AND database = current_database() ORDER BY 1")


def statement(sql: str) -> str:
    """What DuckDB runs for `sql`: the same text, but `show tables` lists the tables of every schema."""
    return EVERY_TABLE if _SHOW_TABLES.fullmatch(sql) else sql


def connect(settings: Settings, tables: list[str] | None = None, sql: str | None = None) -> Connection:
    """A DuckDB connection with a view for each of `tables`, or for each table of the catalog `sql` reads
    (`query.names`: a statement over one table of hundreds loads that one), or, with neither, for every table."""
    con = open_connection(settings)
    if tables is None:
        attach_catalog(con, settings, sql)
    else:
        attach_tables(con, settings, tables)
    return con


def open_connection(settings: Settings) -> Connection:
    """A DuckDB connection with the extensions loaded and the warehouse's credentials set: a cursor of this
    process's database for the warehouse, in a database of its own (see the module's doc)."""
    base = _database(settings)
    with _LOCK:
        cursor = base.cursor()
    name = f"floe_connection_{next(_NUMBERS)}"
    try:
        cursor.execute(f"ATTACH ':memory:' AS {name}")
        cursor.execute(f"USE {name}")
    except BaseException:
        cursor.close()
        raise
    return Connection(cursor, name)


class Connection:
    """A DuckDB connection (every method of `duckdb.DuckDBPyConnection`) whose `close` also detaches its own
    database; one closed by no one is detached when it is collected."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, name: str) -> None:
        self._cursor = cursor
        self._close = weakref.finalize(self, _detach, cursor, name)

    def __getattr__(self, attr: str):
        return getattr(self._cursor, attr)

    def close(self) -> None:
        self._close()


def _detach(cursor: duckdb.DuckDBPyConnection, name: str) -> None:
    try:
        cursor.execute("USE memory")
        cursor.execute(f"DETACH DATABASE IF EXISTS {name}")
    except duckdb.Error:
        pass  # the database is gone with the process's anyway; a statement the user ran may have detached it
    finally:
        cursor.close()


_LOCK = threading.Lock()
_NUMBERS = itertools.count(1)
_DATABASES: dict[str, duckdb.DuckDBPyConnection] = {}


def _database(settings: Settings) -> duckdb.DuckDBPyConnection:
    """This process's DuckDB database for the warehouse's credentials (a hash of them names it: they stay in
    DuckDB alone), made on first use with the extensions loaded and the credentials as its secret."""
    s3 = settings.s3_properties() if settings.on_s3 else {}
    key = hashlib.sha256(repr((settings.on_s3, sorted(s3.items()))).encode()).hexdigest()
    with _LOCK:
        base = _DATABASES.get(key)
        if base is not None:
            return base
        base = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        try:
            for name in EXTENSIONS:
                if name == "httpfs" and not settings.on_s3:
                    continue
                base.execute(f"LOAD '{extension_path(name)}'")
            if settings.on_s3:
                _s3_secret(base, s3)
        except BaseException:
            base.close()
            raise
        _DATABASES[key] = base
        return base


def _s3_secret(con: duckdb.DuckDBPyConnection, s3: dict[str, str]) -> None:
    # The keys were resolved by `s3_properties` (they may be secret references) and live only in DuckDB.
    key, secret, region = (s3.get(k, "") for k in ("s3.access-key-id", "s3.secret-access-key", "s3.region"))
    url = s3.get("s3.endpoint", "")
    endpoint = url.split("://", 1)[-1]
    if endpoint:
        con.execute(
            "CREATE SECRET floe_s3 (TYPE S3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
            [key, secret, region or "us-east-1", endpoint, url.startswith("https")],
        )
    else:
        con.execute("CREATE SECRET floe_s3 (TYPE S3, KEY_ID ?, SECRET ?, REGION ?)", [key, secret, region or "us-east-1"])


def _kind(con: duckdb.DuckDBPyConnection, schema: str, name: str) -> str | None:
    """'view', 'table' or None: what `schema.name` is in this connection's own database."""
    row = con.execute(
        "SELECT 'view' FROM duckdb_views() WHERE database_name = current_database() AND NOT internal"
        " AND schema_name = ? AND view_name = ?"
        " UNION ALL SELECT 'table' FROM duckdb_tables() WHERE database_name = current_database()"
        " AND schema_name = ? AND table_name = ?",
        [schema, name, schema, name],
    ).fetchone()
    return row[0] if row else None


def drop(con: duckdb.DuckDBPyConnection, schema: str, name: str, unless: str | None = None) -> None:
    kind = _kind(con, schema, name)
    if kind and kind != unless:
        con.execute(f'DROP {kind.upper()} "{schema}"."{name}"')


def attach_catalog(con: duckdb.DuckDBPyConnection, settings: Settings, sql: str | None = None,
                   views: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """Create or replace a view for every table of the catalog that `sql` reads (with `views`, the connection's
    own: see `names.named_tables`), or for every one without `sql`; a schema for every namespace. Returns the
    catalog's tables and those it made views of.

    Safe to call again on the same connection: each view then moves to its table's
    newest metadata file.
    """
    catalog = open_catalog(settings)
    names = []
    for ns in catalog.list_namespaces():
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{ns[0]}"')  # an empty namespace too
        names += [".".join(ident) for ident in catalog.list_tables(ns)]
    wanted = names if sql is None else named_tables(sql, names, views)
    return names, attach_tables(con, settings, wanted, catalog)


def attach_tables(con: duckdb.DuckDBPyConnection, settings: Settings, names: list[str], catalog=None) -> list[str]:
    """Create or replace a view for each of the tables `names` (NAMESPACE.TABLE); returns their names."""
    catalog = catalog or open_catalog(settings)
    for name in names:
        namespace, _, short = name.partition(".")
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace}"')
        with warehouse_io(settings, f"read table {name}"):
            table = catalog.load_table(name)
        view = f'"{namespace}"."{short}"'
        if table.current_snapshot() is None:
            # No snapshot yet, so no metadata to scan: an empty table of the same columns.
            drop(con, namespace, short, unless="table")
            con.register("__floe_empty", table.schema().as_arrow().empty_table())
            con.execute(f"CREATE OR REPLACE TABLE {view} AS SELECT * FROM __floe_empty")
            con.unregister("__floe_empty")
        else:
            drop(con, namespace, short, unless="view")
            location = table.metadata_location.replace("'", "''")
            con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM iceberg_scan('{location}')")
    return names


def one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else exc.__class__.__name__


def run_query(settings: Settings, sql: str, tables: list[str] | None = None) -> pa.Table:
    """`sql` on a fresh connection with a view for each table it reads, or for `tables` alone."""
    sql = statement(sql)
    con = connect(settings, tables, sql)
    try:
        result = con.execute(sql)
        if result.description is None:
            return pa.table({})
        return result.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(one_line(exc)) from None
    finally:
        con.close()
