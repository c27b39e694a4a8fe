"""DuckDB SQL over the catalog's Iceberg tables, each named `namespace.table`.

Extensions are loaded from their PyPI packages by file path, so nothing is
downloaded at run time; each table is a view over `iceberg_scan` of its current
metadata file, so a query sees the last committed snapshot.

`run_query` is one statement on a fresh connection (the CLI). `QuerySession` keeps one
connection for many statements (the terminal UI): it refreshes the views before each
statement and can be interrupted from another thread. The query history and result
exports live here too, so they work without any UI.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import os
import threading
from importlib import import_module
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from appliance.catalog import open_catalog, warehouse_io
from appliance.errors import QueryError
from appliance.settings import Settings

EXTENSIONS = ("avro", "iceberg", "httpfs")  # avro before iceberg: iceberg reads Avro manifests
HISTORY_FILE = "query_history.jsonl"
HISTORY_LIMIT = 500
EXPORT_FORMATS = ("csv", "parquet")


class QueryCancelled(QueryError):
    """The statement was interrupted before it finished."""


def _extension_path(name: str) -> Path:
    package = import_module(f"duckdb_extension_{name}")
    base = Path(package.__file__).parent / "extensions"
    found = sorted(base.glob(f"*/{name}.duckdb_extension"))
    if not found:
        raise QueryError(f"duckdb extension {name} is not installed (pip install duckdb-extension-{name})")
    return found[-1]


def connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view for every table of the catalog."""
    con = _open(settings)
    attach_catalog(con, settings)
    return con


def _open(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the extensions loaded and the warehouse's credentials set."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in EXTENSIONS:
        if name == "httpfs" and not settings.warehouse.startswith("s3"):
            continue
        con.execute(f"LOAD '{_extension_path(name)}'")
    if settings.warehouse.startswith("s3"):
        s3 = settings.s3
        endpoint = s3.endpoint.split("://", 1)[-1]
        con.execute(
            "CREATE SECRET floe_s3 (TYPE S3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
            [s3.access_key_id, s3.secret_access_key, s3.region, endpoint, s3.endpoint.startswith("https")],
        ) if endpoint else con.execute(
            "CREATE SECRET floe_s3 (TYPE S3, KEY_ID ?, SECRET ?, REGION ?)",
            [s3.access_key_id, s3.secret_access_key, s3.region],
        )
    return con


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


def _drop(con: duckdb.DuckDBPyConnection, schema: str, name: str, unless: str | None = None) -> None:
    kind = _kind(con, schema, name)
    if kind and kind != unless:
        con.execute(f'DROP {kind.upper()} "{schema}"."{name}"')


def attach_catalog(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[str]:
    """Create or replace a view for every table of the catalog; returns their names.

    Safe to call again on the same connection: each view then moves to its table's
    newest metadata file.
    """
    catalog = open_catalog(settings)
    names = []
    for ns in catalog.list_namespaces():
        schema = ns[0]
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        for ident in catalog.list_tables(ns):
            name = ".".join(ident)
            with warehouse_io(settings, f"read table {name}"):
                table = catalog.load_table(name)
            view = f'"{ident[0]}"."{ident[1]}"'
            if table.current_snapshot() is None:
                # No snapshot yet, so no metadata to scan: an empty table of the same columns.
                _drop(con, ident[0], ident[1], unless="table")
                con.register("__floe_empty", table.schema().as_arrow().empty_table())
                con.execute(f"CREATE OR REPLACE TABLE {view} AS SELECT * FROM __floe_empty")
                con.unregister("__floe_empty")
            else:
                _drop(con, ident[0], ident[1], unless="view")
                location = table.metadata_location.replace("'", "''")
                con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM iceberg_scan('{location}')")
            names.append(name)
    return names


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else exc.__class__.__name__


def run_query(settings: Settings, sql: str) -> pa.Table:
    con = connect(settings)
    try:
        result = con.execute(sql)
        if result.description is None:
            return pa.table({})
        return result.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from None
    finally:
        con.close()


class QuerySession:
    """One DuckDB connection for a sequence of statements, as an interactive user runs them.

    `run` blocks (call it from a worker thread); `interrupt` may be called from any other
    thread while it runs, and makes `run` raise `QueryCancelled`. One statement at a time.
    The connection opens on the first `run`; before each statement the views move to each
    table's newest snapshot, and views of tables dropped from the catalog go away.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()
        self._running = False
        self._cancelled = False
        self._close_when_done = False
        self._views: set[str] = set()

    @property
    def running(self) -> bool:
        return self._running

    def run(self, sql: str) -> pa.Table:
        with self._lock:
            if self._running:
                raise QueryError("another statement is running in this session")
            if self._close_when_done:
                raise QueryError("the query session is closed")
            self._running, self._cancelled = True, False
        try:
            if self._con is None:
                self._con = _open(self.settings)
            con = self._con
            self._refresh(con)
            self._check_cancelled()
            result = con.execute(sql)
            self._check_cancelled()
            if result.description is None:
                return pa.table({})
            table = result.to_arrow_table()
            self._check_cancelled()
            return table
        except duckdb.InterruptException:
            raise QueryCancelled("query cancelled") from None
        except duckdb.Error as exc:
            if self._cancelled:
                raise QueryCancelled("query cancelled") from None
            raise QueryError(_one_line(exc)) from None
        finally:
            with self._lock:
                self._running = self._cancelled = False
                close = self._close_when_done
            if close:
                self._close()

    def _refresh(self, con: duckdb.DuckDBPyConnection) -> None:
        names = set(attach_catalog(con, self.settings))
        for gone in self._views - names:
            schema, _, name = gone.partition(".")
            _drop(con, schema, name)
        self._views = names

    def _check_cancelled(self) -> None:
        if self._cancelled:
            raise QueryCancelled("query cancelled")

    def interrupt(self) -> bool:
        """Ask the running statement to stop; False when none is running. Any thread."""
        with self._lock:
            if not self._running:
                return False
            self._cancelled = True
            con = self._con
        if con is not None:  # None while connecting: `run` sees the flag once connected
            con.interrupt()
        return True

    def close(self) -> None:
        """Close the connection, at once or, while a statement runs, after interrupting it."""
        with self._lock:
            self._close_when_done = True
            running = self._running
        if running:
            self.interrupt()
        else:
            self._close()

    def _close(self) -> None:
        con, self._con = self._con, None
        if con is not None:
            con.close()

    def __enter__(self) -> "QuerySession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def history_path(settings: Settings) -> Path:
    return settings.home / HISTORY_FILE


def _history_lines(path: Path) -> list[tuple[str, str]]:
    """(raw line, sql) for every readable entry, oldest first; a torn or foreign line is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            sql = json.loads(line)["sql"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(sql, str) and sql.strip():
            out.append((line, sql))
    return out


def load_history(settings: Settings, limit: int = HISTORY_LIMIT) -> list[str]:
    """The statements run before, oldest first, newest last."""
    return [sql for _, sql in _history_lines(history_path(settings))[-limit:]]


def append_history(settings: Settings, sql: str, limit: int = HISTORY_LIMIT) -> None:
    """Add a statement (newest last) unless it repeats the newest; keep at most `limit`."""
    sql = sql.strip()
    if not sql:
        return
    path = history_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = _history_lines(path)
    if entries and entries[-1][1].strip() == sql:
        return
    line = json.dumps({"sql": sql, "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    if len(entries) < limit:
        with path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        return
    kept = [raw for raw, _ in entries[len(entries) - limit + 1:]] + [line]
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text("\n".join(kept) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def export_dir(settings: Settings) -> Path:
    return settings.home / "exports"


def _csv_ready(table: pa.Table) -> pa.Table:
    """CSV has no bytes or nested values: those columns become text, as `format_csv` writes them."""
    columns = []
    for field, column in zip(table.schema, table.columns):
        t = field.type
        if pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) \
                or pa.types.is_fixed_size_binary(t):
            column = pa.array([None if v is None else cell_text(v) for v in column.to_pylist()], pa.string())
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def export_table(table: pa.Table, path: Path, fmt: str) -> Path:
    """Write a result to `path` as CSV or Parquet, whole or not at all; returns the path."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"export format must be one of {', '.join(EXPORT_FORMATS)}, not {fmt!r}")
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if fmt == "parquet":
            pq.write_table(table, tmp)
        else:
            pa_csv.write_csv(_csv_ready(table), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def cell_text(value: Any) -> str:
    """One value as text, the way the CLI and the UI show it."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def format_table(table: pa.Table, max_width: int = 60) -> str:
    names = table.column_names
    rows = [[cell_text(v) for v in row.values()] for row in table.to_pylist()]
    clipped = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in rows]
    widths = [max([len(n)] + [len(r[i]) for r in clipped]) for i, n in enumerate(names)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(n.ljust(w) for n, w in zip(names, widths)) + " |", line]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in clipped]
    out.append(line)
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def format_csv(table: pa.Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow(["" if v is None else cell_text(v) for v in row.values()])
    return buf.getvalue()


def format_json(table: pa.Table) -> str:
    def default(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", "backslashreplace")
        if isinstance(value, decimal.Decimal):  # DuckDB sums integers into HUGEINT
            return int(value) if value == value.to_integral_value() else float(value)
        return str(value)

    return "\n".join(json.dumps(row, default=default) for row in table.to_pylist()) + ("\n" if table.num_rows else "")
