"""The plots keep their last plotext build while only the title's step count changes
(issue 27's frame time): what they show must be what a fresh build shows."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.app import App, ComposeResult
from textual.containers import Horizontal

from rngdctl.tui.series import Series
from rngdctl.tui.widgets.series_plot import SeriesPlot


class TwoPlots(App):
    """Two plots of one size side by side: ``kept`` shows one series after another,
    ``fresh`` only the last one."""

    CSS = "SeriesPlot { width: 1fr; height: 1fr; }"

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield SeriesPlot(id="kept")
            yield SeriesPlot(id="fresh")


def halves(app: App) -> tuple[list[str], list[str]]:
    """The screen as text (styles included, as ANSI), split at its middle column."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      color_system="truecolor", force_terminal=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    text = console.export_text(styles=False).splitlines()
    return [line[:width // 2] for line in text], [line[width // 2:] for line in text]


def series(points: int, shift: float = 0.0) -> Series:
    """20 min/max points standing for ``points`` steps (the title: '100,001→20 pts')."""
    xs = tuple(float(50 * i) for i in range(20))
    return Series(xs, tuple(1.0 + shift + (i % 7) / 10 for i in range(20)), points)


@pytest.mark.parametrize("width", [160, 68])  # 80 columns a plot: the title fits; 34: no room
async def test_a_plot_whose_steps_changed_but_no_point_shows_what_a_fresh_build_shows(width):
    app = TwoPlots()
    async with app.run_test(size=(width, 12)) as pilot:
        kept, fresh = app.query_one("#kept", SeriesPlot), app.query_one("#fresh", SeriesPlot)
        title = "loss ● held-out"
        kept.show(title, series(100_000), line=1.2)
        await pilot.pause()
        for points in (100_001, 100_002):  # the count in the title changes, not its length
            kept.show(title, series(points), line=1.2)
            fresh.show(title, series(points), line=1.2)
            await pilot.pause()
            left, right = halves(app)

            assert left == right
            assert kept.render() == fresh.render()  # the same text in the same colours
            assert (f"{points:,}→20 pts" in "\n".join(left)) == (width == 160)
        kept.show(title, series(100_002, shift=0.5), line=1.2)  # a point moved: built anew
        fresh.show(title, series(100_002, shift=0.5), line=1.2)
        await pilot.pause()

        assert halves(app)[0] == halves(app)[1]
        assert kept.render() == fresh.render()
