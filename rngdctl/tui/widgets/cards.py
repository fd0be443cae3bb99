"""The cards: each RNGD card's newest furiosa-smi reading, with bars of its last minutes
(temperature, power, utilization), its memory and who holds it. Hidden without readings."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rngdctl import card_units as units
from rngdctl.tui.data import CardRow, ago
from rngdctl.tui.widgets._update import set_if_changed, update_if_changed

COLUMNS = ("card", "temp", "power", "util", "memory", "held")
GIB = float(1 << 30)
BARS = "▁▂▃▄▅▆▇█"
#: Bars a cell draws: the last minutes in this many buckets (each its highest reading).
BAR_WIDTH = 4
#: The bars' fixed scales, so that two cards' bars compare: °C, and utilization 0-1
#: (power's is each card's limit).
TEMP_SCALE = (20.0, 100.0)


def bars(values: tuple[float, ...], low: float, high: float, width: int = BAR_WIDTH) -> str:
    """``values`` (oldest first) as ``width`` bars, each its bucket's highest, on low-high."""
    if not values:
        return " " * width
    n = len(values)
    buckets = ([max(values[i * n // width:(i + 1) * n // width]) for i in range(width)]
               if n >= width else list(values))
    span = (high - low) or 1.0
    cells = "".join(BARS[min(len(BARS) - 1, max(0, int((v - low) / span * len(BARS))))]
                    for v in buckets)
    return cells.rjust(width)


def _name(row: CardRow, nodes: int) -> Text:
    name = f"{row.node}/{row.card}" if nodes > 1 and row.node else row.card
    throttled = [t for t in row.throttle if t != "Idle"]
    if row.alive is False:
        return Text(f"{name} ✗", style="bold red")
    if throttled:
        return Text(f"{name} ⚠", style="bold yellow")
    return Text(name)


def _cells(row: CardRow, nodes: int) -> tuple:
    limit = row.power_limit_w or (max(row.powers) if row.powers else 1.0)
    who = f"#{row.run}" if row.run is not None else (row.holder or "–")
    return (_name(row, nodes),
            f"{bars(row.temps, *TEMP_SCALE)} {units.temp(row.temp_c)}",
            f"{bars(row.powers, 0.0, limit)} {units.watts(row.power_w)}",
            f"{bars(row.utils, 0.0, 1.0)} {units.util(row.util)}",
            _memory(row), who)


def _memory(row: CardRow) -> str:
    """In use of the total, short: ``6.0/47 GiB``."""
    if row.memory_used is None:
        return "–"
    total = f"/{row.memory_total / GIB:.0f}" if row.memory_total else ""
    return f"{row.memory_used / GIB:.1f}{total} GiB"


class CardsPanel(Static, can_focus=True):
    """One row a card: name (✗ not alive, ⚠ throttling), temperature, power and utilization
    with bars of the last minutes, memory in use, and the run or process holding it.

    Plain text, not a DataTable: nothing is selected here, and a new reading changes
    every row, which a DataTable renders cell by cell (issue 27's frame-time figure)."""

    def show(self, rows: tuple[CardRow, ...], now: float) -> None:
        self.display = bool(rows)
        if not rows:
            return
        nodes = len({r.node for r in rows})
        # Each row's cells made once, and the table only when they changed: a new
        # reading comes every 10 s, a refresh more often.
        cells = tuple(_cells(r, nodes) for r in rows)
        update_if_changed(self, lambda: table_text(list(cells)), key=cells)
        throttling = sum(1 for r in rows if any(t != "Idle" for t in r.throttle))
        dead = sum(1 for r in rows if r.alive is False)
        text = f"{len(rows)} card{'s' if len(rows) != 1 else ''}"
        if dead:
            text += f", {dead} not alive"
        if throttling:
            text += f", {throttling} throttling"
        subtitle = f"{text} · read {ago(min(r.age for r in rows))} ago"
        set_if_changed(self, "border_subtitle", subtitle)


def table_text(rows: list[tuple]) -> Text:
    """The header and one line a card, columns padded to their widest cell."""
    cells = [tuple(Text(c) if isinstance(c, str) else c for c in row)
             for row in [COLUMNS, *rows]]
    widths = [max(row[i].cell_len for row in cells) for i in range(len(COLUMNS))]
    text = Text(no_wrap=True, overflow="ellipsis")
    for n, row in enumerate(cells):
        line = Text("  ").join(cell + " " * (w - cell.cell_len) for cell, w in zip(row, widths))
        if n == 0:
            line.stylize("bold")
        text.append_text(line)
        if n < len(cells) - 1:
            text.append("\n")
    return text
