"""What one commit does to an upsert table: which rows its position deletes remove, and each key's new
place in the index, decided for all of a batch's keys at once.

A commit's entries (its new rows, and the keys whose newest message deletes them) are first reduced to
each key's newest (`precedence`: a key in two partitions of one batch); then each winner meets the
key's current row in the table. Ingestion reads every partition past what the table holds, so a winner
always beats a row of its own partition, and nothing is read back; a row of another partition (a key
that moved) is compared by its Kafka timestamp, read from its file, and so is any row a replay of old
dead letters meets. What loses is deleted by position in the same snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.precedence import UNKNOWN, newer_arrays, newest
from appliance.mergeonread.reading import positions_at
from appliance.mergeonread.segments import DEAD, live, tombstone_positions, tombstones
from appliance.mergeonread.shards import Found
from appliance.model.columns import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TIMESTAMP


@dataclass
class Keys:
    """Entries of keys with their messages' Kafka positions, columnar."""

    words: np.ndarray  # (n, width) uint64: `keyforms` words
    partitions: np.ndarray  # int32
    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, µs; UNKNOWN when Kafka gave none

    def __len__(self) -> int:
        return len(self.partitions)

    @classmethod
    def empty(cls, width: int = 1) -> Keys:
        return cls(np.empty((0, width), dtype=np.uint64), np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64),
                   np.empty(0, dtype=np.int64))

    @classmethod
    def of(cls, form: KeyForm, rows: pa.Table) -> Keys:
        """From rows holding the key columns and Floe's Kafka columns (a decoded batch)."""
        stamps = rows.column(KAFKA_TIMESTAMP.name)
        stamps = stamps.cast(pa.timestamp("us", tz=stamps.type.tz)) if pa.types.is_timestamp(stamps.type) else stamps
        return cls(form.words(rows), rows.column(KAFKA_PARTITION.name).to_numpy().astype(np.int32),
                   rows.column(KAFKA_OFFSET.name).to_numpy().astype(np.int64),
                   stamps.cast(pa.int64()).fill_null(UNKNOWN).to_numpy())

    @classmethod
    def concat(cls, parts: list[Keys]) -> Keys:
        parts = [p for p in parts if len(p)] or parts[:1]
        if not parts:
            return cls.empty()
        return cls(np.concatenate([p.words for p in parts]), np.concatenate([p.partitions for p in parts]),
                   np.concatenate([p.offsets for p in parts]), np.concatenate([p.timestamps for p in parts]))

    def take(self, rows: np.ndarray | slice) -> Keys:
        return Keys(self.words[rows], self.partitions[rows], self.offsets[rows], self.timestamps[rows])


@dataclass
class KeyedRows:
    """What an upsert batch (or a replay) wrote and deleted: its new data files, in order, with their
    rows' keys in file order; the keys whose newest message deletes them; whether a truncate empties
    the table first."""

    files: list[DataFile] = field(default_factory=list)
    rows: Keys = field(default_factory=Keys.empty)
    deleted: Keys = field(default_factory=Keys.empty)
    truncated: bool = False


@dataclass
class Plan:
    """A commit's effect: rows to delete by position, and what the index becomes once it lands."""

    doomed: dict[str, np.ndarray]  # data file path -> positions, sorted
    h: np.ndarray  # the winning keys, spread
    low: np.ndarray | None
    found: Found  # where the index holds them
    locations: np.ndarray  # their locations after the commit (a tombstone: deleted)
    changed: np.ndarray  # which of them change
    lost: np.ndarray  # per entry (rows, then deletes): beaten by a newer message of its key
    replaced: int = 0  # rows of earlier commits replaced or deleted
    truncate: bool = False
    files: list[DataFile] = field(default_factory=list)
    entries: Keys | None = None  # the commit's rows and deletes: their partitions' clocks move on


def plan(index: KeyIndex, table: Table, batch: KeyedRows, after_table: bool = True) -> Plan:
    """The effect of committing `batch` on the table as `index` (brought to it) holds it. `after_table`:
    every message is past what the table holds of its partition (ingestion); otherwise (a replay of
    dead letters), rows of the same partition are compared by offset."""
    entries = Keys.concat([batch.rows, batch.deleted])
    written = len(batch.rows)
    new_locations = np.concatenate([_file_locations(index, batch),
                                    tombstones(batch.deleted.partitions, batch.deleted.timestamps)]).astype(np.uint64)
    h, low = index.spread(entries.words) if len(entries) else (np.empty(0, np.uint64), None)
    win = _newest(h, low, entries)
    lost = np.ones(len(entries), dtype=bool)
    lost[win] = False
    wh, wlow = h[win], None if low is None else low[win]
    # A truncate removes every file before the commit's own: its keys meet no row.
    found = _absent(len(win)) if batch.truncated else index.find(wh, wlow)
    beats = _beats(index, table, entries.take(win), found, after_table)
    lost[win[~beats]] = True
    current = found.location
    twice = np.empty(0, np.uint64) if batch.truncated else index.segments.translate(index.duplicates)[0]
    doomed = np.concatenate([current[found.present & beats], twice])
    doomed = doomed[live(doomed)]
    replaced = len(doomed)
    losing_rows = np.flatnonzero(lost[:written])
    doomed = np.concatenate([doomed, new_locations[losing_rows]])
    locations = np.where(beats, new_locations[win], current)
    return Plan(index.segments.by_file(doomed), wh, wlow, found, locations, beats, lost, replaced,
                batch.truncated, list(batch.files), entries)


def _absent(n: int) -> Found:
    return Found(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int8), np.full(n, -1, dtype=np.int64),
                 np.full(n, DEAD, dtype=np.uint64))


def _file_locations(index: KeyIndex, batch: KeyedRows) -> np.ndarray:
    out, start = [], 0
    for f in batch.files:
        n = f.record_count
        number = index.segments.file_number(f.file_path)
        out.append(index.segments.locations(number, batch.rows.partitions[start:start + n]))
        start += n
    return np.concatenate(out) if out else np.empty(0, dtype=np.uint64)


def _newest(h: np.ndarray, low: np.ndarray | None, entries: Keys) -> np.ndarray:
    """Each key's newest entry (`precedence`); all of them at once when no key is there twice (as in
    ingestion, where a key's messages are in one partition, one task, reduced there)."""
    ordered = np.sort(h)
    if not (ordered[1:] == ordered[:-1]).any():
        return np.arange(len(h))
    if low is None:
        labels = np.unique(h, return_inverse=True)[1].reshape(-1)
    else:
        labels = np.unique(np.stack([h, low], axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    return newest(labels, entries.partitions, entries.offsets, entries.timestamps)


def _beats(index: KeyIndex, table: Table, winners: Keys, found: Found, after_table: bool) -> np.ndarray:
    """Whether each winner beats the key's current row or tombstone (True where there is neither)."""
    beats = np.ones(len(winners), dtype=bool)
    rows = np.flatnonzero(found.present)
    if rows.size:
        theirs = index.segments.partitions_of(found.location[rows])
        # A row without a Kafka position always loses; one of the message's partition, in ingestion, too.
        ask = rows[(theirs >= 0) & ((theirs != winners.partitions[rows]) | (not after_table))]
        if ask.size:
            p, o, t = _read_positions(index, table, found.location[ask])
            beats[ask] = newer_arrays(winners.partitions[ask], winners.offsets[ask], winners.timestamps[ask], p, o, t)
    tombs = np.flatnonzero(~found.present & (found.location != DEAD))
    if tombs.size:  # a delete remembered: its partition and timestamp, no offset
        p, t = tombstone_positions(found.location[tombs])
        mine, stamps = winners.partitions[tombs], winners.timestamps[tombs]
        same = p == mine
        across = newer_arrays(mine, np.zeros(tombs.size), stamps, p, np.zeros(tombs.size), t)
        # In its own partition a later message always wins in ingestion; a replayed one by its timestamp.
        beats[tombs] = np.where(same, True if after_table else stamps > t, across)
    return beats


def _read_positions(index: KeyIndex, table: Table, locations: np.ndarray):
    partitions = np.empty(len(locations), dtype=np.int64)
    offsets = np.empty(len(locations), dtype=np.int64)
    timestamps = np.empty(len(locations), dtype=np.int64)
    segments, rows = index.segments.split(locations)
    files = index.segments.file[segments]
    for number in np.unique(files):
        mine = np.flatnonzero(files == number)
        data_file = index.files[index.segments.paths[number]]
        partitions[mine], offsets[mine], timestamps[mine] = positions_at(table.metadata, table.io, data_file,
                                                                         rows[mine])
    return partitions, offsets, timestamps


def landed(index: KeyIndex, done: Plan, snapshot_id: int, sequence: int) -> None:
    """The commit of `done` landed as `snapshot_id`: the index now reflects it."""
    if done.truncate:  # its rows alone are left: the keys' places it found absent are the empty index's
        for path in index.files:
            if path in index.segments.numbers:
                index.segments.forget_file(index.segments.numbers[path])
        index.files = {}
        index.shards = type(index.shards)(index.shards.wide)
        index.keys = 0
    for f in done.files:
        index.files[f.file_path] = f
    if done.entries is not None and len(done.entries):
        index.tick(done.entries.partitions, done.entries.timestamps)
    rows = np.flatnonzero(done.changed)
    if rows.size:
        sub = Found(done.found.shard[rows], done.found.where[rows], done.found.slot[rows], done.found.location[rows])
        index.assign(done.h[rows], None if done.low is None else done.low[rows], sub, done.locations[rows])
    index.duplicates = np.empty(0, dtype=np.uint64)
    index.at(snapshot_id, sequence)
