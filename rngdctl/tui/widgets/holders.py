"""Device holders: processes with an RNGD device file open, from the newest host sample."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from rngdctl.tui.data import HolderRow, ago
from rngdctl.tui.widgets._table import sync_rows
from rngdctl.tui.widgets._update import set_if_changed

COLUMNS = ("pid", "user", "age", "card", "pod", "run", "mark", "command")


def row_matches(row: HolderRow, needle: str) -> bool:
    hay = (f"{row.pid} {row.user} {row.cmdline} {' '.join(row.files)} {row.pod or ''} "
           f"{row.job or ''} {row.mark}")
    return needle.lower() in hay.lower()


def cards_text(row: HolderRow) -> str:
    if row.cards:
        return ",".join(row.cards)
    return row.files[0] if row.files else "–"


def _cells(row: HolderRow) -> tuple[str, ...]:
    return ("–" if row.pid is None else str(row.pid), row.user, ago(row.age), cards_text(row),
            row.pod or "–", "–" if row.run is None else f"#{row.run}", row.mark or "–",
            row.cmdline[:80])


class HoldersPanel(Vertical):
    """Who holds the devices now: pid, user, age, card, pod, run, orphan/phantom, command."""

    def compose(self) -> ComposeResult:
        table = DataTable(id="holders-table", cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def show(self, rows: tuple[HolderRow, ...], sampled_at: float | None, now: float,
             filter_text: str = "") -> None:
        chosen = [r for r in rows if not filter_text or row_matches(r, filter_text)]
        sync_rows(self.query_one(DataTable), [
            (f"{r.pid}" if r.pid is not None else f"phantom {r.pod}", _cells(r))
            for r in chosen
        ])
        if sampled_at is None:
            set_if_changed(self, "border_subtitle", "no host sample yet")
        else:
            held = _counts(rows)
            set_if_changed(self, "border_subtitle",
                           f"{held} · sampled {ago(now - sampled_at)} ago")


def _counts(rows: tuple[HolderRow, ...]) -> str:
    if not rows:
        return "none"
    n = sum(1 for r in rows if r.pid is not None)
    text = f"{n} holder{'s' if n != 1 else ''}"
    for mark in ("orphan", "phantom"):
        k = sum(1 for r in rows if r.mark == mark)
        if k:
            text += f", {k} {mark}{'s' if k != 1 else ''}"
    return text
