"""Two runs' loss curves on one plot, optionally smoothed, with the rule shown on the plot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from rngdctl.tui.series import Series
from rngdctl.tui.smoothing import PRESETS, Smoothing, next_preset
from rngdctl.tui.widgets.series_plot import points_note

#: The two curves' colours, in the order the runs were marked.
COLORS = ("cyan", "orange")


class OverlayScreen(Screen[None]):
    """Opened with `o` on two marked history runs; `s` cycles the smoothing, Escape goes back."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q", "app.pop_screen", "Back"),
                                         Binding("s", "next_smoothing", "Smoothing")]

    @dataclass
    class SmoothingChanged(Message):
        """The user asked for the curves under another smoothing rule."""

        run_ids: tuple[int, int]
        smoothing: Smoothing

    def __init__(self, run_ids: tuple[int, int]):
        super().__init__()
        self.run_ids = run_ids
        self.smoothing = PRESETS[0]

    def compose(self) -> ComposeResult:
        with Vertical(id="overlay-box", classes="panel") as box:
            box.border_title = f"loss of #{self.run_ids[0]} and #{self.run_ids[1]}"
            yield PlotextPlot(id="overlay-plot")
            yield Static("reading the losses…", id="overlay-rule")
        yield Footer()

    def action_next_smoothing(self) -> None:
        self.smoothing = next_preset(self.smoothing)
        self.query_one("#overlay-rule", Static).update(f"smoothing: {self.smoothing.rule}…")
        self.post_message(self.SmoothingChanged(self.run_ids, self.smoothing))

    def show(self, smoothing: Smoothing, curves: tuple[tuple[str, Series], ...]) -> None:
        """Draw ``curves`` (label, series) smoothed by ``smoothing``; an older answer is dropped."""
        if smoothing != self.smoothing:
            return  # the user has asked for another rule since: its answer follows
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        # The rule is on the plot itself, so a screenshot of it says how it was smoothed.
        plt.title(f"loss · {smoothing.label}")
        plt.xlabel("step")
        for (label, series), color in zip(curves, COLORS):
            if series.x:
                plt.plot(list(series.x), list(series.y), marker="hd", color=color,
                         label=f"{label} ({points_note(series)})")
        plot.refresh()
        empty = [label for label, series in curves if not series.x]
        self.query_one("#overlay-rule", Static).update(
            f"{smoothing.rule}"
            + (f"\nno finite loss logged: {', '.join(empty)}" if empty else "")
            + f"\ns: next smoothing ({' → '.join(p.label for p in PRESETS)}) · Esc: back")
