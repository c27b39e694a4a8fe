"""A stage's definition: Spark SQL over the new rows of one table, into another table."""

from __future__ import annotations

from dataclasses import dataclass

APPEND, GROUP = "append", "group"  # its kinds: rows appended, or groups kept equal to the whole query
KINDS = (APPEND, GROUP)
DOES = {APPEND: "appends the rows its query gives for each run's new rows",
        GROUP: "keeps its table equal to the query over the whole source, merging each run's new rows"}
SOURCE = "source"  # how a stage's SQL names the new rows of its source table


@dataclass(frozen=True)
class StageDef:
    name: str
    id: str
    source: str  # NAMESPACE.TABLE whose appended rows it reads
    sql: str
    table: str  # NAMESPACE.TABLE it writes
    kind: str  # APPEND or GROUP
    paused: bool
    created_at: str
    updated_at: str = ""
