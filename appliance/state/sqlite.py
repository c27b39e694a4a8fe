"""sqlite-utils, imported without pandas.

sqlite-utils imports pandas whenever it is installed (only to map `pandas.Timestamp` to a TEXT
column when it guesses a table's columns from values). Floe declares every column itself
(state/schema.py) and never stores a pandas value, yet that import was 0.12 s of every `floe`
command. Hiding pandas for the one import keeps `floe stream list` and `floe status` quick; pandas
stays importable afterwards for whoever needs it (PySpark's Arrow path).
"""

from __future__ import annotations

import sys

_hidden = sys.modules.get("pandas")
sys.modules["pandas"] = None  # type: ignore[assignment]  # `import pandas` raises ImportError meanwhile
try:
    import sqlite_utils
finally:
    if _hidden is None:
        del sys.modules["pandas"]
    else:
        sys.modules["pandas"] = _hidden

Database = sqlite_utils.Database

__all__ = ["Database"]
