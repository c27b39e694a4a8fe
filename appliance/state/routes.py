"""A routed stream's routes, one per table a field's value named, in the state database (beside the streams')."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a route's mapping is Arrow's and PyIceberg's types: `floe status` and lists need neither
    from appliance.model.routes import Route


def _row(route: Route) -> dict[str, Any]:
    return {"stream": route.stream, "table_name": route.table, "value": route.value,
            "mapping": route.mapping.to_toml() if route.mapping.columns else "", "created_at": route.created_at,
            "start_positions": json.dumps({str(k): v for k, v in route.start_positions.items()}),
            "refused": route.refused or None}


def _route(row: dict[str, Any]) -> Route:
    from appliance.model.mapping import Mapping
    from appliance.model.routes import Route

    return Route(stream=row["stream"], table=row["table_name"], value=row["value"],
                 mapping=Mapping.from_toml(row["mapping"], origin=f"stream {row['stream']} route {row['table_name']}",
                                           stored=True) if row["mapping"] else Mapping.of_table(()),
                 created_at=row["created_at"],
                 start_positions={int(k): v for k, v in json.loads(row["start_positions"] or "{}").items()},
                 refused=row["refused"] or "")


class RouteRecords:
    """`StateStore`'s part for routed streams' routes; it uses the store's `db` and `_rows`."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    def add_event(self, kind: Any, message: str, stream: str | None = None, level: Any = None,
                  table: str | None = None) -> None:
        raise NotImplementedError

    def add_route(self, route: Route, told: str | None = None) -> bool:
        """Recorded once: a route already recorded (an attempt cut short after recording it) stays as it was.
        With `told`, the event that says so (ROUTE_ADDED), in the same transaction: a kill between the two
        left a route no event ever told of, as the next attempt finds it recorded. Whether this call recorded it."""
        from appliance.core.failpoints import failpoint
        from appliance.core.vocabulary import EventKind

        row = _row(route)
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            added = conn.execute(f"insert or ignore into stream_routes ({', '.join(row)}) "
                                 f"values ({', '.join('?' for _ in row)})", list(row.values())).rowcount == 1
            failpoint("route_recorded")
            if added and told:
                self.add_event(EventKind.ROUTE_ADDED, told, route.stream, table=route.table)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return added

    def update_route(self, route: Route) -> None:
        self.db["stream_routes"].upsert(_row(route), pk=("stream", "table_name"))

    def routes(self, stream: str) -> dict[str, Route]:
        """The stream's routes by table."""
        return {r["table_name"]: _route(r)
                for r in self._rows("stream_routes", "stream = ?", [stream], order_by="table_name")}

    def route_tables(self) -> dict[str, list[str]]:
        """Each routed stream's tables, by stream: no mapping parsed."""
        out: dict[str, list[str]] = {}
        for stream, table in self.db.execute("select stream, table_name from stream_routes where refused is null "
                                             "order by stream, table_name"):
            out.setdefault(stream, []).append(table)
        return out

    def forget_routes(self, stream: str) -> None:
        self.db["stream_routes"].delete_where("stream = ?", [stream])
