"""Which of the catalog's tables a statement reads: the ones a query makes views of, the rest never.

A view is a table's newest metadata file loaded from the catalog and bound by DuckDB; a catalog of hundreds of
tables made every statement pay for all of them. DuckDB says which tables a statement names
(`duckdb.get_table_names`, asked of a connection of its own with no view in it: asked of one with views, it
names what they read instead); where it cannot tell (it binds the statement as it goes, and a join `USING` a
column of a table it does not have fails), every word of the statement that is a table's name counts. A
statement that lists tables (`show tables`, `information_schema`, `duckdb_tables()`...) reads every one.
"""

from __future__ import annotations

import re
import threading

import duckdb

# What lists the tables or their columns: such a statement sees every table.
_LISTS = re.compile(r"\bshow\s+(all\s+)?tables\b|\binformation_schema\b|\bduckdb_(tables|views|columns)\b"
                    r"|\bshow_tables\b|^\s*(describe|show)\s*;?\s*$", re.IGNORECASE)
# An identifier, quoted (its quotes doubled inside) or not.
_WORD = re.compile(r'"((?:[^"]|"")+)"|([A-Za-z_][\w$]*)')
_DOTTED = re.compile(rf"(?:{_WORD.pattern})(?:\.(?:{_WORD.pattern}))*")

_names_lock = threading.Lock()
_names_con: duckdb.DuckDBPyConnection | None = None  # no view, no table: it only parses and names


def _referenced(sql: str) -> list[tuple[str, ...]] | None:
    """Each table reference of `sql`, as its parts (`("ingest", "orders")`, `("orders",)`), in lower case;
    None when DuckDB cannot tell. A statement that does not parse names nothing: its error is DuckDB's to say."""
    global _names_con
    with _names_lock:
        if _names_con is None:
            _names_con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                                "autoload_known_extensions": False})
        try:
            qualified = duckdb.get_table_names(sql, qualified=True, connection=_names_con)
        except duckdb.ParserException:
            return []
        except duckdb.Error:
            return None
    return [_parts(name) for name in qualified]


def _parts(qualified: str) -> tuple[str, ...]:
    """`ingest."Or ders" AS o` -> ("ingest", "or ders"): DuckDB's qualified name, with the alias it may add."""
    parts, pos = [], 0
    while (match := _WORD.match(qualified, pos)) is not None:
        quoted, plain = match.groups()
        parts.append(_word(quoted, plain))
        pos = match.end()
        if not qualified.startswith(".", pos):
            break
        pos += 1
    return tuple(parts)


def _words(sql: str) -> list[tuple[str, ...]]:
    """Every name in `sql`, dotted ones (`ingest.orders`) as their parts."""
    return [_parts(match.group()) for match in _DOTTED.finditer(sql)]


def _word(quoted: str | None, plain: str | None) -> str:
    return (quoted.replace('""', '"') if quoted else plain or "").lower()


def named_tables(sql: str, tables: list[str], views: dict[str, str] | None = None) -> list[str]:
    """The tables of `tables` (NAMESPACE.TABLE) that `sql` reads, in their order. `views`: the connection's own
    views (SCHEMA.NAME, lower case -> their SQL), made by its user: naming one reads the tables it names."""
    if _LISTS.search(sql):
        return list(tables)
    views = views or {}
    wanted: set[str] = set()
    seen: set[str] = set()
    pending = [_referenced(sql)]
    if pending[0] is None:
        pending = [_words(sql)]
    while pending:
        for parts in pending.pop() or []:
            matched = [t for t in tables if _matches(t, parts)]
            wanted.update(matched)
            for view in [v for v in views if not matched and _matches(v, parts) and v not in seen]:
                seen.add(view)
                pending.append(_words(views[view]))  # its SQL, CREATE VIEW and all: DuckDB cannot bind it alone
    return [t for t in tables if t in wanted]


def _matches(table: str, parts: tuple[str, ...]) -> bool:
    """Whether the reference `parts` may be `table` (NAMESPACE.TABLE): the same name, in the same namespace
    when the reference says one (a database before it is not checked: it may be the catalog's alias)."""
    if not parts:
        return False
    namespace, _, name = table.lower().partition(".")
    return parts[-1] == name and (len(parts) < 2 or parts[-2] == namespace)
