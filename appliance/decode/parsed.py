"""What a message format makes of a batch (`Parsed`), and the shape every format fills (`MessageFormat`).

A format parses a batch's raw values: which messages parsed (and each mapped column's values
for them), which did not and why, and what the messages carry that the mapping does not
(`Parsed.proposed`: new fields, as columns). For schemas from a registry it also says which
columns a writer schema would widen (`Parsed.wider`) or changes incompatibly (`Parsed.changes`,
`Parsed.conflicts`). JSON is `decode.json_format`; Avro and Protobuf, which need the registry,
are `decode.registered`. A new format (an envelope such as Debezium's) fills the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Protocol

from appliance.model.changes import SchemaChange
from appliance.model.mapping import Column, Mapping
from appliance.model.types import ColumnType

Bad = tuple[int, str, str]  # (index of the message, dead-letter stage, reason)


class Op(StrEnum):
    """What a message does to its key's row in an upsert stream."""

    UPSERT = "upsert"
    DELETE = "delete"
    TRUNCATE = "truncate"  # every row committed before it, and those before it in its partition


@dataclass
class Conflict:
    """A writer schema whose field has another type than its column holds, and the rows it wrote
    (positions in `Parsed.good`). `nested`: the field became a record or a union, whose parts are
    columns of their own (schema evolution adds them)."""

    column: str
    ours: str
    theirs: str
    writer: str  # the writer schema, as the message names it
    nested: bool = False
    positions: list[int] = field(default_factory=list)


@dataclass
class Parsed:
    """The messages of a batch that parsed, in order, and the others with their reasons."""

    good: list[int]
    bad: list[Bad]
    values: Callable[[list[Column]], list[list[Any]]]  # each column's values, aligned with `good`
    proposed: list[Column] = field(default_factory=list)
    wider: dict[str, ColumnType] = field(default_factory=dict)
    changes: dict[str, SchemaChange] = field(default_factory=dict)  # column -> how its writer changed it
    schemas: dict[str, int] = field(default_factory=dict)  # writer schema (id, for registry formats) -> messages
    conflicts: list[Conflict] = field(default_factory=list)
    # Whether a value a column cannot hold may widen it: for JSON, the values are all there is;
    # with a writer schema, only a wider type in the schema may (a value beyond it is corrupt).
    widen_by_value: bool = True
    # What each good message does to its key's row, for formats that say (Debezium's); None: every
    # message is its key's new row (or, in an append stream, a row).
    ops: list[Op] | None = None


def validate(values: list[bytes | None], max_message_bytes: int) -> tuple[list[int], list[Bad]]:
    """Indexes of the messages worth parsing; the empty and the oversized ones as dead letters."""
    try:
        lengths = list(map(len, values))
    except TypeError:  # a message without a value: looked at one by one below
        pass
    else:
        if not values or (min(lengths) > 0 and max(lengths) <= max_message_bytes):
            return list(range(len(values))), []  # the usual batch, checked in C
    ok: list[int] = []
    bad: list[Bad] = []
    for i, value in enumerate(values):
        if not value:
            bad.append((i, "validate", "empty message (no value)"))
        elif len(value) > max_message_bytes:
            bad.append((i, "validate", f"message of {len(value)} bytes exceeds max_message_bytes ({max_message_bytes})"))
        else:
            ok.append(i)
    return ok, bad


def extract_columns(objects: list[dict[str, Any]], paths: list[tuple[str, ...]]) -> list[list[Any]]:
    """Values at each path, one list per path aligned with `objects`.

    Shared parents are looked up once: `customer.id` and `customer.name` walk
    `customer` a single time. Comprehensions, not per-value function calls: this
    is the innermost loop of ingestion.
    """
    levels: dict[tuple[str, ...], list[Any]] = {(): objects}

    def at(path: tuple[str, ...]) -> list[Any]:
        found = levels.get(path)
        if found is None:
            parent, key = at(path[:-1]), path[-1]
            if len(path) == 1:
                found = [o.get(key) for o in parent]  # top level: every object is a dict
            else:
                found = [p.get(key) if p.__class__ is dict else None for p in parent]
            levels[path] = found
        return found

    return [at(path) for path in paths]


class MessageFormat(Protocol):
    """How one stream's messages are parsed. Implementations are picklable (they travel to Spark
    tasks) and keep what they build (decoders per schema id) per Python worker, not per batch."""

    name: str

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        """Every value either parsed (in `Parsed.good`, in order) or bad with its reason: none lost.
        Raises only a retryable FloeError about the world (a registry that does not answer)."""
        ...
