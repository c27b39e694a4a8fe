"""The statements a user ran, newest last, in `$FLOE_HOME/query_history.jsonl`: shared by every UI."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from appliance.config.settings import Settings

HISTORY_FILE = "query_history.jsonl"
HISTORY_LIMIT = 500


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
