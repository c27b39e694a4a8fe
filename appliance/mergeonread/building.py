"""Building an upsert table's key index from the table itself: every live data file's key columns and
Kafka partition, less the rows its position deletes remove.

Files are read by a few threads at once (Parquet decoding and DuckDB's hashing let go of the GIL) and
their keys routed to the shards as they come; each shard is sorted once at the end, so the build holds
the index and a file or two, never a second copy of it. A key found live twice (a writer that is not
Floe, say) keeps the row `precedence` calls newest; the others are deleted by the next commit.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from pyiceberg.manifest import DataFileContent, ManifestEntry
from pyiceberg.table import Table

from appliance.mergeonread.deletes import live_deletes
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.memory import give_back
from appliance.mergeonread.precedence import newer_arrays
from appliance.mergeonread.reading import partitions_of, positions_at, read_columns
from appliance.mergeonread.segments import DEAD, Segments
from appliance.mergeonread.shards import SHARD_BITS, SHARDS, Shard
from appliance.model.columns import KAFKA_PARTITION
from appliance.tables.datafiles import live_entries

READERS = max(1, min(4, os.cpu_count() or 1))


def build(index: KeyIndex, table: Table) -> None:
    """Every live key of `table`'s current snapshot."""
    form = KeyForm.of(table.schema(), index.columns)
    index.reset(form, str(table.metadata.table_uuid))
    entries = live_entries(table)
    data = sorted((e for e in entries if e.data_file.content == DataFileContent.DATA),
                  key=lambda e: (e.sequence_number or 0, e.data_file.file_path))
    deletes = live_deletes(table, entries)
    parts: list[list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]] = [[] for _ in range(SHARDS)]
    _route(index, _read_all(table, form, data), deletes, parts)
    runs: list[tuple[int, list[list[int]]]] = []
    for s, chunks in enumerate(parts):
        index.shards.parts[s], found = _sorted(chunks, index.shards.wide)
        parts[s] = []  # let go of the chunks as each shard is done
        if found:
            runs.append((s, found))
    if runs:
        index.duplicates = _resolve(table, index, runs)
    index.keys = len(index.shards)
    current = table.current_snapshot()
    index.at(current.snapshot_id if current else None, current.sequence_number if current else 0)
    give_back()


def _route(index: KeyIndex, files, deletes, parts: list[list]) -> None:
    """Each file's live keys and locations, cut by shard, onto `parts`: copies, so that the file's own
    arrays go as soon as it is routed (views would keep every file's arrays until the last shard is
    sorted: twice the index at the end of a build)."""
    for entry, rows in files:
        path = entry.data_file.file_path
        index.files[path] = entry.data_file
        words, nulls, partitions = rows
        alive = ~nulls
        gone = deletes.applying(path, entry.sequence_number or 0)
        if gone is not None:
            alive[gone[gone < len(alive)]] = False
        # Files are numbered in commit order, so a later number is a later row for `_resolve`.
        locations = index.segments.locations(index.segments.file_number(path), partitions)[alive]
        h, low = index.spread(words[alive])
        # Cut into shards by the top bits: an 8-bit key sorts in linear time.
        order = np.argsort((h >> np.uint64(64 - SHARD_BITS)).astype(np.uint8), kind="stable")
        h, locations = h[order], locations[order]
        low = None if low is None else low[order]
        bounds = np.searchsorted(h >> np.uint64(64 - SHARD_BITS), np.arange(SHARDS + 1, dtype=np.uint64))
        for s in np.flatnonzero(np.diff(bounds)):
            cut = slice(bounds[s], bounds[s + 1])
            parts[s].append((h[cut].copy(), None if low is None else low[cut].copy(), locations[cut].copy()))


def _read_all(table: Table, form: KeyForm, data: list[ManifestEntry]):
    """(entry, (words, has a null key, partitions)) per data file, in order, read a few at a time."""
    columns = form.columns + (KAFKA_PARTITION.name,)

    def read(entry: ManifestEntry):
        rows = read_columns(table.metadata, table.io, entry.data_file, columns)
        return form.words(rows), form.has_null(rows), partitions_of(rows)

    with ThreadPoolExecutor(READERS) as pool:
        pending: deque = deque()
        for entry in data:
            pending.append((entry, pool.submit(read, entry)))
            if len(pending) > 2 * READERS:
                first, future = pending.popleft()
                yield first, future.result()
        while pending:
            first, future = pending.popleft()
            yield first, future.result()


def _sorted(chunks, wide: bool) -> tuple[Shard, list[list[int]]]:
    """A shard of the chunks' keys, sorted; and the runs of slots that hold one key more than once."""
    shard = Shard(wide)
    if not chunks:
        return shard, []
    h = np.concatenate([c[0] for c in chunks])
    order = np.argsort(h)
    shard.h = h[order]
    del h
    shard.loc = np.concatenate([c[2] for c in chunks])[order]
    if wide:
        shard.low = np.concatenate([c[1] for c in chunks])[order]
    runs: list[list[int]] = []
    for i in np.flatnonzero(shard.h[1:] == shard.h[:-1]).tolist():  # rare: a high word twice
        if runs and runs[-1][-1] == i:
            runs[-1].append(i + 1)
        else:
            runs.append([i, i + 1])
    if wide:  # keys sharing a high word are two keys unless their low words are equal too
        runs = [same for run in runs for same in _by_low(shard, run)]
    return shard, runs


def _by_low(shard: Shard, run: list[int]) -> list[list[int]]:
    """A run of slots of one high word, sorted by low word in place; the slots of each key held twice."""
    slots = np.array(run)
    order = np.argsort(shard.low[slots], kind="stable")
    for a in (shard.h, shard.low, shard.loc):
        a[slots] = a[slots][order]
    groups: dict[int, list[int]] = {}
    for slot in run:
        groups.setdefault(int(shard.low[slot]), []).append(slot)
    return [g for g in groups.values() if len(g) > 1]


def _resolve(table: Table, index: KeyIndex, runs: list[tuple[int, list[list[int]]]]) -> np.ndarray:
    """Keys found live more than once: each keeps the row `precedence` calls newest (a row without a
    Kafka position is older than any; among equals, the later file, then row); the other rows'
    locations are returned, for the next commit to delete, and their slots leave the shard."""
    slots = [(s, run) for s, shard_runs in runs for run in shard_runs]
    locations = np.unique(np.concatenate([index.shards.parts[s].loc[run] for s, run in slots]))
    partitions, offsets, timestamps = _positions(table, index.segments, locations)
    losers: list[int] = []
    for s, run in slots:
        shard = index.shards.parts[s]
        run = [run[i] for i in np.argsort(shard.loc[run], kind="stable")]  # earlier rows (files, then rows) first
        at = np.searchsorted(locations, shard.loc[run])
        best = 0
        for j in range(1, len(run)):  # later locations first win ties: they are later rows
            a, b = at[best], at[j]
            if not newer_arrays(*(x[[a]] for x in (partitions, offsets, timestamps)),
                                *(x[[b]] for x in (partitions, offsets, timestamps)))[0]:
                best = j
        winner = shard.loc[run[best]]
        losers += [int(shard.loc[i]) for i in run if i != run[best]]
        shard.loc[run[0]] = winner
        shard.loc[run[1:]] = DEAD  # out at the shard's next merge
    for s, _ in runs:
        index.shards.parts[s].merge()
    return np.array(sorted(losers), dtype=np.uint64)


def _positions(table: Table, segments: Segments, locations: np.ndarray):
    """(partition, offset, timestamp) of the rows at `locations` (read back from their files)."""
    partitions = np.full(len(locations), -1, dtype=np.int64)
    offsets = np.full(len(locations), -1, dtype=np.int64)
    timestamps = np.full(len(locations), np.iinfo(np.int64).min, dtype=np.int64)
    seg, rows = segments.split(locations)
    files = segments.file[seg]
    entries = {e.data_file.file_path: e.data_file for e in live_entries(table)}
    for number in np.unique(files):
        mine = np.flatnonzero(files == number)
        p, o, t = positions_at(table.metadata, table.io, entries[segments.paths[number]], rows[mine])
        partitions[mine], offsets[mine], timestamps[mine] = p, o, t
    return partitions, offsets, timestamps
