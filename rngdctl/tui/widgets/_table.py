"""Refreshing a DataTable in place: same rows, same cursor, no flicker."""

from __future__ import annotations

from textual.widgets import DataTable


def sync_rows(table: DataTable, rows: list[tuple[str, tuple]]) -> None:
    """Make ``table`` show ``rows`` (key, cells), keeping the cursor on the same key."""
    current = [str(k.value) for k in table.rows]
    wanted = [key for key, _ in rows]
    if current == wanted:
        for key, cells in rows:
            for column, value in zip(table.columns, cells):
                if table.get_cell(key, column) != value:
                    table.update_cell(key, column, value)
        return
    selected = selected_key(table)
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if selected in wanted:
        table.move_cursor(row=wanted.index(selected), animate=False)


def selected_key(table: DataTable) -> str | None:
    """The key of the row under the cursor, or None when the table is empty."""
    if not table.row_count:
        return None
    try:
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
    except Exception:  # noqa: BLE001 - a cursor past the end after rows went away
        return None
