"""History: finished runs with their step counts, speed and the model's error."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from rngdctl.tui.data import HistoryRow, ago, num, percent, status_text
from rngdctl.tui.widgets._table import selected_key, sync_rows

COLUMNS = ("run", "status", "steps", "median", "tok/s", "model", "error", "ended")
STYLES = {"done": "green", "failed": "red", "oom": "red", "timeout": "red",
          "cancelled": "yellow"}


def row_matches(row: HistoryRow, needle: str) -> bool:
    hay = f"#{row.run_id} {row.name or ''} {row.status} {row.model or ''}"
    return needle.lower() in hay.lower()


class HistoryPanel(Vertical):
    """Past runs, newest first; Enter opens one."""

    @dataclass
    class Opened(Message):
        """The user asked for a run's detail."""

        run_id: int

    def compose(self) -> ComposeResult:
        table = DataTable(id="history-table", cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def show(self, rows: tuple[HistoryRow, ...], now: float, filter_text: str = "") -> None:
        chosen = [r for r in rows if not filter_text or row_matches(r, filter_text)]
        sync_rows(self.query_one(DataTable), [
            (str(r.run_id), (
                f"#{r.run_id}" + (f" {r.name}" if r.name else ""),
                Text(status_text(r.status), style=STYLES.get(r.status, "")),
                f"{r.steps_done}/{num(r.steps_total, 'd')}",
                num(r.median_s, ".3f", " s"),
                num(r.tok_s, ",.0f"),
                num(r.model_s, ".3f", " s"),
                percent(r.error),
                "–" if r.ended is None else f"{ago(now - r.ended)} ago",
            ))
            for r in chosen
        ])

    @property
    def selected_run(self) -> int | None:
        key = selected_key(self.query_one(DataTable))
        return None if key is None else int(key)

    @on(DataTable.RowSelected, "#history-table")
    def open_run(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Opened(int(event.row_key.value)))
