"""A line plot of one run series (loss or step time), already downsampled.

Two widgets draw it: ``SeriesPlot`` (textual-plotext, the one the app uses)
and ``NativeSeriesPlot`` (textual-plot, a native Textual widget), measured
against each other by bench/tui_frame_time.py (docs/performance.md, "TUI").
``PLOT`` names the one ``series_plot()`` makes. textual-plotext measured faster at
the p95 and needs no snapshot change, so the app keeps it; textual-plot is not
a dependency (the ``bench`` extra installs it to measure it).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult, RenderResult
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
    optional second series (the held-out loss) is drawn over it as points.

    plotext is the costliest part of a frame, and on most refreshes only the title
    changes (its step count: one more step), not a point: the last build is kept, and a
    title of the same length is put in its place (plotext places a title by its length
    alone) or, where plotext had no room to draw it, changes nothing and is not drawn
    again. Any other change builds the plot anew."""

    _shown = None
    _plotted = None  # what plotext draws besides the title: the points and the line
    _title = ""
    #: The last build: (what was plotted, size, plotext theme, its title, its ANSI text).
    _built: tuple | None = None

    def show(self, title: str, series: Series, *, line: float | None = None,
             second: Series | None = None) -> None:
        key = (title, series, line, second)
        if key == self._shown:
            return
        self._shown = key
        self._title = f"{title} · {points_note(series)}"
        plotted = (series.x, series.y, line, (second.x, second.y) if second else None)
        if plotted == self._plotted:
            self.plt.title(self._title)  # for the next full build
            if self._retitled() == (self._built[4] if self._built else None):
                return  # the title has no room in the plot: nothing on screen changes
            self.refresh()
            return
        self._plotted = plotted
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self._title)
        if series.x:
            plt.plot(list(series.x), list(series.y), marker="hd", color="cyan")
            if line is not None:
                plt.hline(line, color="orange")
        if second is not None and second.x:
            plt.scatter(list(second.x), list(second.y), marker="●", color=HELD_OUT_COLOR)
        self.refresh()

    def _retitled(self) -> str | None:
        """The last build with the current title in place of its own, where only the title
        changed since and has the same length (None otherwise). plotext draws the title in
        one run of one colour on its own row, where it fits, so it is found once or not at
        all (no room: the build is the same)."""
        if self._built is None:
            return None
        plotted, size, theme, title, ansi = self._built
        if (plotted != self._plotted or size != tuple(self.size)
                or theme != self._get_plotext_theme_name(self.app.theme)
                or len(title) != len(self._title)):
            return None
        found = ansi.count(title)
        if found > 1:
            return None
        return ansi.replace(title, self._title) if found else ansi

    def render(self) -> RenderResult:
        ansi = self._retitled()
        if ansi is None:
            # textual-plotext's own render (PlotextPlot.render), keeping the ANSI text.
            self._plot.plotsize(self.size.width, self.size.height)
            self._plot._set_size(self.size.width, self.size.height)
            self._plot.theme(self._get_plotext_theme_name(self.app.theme))
            ansi = self._plot.build()
        self._built = (self._plotted, tuple(self.size),
                       self._get_plotext_theme_name(self.app.theme), self._title, ansi)
        return Text.from_ansi(ansi)


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
