"""Every `floe` command and SQL query Floe proposes to a user, in one place: the hints of alerts, errors
and events, the CLI's and the UI's messages. tests/test_hints.py runs each as printed against a real
stream, and checks that no other module spells one, so a renamed column or option cannot leave a
hint behind that fails.

`{stream}`, `{stage}`, `{table}`, `{alert}`, `{column}`... are filled in where the hint is shown. A word in
capitals (NAME, RULE, URL, TABLE, QUERY) is for the user to fill in: the command's syntax, shown where
no name is at hand.
"""

from __future__ import annotations

# ---- commands ----------------------------------------------------------------------------------
START_ENGINE = "floe run"
LIST_STREAMS = "floe stream list"
LIST_STAGES = "floe stage list"
LIST_ALERTS = "floe alert list"
STATUS = "floe status"
SHOW_STREAM = "floe stream show {stream}"
SHOW_STAGE = "floe stage show {stage}"
TABLE_RUNS = "floe table runs {table}"
TABLE_POLICY = "floe table policy TABLE"
HELP = "{command} --help"  # after a usage error, `command` as the user typed it (`floe stream create`)
CREATE_STREAM_HELP = "floe stream create --help"
CREATE_STAGE_HELP = "floe stage create --help"
UPDATE_STAGE = 'floe stage update {stage} --sql "QUERY"'
ADD_ALERT = "floe alert add NAME --rule RULE --notify URL"
TEST_ALERT = "floe alert test {alert}"
EVOLVE_STREAM = "floe stream update {stream} --schema-evolution auto"
DROP_COLUMN = "floe table alter {table} drop-column {column}"
ADD_STRING_COLUMN = "floe table alter {table} add-column {column} string"
REPLAY = "floe dlq replay {stream}"
AUDIT = "floe audit {stream}"

# ---- queries (DuckDB, through `floe query` or the UI's Query section) ------------------------------
LIST_TABLES = 'floe query "show tables"'
DEAD_LETTER_REASONS = ('floe query "select error_stage, error_message, count(*) as n from {dead_letters} '
                       'group by all order by n desc"')
DEMO_QUERY = 'floe query "select status, count(*) as orders from ingest.pizza_orders group by 1"'
TABLE_SAMPLE = "select * from {table} limit 100"
TABLE_SAMPLE_SYNTAX = "select * from NAMESPACE.TABLE limit 100"


def replay(stream: str, topic: str = "") -> str:
    """The replay of a stream's dead letters; of a pattern stream's one topic's, `topic`'s (a Kafka topic's name
    needs no quoting: letters, digits, `.`, `_` and `-`)."""
    return REPLAY.format(stream=stream) + (f" --topic {topic}" if topic else "")


def routed_dead_letters(table: str) -> str:
    """How a routed stream's dead letters are read, where a command works on single-table streams only."""
    return f'its dead letters: `floe query "{TABLE_SAMPLE.format(table=table)}"`'


# ---- a stage's query (Spark SQL over `source`), shown in the empty stage editor ----------------------
STAGE_EXAMPLE = ("-- for example, orders per hour:\nselect date_trunc('hour', ordered_at) as hour, count(*) as orders\n"
                 "from source\ngroup by 1")


def add_column(table: str, column: str, source: str | None) -> str:
    """The command that adds `column` as a string column, filled from `source` when it is not the field
    of the column's name."""
    command = ADD_STRING_COLUMN.format(table=table, column=column)
    return command if not source or source == column else f"{command} --source {source}"
