"""What a dead-letter replay did, or would do (a dry run): as `floe dlq replay` prints it, and as the
running engine hands it to the command that asked."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReplayReport:
    stream: str
    dry_run: bool
    selected: int = 0
    moved: int = 0
    stayed: int = 0
    superseded: int = 0  # upsert streams: a newer row of the key won; the dead letter stays as it was
    waiting: int = 0  # past the target's committed position: left for a later replay
    reasons: list[tuple[str, int]] = field(default_factory=list)  # of those that stay, most frequent first
    seconds: float = 0.0

    def lines(self) -> list[str]:
        verb = ("would move", "would stay") if self.dry_run else ("moved", "stay")
        out = [f"{self.stream}: {self.selected:,} dead letters selected; {verb[0]} {self.moved:,} to the target, "
               f"{self.stayed:,} {verb[1]} in the dead-letter table"
               + (f", {self.superseded:,} left as they were (a newer row of their key is in the table)"
                  if self.superseded else "")
               + ("" if self.dry_run else f" ({self.seconds:.1f} s)")]
        if self.waiting:
            out.append(f"{self.waiting:,} dead letters are past the stream's committed position: replay them once "
                       "it has moved on")
        out += [f"  {n:,} x {reason}" for reason, n in self.reasons]
        return out

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, values: dict[str, Any]) -> ReplayReport:
        return cls(**{**values, "reasons": [(reason, n) for reason, n in values["reasons"]]})
