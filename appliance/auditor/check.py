"""`floe audit`: every offset from a stream's first to its committed position, exactly once.

The target table is read first and its newest commit gives the committed position; the
dead-letter table is read after it. The engine commits a batch's dead letters before its
rows, so whatever the dead-letter table holds for offsets under that position is already
there, and a live stream can be audited while it runs. Rows are read with DuckDB, two
columns at a time, and counted per offset (see tally.py). Nothing is written anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing

import duckdb
import numpy as np

from appliance.auditor.report import AuditReport, OffsetRange, PartitionAudit, Reason
from appliance.auditor.scans import scan_sql
from appliance.auditor.tally import PartitionTally, runs, tally
from appliance.auditor.upserts import audit_routed_upserts, audit_upserts
from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.errors import FloeError, QueryError
from appliance.kafka.client import KafkaClient, Watermarks
from appliance.model.columns import ERROR_MESSAGE, ERROR_STAGE, KAFKA_OFFSET, KAFKA_PARTITION
from appliance.model.mapping import Mapping
from appliance.model.patterns import member_stream
from appliance.model.stream import StreamDef
from appliance.query.connection import one_line, open_connection
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.evolution import mapping_of
from appliance.tables.snapshots import committed_offsets, purged, replay_of, retention_deleted

BATCH_ROWS = 1 << 20
REASONS = 10


def audit_stream(settings: Settings, name: str) -> AuditReport:
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        expired = state.expired_offsets(stream.id)
    return audit_of(settings, stream.single("this audit", f"`{hints.AUDIT.format(stream=name)}` audits each of its topics"), expired)


def audit_streams(settings: Settings, name: str) -> tuple[bool, list[AuditReport]]:
    """(a pattern stream?, its audits): a stream's one; a pattern stream's, one per topic it took (those gone
    from the cluster included)."""
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        if stream.is_routed:
            routes = {r.table: r.mapping for r in state.routes(name).values() if not r.refused}
            return False, [audit_of(settings, stream, state.expired_offsets(stream.id), routes)]
        if not stream.is_pattern:
            return False, [audit_of(settings, stream, state.expired_offsets(stream.id))]
        members = [(member_stream(stream, m), state.expired_offsets(m.id)) for m in state.members(name).values()]
    return True, [audit_of(settings, member, expired) for member, expired in members]


def audit_of(settings: Settings, stream: StreamDef, expired: list[tuple[int, int, int]],
             routes: dict[str, Mapping] | None = None) -> AuditReport:
    """`routes`: a routed stream's tables (with each route's recorded mapping), whose rows together with its dead
    letters hold every offset once (an upsert stream's: each key's newest message of each table's messages)."""
    started = time.monotonic()
    name = stream.name
    catalog = Catalog(settings)
    with warehouse_io(settings, f"read stream {name}'s tables"):
        targets, dead = _routed(catalog, stream, list(routes)) if routes is not None else _tables(catalog, stream)
    target = targets[0] if targets else dead
    report = AuditReport(stream.name, stream.topic, stream.table, stream.dead_letter_table)
    dead_committed = committed_offsets(dead, stream.id) or {}
    # A routed stream's position is its dead-letter table's, committed last in each batch (`ingest/routed.py`).
    committed = dead_committed if routes is not None else committed_offsets(target, stream.id) or {}
    marks = _watermarks(settings, stream, report)
    if stream.upserts and routes is not None:  # each route table key by key, over the messages routed to it
        tables = {t: (table, mapping_of(table, routes[t])) for t, table in zip(routes, targets)}
        report.keys = audit_routed_upserts(settings, stream, report, tables, dead, committed, marks)
    elif stream.upserts:  # a key's newest row, not every offset: checked against the topic, key by key
        report.keys = audit_upserts(settings, stream, report, target, dead, mapping_of(target, stream.mapping),
                                    committed, marks)
    if stream.upserts:
        report.dead_letters = _dead_reasons(settings, dead, stream)
        report.seconds = time.monotonic() - started
        return report
    first = {p: stream.start_positions.get(p, 0) for p in set(stream.start_positions) | set(committed) | set(marks)}

    def make(p: int) -> PartitionTally:
        start = first.get(p, 0)
        return PartitionTally(start, max(committed.get(p, start), start))

    rows = {p: make(p) for p in sorted(first)}
    dead_rows = {p: make(p) for p in sorted(first)}
    with closing(open_connection(settings)) as con:
        for table in targets:
            tally(_offsets(con, table, stream), rows, make)
        tally(_offsets(con, dead, stream), dead_rows, make)
        report.dead_letters = _reasons(con, dead, stream)
    report.retention_deleted = sum(map(retention_deleted, targets)) + retention_deleted(dead) + purged(dead)
    for p in sorted(set(rows) | set(dead_rows)):
        _partition(report, p, rows.setdefault(p, make(p)), dead_rows.setdefault(p, make(p)), marks.get(p),
                   dead_committed.get(p), [(lo, hi) for q, lo, hi in expired if q == p])
    _explain_by_retention(report)
    report.seconds = time.monotonic() - started
    return report


def _tables(catalog: Catalog, stream: StreamDef, attempts: int = 5):
    """The target, then the dead-letter table (see the module's docstring), as of the same replay: a
    replay moves dead letters to the target in one catalog transaction, so two loads on either side
    of it would find its messages in neither table. Loaded again, in the same order, until both
    name the same newest replay."""
    for _ in range(attempts):
        target = catalog.table(stream.table)
        dead = catalog.table(stream.dead_letter_table)
        if replay_of(target) == replay_of(dead):
            break
    return [target], dead


def _routed(catalog: Catalog, stream: StreamDef, routes: list[str], attempts: int = 5):
    """A routed stream's tables: the dead-letter table first (it commits last: whatever it says was committed is
    in the route tables read after it), then each route's; loaded again until the dead-letter table names the same
    newest replay after them as before (a replay moves dead letters to route tables in one catalog transaction:
    loads on either side of it would find its messages twice); an upsert stream's, until no batch committed between.
    """
    for _ in range(attempts):
        dead = catalog.table(stream.dead_letter_table)
        tables = [catalog.table(t) for t in routes]
        again = catalog.table(stream.dead_letter_table)
        # An upsert stream's tables are compared with each key's newest message up to the dead-letter table's
        # position: as of that same batch (every batch moves them in one catalog transaction), none ahead.
        if replay_of(again) == replay_of(dead) and not (stream.upserts and _snapshot(again) != _snapshot(dead)):
            break
    return tables, dead


def _snapshot(table) -> int | None:
    return table.metadata.current_snapshot_id


def _dead_reasons(settings: Settings, dead, stream: StreamDef) -> list[Reason]:
    with closing(open_connection(settings)) as con:
        return _reasons(con, dead, stream)


def _partition(report: AuditReport, p: int, rows: PartitionTally, dead: PartitionTally, marks: Watermarks | None,
               dead_committed: int | None, expired: list[tuple[int, int]]) -> None:
    rows.check()
    dead.check()
    both = rows.counts.astype(np.uint32) + dead.counts
    missing = 0
    for a, b in runs(both == 0):
        for lo, hi, gone in _split(rows.first + a, rows.first + b, expired):
            (report.expired if gone else report.gaps).append(OffsetRange(p, lo, hi - 1))
            missing += hi - lo
    duplicated = 0
    for a, b in runs(both > 1):
        report.duplicates.append(OffsetRange(p, rows.first + a, rows.first + b - 1, int(rows.counts[a:b].sum()),
                                             int(dead.counts[a:b].sum())))
        duplicated += b - a
    if rows.below_rows or dead.below_rows:
        report.problems.append(f"partition {p}: {rows.below_rows + dead.below_rows:,} rows hold offsets before the "
                               f"stream's first offset {rows.first:,} (e.g. {(rows.below + dead.below)[:5]})")
    if rows.beyond_rows:
        report.problems.append(f"partition {p}: {rows.beyond_rows:,} target rows hold offsets at or past the "
                               f"committed position {rows.end:,} (e.g. {rows.beyond[:5]})")
    _dead_letters_ahead(report, p, dead, dead_committed)
    if marks is not None:
        _against_topic(report, p, rows.end, marks)
    report.partitions.append(PartitionAudit(
        p, rows.first, rows.end, dead_committed, None if marks is None else marks.low,
        None if marks is None else marks.high, rows.rows_in_range + rows.beyond_rows + rows.below_rows,
        dead.rows_in_range + dead.beyond_rows + dead.below_rows, missing, duplicated))


def _dead_letters_ahead(report: AuditReport, p: int, dead: PartitionTally, dead_committed: int | None) -> None:
    """Dead letters past the target's position: a batch whose dead letters committed and whose rows
    did not (a crash between the two commits). The next batch skips them; past the dead-letter
    table's own position there should be none."""
    if not dead.beyond_rows:
        return
    stray = [o for o in dead.beyond if dead_committed is None or o >= dead_committed]
    if stray:
        report.problems.append(f"partition {p}: dead letters hold offsets past the dead-letter table's own committed "
                               f"position {dead_committed} (e.g. {stray[:5]})")
    else:
        report.notes.append(f"partition {p}: {dead.beyond_rows:,} dead letters were committed ahead of the target "
                            f"(up to offset {dead_committed - 1:,}); the next batch accounts for them")


def _against_topic(report: AuditReport, p: int, committed: int, marks: Watermarks) -> None:
    if committed > marks.high:
        report.problems.append(f"partition {p}: committed position {committed:,} is past the topic's end "
                               f"{marks.high:,} (was the topic recreated?)")
    elif committed < marks.low:
        report.notes.append(f"partition {p}: offsets {committed:,}..{marks.low - 1:,} left the topic before they "
                            "were read; the stream will report them as expired when it moves on")


def _explain_by_retention(report: AuditReport) -> None:
    """Retention deletes old rows; which offsets they held is not kept, only how many. Missing
    offsets are put down to it only while they are no more than it deleted."""
    lost = sum(r.count for r in report.gaps)
    if lost and lost <= report.retention_deleted:
        report.retention, report.gaps = report.gaps, []
    elif report.retention_deleted:
        report.notes.append(f"retention and purges deleted {report.retention_deleted:,} rows from these tables; "
                            f"{lost:,} offsets are missing, more than it can explain")


def _split(lo: int, hi: int, expired: list[tuple[int, int]]) -> Iterator[tuple[int, int, bool]]:
    """[lo, hi) cut into pieces inside (True) and outside (False) the expired ranges."""
    at = lo
    for first, low in sorted(expired):
        a, b = max(first, at), min(low, hi)
        if a >= b:
            continue
        if a > at:
            yield at, a, False
        yield a, b, True
        at = b
    if at < hi:
        yield at, hi, False


def _watermarks(settings: Settings, stream: StreamDef, report: AuditReport) -> dict[int, Watermarks]:
    try:
        with KafkaClient(stream.kafka, group=stream.group, timeout=settings.sample_timeout) as client:
            return client.watermarks(stream.topic)
    except FloeError as exc:  # the tables can still be audited; only the topic check is left out
        report.notes.append(f"the topic's watermarks were not checked: {exc}")
        return {}


def _offsets(con, table, stream: StreamDef) -> Iterator:
    sql = scan_sql(table, stream, f"{KAFKA_PARTITION.name}, {KAFKA_OFFSET.name}")
    if sql is None:
        return
    try:
        yield from con.execute(sql).to_arrow_reader(BATCH_ROWS)
    except duckdb.Error as exc:
        raise QueryError(f"reading {'.'.join(table.name())}: {one_line(exc)}") from None


# A number standing on its own (an offset, a count, a timestamp like 2024-01-05T10:00:00.123+00:00) becomes N,
# so alike messages group; digits that are part of a word stay ("UTF-8", "ISO-8859-1", "int32", "x86_64").
# DuckDB's regular expressions (RE2) have no look-behind: the character before the number is matched and kept.
NUMBER = r"(^|[^A-Za-z0-9_.-])-?[0-9]+([.:/T+-][0-9]+)*"


def masked_reason(column: str) -> str:
    """The SQL expression that groups dead letters' messages: their first 160 characters, numbers masked."""
    return f"regexp_replace(left({column}, 160), '{NUMBER}', '\\1N', 'g')"


def _reasons(con, table, stream: StreamDef) -> list[Reason]:
    """The dead letters grouped by stage and message (numbers masked, so alike messages group)."""
    reason = masked_reason(ERROR_MESSAGE.name)
    sql = scan_sql(table, stream, f"{ERROR_STAGE.name}, {reason} AS reason, count(*) AS n, "
                f"arg_min({KAFKA_PARTITION.name}, {KAFKA_OFFSET.name}), min({KAFKA_OFFSET.name})",
                f"GROUP BY ALL ORDER BY n DESC LIMIT {REASONS}")
    if sql is None:
        return []
    try:
        found = con.execute(sql).fetchall()
    except duckdb.Error as exc:
        raise QueryError(f"reading {'.'.join(table.name())}: {one_line(exc)}") from None
    return [Reason(stage or "", text or "", n, p, o) for stage, text, n, p, o in found]
