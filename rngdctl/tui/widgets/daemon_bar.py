"""The top line: is the daemon alive, since when, where, and is the view paused."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rngdctl.tui.data import DAEMON_GLYPHS, DaemonView, ago, clock_time


def daemon_text(view: DaemonView, *, paused: bool = False, read_only: bool = False,
                filter_text: str = "", error: str | None = None) -> Text:
    glyph = DAEMON_GLYPHS.get(view.state, "?")
    if view.state == "alive":
        text = Text.assemble((f"{glyph} daemon alive", "bold green"),
                             f" · heartbeat {ago(view.heartbeat_age)} ago")
    elif view.state == "stale":
        text = Text.assemble((f"{glyph} daemon not answering", "bold yellow"),
                             f" · last heartbeat {ago(view.heartbeat_age)} ago")
    elif view.state == "stopped":
        reason = f" ({view.stop_reason})" if view.stop_reason else ""
        text = Text.assemble((f"{glyph} no daemon running", "bold red"),
                             f" · stopped {clock_time(view.since)}{reason}")
    else:
        text = Text.assemble((f"{glyph} no daemon running", "bold red"),
                             " · none has run in this home")
    if view.pid is not None and view.state in ("alive", "stale"):
        text.append(f" · pid {view.pid}")
    if view.launcher:
        text.append(f" · launcher {view.launcher}")
    if view.node:
        text.append(f" · node {view.node}")
    if view.home:
        text.append(f" · home {view.home}")
    if filter_text:
        text.append(f"  / {filter_text}", "bold")
    if read_only:
        text.append("  read-only", "bold")
    if paused:
        text.append("  ⏸ paused", "bold reverse")
    if error:
        text.append(f"  ✗ {error}", "bold red")
    return text


class DaemonBar(Static):
    """One line: the daemon's state, its launcher, node and home."""

    def show(self, view: DaemonView, **flags) -> None:
        self.update(daemon_text(view, **flags))
