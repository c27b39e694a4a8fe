"""DuckDB SQL over the catalog's Iceberg tables, each named `namespace.table`.

Extensions are loaded from their PyPI packages by file path, so nothing is
downloaded at run time; each table is a view over `iceberg_scan` of its current
metadata file, so a query sees the last committed snapshot.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
from importlib import import_module
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from appliance.catalog import open_catalog, warehouse_io
from appliance.errors import QueryError
from appliance.settings import Settings

EXTENSIONS = ("avro", "iceberg", "httpfs")  # avro before iceberg: iceberg reads Avro manifests


def _extension_path(name: str) -> Path:
    package = import_module(f"duckdb_extension_{name}")
    base = Path(package.__file__).parent / "extensions"
    found = sorted(base.glob(f"*/{name}.duckdb_extension"))
    if not found:
        raise QueryError(f"duckdb extension {name} is not installed (pip install duckdb-extension-{name})")
    return found[-1]


def connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view for every table of the catalog."""
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
    attach_catalog(con, settings)
    return con


def attach_catalog(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[str]:
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
                con.register("__floe_empty", table.schema().as_arrow().empty_table())
                con.execute(f"CREATE OR REPLACE TABLE {view} AS SELECT * FROM __floe_empty")
                con.unregister("__floe_empty")
            else:
                location = table.metadata_location.replace("'", "''")
                con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM iceberg_scan('{location}')")
            names.append(name)
    return names


def run_query(settings: Settings, sql: str) -> pa.Table:
    con = connect(settings)
    try:
        result = con.execute(sql)
        if result.description is None:
            return pa.table({})
        return result.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(str(exc).strip().splitlines()[0]) from None
    finally:
        con.close()


def _cell(value: Any) -> str:
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
    rows = [[_cell(v) for v in row.values()] for row in table.to_pylist()]
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
        writer.writerow(["" if v is None else _cell(v) for v in row.values()])
    return buf.getvalue()


def format_json(table: pa.Table) -> str:
    def default(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", "backslashreplace")
        if isinstance(value, decimal.Decimal):  # DuckDB sums integers into HUGEINT
            return int(value) if value == value.to_integral_value() else float(value)
        return str(value)

    return "\n".join(json.dumps(row, default=default) for row in table.to_pylist()) + ("\n" if table.num_rows else "")
