"""DuckDB's extensions, loaded from their PyPI packages by file path: nothing is downloaded at run time."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from appliance.core.errors import QueryError


def extension_path(name: str) -> Path:
    package = import_module(f"duckdb_extension_{name}")
    base = Path(package.__file__).parent / "extensions"
    found = sorted(base.glob(f"*/{name}.duckdb_extension"))
    if not found:
        raise QueryError(f"duckdb extension {name} is not installed (pip install duckdb-extension-{name})")
    return found[-1]
