"""Writing a query result to a file, whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from appliance.config.settings import Settings
from appliance.query.formatting import cell_text

EXPORT_FORMATS = ("csv", "parquet")


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


SUFFIXES = {"csv": ".csv", "parquet": ".parquet"}
_KNOWN = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def format_for(path: str) -> str:
    """The export format a path's suffix asks for (CSV unless it says Parquet)."""
    return _KNOWN.get(Path(path.strip()).suffix.lower(), "csv")


def default_export_path(settings: Settings, stamp: str) -> Path:
    return export_dir(settings) / f"query-{stamp}.csv"


def export_path(settings: Settings, text: str, fmt: str) -> Path:
    """Where an export typed as `text` goes: under the exports folder unless absolute, with the
    suffix of the format chosen (the button says which, whatever the typed suffix)."""
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = export_dir(settings) / path
    if _KNOWN.get(path.suffix.lower(), fmt) != fmt or not path.suffix:
        path = path.with_suffix(SUFFIXES[fmt])
    return path
