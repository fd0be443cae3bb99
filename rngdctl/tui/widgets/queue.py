"""The queue: position, run, config and age, in launch order."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from rngdctl.tui.data import QueueRow, ago, status_text
from rngdctl.tui.widgets._table import selected_key, sync_rows

COLUMNS = ("pos", "run", "state", "cards", "resident", "steps", "model", "age")


def row_matches(row: QueueRow, needle: str) -> bool:
    hay = f"#{row.run_id} {row.name or ''} {row.model or ''} {'held' if row.held else 'queued'}"
    return needle.lower() in hay.lower()


class QueuePanel(Vertical):
    """Queued runs; the cursor picks the run that cancel, hold and move act on."""

    def compose(self) -> ComposeResult:
        table = DataTable(id="queue-table", cursor_type="row", zebra_stripes=False)
        table.add_columns(*COLUMNS)
        yield table

    def show(self, rows: tuple[QueueRow, ...], filter_text: str = "") -> None:
        table = self.query_one(DataTable)
        chosen = [r for r in rows if not filter_text or row_matches(r, filter_text)]
        sync_rows(table, [
            (str(r.run_id), (
                str(r.position),
                f"#{r.run_id}" + (f" {r.name}" if r.name else ""),
                Text(status_text("queued", r.held), style="yellow" if r.held else ""),
                _opt(r.cards), _opt(r.resident),
                _opt(r.steps) + (" +base" if r.baseline else ""),
                r.model or "–", ago(r.age),
            ))
            for r in chosen
        ])
        if not chosen:
            self.border_subtitle = "empty" if not rows else "no run matches the filter"
        else:
            self.border_subtitle = f"{len(chosen)} queued"

    @property
    def selected_run(self) -> int | None:
        key = selected_key(self.query_one(DataTable))
        return None if key is None else int(key)


def _opt(value) -> str:
    return "–" if value is None else str(value)
