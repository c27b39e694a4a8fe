"""Query results as text: a boxed table, CSV or JSON lines, and one cell as the CLI and UI show it."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # tables come in from DuckDB's answers; `floe stream list` prints records without Arrow
    import pyarrow as pa


def cell_text(value: Any) -> str:
    """One value as text, the way the CLI and the UI show it."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def format_table(table: pa.Table, max_width: int = 60) -> str:
    return format_rows(table.column_names, table.to_pylist(), max_width)


def format_rows(names: list[str], records: list[dict[str, Any]], max_width: int = 60) -> str:
    """Records as a boxed text table; without Arrow, whose `Table.from_pylist` imports pandas (0.15 s)."""
    rows = [[cell_text(v) for v in row.values()] for row in records]
    clipped = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in rows]
    widths = [max([len(n)] + [len(r[i]) for r in clipped]) for i, n in enumerate(names)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(n.ljust(w) for n, w in zip(names, widths)) + " |", line]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in clipped]
    out.append(line)
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def format_csv(table: pa.Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow(["" if v is None else cell_text(v) for v in row.values()])
    return buf.getvalue()


def format_json(table: pa.Table) -> str:
    def default(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", "backslashreplace")
        if isinstance(value, decimal.Decimal):
            # DuckDB sums integers into HUGEINT: those are integers; other decimals keep every
            # digit as text, where a JSON number would round them to a double.
            return int(value) if value == value.to_integral_value() and value.as_tuple().exponent >= 0 \
                else str(value)
        return str(value)

    return "\n".join(json.dumps(row, default=default) for row in table.to_pylist()) + ("\n" if table.num_rows else "")
