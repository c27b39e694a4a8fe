"""A pattern stream's members, one per topic it took, in the state database (beside the streams')."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance.core.clock import now
from appliance.core.errors import TableConflict

if TYPE_CHECKING:  # a member's mapping is Arrow's and PyIceberg's types: `floe status` and lists need neither
    from appliance.model.patterns import Member
    from appliance.model.stream import StreamDef


def _row(member: Member) -> dict[str, Any]:
    return {"stream": member.stream, "topic": member.topic, "id": member.id, "target_table": member.table,
            "dead_letter_table": member.dead_letter_table, "mapping": member.mapping.to_toml(),
            "start_positions": json.dumps({str(k): v for k, v in member.start_positions.items()}),
            "key_columns": json.dumps(list(member.key)), "subject": member.subject,
            "created_at": member.created_at, "removed_at": member.removed_at or None}


def _member(row: dict[str, Any]) -> Member:
    from appliance.model.mapping import Mapping
    from appliance.model.patterns import Member

    return Member(stream=row["stream"], topic=row["topic"], id=row["id"], table=row["target_table"],
                  dead_letter_table=row["dead_letter_table"],
                  mapping=Mapping.from_toml(row["mapping"], origin=f"stream {row['stream']} topic {row['topic']}"),
                  start_positions={int(k): v for k, v in json.loads(row["start_positions"]).items()},
                  created_at=row["created_at"], key=tuple(json.loads(row["key_columns"] or "[]")),
                  subject=row["subject"] or "", removed_at=row["removed_at"] or "")


class MemberRecords:
    """`StateStore`'s part for pattern streams' members; it uses the store's `db` and `_rows`."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    def streams(self) -> list[StreamDef]:
        raise NotImplementedError

    routes: Callable[[str], dict]  # `RouteRecords.routes` (an annotation only: a method here would shadow it)

    def table_writers(self) -> list[StreamDef]:
        """Every stream as the tables it writes see it: a pattern stream as one stream per topic it took (its
        tables, id and mapping), so that whatever asks who writes a table asks once."""
        from appliance.model.patterns import member_stream
        from appliance.model.routes import route_stream

        out: list[StreamDef] = []
        for stream in self.streams():
            if stream.is_pattern:
                out += [member_stream(stream, m) for m in self.members(stream.name).values()]
            elif stream.is_routed:  # itself too: its dead-letter table is written before any route is made
                out += [stream] + [route_stream(stream, r) for r in self.routes(stream.name).values() if not r.refused]
            else:
                out.append(stream)
        return out

    def add_member(self, member: Member) -> None:
        try:
            self.db["stream_members"].insert(_row(member))
        except sqlite3.IntegrityError:
            raise TableConflict(f"stream {member.stream!r} already holds topic {member.topic!r}") from None

    def members(self, stream: str) -> dict[str, Member]:
        """The stream's members by topic, those whose topic is gone included."""
        return {r["topic"]: _member(r) for r in self._rows("stream_members", "stream = ?", [stream], order_by="topic")}

    def member_tables(self) -> dict[str, list[str]]:
        """Each pattern stream's members' target tables, by stream: no mapping parsed (lists of hundreds)."""
        out: dict[str, list[str]] = {}
        for stream, table in self.db.execute("select stream, target_table from stream_members order by stream, topic"):
            out.setdefault(stream, []).append(table)
        return out

    def all_members(self) -> list[Member]:
        return [_member(r) for r in self._rows("stream_members", order_by="stream, topic")]

    def tables_of(self, stream: StreamDef) -> list[str]:
        """Every table a stream writes: its two, each of a pattern stream's members' two, or a routed stream's
        dead-letter table and its routes'."""
        if stream.is_routed:
            return [stream.dead_letter_table] + [r.table for r in self.routes(stream.name).values() if not r.refused]
        if not stream.is_pattern:
            return [stream.table, stream.dead_letter_table]
        return [t for m in self.members(stream.name).values() for t in (m.table, m.dead_letter_table)]

    def update_member_mapping(self, stream: str, topic: str, mapping) -> None:
        """The mapping the member's table makes now (its schema evolved, or changed by another client)."""
        self.db.execute("update stream_members set mapping = ? where stream = ? and topic = ?",
                        [mapping.to_toml(), stream, topic])

    def remove_member(self, stream: str, topic: str) -> None:
        """Its topic left the cluster: it is no longer read; its tables and record stay."""
        self.db.execute("update stream_members set removed_at = ? where stream = ? and topic = ?",
                        [now(), stream, topic])

    def forget_members(self, stream: str) -> None:
        """With the stream: its members and what was noted of their offsets."""
        self.db["expired_offsets"].delete_where("stream_id in (select id from stream_members where stream = ?)",
                                                [stream])
        self.db["stream_members"].delete_where("stream = ?", [stream])
