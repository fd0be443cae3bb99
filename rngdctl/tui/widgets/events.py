"""The daemon's latest own events: start and stop, tick failures, API outages, unknown Jobs."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from rngdctl.tui.data import EventRow
from rngdctl.tui.widgets._update import set_if_changed, update_if_changed


def event_text(row: EventRow, width: int = 100) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(row.time))
    return f"{stamp} {row.kind}: {row.message}"[:width]


class EventsPanel(Vertical):
    """The newest daemon-level events, newest last (`rngdctl events` has them all)."""

    def compose(self) -> ComposeResult:
        yield Static("", id="events-text")

    def show(self, rows: tuple[EventRow, ...]) -> None:
        text = "\n".join(event_text(r) for r in rows) or "no daemon event stored yet"
        update_if_changed(self.query_one("#events-text", Static), text)
        set_if_changed(self, "border_subtitle", "rngdctl events for all")
