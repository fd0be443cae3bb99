"""History: finished runs with their step counts, speed and the model's error; `m` marks
two of them and `o` overlays their loss curves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from rngdctl.tui.data import HistoryRow, ago, num, percent, status_text
from rngdctl.tui.widgets._table import selected_key, sync_rows

COLUMNS = ("run", "status", "steps", "median", "tok/s", "model", "vs", "error", "ended")
STYLES = {"done": "green", "failed": "red", "oom": "red", "timeout": "red",
          "cancelled": "yellow"}
#: Before a marked run's id in the run column.
MARK = "◆ "


def vs_cell(row: HistoryRow) -> str:
    """The step the error is against, and which figure it is: "0.032 s paired estimate"."""
    if row.measured_name is None:
        return "–"
    return f"{num(row.measured_s, '.3f', ' s')} {row.measured_name}"


def row_matches(row: HistoryRow, needle: str) -> bool:
    hay = f"#{row.run_id} {row.name or ''} {row.status} {row.model or ''}"
    return needle.lower() in hay.lower()


class HistoryPanel(Vertical):
    """Past runs, newest first; Enter opens one, `m` marks it, `o` overlays the two marked."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("m", "mark", "Mark"),
                                         Binding("o", "overlay", "Overlay")]

    @dataclass
    class Opened(Message):
        """The user asked for a run's detail."""

        run_id: int

    @dataclass
    class OverlayAsked(Message):
        """The user asked for the loss curves of two marked runs on one plot."""

        run_ids: tuple[int, int]

    #: The marked runs, oldest mark first (two at most); replaced, never changed in place.
    marked: tuple[int, ...] = ()
    _shown: tuple = ((), 0.0, "")

    def compose(self) -> ComposeResult:
        table = DataTable(id="history-table", cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def show(self, rows: tuple[HistoryRow, ...], now: float, filter_text: str = "") -> None:
        self._shown = (rows, now, filter_text)
        chosen = [r for r in rows if not filter_text or row_matches(r, filter_text)]
        sync_rows(self.query_one(DataTable), [
            (str(r.run_id), (
                (MARK if r.run_id in self.marked else "") + f"#{r.run_id}"
                + (f" {r.name}" if r.name else ""),
                Text(status_text(r.status), style=STYLES.get(r.status, "")),
                f"{r.steps_done}/{num(r.steps_total, 'd')}",
                num(r.median_s, ".3f", " s"),
                num(r.tok_s, ",.0f"),
                num(r.model_s, ".3f", " s"),
                vs_cell(r),
                percent(r.error),
                "–" if r.ended is None else f"{ago(now - r.ended)} ago",
            ))
            for r in chosen
        ])

    @property
    def selected_run(self) -> int | None:
        key = selected_key(self.query_one(DataTable))
        return None if key is None else int(key)

    def action_mark(self) -> None:
        """Mark the run under the cursor, or unmark it; a third mark replaces the oldest."""
        run_id = self.selected_run
        if run_id is None:
            return
        if run_id in self.marked:
            self.marked = tuple(r for r in self.marked if r != run_id)
        else:
            self.marked = (*self.marked, run_id)[-2:]
        self.show(*self._shown)
        self.border_subtitle = (f"marked {', '.join(f'#{r}' for r in self.marked)}"
                                + (": o overlays their losses" if len(self.marked) == 2
                                   else ": mark one more with m") if self.marked else "")

    def action_overlay(self) -> None:
        if len(self.marked) < 2:
            self.notify(f"mark two runs with m first ({len(self.marked)} marked)",
                        severity="warning")
            return
        self.post_message(self.OverlayAsked((self.marked[0], self.marked[1])))

    @on(DataTable.RowSelected, "#history-table")
    def open_run(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Opened(int(event.row_key.value)))
