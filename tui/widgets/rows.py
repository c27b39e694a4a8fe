"""Tables updated in place: a cell changes only when its text did, so nothing flickers."""

from __future__ import annotations

from textual.widgets import DataTable


def put_row(table: DataTable, key: str, cells: dict[str, str]) -> None:
    """Add the row, or change only the cells whose text differs."""
    if key in table.rows:
        for column, value in cells.items():
            if str(table.get_cell(key, column)) != value:
                table.update_cell(key, column, value, update_width=True)
    else:
        table.add_row(*cells.values(), key=key)


def put_rows(table: DataTable, rows: dict[str, dict[str, str]]) -> None:
    """The table holds exactly `rows`, in place: changed cells updated, gone rows removed."""
    for key, cells in rows.items():
        put_row(table, key, cells)
    for key in list(table.rows):
        if key.value not in rows:
            table.remove_row(key)


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
