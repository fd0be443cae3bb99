"""The top line: is the daemon alive, since when, where, and is the view paused."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rngdctl.tui.data import DAEMON_GLYPHS, DaemonView, ago, clock_time
from rngdctl.tui.widgets._update import update_if_changed


def daemon_text(view: DaemonView, *, paused: bool = False, read_only: bool = False,
                filter_text: str = "", error: str | None = None,
                notice: str | None = None) -> Text:
    # Flags first, so that a narrow terminal cuts the home path, not them.
    text = Text()
    if notice:  # what to do next (the demo's run ended): first, where the eye starts
        text.append(f"✓ {notice}", "bold reverse")
        text.append("  ")
    if error:
        text.append(f"✗ {error}", "bold red")
        text.append("  ")
    if paused:
        text.append("⏸ paused", "bold reverse")
        text.append("  ")
    if read_only:
        text.append("read-only", "bold")
        text.append("  ")
    if filter_text:
        text.append(f"/ {filter_text}", "bold")
        text.append("  ")
    glyph = DAEMON_GLYPHS.get(view.state, "?")
    if view.state == "alive":
        text.append(f"{glyph} daemon alive", "bold green")
        text.append(f" · heartbeat {ago(view.heartbeat_age)} ago")
    elif view.state == "down":
        # Killed or hung: it could not say it stopped. What the panels show is as of then.
        text.append(f"{glyph} no daemon running", "bold red")
        text.append(f" · since {clock_time(view.since)} (last heartbeat "
                    f"{ago(view.heartbeat_age)} ago"
                    + (f", pid {view.pid} gone" if view.pid_gone and view.pid else "") + ")")
    elif view.state == "stopped":
        reason = f" ({view.stop_reason})" if view.stop_reason else ""
        text.append(f"{glyph} no daemon running", "bold red")
        text.append(f" · stopped {clock_time(view.since)}{reason}")
    else:
        text.append(f"{glyph} no daemon running", "bold red")
        text.append(" · none has run in this home")
    if view.pid is not None and view.state == "alive":
        text.append(f" · pid {view.pid}")
    if view.launcher:
        text.append(f" · launcher {view.launcher}")
    if view.node:
        text.append(f" · node {view.node}")
    if view.home:
        text.append(f" · home {view.home}")
    return text


class DaemonBar(Static):
    """One line: the daemon's state, its launcher, node and home."""

    def show(self, view: DaemonView, **flags) -> None:
        update_if_changed(self, daemon_text(view, **flags))
