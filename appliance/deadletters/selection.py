"""Which dead letters a command acts on: a stream's dead-letter rows, narrowed by a `--where`.

DuckDB reads the dead-letter table's live data files directly (with each row's file and row
number: a replay or a purge deletes by position), less the rows position deletes already removed.
A `--where` is one SQL condition over the table's columns, checked by sqlglot before it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from appliance.config.settings import Settings
from appliance.core.errors import DeadLetterFilterInvalid
from appliance.mergeonread.deletes import live_deletes
from appliance.model.columns import INGESTED_AT, KAFKA_OFFSET, KAFKA_PARTITION
from appliance.query.connection import one_line, open_connection
from appliance.tables.datafiles import live_entries

FILE, POSITION = "__file", "__position"


@dataclass
class Selection:
    """Dead letters by place: data file -> positions (sorted), with each one's (partition, offset)."""

    positions: dict[str, np.ndarray] = field(default_factory=dict)
    messages: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    waiting: int = 0  # at or past the target's committed position: a batch in flight may still read them

    def __len__(self) -> int:
        return sum(len(p) for p in self.positions.values())

    def by_partition(self) -> dict[int, dict[str, np.ndarray]]:
        """The same dead letters grouped by Kafka partition (an upsert replay keeps a key in one task)."""
        out: dict[int, dict[str, list[int]]] = {}
        for path, positions in self.positions.items():
            for pos, (p, _) in zip(positions.tolist(), self.messages[path]):
                out.setdefault(p, {}).setdefault(path, []).append(pos)
        return {p: {path: np.array(v, dtype=np.int64) for path, v in files.items()} for p, files in out.items()}


def check_where(where: str | None) -> str | None:
    """`where` as one SQL condition, or DeadLetterFilterInvalid naming what is wrong."""
    if where is None or not where.strip():
        return None
    try:
        parsed = sqlglot.parse(f"select 1 from t where {where}", read="duckdb")
    except sqlglot.errors.SqlglotError as exc:
        raise DeadLetterFilterInvalid(f"--where does not parse: {one_line(exc)}") from None
    if len(parsed) != 1 or parsed[0] is None or parsed[0].args.get("where") is None:
        raise DeadLetterFilterInvalid("--where must be one SQL condition, e.g. \"error_stage = 'convert'\"")
    return where


class Reading:
    """One DuckDB connection for a command's reads of dead-letter tables (a pattern stream's may be hundreds): its
    extensions loaded once, not once a table; opened at the first read, closed with the block."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._con: duckdb.DuckDBPyConnection | None = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = open_connection(self.settings)
        return self._con

    def __enter__(self) -> Reading:
        return self

    def __exit__(self, *exc) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def dead_letter_rows(reading: Reading, table: Table, since: str, where: str | None, columns: str = "*") -> pa.Table:
    """The live rows of the dead-letter table ingested `since` (the stream's creation) that `where`
    selects, each with its data file (`__file`) and row position (`__position`)."""
    where = check_where(where)
    entries = live_entries(table)
    files = [e.data_file.file_path for e in entries if e.data_file.content == DataFileContent.DATA]
    con = reading.con
    if files:
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        source = f"read_parquet([{listed}], filename=true, file_row_number=true)"
    else:
        # No file yet: the same query over no rows of the table's columns, so that what it selects and
        # the filter are checked as they would be, and the result has the columns asked for.
        con.register("no_rows", schema_to_pyarrow(table.schema(), include_field_ids=False).empty_table())
        source = "(select ''::varchar as filename, 0::bigint as file_row_number, * from no_rows)"
    sql = (f"select filename as {FILE}, file_row_number as {POSITION}, {columns} from {source} "
           f"where {INGESTED_AT.name} >= ?::timestamptz"
           + (f" and ({where})" if where else "") + f" order by {FILE}, {POSITION}")
    try:
        rows = con.execute(sql, [since]).to_arrow_table()
    except duckdb.Error as exc:
        raise DeadLetterFilterInvalid(f"--where: {one_line(exc)}") from None
    finally:
        if not files:
            con.unregister("no_rows")
    return _live(rows, table, files, entries) if files else rows


def _live(rows: pa.Table, table: Table, files: list[str], entries) -> pa.Table:
    """`rows` less those position deletes removed; `__file` as the table names its files."""
    local = {_local(f): f for f in files}
    paths = [local.get(p, p) for p in rows.column(FILE).to_pylist()]
    rows = rows.set_column(rows.schema.get_field_index(FILE), FILE, pa.array(paths, pa.string()))
    deleted = live_deletes(table, entries)
    if not deleted.positions:
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    at = rows.column(POSITION).to_numpy()
    # The rows come ordered by file: each file's rows are one run, looked up once, not a scan per file.
    starts = [i for i in range(len(paths)) if i == 0 or paths[i] != paths[i - 1]] + [len(paths)]
    for a, b in zip(starts, starts[1:]):
        positions = deleted.of(paths[a])
        if positions is not None:
            keep[a:b] = ~np.isin(at[a:b], positions)
    return rows.filter(pa.array(keep))


def _local(path: str) -> str:
    """A file path as DuckDB's `filename` column gives it."""
    return path[len("file://"):] if path.startswith("file://") else path


def select(reading: Reading, table: Table, since: str, where: str | None,
           committed: dict[int, int] | None) -> Selection:
    """The dead letters to replay or purge; those at or past `committed` (the target's position, per
    partition; `{}` when the target holds none yet) are counted as waiting, as a batch in flight may
    still read them back; None: every one (a purge)."""
    rows = dead_letter_rows(reading, table, since, where, f"{KAFKA_PARTITION.name}, {KAFKA_OFFSET.name}")
    out = Selection()
    grouped: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}
    for path, pos, p, o in zip(*(rows.column(i).to_pylist() for i in range(4))):
        if committed is not None and o >= (committed or {}).get(p, 0):
            out.waiting += 1
            continue
        positions, messages = grouped.setdefault(path, ([], []))
        positions.append(pos)
        messages.append((p, o))
    for path, (positions, messages) in grouped.items():
        out.positions[path] = np.array(positions, dtype=np.int64)
        out.messages[path] = messages
    return out

