"""What `floe audit` found: per partition, the offset ranges that break exactly-once, and why not others."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class OffsetRange:
    """Offsets first..last (inclusive) of a partition, and the rows the two tables hold for them."""

    partition: int
    first: int
    last: int
    target_rows: int = 0
    dead_letter_rows: int = 0

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def describe(self) -> str:
        where = f"partition {self.partition}, offset{'s' if self.count > 1 else ''} " + (
            f"{self.first}..{self.last} ({self.count:,} offsets)" if self.count > 1 else f"{self.first}")
        if self.target_rows or self.dead_letter_rows:
            where += f": {self.target_rows:,} rows in the target, {self.dead_letter_rows:,} in the dead-letter table"
        return where


@dataclass(frozen=True)
class PartitionAudit:
    partition: int
    first: int  # the stream's first offset in this partition
    committed: int  # the next offset to read, from the target table's newest commit
    dead_letter_committed: int | None
    low: int | None  # the topic's watermarks, when the broker answered
    high: int | None
    target_rows: int
    dead_letter_rows: int
    missing: int  # offsets in neither table, expired ones and retention's included
    duplicated: int  # offsets held by more than one row

    @property
    def checked(self) -> int:
        return max(self.committed - self.first, 0)

    @property
    def lag(self) -> int | None:
        return None if self.high is None else max(self.high - self.committed, 0)


@dataclass(frozen=True)
class Reason:
    stage: str
    reason: str  # the error message with its numbers replaced by N, so alike reasons group
    rows: int
    example_partition: int
    example_offset: int


@dataclass
class AuditReport:
    stream: str
    topic: str
    table: str
    dead_letter_table: str
    partitions: list[PartitionAudit] = field(default_factory=list)
    gaps: list[OffsetRange] = field(default_factory=list)  # lost: in neither table, not explained
    duplicates: list[OffsetRange] = field(default_factory=list)
    expired: list[OffsetRange] = field(default_factory=list)  # left the topic before they were read
    retention: list[OffsetRange] = field(default_factory=list)  # missing, within what retention deleted
    problems: list[str] = field(default_factory=list)  # other broken invariants
    notes: list[str] = field(default_factory=list)  # worth knowing, not failures
    dead_letters: list[Reason] = field(default_factory=list)
    retention_deleted: int = 0
    seconds: float = 0.0
    keys: Any = None  # an upsert stream's key-by-key check (`upserts.KeyAudit`)

    @property
    def ok(self) -> bool:
        return not (self.gaps or self.duplicates or self.problems)

    @property
    def checked(self) -> int:
        return sum(p.checked for p in self.partitions)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ok"], out["checked"] = self.ok, self.checked
        for p, audit in zip(out["partitions"], self.partitions):
            p["checked"], p["lag"] = audit.checked, audit.lag
        out["dead_letters"] = {"rows": sum(r.rows for r in self.dead_letters), "reasons": out["dead_letters"]}
        if out["keys"] is not None:
            out["keys"]["truncated"] = sorted(out["keys"]["truncated"])
        return out

    def render(self, limit: int = 20) -> str:
        lines = [f"stream {self.stream}: topic {self.topic} -> {self.table} (dead letters: {self.dead_letter_table})",
                 f"{'partition':>9}  {'first':>12}  {'committed':>12}  {'topic low..high':>24}  {'target rows':>12}  "
                 f"{'dead letters':>12}  {'missing':>9}  {'duplicated':>10}"]
        for p in self.partitions:
            marks = "unknown" if p.low is None else f"{p.low:,}..{p.high:,}"
            lines.append(f"{p.partition:>9}  {p.first:>12,}  {p.committed:>12,}  {marks:>24}  {p.target_rows:>12,}  "
                         f"{p.dead_letter_rows:>12,}  {p.missing:>9,}  {p.duplicated:>10,}")
        rows = sum(p.target_rows for p in self.partitions)
        dead = sum(p.dead_letter_rows for p in self.partitions)
        for title, ranges in (("LOST (in neither table)", self.gaps), ("DUPLICATED", self.duplicates),
                              ("expired from the topic before Floe read them (not a loss)", self.expired),
                              (f"missing, within the {self.retention_deleted:,} rows retention and purges deleted",
                               self.retention)):
            if ranges:
                lines.append(f"{title}: {sum(r.count for r in ranges):,} offsets in {len(ranges):,} ranges")
                lines += [f"  {r.describe()}" for r in ranges[:limit]]
                if len(ranges) > limit:
                    lines.append(f"  ... and {len(ranges) - limit:,} more ranges (--format json lists them all)")
        lines += [f"PROBLEM: {p}" for p in self.problems]
        lines += [f"note: {n}" for n in self.notes]
        if self.dead_letters:
            lines.append(f"dead letters by reason ({dead:,} rows):")
            lines += [f"  {r.rows:>10,}  {r.stage}: {r.reason}  (e.g. partition {r.example_partition} "
                      f"offset {r.example_offset})" for r in self.dead_letters]
        verdict = "OK" if self.ok else "FAILED"
        if self.keys is not None:
            lines.append(f"{verdict}: {self.keys.keys:,} keys in the newest state of {self.keys.messages:,} retained "
                         f"messages; {self.keys.table_keys:,} keys in the table; {dead:,} dead letters "
                         f"({self.seconds:.1f} s)")
            return "\n".join(lines)
        lines.append(f"{verdict}: {self.checked:,} offsets from the first ingested to the committed position; "
                     f"{rows:,} rows in the target, {dead:,} dead letters; "
                     f"{sum(r.count for r in self.gaps):,} lost, {sum(r.count for r in self.duplicates):,} duplicated "
                     f"({self.seconds:.1f} s)")
        return "\n".join(lines)
