"""SQLite databases in WAL mode: the state database, and Floe's own catalog, written by many threads and
read by other processes while they are (one fsync a commit, not a rollback journal's several)."""

from __future__ import annotations

import sqlite3
import time


def use_wal(conn: sqlite3.Connection, timeout: float = 30.0) -> None:
    """Put the database in WAL mode (it stays so, in the file).

    Switching modes ignores the busy timeout, so two processes opening a fresh database
    together can see "database is locked": retry until one of them has switched it.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
