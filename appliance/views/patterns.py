"""A pattern stream's topics as `floe stream show`, `floe stream list` and the UI see them: each topic with
its tables, whether it is still read, and the offsets its table has committed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.config.settings import Settings

if TYPE_CHECKING:  # a member's mapping is Arrow's and PyIceberg's types: `floe stream list` needs neither
    from appliance.model.patterns import Member


@dataclass(frozen=True)
class TopicView:
    topic: str
    table: str
    dead_letter_table: str
    state: str  # "reading", or "removed at ..." once the topic left the cluster
    committed_offsets: dict[int, int] | str | None  # a text when the table cannot be read


def committed_of(settings: Settings, table: str, stream_id: str) -> dict[int, int] | str | None:
    """The offsets `table` committed for `stream_id`: read from its metadata file where that is cheap, else
    through the catalog (imported only then: PyIceberg's tables cost)."""
    from appliance.tables.metadata_json import NOT_HERE, committed_offsets_of

    try:
        offsets = committed_offsets_of(settings, table, stream_id)
        if offsets is NOT_HERE:
            from appliance.tables.catalog import Catalog
            from appliance.tables.snapshots import committed_offsets

            offsets = committed_offsets(Catalog(settings).table(table), stream_id)
        return offsets
    except Exception as exc:  # the table may have been dropped by hand
        return f"unavailable: {exc}"


def topic_views(settings: Settings, members: dict[str, Member]) -> list[TopicView]:
    return [TopicView(m.topic, m.table, m.dead_letter_table, f"removed at {m.removed_at}" if m.removed_at
                      else "reading", committed_of(settings, m.table, m.id)) for m in members.values()]


@dataclass(frozen=True)
class RouteView:
    value: str  # the value that first named the table
    table: str
    refused: str  # why its table cannot be made ("" when it is)
    committed_offsets: dict[int, int] | str | None  # a text when the table cannot be read


def route_views(settings: Settings, stream_id: str, routes: dict) -> list[RouteView]:
    return [RouteView(r.value, r.table, r.refused, None if r.refused else committed_of(settings, r.table, stream_id))
            for r in routes.values()]
