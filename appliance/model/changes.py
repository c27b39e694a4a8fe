"""What messages can ask of a table's schema: an evolution to commit before their rows land, and
the schema changes they show, told once per stream.

Decoding finds both (`decode`); the tables package commits an evolution and the engine tells
the changes; neither needs to know how the other works.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from appliance.model.mapping import Column
from appliance.model.types import parse_type, widens


@dataclass(frozen=True)
class Evolution:
    """What the table must become before a batch can be written: columns to add, columns to widen."""

    add: tuple[Column, ...] = ()
    widen: tuple[tuple[str, str], ...] = ()  # (column, wider type)

    def __bool__(self) -> bool:
        return bool(self.add or self.widen)

    def merged(self, other: Evolution) -> Evolution:
        add = {c.source: c for c in (*self.add, *other.add)}
        widen = dict(self.widen)
        for column, wider in other.widen:  # tasks may ask different widths of one column: the widest
            if column not in widen or widens(parse_type(widen[column]), parse_type(wider)):
                widen[column] = wider
        return Evolution(tuple(add.values()), tuple(sorted(widen.items())))


class ChangeKind(StrEnum):
    INCOMPATIBLE = "incompatible"  # messages carry another type than the column: they are dead-lettered
    IGNORED = "ignored"  # a new field that schema evolution (off) does not add


@dataclass(frozen=True, order=True)
class SchemaChange:
    """A change in what the messages carry, against the table's column (`seen`: what came instead, or,
    for an ignored field, its path)."""

    kind: ChangeKind
    column: str
    column_type: str
    seen: str

    @classmethod
    def incompatible(cls, column: str, column_type: str, seen: str) -> SchemaChange:
        return cls(ChangeKind.INCOMPATIBLE, column, column_type, seen)

    @classmethod
    def ignored(cls, column: str, column_type: str, source: str) -> SchemaChange:
        return cls(ChangeKind.IGNORED, column, column_type, source)

    @property
    def key(self) -> str:
        """How the state database remembers that the change was told (the same text as ever)."""
        return "|".join((self.kind.value, self.column, self.column_type, self.seen))
