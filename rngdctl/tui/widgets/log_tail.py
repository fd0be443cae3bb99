"""The run's log tail, read from its log file (the last 64 KiB at most)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Log, Static

TAIL_BYTES = 64 * 1024


def read_tail(path: str | Path | None, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last lines of a file, or one line saying why there are none. Never raises."""
    if not path:
        return ["– this run has no log file (yet)"]
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError as exc:
        return [f"– cannot read {path}: {exc.strerror}"]
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first one is cut
    return lines or ["– the log is empty"]


class LogScreen(ModalScreen[None]):
    """A scrolling view of a run's log; `r` reloads it."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q,l", "app.pop_screen", "Close"),
                Binding("r", "reload", "Reload")]

    def __init__(self, title: str, path: str | None):
        super().__init__()
        self.title_text = title
        self.path = path

    def compose(self) -> ComposeResult:
        yield Static(f"{self.title_text} · {self.path or '–'} · r reloads · Esc closes",
                     classes="dialog-title")
        yield Log(id="log-view", auto_scroll=True)

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        log = self.query_one(Log)
        log.clear()
        log.write_lines(read_tail(self.path))
