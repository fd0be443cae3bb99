"""A run's detail: the same summary and plots as the current-run panel, and its note."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Markdown, Static

from rngdctl.tui.data import RunView
from rngdctl.tui.widgets.current_run import phases_renderable, summary_text
from rngdctl.tui.widgets.run_plots import RunPlots


class RunDetailScreen(Screen[None]):
    """Opened with Enter on a history row; Escape goes back."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, run_id: int):
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with Vertical(id="detail-top", classes="panel") as top:
            top.border_title = f"run #{self.run_id}"
            yield Static("loading…", id="detail-summary")
            yield RunPlots(id="detail-plots")
        with VerticalScroll(id="detail-note", classes="panel") as note:
            note.border_title = "note preview (e exports it)"
            yield Static(id="detail-phases")
            yield Markdown("", id="detail-markdown")
        yield Footer()

    def show(self, view: RunView, note: str, now: float) -> None:
        self.query_one("#detail-summary", Static).update(summary_text(view, now))
        self.query_one(RunPlots).show(view)
        self.query_one("#detail-phases", Static).update(phases_renderable(view))
        self.query_one("#detail-markdown", Markdown).update(note)
