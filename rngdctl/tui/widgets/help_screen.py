"""The key map, k9s-style: what each key does here."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("?", "this help"),
    ("q", "quit"),
    ("Tab / Shift+Tab", "next / previous panel"),
    ("1-6", "current run, gates, queue, history, device holders, cards"),
    ("/", "filter the tables (Enter keeps it, Esc clears it)"),
    ("Space", "pause or resume the refresh"),
    ("l", "log tail of the selected run"),
    ("Enter", "open the selected run (history)"),
    ("m / o", "history: mark two runs / overlay their loss curves (s: smoothing)"),
]
ACTION_KEYS = [
    ("s", "submit a run"),
    ("c", "cancel the selected run (asks; No is the default)"),
    ("h", "hold or release the selected queued run"),
    ("K / J", "move the selected queued run up / down"),
    ("e", "export the selected run's note to experiments/"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q,question_mark", "app.pop_screen", "Close")]

    def __init__(self, *, read_only: bool):
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        table.add_column(style="bold")
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        if self.read_only:
            table.add_row("", "read-only: actions are hidden")
        else:
            for key, what in ACTION_KEYS:
                table.add_row(key, what)
        with Vertical(id="help-box", classes="dialog"):
            yield Static("rngdctl tui: keys", classes="dialog-title")
            yield Static(table, id="help-keys")
            yield Static("glyphs: ▶ running  ✓ done/pass  ✗ failed/fail  ⊘ cancelled  "
                         "◷ queued  ⏸ held  – n/a or missing", classes="dim")
