"""Which dead-letter tables a `floe dlq` command acts on, each as a stream of one topic and one table.

A single stream is itself. A pattern stream is each topic it took (those gone from the cluster included: their
tables stay), each run as the batches run it (`member_stream`: the member's topic, tables, id and mapping), so
that a listing, a purge or a replay of one member is a single stream's, under the pattern stream's name. A
routed stream has one dead-letter table for all its routes; its position is that table's (committed last in
each batch, `ingest/routed.py`), and its replay routes each dead letter again (`deadletters/routed`).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core import hints
from appliance.core.errors import TopicNotInStream
from appliance.model.patterns import member_stream
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore


@dataclass(frozen=True)
class DeadLetterSource:
    """One dead-letter table of a stream, with the stream as its batches write it."""

    stream: StreamDef  # a single stream, or a pattern stream's member as `member_stream` makes it
    topic: str = ""  # a pattern stream's member's topic; "" for a stream of one dead-letter table
    routed: bool = False

    @property
    def table(self) -> str:
        return self.stream.dead_letter_table

    @property
    def anchor(self) -> str:
        """The table whose snapshots hold the stream's committed position: its target's; a routed stream's
        dead-letter table (it has no target of its own)."""
        return self.stream.dead_letter_table if self.routed else self.stream.table


def sources(state: StateStore, stream: StreamDef, topic: str | None = None) -> list[DeadLetterSource]:
    """The stream's dead-letter tables (`topic`: the one of that topic), a pattern stream's in its topics' order."""
    if stream.is_pattern:
        members = state.members(stream.name)
        if topic is not None and topic not in members:
            raise TopicNotInStream(f"stream {stream.name} holds no topic {topic!r}: "
                                   f"`{hints.SHOW_STREAM.format(stream=stream.name)}` lists its topics")
        return [DeadLetterSource(member_stream(stream, m), m.topic) for t, m in members.items()
                if topic is None or t == topic]
    if topic is not None and topic != stream.topic:
        raise TopicNotInStream(f"stream {stream.name} reads topic {stream.topic!r}, not {topic!r}")
    return [DeadLetterSource(stream, routed=stream.is_routed)]
