"""Each message's route value, the one way a routed stream's batch, its dead-letter replay and its audit read it.

The field of a JSON value is looked up in the object parsed once (which the route's mapping then reads); another
format's value is parsed for that one column; a route taken from the Kafka key or a header is read as a mapped
column of that source reads it (`decode.kafka_sources`), with no value parsed. What the value names is
`model.routes.RouteRule.route`'s to say.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from appliance.decode.json_format import JsonFormat, parse_objects
from appliance.decode.kafka_sources import column_values
from appliance.decode.parsed import Bad, MessageFormat, Parsed
from appliance.kafka.records import RawBatch
from appliance.model.mapping import Column, Mapping
from appliance.model.routes import RouteRule


def route_values(raw: RawBatch, rule: RouteRule, fmt: MessageFormat | None, max_message_bytes: int
                 ) -> tuple[list[tuple[int, Any]], list[Bad], list | None]:
    """Each parsed message's route value (None: no such field), the messages that do not parse, with why, and for
    JSON each message's object (None for one that is not an object), which its route's mapping then reads."""
    if rule.from_kafka:
        return (*_kafka_values(raw, rule, fmt, max_message_bytes), None)
    values = raw.values
    if fmt is None or isinstance(fmt, JsonFormat):
        good, objects, bad = parse_objects(values, max_message_bytes)
        found: list[Any] = objects
        for key in rule.path:
            found = [o.get(key) if o.__class__ is dict else None for o in found]
        everyone: list = [None] * len(values)
        for i, o in zip(good, objects):
            everyone[i] = o
        return list(zip(good, found)), bad, everyone
    column = Column("route", "string", rule.path)
    parsed = fmt.parse(values, max_message_bytes, Mapping.of_table([column]))
    [found] = parsed.values([column])
    found = found.to_pylist() if isinstance(found, (pa.Array, pa.ChunkedArray)) else list(found)
    return list(zip(parsed.good, found)), list(parsed.bad), None


def _kafka_values(raw: RawBatch, rule: RouteRule, fmt: MessageFormat | None, max_message_bytes: int
                  ) -> tuple[list[tuple[int, Any]], list[Bad]]:
    """The key's or a header's text (or a key's field), read as a mapped column of that source reads it
    (`decode.kafka_sources`); a key or header that cannot be read is a dead letter with the reason. The values
    are decoded later, by each route's mapping."""
    everyone = Parsed(good=list(range(len(raw))), bad=[], values=lambda columns: [])
    problems: dict = {}
    [found] = column_values(Mapping.of_table([Column("route", "string", rule.path)]), everyone, raw, fmt,
                            max_message_bytes, problems)
    found = found.to_pylist() if isinstance(found, (pa.Array, pa.ChunkedArray)) else list(found)
    bad: list[Bad] = [(i, problem.stage, problem.message) for i, problem in sorted(problems.items())]
    return [(i, value) for i, value in enumerate(found) if i not in problems], bad
