"""One DuckDB connection for a sequence of statements, as an interactive user runs them."""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

from appliance.config.settings import Settings
from appliance.core.errors import QueryCancelled, QueryError
from appliance.query.connection import attach_catalog, drop, one_line, open_connection, statement


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
                self._con = open_connection(self.settings)
            con = self._con
            sql = statement(sql)
            self._refresh(con, sql)
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
            raise QueryError(one_line(exc)) from None
        finally:
            with self._lock:
                self._running = self._cancelled = False
                close = self._close_when_done
            if close:
                self._close()

    def _refresh(self, con: duckdb.DuckDBPyConnection, sql: str) -> None:
        """The views of the tables `sql` reads moved to their newest snapshots (those of other tables stay as
        they were, unread); views of tables gone from the catalog dropped."""
        every, attached = attach_catalog(con, self.settings, sql, self._own_views(con))
        names = set(every)
        for gone in self._views - names:
            schema, _, name = gone.partition(".")
            drop(con, schema, name)
        self._views = (self._views & names) | set(attached)

    def _own_views(self, con: duckdb.DuckDBPyConnection) -> dict[str, str]:
        """The views the user made in this session (SCHEMA.NAME, lower case -> their SQL): a statement naming
        one reads the tables it names."""
        ours = {v.lower() for v in self._views}
        rows = con.execute("SELECT schema_name || '.' || view_name, sql FROM duckdb_views() "
                           "WHERE database_name = current_database() AND NOT internal").fetchall()
        return {name.lower(): text for name, text in rows if name.lower() not in ours}

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
