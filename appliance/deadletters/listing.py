"""`floe dlq list` and `floe dlq purge`: a stream's dead letters shown, and the unwanted ones deleted.

A purge deletes by position (merge-on-read, nothing rewritten) and counts what it deleted in the
dead-letter table's properties, so `floe audit` tells those offsets from a loss; the operation
itself is in the audit trail (`control/dead_letters.py`). Like a replay, it leaves alone the dead
letters past the target's committed position, which a batch in flight may still read back.
"""

from __future__ import annotations

import codecs

import pyarrow as pa

from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.errors import DeadLetterFilterInvalid
from appliance.core.vocabulary import EventKind
from appliance.deadletters.moves import commit_purge
from appliance.deadletters.selection import check_where, dead_letter_rows, select
from appliance.model.columns import (
    ERROR_MESSAGE,
    ERROR_STAGE,
    INGESTED_AT,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    RAW_VALUE,
)
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.commits import commit_lock
from appliance.tables.snapshots import committed_offsets

LISTED = [KAFKA_PARTITION.name, KAFKA_OFFSET.name, KAFKA_TIMESTAMP.name, INGESTED_AT.name, ERROR_STAGE.name,
          ERROR_MESSAGE.name]


def list_dead_letters(settings: Settings, name: str, where: str | None = None, limit: int = 50,
                      preview: int = 80) -> pa.Table:
    """The stream's dead letters that `where` selects, oldest offset first, with a preview of each value."""
    with StateStore(settings.state_db) as state:
        stream = state.stream(name).single("listing dead letters", hints.pattern_dead_letters(name))
    with warehouse_io(settings, f"read {stream.dead_letter_table}"):
        table = Catalog(settings).table(stream.dead_letter_table)
        rows = dead_letter_rows(settings, table, stream.created_at, where,
                                ", ".join(LISTED) + f", {RAW_VALUE.name}[1:{int(preview)}] as value")
    rows = rows.sort_by([(KAFKA_PARTITION.name, "ascending"), (KAFKA_OFFSET.name, "ascending")]).slice(0, limit)
    values = [None if v is None else codecs.decode(bytes(v), "utf-8", "replace") for v in rows.column("value").to_pylist()]
    return rows.select(LISTED).append_column("value", pa.array(values, pa.string()))


def purge(settings: Settings, name: str, where: str) -> tuple[int, int]:
    """Delete the stream's dead letters that `where` selects; (deleted, left for later: past the
    target's committed position)."""
    if check_where(where) is None:
        raise DeadLetterFilterInvalid("purge needs --where: which dead letters nobody wants")
    with StateStore(settings.state_db) as state:
        stream = state.stream(name).single("purging dead letters", hints.pattern_dead_letters(name))
        catalog = Catalog(settings)
        with warehouse_io(settings, f"purge dead letters of {name}"):
            target = catalog.table(stream.table)
            with commit_lock(settings, stream.dead_letter_table):
                table = catalog.table(stream.dead_letter_table)
                chosen = select(settings, table, stream.created_at, where, committed_offsets(target, stream.id) or {})
                if len(chosen):
                    commit_purge(table, chosen.positions)
        if len(chosen):
            state.add_event(EventKind.DEAD_LETTERS_PURGED, f"purged {len(chosen):,} dead letters of "
                            f"{stream.dead_letter_table} where {where}", stream.name)
    return len(chosen), chosen.waiting
