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

from appliance.config.settings import Settings
from appliance.core.errors import FloeError, ReplayConflict, SchemaError
from appliance.core.failpoints import failpoint
from appliance.core.vocabulary import EventKind
from appliance.deadletters.moves import Move, check_together, commit_move
from appliance.deadletters.report import ReplayReport
from appliance.deadletters.selection import Reading, Selection, check_where, select
from appliance.deadletters.sources import DeadLetterSource, sources
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


def replay(settings: Settings, name: str, where: str | None = None, dry_run: bool = False,
           spark=None, topic: str | None = None) -> ReplayReport:
    """Replay the stream's dead letters that `where` selects (all of them without it); a pattern stream's, each
    topic's (`topic`'s alone) into its own table, as a single stream's: each topic's move is one commit."""
    check_where(where)
    with StateStore(settings.state_db) as state, Reading(settings) as reading:
        stream = state.stream(name)
        reports = []
        catalog = Catalog(settings)
        with warehouse_io(settings, f"replay dead letters of {name}"):
            for source in sources(state, stream, topic):
                report = _attempts(reading, state, catalog, source, where, dry_run, spark)
                if not dry_run and report.selected:
                    state.add_event(EventKind.DEAD_LETTERS_REPLAYED, report.lines()[0], stream.name,
                                    table=source.stream.table if source.topic else None)
                reports.append(report)
    return ReplayReport.of_tables(name, dry_run, reports) if stream.is_pattern else reports[0]


def _attempts(reading: Reading, state: StateStore, catalog: Catalog, source: DeadLetterSource,
              where: str | None, dry_run: bool, spark) -> ReplayReport:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            if source.routed:
                from appliance.deadletters.routed import RoutedReplay

                report = RoutedReplay(reading, state, catalog, source.stream).run(where, dry_run, spark)
            else:
                report = _replay(reading, state, catalog, source, where, dry_run, spark)
            break
        except ReplayConflict as exc:
            if attempt == ATTEMPTS:
                raise
            log.info("replay of %s: %s; reading the dead letters again", source.table, exc)
    if source.topic:
        report.table = source.stream.table
    return report


def _replay(reading: Reading, state: StateStore, catalog: Catalog, source: DeadLetterSource, where: str | None,
            dry_run: bool, spark) -> ReplayReport:
    started, settings = time.monotonic(), reading.settings
    stream = source.stream
    schema = StreamSchema(settings, state, stream, member=bool(source.topic))
    target = schema.prepared(catalog.table(stream.table))
    dead_letter = catalog.table(stream.dead_letter_table)
    if not dry_run:
        check_together(target)
    chosen = select(reading, dead_letter, stream.created_at, where, committed_offsets(target, stream.id) or {})
    report = ReplayReport(stream.name, dry_run, selected=len(chosen), waiting=chosen.waiting)
    if not len(chosen):
        return report
    if spark is None:
        from appliance.spark.session import running_session, spark_session

        spark = running_session() or spark_session(settings)
    target, results = _decode(settings, spark, schema, stream, target, dead_letter, chosen, dry_run)
    report.tally(results)
    if dry_run:
        return report
    written = [f for r in results for f in r.target_files + r.dead_letter_files]
    move = Move(taken=chosen.positions, taken_at=chosen.messages,
                target_files=[f for r in results for f in r.target_files],
                dead_letter_files=[f for r in results for f in r.dead_letter_files],
                keyed=_keyed(results) if stream.upserts else None,
                key_columns=tuple(stream.key) if stream.upserts else (), home=settings.home)
    failpoint("replay_before_commit", stream.table)
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
    schema evolution asks for is committed first, as a batch commits it. A dry run decodes those
    again against the table as that change would make it, committed nowhere, so that it counts what
    a replay would move."""
    if stream.upserts:  # a key's messages in one task, as a batch reads all of a partition in one
        tasks = list(chosen.by_partition().values())
    else:
        tasks = split(chosen.positions, parallelism(spark))
    results: list[PartResult] = []
    mapping = schema.mapping(target)
    for _ in range(MAX_EVOLUTIONS + 1):
        spec = ReplaySpec(stream.name, mapping, TableTarget.of(target), TableTarget.of(dead_letter),
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
        if dry_run:
            target, mapping = schema.staged(target, _merged(again))
        else:
            target = schema.evolve(target, _merged(again))
            mapping = schema.mapping(target)
        tasks = [r.parts for r in again]
    raise SchemaError(f"stream {stream.name}: the dead letters still ask for schema changes after "
                      f"{MAX_EVOLUTIONS} of them")


def _merged(results: list[PartResult]):
    out = results[0].evolution
    for r in results[1:]:
        out = out.merged(r.evolution)
    return out
