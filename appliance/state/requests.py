"""Work asked of the running engine (`engine_requests`): asked, taken by exactly one engine, answered,
or withdrawn by its asker, or abandoned by an engine that stopped. `control/requests.py` asks and waits;
`control/answers.py` is the engine's side."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterable

from appliance.core.clock import now, utcnow
from appliance.core.vocabulary import EngineAsk
from appliance.state.records import EngineRequestRecord


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class EngineRequests:
    """`StateStore`'s part for requests to the engine; it uses the store's `db` and `_rows`."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    def new_engine_request(self, ask: EngineAsk, args: dict[str, Any], who: dict[str, str]) -> int:
        """Ask the engine (a request row; pruned with the other runtime rows, `state/upkeep.py`)."""
        cursor = self.db.conn.execute("insert into engine_requests (ask, args, who, requested_at) values (?, ?, ?, ?)",
                                      [str(ask), _json(args), _json(who), now()])
        return int(cursor.lastrowid)

    def engine_request(self, request_id: int) -> EngineRequestRecord | None:
        rows = list(self._rows("engine_requests", "id = ?", [request_id]))
        return EngineRequestRecord.of(rows[0]) if rows else None

    def take_engine_requests(self, pid: int, asks: Iterable[EngineAsk], within: float, limit: int
                             ) -> list[EngineRequestRecord]:
        """Up to `limit` requests for `asks` of the last `within` seconds that nobody took or withdrew (older
        ones: their asker is gone), oldest first, each marked taken by `pid` (exactly one taker)."""
        asks = [str(a) for a in asks]
        if limit < 1 or not asks:
            return []
        taken = []
        since = (utcnow() - dt.timedelta(seconds=within)).isoformat(timespec="milliseconds")
        where = (f"taken_at is null and withdrawn_at is null and requested_at >= ? and ask in "
                 f"({', '.join('?' * len(asks))})")
        for row in self._rows("engine_requests", where, [since, *asks], order_by="id", limit=limit):
            at = now()
            cursor = self.db.execute("update engine_requests set taken_at = ?, taken_by = ? where id = ? and "
                                     "taken_at is null and withdrawn_at is null", [at, pid, row["id"]])
            if cursor.rowcount == 1:
                taken.append(EngineRequestRecord.of({**row, "taken_at": at, "taken_by": pid}))
        return taken

    def withdraw_engine_request(self, request_id: int) -> bool:
        """Stop waiting for a request no engine has taken; False when one took it meanwhile."""
        cursor = self.db.execute("update engine_requests set withdrawn_at = ? where id = ? and taken_at is null",
                                 [now(), request_id])
        return cursor.rowcount == 1

    def engine_request_progress(self, request_id: int, answer: Any) -> None:
        """What a long piece of work has done so far, for its asker to show."""
        self.db.execute("update engine_requests set answer = ? where id = ?", [_json(answer), request_id])

    def answer_engine_request(self, request_id: int, *, answer: Any = None, result: bytes | None = None,
                              error: str = "", error_kind: str = "") -> None:
        self.db.execute("update engine_requests set answered_at = ?, answer = coalesce(?, answer), result = ?, "
                        "error = ?, error_kind = ? where id = ?",
                        [now(), None if answer is None else _json(answer), result, error, error_kind, request_id])

    def abandon_engine_request(self, request_id: int) -> None:
        """The engine stopped before it was done: its asker does the work itself."""
        self.db.execute("update engine_requests set abandoned_at = ? where id = ?", [now(), request_id])
