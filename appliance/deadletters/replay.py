"""`floe dlq replay`: dead letters decoded again with the stream's mapping as it is now, and moved.

A replay selects the stream's dead letters (`selection`: by `--where`, and only under the target's
committed position, so a batch in flight never meets a dead letter gone from under it), decodes
them again in Spark tasks (`tasks`), commits a schema change first where schema evolution asks
for one (as a batch does), and then moves them, in one catalog transaction under both tables'
commit locks (`deadletters/moves`): those that now decode into the target, the rest back into the
dead-letter table with their new reason. It runs beside the running stream and holds its locks
for one commit. A kill at any point leaves both tables as they were or both moved; the files of
an interrupted replay are orphans, and running it again finishes the job.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from appliance.config.settings import Settings
from appliance.core.errors import FloeError, ReplayConflict, SchemaError
from appliance.core.failpoints import failpoint
from appliance.core.vocabulary import EventKind
from appliance.deadletters.moves import Move, check_together, commit_move
from appliance.deadletters.selection import Selection, check_where, select
from appliance.deadletters.tasks import PartResult, ReplaySpec, run_replay, split
from appliance.decode.formats import format_of
from appliance.decode.keys import Keyed
from appliance.ingest.stream_schema import StreamSchema
from appliance.mergeonread.plans import KeyedRows, Keys
from appliance.model.stream import StreamDef
from appliance.spark.session import parallelism
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.commits import commit_lock
from appliance.tables.datafiles import TableTarget, delete_files
from appliance.tables.snapshots import committed_offsets

log = logging.getLogger(__name__)

ATTEMPTS = 3  # a replay whose dead letters were taken or rewritten meanwhile reads them again
MAX_EVOLUTIONS = 3
TOP_REASONS = 5


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


def replay(settings: Settings, name: str, where: str | None = None, dry_run: bool = False,
           spark=None) -> ReplayReport:
    """Replay the stream's dead letters that `where` selects (all of them without it)."""
    check_where(where)
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        catalog = Catalog(settings)
        with warehouse_io(settings, f"replay dead letters of {name}"):
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    report = _replay(settings, state, catalog, stream, where, dry_run, spark)
                    break
                except ReplayConflict as exc:
                    if attempt == ATTEMPTS:
                        raise
                    log.info("replay of %s: %s; reading the dead letters again", name, exc)
        if not dry_run and report.selected:
            state.add_event(EventKind.DEAD_LETTERS_REPLAYED, report.lines()[0], stream.name)
    return report


def _replay(settings: Settings, state: StateStore, catalog: Catalog, stream: StreamDef, where: str | None,
            dry_run: bool, spark) -> ReplayReport:
    started = time.monotonic()
    schema = StreamSchema(settings, state, stream)
    target = schema.prepared(catalog.table(stream.table))
    dead_letter = catalog.table(stream.dead_letter_table)
    if not dry_run:
        check_together(target)
    chosen = select(settings, dead_letter, stream.created_at, where, committed_offsets(target, stream.id) or {})
    report = ReplayReport(stream.name, dry_run, selected=len(chosen), waiting=chosen.waiting)
    if not len(chosen):
        return report
    if spark is None:
        from appliance.spark.session import spark_session

        spark = spark_session(settings)
    target, results = _decode(settings, spark, schema, stream, target, dead_letter, chosen, dry_run)
    reasons: Counter = Counter()
    for r in results:
        reasons.update(r.reasons)
    report.moved, report.stayed = sum(r.moved for r in results), sum(r.stayed for r in results)
    report.reasons = reasons.most_common(TOP_REASONS)
    if dry_run:
        return report
    written = [f for r in results for f in r.target_files + r.dead_letter_files]
    move = Move(taken=chosen.positions, taken_at=chosen.messages,
                target_files=[f for r in results for f in r.target_files],
                dead_letter_files=[f for r in results for f in r.dead_letter_files],
                keyed=_keyed(results) if stream.upserts else None,
                key_columns=tuple(stream.key) if stream.upserts else (), home=settings.home)
    failpoint("replay_before_commit")
    try:
        with commit_lock(settings, stream.table), commit_lock(settings, stream.dead_letter_table):
            moved = commit_move(target.refresh(), dead_letter.refresh(), move)
    except BaseException:
        delete_files(target, [f.file_path for f in written])
        raise
    report.superseded = moved.superseded_count
    report.moved -= moved.superseded_count
    report.seconds = time.monotonic() - started
    return report


def _keyed(results: list[PartResult]) -> KeyedRows:
    """The replay's target files with their rows' keys, and the keys deleted, in the order of the files."""
    return KeyedRows([f for r in results for f in r.target_files],
                     Keys.concat([r.rows for r in results if r.rows is not None]),
                     Keys.concat([r.deleted for r in results if r.deleted is not None]))


def _decode(settings: Settings, spark, schema: StreamSchema, stream: StreamDef, target, dead_letter,
            chosen: Selection, dry_run: bool) -> tuple[object, list[PartResult]]:
    """Every selected dead letter decoded (and, unless a dry run, written); a schema change that
    schema evolution asks for is committed first, as a batch commits it."""
    if stream.upserts:  # a key's messages in one task, as a batch reads all of a partition in one
        tasks = list(chosen.by_partition().values())
    else:
        tasks = split(chosen.positions, parallelism(spark))
    results: list[PartResult] = []
    for _ in range(MAX_EVOLUTIONS + 1):
        spec = ReplaySpec(stream.name, schema.mapping(target), TableTarget.of(target), TableTarget.of(dead_letter),
                          settings.engine.max_message_bytes, format_of(stream), stream.evolves,
                          Keyed(stream.key, tombstones_delete=not stream.cdc) if stream.upserts else None,
                          write=not dry_run)
        done = run_replay(spark, spec, tasks)
        failed = next((r for r in done if isinstance(r, FloeError)), None)
        ok = [r for r in done if isinstance(r, PartResult)]
        if failed is not None:
            delete_files(target, [f.file_path for r in results + ok for f in r.target_files + r.dead_letter_files])
            raise failed
        results += [r for r in ok if not r.evolution]
        again = [r for r in ok if r.evolution]
        if not again:
            if any(r.truncates for r in results):
                delete_files(target, [f.file_path for r in results for f in r.target_files + r.dead_letter_files])
                raise SchemaError(f"stream {stream.name}: a selected dead letter is a truncate event, which replay "
                                  "does not apply; leave it out with --where (or purge it)")
            return target, results
        if dry_run:  # nothing may change: those messages count as moving, once the table would have changed
            results += [PartResult(r.parts, moved=sum(len(p) for p in r.parts.values()),
                                   reasons=Counter()) for r in again]
            return target, results
        target = schema.evolve(target, _merged(again))
        tasks = [r.parts for r in again]
    raise SchemaError(f"stream {stream.name}: the dead letters still ask for schema changes after "
                      f"{MAX_EVOLUTIONS} of them")


def _merged(results: list[PartResult]):
    out = results[0].evolution
    for r in results[1:]:
        out = out.merged(r.evolution)
    return out
