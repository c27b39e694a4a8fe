"""Planning a batch, without I/O: where to read, how much, in which tasks, and where to resume.

Positions, watermarks and a message budget go in; pieces (offset ranges) come out.
The pieces' read results go in; the offsets to commit come out, never past a gap
that was not read. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.core.errors import FloeError, OffsetsBeyondTopic
from appliance.kafka.client import Watermarks
from appliance.kafka.reader import Piece, PieceResult

SMALL_TASK = 2000  # messages: a batch this size per core is not worth another task


@dataclass(frozen=True)
class Committed:
    """The offsets a stream's two tables hold; None where a table holds none of this stream's yet.

    The target table's offsets say where reading resumes. The dead-letter table's may be
    ahead (a crash between the two commits of a batch): the messages of that range that
    landed as dead letters must not land again, in either table (`replayed`).
    """

    target: dict[int, int] | None
    dead_letter: dict[int, int] | None

    def read_from(self, start_positions: dict[int, int]) -> dict[int, int]:
        """Where each partition is read from: committed offsets, else where the stream began."""
        return {**start_positions, **(self.target or {})}

    def replayed(self, start_positions: dict[int, int]) -> dict[int, tuple[int, int]]:
        """Per partition, the offsets [from, to) whose dead letters are committed and whose target
        rows are not: what a batch interrupted between its two commits leaves to replay."""
        start = self.read_from(start_positions)
        return {p: (start.get(p, 0), end) for p, end in sorted((self.dead_letter or {}).items())
                if end > start.get(p, 0)}

    def after(self, offsets: dict[int, int], dead_letters_committed: bool) -> Committed:
        """What the tables hold once a batch ending at `offsets` is committed."""
        return Committed(dict(offsets), dict(offsets) if dead_letters_committed else self.dead_letter)


@dataclass(frozen=True)
class Expired:
    """Offsets [first, low) of a partition left the topic before they were read."""

    partition: int
    first: int
    low: int

    def describe(self) -> str:
        return (f"partition {self.partition}: offsets {self.first}..{self.low - 1} expired from the topic "
                "before Floe read them")


@dataclass(frozen=True)
class Plan:
    start: dict[int, int]  # where each partition's reading starts, past expired offsets
    pieces: list[Piece]  # what this batch reads, at most the budget
    expired: list[Expired] = field(default_factory=list)


def plan_batch(positions: dict[int, int], marks: dict[int, Watermarks], budget: int) -> Plan:
    """The next batch: from `positions` (a partition not in it starts at 0) up to the high watermarks."""
    start: dict[int, int] = dict(positions)
    expired: list[Expired] = []
    lags: dict[int, int] = {}
    for p, w in marks.items():
        pos = positions.get(p, 0)
        if pos < w.low:
            expired.append(Expired(p, pos, w.low))
            pos = w.low
        if pos > w.high:
            raise OffsetsBeyondTopic(
                f"partition {p}: committed offset {pos} is beyond the topic's end ({w.high}); "
                "was the topic recreated? delete and recreate the stream to start over"
            )
        start[p] = pos
        lags[p] = w.high - pos
    shares = allocate(lags, budget)
    pieces = [Piece(p, start[p], start[p] + n) for p, n in sorted(shares.items())]
    return Plan(start, pieces, expired)


def allocate(lags: dict[int, int], budget: int) -> dict[int, int]:
    """Split a batch's message budget over partitions, fairly: small lags are served whole."""
    out: dict[int, int] = {}
    remaining = {p: lag for p, lag in lags.items() if lag > 0}
    while remaining and budget > 0:
        share = max(1, budget // len(remaining))
        for p in sorted(remaining, key=remaining.get):
            take = min(remaining[p], share, budget)
            out[p] = out.get(p, 0) + take
            budget -= take
            remaining[p] -= take
            if remaining[p] == 0:
                del remaining[p]
            if budget <= 0:
                break
    return out


def plan_tasks(pieces: list[Piece], parallelism: int, split: bool = True) -> list[list[Piece]]:
    """Split and balance pieces over about `parallelism` tasks, largest first.

    A large partition is cut into several pieces so that a topic with fewer
    partitions than cores still uses every core; not with `split` off (an upsert stream's
    task must hold all of a partition's messages, to keep only each key's newest).
    """
    pieces = [p for p in pieces if p.size > 0]
    if not pieces:
        return []
    total = sum(p.size for p in pieces)
    slots = max(1, min(parallelism, total // SMALL_TASK or 1))
    share = -(-total // slots)
    cut: list[Piece] = []
    for piece in pieces:
        start = piece.start
        while split and piece.end - start > share:
            cut.append(Piece(piece.partition, start, start + share))
            start += share
        cut.append(Piece(piece.partition, start, piece.end))
    bins: list[list[Piece]] = [[] for _ in range(min(slots, len(cut)))]
    loads = [0] * len(bins)
    for piece in sorted(cut, key=lambda p: -p.size):
        i = loads.index(min(loads))
        bins[i].append(piece)
        loads[i] += piece.size
    for b in bins:
        b.sort(key=lambda p: (p.partition, p.start))
    return [b for b in bins if b]


def advance(start: dict[int, int], results: list[PieceResult]) -> tuple[dict[int, int], list[FloeError]]:
    """Offsets to commit, as far as each partition was read without a gap, and the read errors.

    A piece that stopped early (its error says why) blocks the rest of its partition. If
    a later piece of that partition read rows anyway, the batch cannot be committed:
    committing them would skip the gap, committing only up to the gap would write them
    twice later. Then the first error is raised, with its type, and the batch is re-read.
    """
    new = dict(start)
    blocked: set[int] = set()
    errors: list[FloeError] = []
    for pr in sorted(results, key=lambda pr: (pr.partition, pr.start)):
        if pr.partition in blocked:
            if pr.next_offset > pr.start:
                raise errors[0].reworded(f"batch abandoned, will be re-read: {_joined(errors)}")
            continue
        new[pr.partition] = pr.next_offset
        if pr.error is not None:
            errors.append(pr.error)
            blocked.add(pr.partition)
    if errors and new == start:
        raise errors[0].reworded(_joined(errors))
    return new, errors


def _joined(errors: list[FloeError]) -> str:
    return "; ".join(str(e) for e in errors)


def lag(positions: dict[int, int], marks: dict[int, Watermarks]) -> int:
    """Messages in the topic not yet committed (expired ones do not count)."""
    return sum(max(0, w.high - max(positions.get(p, 0), w.low)) for p, w in marks.items())


def caught_up(positions: dict[int, int], marks: dict[int, Watermarks], goal: dict[int, int]) -> bool:
    """Whether every partition is committed up to `goal` (offsets that expired count as read)."""
    return all(max(positions.get(p, 0), marks[p].low if p in marks else 0) >= high for p, high in goal.items())


def pack_tasks(sizes: list[int], parallelism: int) -> list[list[int]]:
    """Group work items (of `sizes` messages) into Spark tasks: indexes per task.

    Several streams' small batches share one task, since a task costs a fixed amount
    whatever it holds, while large ones still spread over every core: as many tasks as
    there are cores, items or `SMALL_TASK`s of messages, whichever is fewest.
    """
    if not sizes:
        return []
    slots = max(1, min(len(sizes), parallelism, -(-sum(sizes) // SMALL_TASK)))
    bins: list[list[int]] = [[] for _ in range(slots)]
    loads = [0] * slots
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        b = loads.index(min(loads))
        bins[b].append(i)
        loads[b] += sizes[i]
    return [sorted(b) for b in bins if b]
