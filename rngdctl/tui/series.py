"""Plot series for the TUI: downsampled as a pass grows, and a run's whole loss curve.

``MinMaxBuckets`` keeps each bucket's minimum and maximum, so a plot has a
bounded number of points and every spike survives; ``PassSeries`` feeds it only
the steps each refresh adds, ``HeldOutSeries`` only the held-out losses (eval
records) each refresh adds; ``overlay_series`` smooths a whole loss curve
(``rngdctl.tui.smoothing``) and then downsamples it for the history's overlay.
No Textual here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from daemon.run.plots import PLOT_BUCKETS, MinMaxBuckets, PassPlots, Series

__all__ = ["PLOT_BUCKETS", "HeldOutSeries", "LossCurve", "MinMaxBuckets", "PassSeries", "Series",
           "overlay_series"]


@dataclass(frozen=True)
class LossCurve:
    """A run's main-pass losses, every finite one in step order: what the overlay smooths."""

    run_id: int
    label: str
    steps: tuple[int, ...] = ()
    losses: tuple[float, ...] = ()


# === Downsampling ============================================================
# The min/max buckets and a pass's two plots live in daemon/run/plots.py: the daemon
# seals a finished run's plots with them (stats.seal), so they are the same code.


class PassSeries(PassPlots):
    """One pass's steps as read so far; each refresh adds only the new ones.

    Keeps what the panels need and nothing that grows per refresh: the last
    step and the two plots' min/max buckets. A pass whose plots the store
    kept (sealed when the run ended, or kept at ingest while it runs) starts
    from them (``restore``). The medians over steps 6-N (over warm-up steps
    while the run has no others) are the store's aggregates, whatever the
    pass's length (``stats.steady_medians``, set by the caller).
    """

    def __init__(self, buckets: int = PLOT_BUCKETS):
        super().__init__(buckets)
        self.restored = False  # the plots came from the store, not from reading the steps
        self.medians: tuple[float | None, float | None] = (None, None)

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.restored = True


class HeldOutSeries:
    """One pass's held-out losses as read so far; each refresh reads only the evals stored
    after the newest it has (one indexed query, most often empty)."""

    def __init__(self, buckets: int = PLOT_BUCKETS):
        self.last = -1  # the newest eval's step (0: the one before any step)
        self.last_loss: float | None = None
        self.plot = MinMaxBuckets(buckets)

    def read(self, store, run_id: int, label: str) -> int:
        """Add the pass's evals after the newest one read; how many were new."""
        rows = store.eval_series(run_id, label, after_step=self.last)
        finite = [(step, loss) for step, loss in rows if loss is not None and math.isfinite(loss)]
        self.plot.extend([x for x, _ in finite], [y for _, y in finite])
        if rows:
            self.last, self.last_loss = rows[-1]
        return len(rows)


def overlay_series(curve: LossCurve, smoothing, buckets: int = 2 * PLOT_BUCKETS) -> Series:
    """``curve`` smoothed over every logged loss, then downsampled for the plot (smoothing
    after downsampling would average the buckets' extremes, not the losses)."""
    plot = MinMaxBuckets(buckets)
    for step, y in zip(curve.steps, smoothing.apply(curve.losses)):
        plot.append(step, y)
    return plot.series()
