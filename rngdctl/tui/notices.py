"""What the monitor rings the terminal bell and shows a toast for.

The daemon stores a `notify` event at four moments of every run, whether or
not the run has a `--notify` command (docs/design.md, "Notifications"):
``data.on`` is ``start``, ``finish`` (done or cancelled), ``failure`` (failed,
oom, timeout) or ``gates_cleared`` (the gates passed after blocking the run for
more than ``[notify] blocked_minutes``), and the message is one line for
people. The TUI follows those events, so it tells what `--notify` tells,
including what happened between two refreshes. No Textual here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The event kind the daemon stores at each of the four moments.
NOTIFY = "notify"
#: ``data.on`` -> the toast's title.
TITLES = {"start": "run started", "finish": "run finished", "failure": "run failed",
          "gates_cleared": "gates cleared"}


@dataclass(frozen=True)
class Notice:
    """One toast: ``severity`` is Textual's (information, warning, error)."""

    title: str
    message: str
    severity: str = "information"


def notice_of(event: dict) -> Notice | None:
    """The toast for a `notify` event, or None for a moment the TUI does not know."""
    data = event.get("data") or {}
    on = data.get("on")
    if on not in TITLES:
        return None
    if on == "failure":
        severity = "error"
    elif data.get("status") == "cancelled":
        severity = "warning"
    else:
        severity = "information"
    message = (event.get("message") or "").splitlines()
    return Notice(TITLES[on], message[0] if message else f"run {event.get('run_id')}",
                  severity)
