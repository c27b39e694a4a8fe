"""The suite's order under xdist: the longest test files first, spread so that each worker starts on its share.

xdist's `worksteal` hands each of the N workers a contiguous block of the collection, the same number of tests
each, and an idle worker later steals the last half of the longest queue. In collection order a two-minute
kill test could start last, with the other workers idle beside it. So the files are dealt, longest first, to the
block with the least time so far that has room for them: each block holds about an N-th of the suite's time
and count, begins with its longest files and ends with short ones, which are what gets stolen. A file stays
whole (its module fixtures, such as the Java reader, start once). Times are those of an earlier whole run
(tests/durations.tsv: `cp .test-durations.tsv tests/durations.tsv` after one); a test not in it counts as a
median one. A run without workers keeps the collection order.
"""

from __future__ import annotations

import statistics
from pathlib import Path

TIMES = Path(__file__).with_name("durations.tsv")


def known_times(path: Path | None = None) -> dict[str, float]:
    path = path or TIMES
    times: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            seconds, _, nodeid = line.partition("\t")
            try:
                times[nodeid] = float(seconds)
            except ValueError:
                continue  # a line that is not a time: the order is a guess anyway
    return times


def block_sizes(count: int, workers: int) -> list[int]:
    """How many tests worksteal's first split gives each worker (each takes its share of what is left)."""
    sizes, left = [], count
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def dealt(nodeids: list[str], times: dict[str, float], workers: int) -> list[int]:
    """Positions of `nodeids` in the order to run them: whole files in `workers` blocks, longest first."""
    default = statistics.median(times.values()) if times else 1.0
    files: dict[str, list[int]] = {}
    for position, nodeid in enumerate(nodeids):
        files.setdefault(nodeid.split("::")[0], []).append(position)
    cost = {f: sum(times.get(nodeids[p], default) for p in ps) for f, ps in files.items()}
    sizes = block_sizes(len(nodeids), workers)
    blocks: list[list[str]] = [[] for _ in range(workers)]
    load, filled = [0.0] * workers, [0] * workers
    for f in sorted(files, key=lambda f: (-cost[f], f)):
        roomy = [b for b in range(workers) if filled[b] + len(files[f]) <= sizes[b]]
        b = min(roomy, key=lambda b: (load[b], b)) if roomy else max(range(workers),
                                                                      key=lambda b: (sizes[b] - filled[b], -b))
        blocks[b].append(f)
        load[b] += cost[f]
        filled[b] += len(files[f])
    return [p for block in blocks for f in block for p in files[f]]


def pytest_collection_modifyitems(config, items) -> None:
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers or workers < 2 or len(items) < 2:
        return
    order = dealt([item.nodeid for item in items], known_times(), workers)
    items[:] = [items[p] for p in order]  # every worker computes the same order: xdist checks they agree
