"""A line plot of one run series (loss or step time), already downsampled.

Two widgets draw it: ``SeriesPlot`` (textual-plotext, the one the app uses)
and ``NativeSeriesPlot`` (textual-plot, a native Textual widget), measured
against each other by bench/tui_frame_time.py (docs/performance.md, "TUI").
``PLOT`` names the one ``series_plot()`` makes. textual-plotext measured faster at
the p95 and needs no snapshot change, so the app keeps it; textual-plot is not
a dependency (the ``bench`` extra installs it to measure it).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from rngdctl.tui.series import Series

#: "plotext" (textual-plotext) or "textual-plot"; the benchmark sets it per measurement.
PLOT = "plotext"
#: The second series' colour (the held-out loss on the loss plot); the first is cyan.
HELD_OUT_COLOR = "magenta"


def points_note(series: Series) -> str:
    """How many points stand behind the plot: '130 steps', or '100,000→240 pts' when
    downsampled (each bucket's minimum and maximum)."""
    if series.points > len(series.x):
        return f"{series.points:,}→{len(series.x)} pts"
    return f"{series.points:,} steps"


class SeriesPlot(PlotextPlot):
    """Plots a Series; an optional horizontal line marks the model's prediction, and an
    optional second series (the held-out loss) is drawn over it as points."""

    def show(self, title: str, series: Series, *, line: float | None = None,
             second: Series | None = None) -> None:
        key = (title, series, line, second)
        if key == getattr(self, "_shown", None):
            return  # plotext is the costliest part of a frame: only redraw on new data
        self._shown = key
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(f"{title} · {points_note(series)}")
        if series.x:
            plt.plot(list(series.x), list(series.y), marker="hd", color="cyan")
            if line is not None:
                plt.hline(line, color="orange")
        if second is not None and second.x:
            plt.scatter(list(second.x), list(second.y), marker="●", color=HELD_OUT_COLOR)
        self.refresh()


class NativeSeriesPlot(Vertical):
    """The same plot drawn by textual-plot: a title line over a PlotWidget."""

    DEFAULT_CSS = """
    NativeSeriesPlot > Static { height: 1; text-align: center; }
    NativeSeriesPlot > PlotWidget { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        from textual_plot import PlotWidget

        yield Static()
        yield PlotWidget(allow_pan_and_zoom=False)

    def show(self, title: str, series: Series, *, line: float | None = None,
             second: Series | None = None) -> None:
        from textual_plot import HiResMode, PlotWidget

        key = (title, series, line, second)
        if key == getattr(self, "_shown", None):
            return
        self._shown = key
        self.query_one(Static).update(f"{title} · {points_note(series)}")
        plot = self.query_one(PlotWidget)
        plot.clear()
        if series.x:
            plot.plot(series.x, series.y, line_style="cyan", hires_mode=HiResMode.BRAILLE)
            if line is not None:
                plot.plot([series.x[0], series.x[-1]], [line, line], line_style="dark_orange")
        if second is not None and second.x:
            plot.scatter(second.x, second.y, marker="●", marker_style=HELD_OUT_COLOR)


def series_plot(classes: str):
    """The plot widget ``PLOT`` names."""
    return NativeSeriesPlot(classes=classes) if PLOT == "textual-plot" else \
        SeriesPlot(classes=classes)
