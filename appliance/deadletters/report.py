"""What a dead-letter replay did, or would do (a dry run), and what a purge did: as `floe dlq replay` and `floe dlq
purge` print it, and as the running engine hands it to the command that asked."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TOP_REASONS = 5  # of those that stay, the most frequent reasons told


@dataclass
class ReplayReport:
    stream: str
    dry_run: bool
    table: str = ""  # a pattern stream's topic's: its target table
    selected: int = 0
    moved: int = 0
    stayed: int = 0
    superseded: int = 0  # upsert streams: a newer row of the key won; the dead letter stays as it was
    waiting: int = 0  # past the target's committed position: left for a later replay
    reasons: list[tuple[str, int]] = field(default_factory=list)  # of those that stay, most frequent first
    seconds: float = 0.0
    tables: list[ReplayReport] = field(default_factory=list)  # a pattern stream's: each topic's, by target table
    routed: bool = False  # a routed stream's: its dead letters move to the tables their values name

    @classmethod
    def of_tables(cls, stream: str, dry_run: bool, reports: list[ReplayReport]) -> ReplayReport:
        """A pattern stream's replay: its topics' added up, each kept."""
        reasons: Counter = Counter()
        for r in reports:
            reasons.update(dict(r.reasons))
        return cls(stream, dry_run, selected=sum(r.selected for r in reports), moved=sum(r.moved for r in reports),
                   stayed=sum(r.stayed for r in reports), superseded=sum(r.superseded for r in reports),
                   waiting=sum(r.waiting for r in reports), reasons=reasons.most_common(TOP_REASONS),
                   seconds=sum(r.seconds for r in reports), tables=reports)

    def tally(self, parts: list) -> None:
        """What a replay's Spark tasks did (each part's `moved`, `stayed` and `reasons`), added up."""
        reasons: Counter = Counter()
        for part in parts:
            reasons.update(part.reasons)
        self.moved, self.stayed = sum(p.moved for p in parts), sum(p.stayed for p in parts)
        self.reasons = reasons.most_common(TOP_REASONS)

    def lines(self) -> list[str]:
        label = f"{self.stream} ({self.table}): " if self.table else f"{self.stream}: "
        out = [self._summary(label, "their tables" if self.tables or self.routed else "the target")]
        out += ["  " + t._summary(f"{t.table}: ", "it") for t in self.tables if t.selected or t.waiting]
        if self.waiting:
            out.append(f"{self.waiting:,} dead letters are past the stream's committed position: replay them once "
                       "it has moved on")
        out += [f"  {n:,} x {reason}" for reason, n in self.reasons]
        return out

    def _summary(self, label: str, target: str) -> str:
        verb = ("would move", "would stay") if self.dry_run else ("moved", "stay")
        return (f"{label}{self.selected:,} dead letters selected; {verb[0]} {self.moved:,} to {target}, "
                f"{self.stayed:,} {verb[1]} in the dead-letter table"
                + (f", {self.superseded:,} left as they were (a newer row of their key is in the table)"
                   if self.superseded else "")
                + ("" if self.dry_run else f" ({self.seconds:.1f} s)"))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, values: dict[str, Any]) -> ReplayReport:
        return cls(**{**values, "reasons": [(reason, n) for reason, n in values["reasons"]],
                      "tables": [cls.of(t) for t in values.get("tables", ())]})


@dataclass(frozen=True)
class Purged:
    """What a purge did to one dead-letter table."""

    table: str
    deleted: int
    waiting: int  # past the stream's committed position: left for later


@dataclass
class PurgeReport:
    stream: str
    tables: list[Purged] = field(default_factory=list)

    @property
    def deleted(self) -> int:
        return sum(t.deleted for t in self.tables)

    @property
    def waiting(self) -> int:
        return sum(t.waiting for t in self.tables)

    def lines(self) -> list[str]:
        """What `floe dlq purge` prints: the total, then each table's of a stream of many (those it touched)."""
        out = [f"{self.stream}: purged {self.deleted:,} dead letters"
               + (f"; {self.waiting:,} past the stream's committed position were left" if self.waiting else "")]
        if len(self.tables) > 1:
            out += [f"  {t.table}: purged {t.deleted:,}" + (f", {t.waiting:,} left" if t.waiting else "")
                    for t in self.tables if t.deleted or t.waiting]
        return out

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, values: dict[str, Any]) -> PurgeReport:
        return cls(values["stream"], [Purged(**t) for t in values["tables"]])
