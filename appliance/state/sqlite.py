"""sqlite-utils, imported without pandas and numpy.

sqlite-utils imports pandas and numpy whenever they are installed (only to map `pandas.Timestamp` and numpy's
scalar types to a column type when it guesses a table's columns from values). Floe declares every column itself
(state/schema.py) and never stores a pandas or numpy value, yet those imports were 0.12 s and 0.1 s of every
`floe` command. Hiding them for the one import keeps `floe stream list` and `floe status` quick; both stay
importable afterwards for whoever needs them (PySpark's Arrow path, the key index).
"""

from __future__ import annotations

import sys

_HIDDEN = ("pandas", "numpy")
_kept = {name: sys.modules.get(name) for name in _HIDDEN}
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]  # `import pandas` raises ImportError meanwhile
try:
    import sqlite_utils
finally:
    for _name, _module in _kept.items():
        if _module is None:
            del sys.modules[_name]
        else:
            sys.modules[_name] = _module


class Database(sqlite_utils.Database):
    """sqlite-utils' database whose `db[name]` is the table of that name without asking SQLite first whether it is a
    view (a query of `sqlite_master` each time, twice through `db.table`): the state database holds no views, and
    every batch's status and record, and each table's look by maintenance, went through it."""

    def __getitem__(self, table_name: str) -> sqlite_utils.db.Table:
        return sqlite_utils.db.Table(self, table_name, strict=self.strict)

__all__ = ["Database"]
