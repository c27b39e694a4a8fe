"""Tables updated in place: a cell changes only when its text did, so nothing flickers."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable


def _width(value: str) -> int:
    return cell_len(Text.from_markup(value).plain if "[" in value else value)


def put_row(table: DataTable, key: str, cells: dict[str, str]) -> None:
    """Add the row, or change only the cells whose text differs.

    A column widens for a wider cell, and never narrows while it has rows: a DataTable asked to fit a cell
    narrower than its column measures the whole column again, and a refresh that changes a cell of each of
    hundreds of rows (their ages) would measure every cell of the table once per changed cell."""
    if key in table.rows:
        for column, value in cells.items():
            if str(table.get_cell(key, column)) != value:
                wider = _width(value) > table.columns[column].content_width  # type: ignore[index]
                table.update_cell(key, column, value, update_width=wider)
    else:
        table.add_row(*cells.values(), key=key)


def put_rows(table: DataTable, rows: dict[str, dict[str, str]]) -> None:
    """The table holds exactly `rows`, in place: changed cells updated, gone rows removed."""
    for key, cells in rows.items():
        put_row(table, key, cells)
    for key in list(table.rows):
        if key.value not in rows:
            table.remove_row(key)


def put_ordered_rows(table: DataTable, rows: dict[str, dict[str, str]], key_column: str) -> None:
    """The table holds exactly `rows`, in their order, in place (`key_column`'s cell holds each row's key); the
    cursor stays on the row it was on, wherever that row moved. Only when many rows go at once (a filter
    typed) is the table emptied and filled again: removing rows one by one costs rows times rows removed."""
    chosen = selected_key(table)
    if sum(1 for key in table.rows if key.value not in rows) > 32:
        table.clear()
    put_rows(table, rows)
    if any(table.get_row_index(key) != i for i, key in enumerate(rows)):
        order = {key: i for i, key in enumerate(rows)}
        table.sort(key_column, key=lambda value: order[str(value)])
    if chosen in rows and table.get_row_index(chosen) != table.cursor_row:
        table.move_cursor(row=table.get_row_index(chosen), animate=False)


def trim_rows(table: DataTable, keep: int) -> None:
    """Positional rows "0".."n-1": drop those beyond `keep`."""
    for key in list(table.rows):
        if int(key.value) >= keep:
            table.remove_row(key)


def selected_key(table: DataTable) -> str | None:
    """The key of the row under the cursor, if there is one."""
    if not table.row_count:
        return None
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
