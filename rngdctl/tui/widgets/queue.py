"""The queue: position, run, estimated start and end, config and age, in launch order;
under the table, what the selected run's estimate rests on (or why it has none)."""

from __future__ import annotations

import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from rngdctl.tui.data import QueueRow, ago, status_text
from rngdctl.tui.widgets._table import selected_key, sync_rows
from rngdctl.tui.widgets._update import set_if_changed, update_if_changed

COLUMNS = ("pos", "run", "state", "start", "end", "cards", "resident", "steps", "model", "age")
#: Rows the table holds at most: the head of the queue, in launch order (of the runs the
#: filter matches, with one). Formatting and diffing every row of a sweep of 10,000 queued
#: runs took 170 ms a frame (issue 33); the filter (/) finds a run further back.
SHOWN = 200


def row_matches(row: QueueRow, needle: str) -> bool:
    hay = f"#{row.run_id} {row.name or ''} {row.model or ''} {'held' if row.held else 'queued'}"
    return needle.lower() in hay.lower()


def estimate_time(t: float | None, now: float) -> str:
    """'~14:02' today, '~12-03 14:02' on another day; an en dash for no estimate."""
    if t is None:
        return "–"
    same_day = time.localtime(t)[:3] == time.localtime(now)[:3]
    return "~" + time.strftime("%H:%M" if same_day else "%m-%d %H:%M", time.localtime(t))


def basis_text(row: QueueRow | None, now: float) -> Text:
    """One line for the selected run: its estimate and what it rests on, or why it has none."""
    if row is None:
        return Text("")
    label = f"#{row.run_id}" + (f" {row.name}" if row.name else "")
    if row.start is None:
        return Text.assemble((f"{label}: ", "bold"), (row.basis, "dim"))
    when = f"{label}: start {estimate_time(row.start, now)}, end {estimate_time(row.end, now)}"
    return Text.assemble((when, "bold"), (f"; rests on: {row.basis}", "dim"))


class QueuePanel(Vertical):
    """Queued runs; the cursor picks the run that cancel, hold and move act on."""

    _rows: dict[int, QueueRow] = {}  # noqa: RUF012 - replaced on each show, never changed
    _now: float = 0.0

    def compose(self) -> ComposeResult:
        table = DataTable(id="queue-table", cursor_type="row", zebra_stripes=False)
        table.add_columns(*COLUMNS)
        yield table
        yield Static(id="queue-basis")

    def show(self, rows: tuple[QueueRow, ...], filter_text: str = "",
             now: float | None = None) -> None:
        table = self.query_one(DataTable)
        self._now = time.time() if now is None else now
        chosen = [r for r in rows if not filter_text or row_matches(r, filter_text)]
        self._rows = {r.run_id: r for r in chosen[:SHOWN]}
        sync_rows(table, [
            (str(r.run_id), (
                str(r.position),
                f"#{r.run_id}" + (f" {r.name}" if r.name else ""),
                Text(status_text("queued", r.held), style="yellow" if r.held else ""),
                estimate_time(r.start, self._now), estimate_time(r.end, self._now),
                _opt(r.cards), _opt(r.resident),
                _opt(r.steps) + (" +base" if r.baseline else ""),
                r.model or "–", ago(max(0.0, self._now - r.created)),
            ))
            for r in chosen[:SHOWN]
        ])
        if not chosen:
            set_if_changed(self, "border_subtitle",
                           "empty" if not rows else "no run matches the filter")
        else:
            unestimated = sum(1 for r in chosen if r.start is None)
            set_if_changed(self, "border_subtitle", f"{len(chosen):,} queued" + (
                f", the first {SHOWN} shown" if len(chosen) > SHOWN else "") + (
                f", {unestimated:,} without estimate" if unestimated else ""))
        self._show_basis()

    @on(DataTable.RowHighlighted, "#queue-table")
    def _show_basis(self) -> None:
        run_id = self.selected_run
        update_if_changed(self.query_one("#queue-basis", Static),
                          basis_text(self._rows.get(run_id), self._now))

    @property
    def selected_run(self) -> int | None:
        key = selected_key(self.query_one(DataTable))
        return None if key is None else int(key)


def _opt(value) -> str:
    return "–" if value is None else str(value)
