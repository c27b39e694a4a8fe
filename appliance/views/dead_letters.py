"""A stream's newest dead letters, read from its dead-letter table through DuckDB."""

from __future__ import annotations

import codecs
import datetime as dt
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.query.connection import run_query
from appliance.state.store import StateStore


@dataclass
class DeadLetter:
    ingested_at: dt.datetime | None
    partition: int | None
    offset: int | None
    kafka_timestamp: dt.datetime | None
    error_stage: str
    error_message: str
    value_preview: str  # the raw value's first bytes as UTF-8, undecodable bytes replaced
    value_bytes: int | None  # the raw value's full size; None for a null value
    truncated: bool


def _preview(raw: bytes | None, total: int | None) -> tuple[str, bool]:
    if raw is None:
        return "", False
    truncated = total is not None and total > len(raw)
    # A cut in the middle of a character is not an error of the message: leave the tail out.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(raw), final=not truncated)
    return text, truncated


def dead_letters(settings: Settings, name: str, limit: int = 20, preview_bytes: int = 512) -> list[DeadLetter]:
    """The stream's most recent dead-letter rows, newest first, from its dead-letter table (a pattern stream's:
    from each of its topics')."""
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        # a routed stream's routes share its one dead-letter table
        tables = [stream.dead_letter_table] if stream.is_routed else \
            [s.dead_letter_table for s in state.table_writers() if s.name == name]
    if not tables:
        return []
    selects = [
        "select _ingested_at, _kafka_partition, _kafka_offset, _kafka_timestamp, error_stage, error_message,"
        f" raw_value[1:{int(preview_bytes)}] as raw_preview, octet_length(raw_value) as raw_bytes"
        f' from "{namespace}"."{short}"' for namespace, _, short in (t.partition(".") for t in tables)]
    sql = f"{' union all '.join(selects)} order by _ingested_at desc, _kafka_offset desc limit {int(limit)}"
    out = []
    for row in run_query(settings, sql, tables=tables).to_pylist():  # its own tables, of however many
        text, truncated = _preview(row["raw_preview"], row["raw_bytes"])
        out.append(DeadLetter(
            ingested_at=row["_ingested_at"],
            partition=row["_kafka_partition"],
            offset=row["_kafka_offset"],
            kafka_timestamp=row["_kafka_timestamp"],
            error_stage=row["error_stage"] or "",
            error_message=row["error_message"] or "",
            value_preview=text,
            value_bytes=row["raw_bytes"],
            truncated=truncated,
        ))
    return out
