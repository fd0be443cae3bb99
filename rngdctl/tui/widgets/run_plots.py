"""The loss and step-time plots of one run (the current-run panel and the detail screen)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal

from rngdctl.tui.data import RunView
from rngdctl.tui.widgets.series_plot import series_plot


class RunPlots(Horizontal):
    """The loss and step-time plots of one run, side by side."""

    def compose(self) -> ComposeResult:
        yield series_plot("loss-plot")
        yield series_plot("step-plot")

    def show(self, view: RunView) -> None:
        loss, step = self.children
        held_out = " ● held-out" if view.held_out.points else ""
        loss.show(f"loss{held_out}", view.loss, second=view.held_out)
        model = " · model ─" if view.model_s is not None else ""
        step.show(f"step s{model}", view.step_time, line=view.model_s)
