"""Messages as a reader hands them on: parallel lists, cheap to fill from a consumer."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RawBatch:
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)  # epoch milliseconds
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]] | None] = field(default_factory=list)
    throttle_ms: int = 0  # the longest the broker throttled the reads that filled it

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self, indexes: list[int]) -> RawBatch:
        """The messages at `indexes`, in that order."""
        return RawBatch(*([column[i] for i in indexes] for column in (
            self.partitions, self.offsets, self.timestamps, self.keys, self.values, self.headers)))
