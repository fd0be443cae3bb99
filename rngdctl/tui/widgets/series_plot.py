"""A line plot of one run series (loss or step time), already downsampled."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from rngdctl.tui.data import Series


def points_note(series: Series) -> str:
    """How many points stand behind the plot: '130 steps', or '100,000→240 pts' when
    downsampled (each bucket's minimum and maximum)."""
    if series.points > len(series.x):
        return f"{series.points:,}→{len(series.x)} pts"
    return f"{series.points:,} steps"


class SeriesPlot(PlotextPlot):
    """Plots a Series; an optional horizontal line marks the model's prediction."""

    def show(self, title: str, series: Series, *, line: float | None = None) -> None:
        key = (title, series, line)
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
        self.refresh()
