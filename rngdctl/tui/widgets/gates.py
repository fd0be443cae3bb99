"""Gates: each gate's reading, threshold and verdict for the head of the queue,
how long and by what it has been blocked, and the host load over the last hour."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from rngdctl.tui.data import VERDICT_GLYPHS, GatesView, ago, clock_time, num
from rngdctl.tui.widgets._update import update_if_changed
from rngdctl.tui.widgets.nodes import NodeVerdicts

VERDICT_STYLES = {"pass": "green", "fail": "bold red", "n/a": "dim"}


def gates_renderable(view: GatesView, now: float) -> Table | Text:
    if view.run_id is None:
        return Text("queue empty: no run waits on the gates", style="dim")
    if not view.rows:
        return Text(f"{view.run_label} waits: not checked yet (is the daemon running?)")
    table = Table(box=None, show_edge=False, pad_edge=False, expand=True, padding=(0, 1, 0, 0))
    table.add_column("gate", no_wrap=True)
    table.add_column("reading", justify="right", no_wrap=True)
    table.add_column("need", no_wrap=True)
    table.add_column("detail", overflow="ellipsis", no_wrap=True, ratio=1)
    for row in view.rows:
        style = VERDICT_STYLES.get(row.verdict, "")
        table.add_row(Text(f"{VERDICT_GLYPHS.get(row.verdict, '?')} {row.name}", style=style),
                      row.reading, row.threshold, Text(row.detail, style="dim"))
    return table


def blocked_text(view: GatesView, now: float) -> Text:
    if view.run_id is None or view.passed is None:
        return Text("")
    checked = f" (checked {ago(now - view.checked_at)} ago)" if view.checked_at else ""
    if view.as_of is not None and view.checked_at:
        # No daemon runs: nobody checks, so this verdict is history, not the present.
        checked = f" (as of {clock_time(view.checked_at)}: no daemon running)"
    if view.passed:
        return Text.assemble(("✓ ", "green"), f"{view.run_label}: all gates pass{checked}")
    return Text.assemble((f"✗ {view.run_label} blocked {ago(view.blocked_for)}", "bold red"),
                         f": {view.blocked_by or '–'}{checked}")


class GatesPanel(Vertical, can_focus=True):
    """The head of the queue against each gate, and a host-load sparkline."""

    def compose(self) -> ComposeResult:
        yield Static(id="gates-blocked")
        yield Static(id="gates-table")
        yield NodeVerdicts(id="gates-nodes")
        yield Static(id="load-label")
        yield Sparkline([], id="load-sparkline")

    def show(self, view: GatesView, now: float) -> None:
        update_if_changed(self.query_one("#gates-blocked", Static), blocked_text(view, now))
        update_if_changed(self.query_one("#gates-table", Static),
                          lambda: gates_renderable(view, now),
                          key=(view.run_id, view.rows))
        self.query_one("#gates-nodes", NodeVerdicts).show(view)
        series = view.load_series
        label = (f"host load 1 m: {num(view.load_now, '.2f')} now, "
                 f"{num(min(series) if series else None, '.2f')}–"
                 f"{num(max(series) if series else None, '.2f')} over the last hour "
                 f"({len(series)} samples)")
        update_if_changed(self.query_one("#load-label", Static), Text(label, style="dim"))
        sparkline = self.query_one("#load-sparkline", Sparkline)
        if sparkline.data != list(series):
            sparkline.data = list(series)
