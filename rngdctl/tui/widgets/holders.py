"""Device holders: processes with an RNGD device file open, from the newest host sample."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from rngdctl.tui.data import HolderRow, ago
from rngdctl.tui.widgets._table import sync_rows

COLUMNS = ("pid", "user", "age", "files", "command")


def row_matches(row: HolderRow, needle: str) -> bool:
    hay = f"{row.pid} {row.user} {row.cmdline} {' '.join(row.files)}"
    return needle.lower() in hay.lower()


def files_text(files: tuple[str, ...]) -> str:
    if not files:
        return "–"
    return files[0] + (f" +{len(files) - 1}" if len(files) > 1 else "")


class HoldersPanel(Vertical):
    """Who holds the devices now: pid, user, age, files, command line."""

    def compose(self) -> ComposeResult:
        table = DataTable(id="holders-table", cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def show(self, rows: tuple[HolderRow, ...], sampled_at: float | None, now: float,
             filter_text: str = "") -> None:
        chosen = [r for r in rows if not filter_text or row_matches(r, filter_text)]
        sync_rows(self.query_one(DataTable), [
            (f"{r.pid}", (str(r.pid), r.user, ago(r.age), files_text(r.files), r.cmdline[:80]))
            for r in chosen
        ])
        if sampled_at is None:
            self.border_subtitle = "no host sample yet"
        else:
            held = f"{len(rows)} holder{'s' if len(rows) != 1 else ''}" if rows else "none"
            self.border_subtitle = f"{held} · sampled {ago(now - sampled_at)} ago"
