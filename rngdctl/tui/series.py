"""Plot series for the TUI: downsampled as a pass grows, and a run's whole loss curve.

``MinMaxBuckets`` keeps each bucket's minimum and maximum, so a plot has a
bounded number of points and every spike survives; ``PassSeries`` feeds it
(and the running medians) only the steps each refresh adds; ``overlay_series``
smooths a whole loss curve (``rngdctl.tui.smoothing``) and then downsamples it
for the history's overlay. No Textual here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from daemon import stats

#: Plot buckets: each keeps its minimum and maximum, so at most twice this many points.
PLOT_BUCKETS = 100


@dataclass(frozen=True)
class Series:
    """A plot's points after downsampling, and how many raw points stand behind them."""

    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    points: int = 0


@dataclass(frozen=True)
class LossCurve:
    """A run's main-pass losses, every finite one in step order: what the overlay smooths."""

    run_id: int
    label: str
    steps: tuple[int, ...] = ()
    losses: tuple[float, ...] = ()


# === Downsampling ============================================================


class MinMaxBuckets:
    """A series downsampled as it grows: each bucket keeps its minimum and maximum.

    Buckets cover ``width`` consecutive points; when there are more than
    ``limit`` of them (``2 * limit`` single points at first), neighbours merge
    in pairs and ``width`` doubles. So a
    point is appended in constant time (amortised), a plot never has more
    than ``2 * limit`` points, and a spike survives however long the run,
    which an average or a stride would hide.
    """

    def __init__(self, limit: int = PLOT_BUCKETS):
        self.limit = limit
        self.width = 1
        self.count = 0
        self._buckets: list[list] = []  # [points, (x, y) of the min, (x, y) of the max]

    def append(self, x: float, y: float) -> None:
        self.count += 1
        if self._buckets and self._buckets[-1][0] < self.width:
            bucket = self._buckets[-1]
            bucket[0] += 1
            if y < bucket[1][1]:
                bucket[1] = (x, y)
            if y > bucket[2][1]:
                bucket[2] = (x, y)
            return
        self._buckets.append([1, (x, y), (x, y)])
        # Single points: up to 2 * limit of them are plotted as they are.
        if len(self._buckets) > (2 * self.limit if self.width == 1 else self.limit):
            self._merge()

    def _merge(self) -> None:
        merged = []
        for i in range(0, len(self._buckets), 2):
            pair = self._buckets[i:i + 2]
            merged.append([sum(b[0] for b in pair),
                           min((b[1] for b in pair), key=lambda p: p[1]),
                           max((b[2] for b in pair), key=lambda p: p[1])])
        self._buckets = merged
        self.width *= 2

    def series(self) -> Series:
        xs: list[float] = []
        ys: list[float] = []
        for _n, low, high in self._buckets:
            for x, y in sorted({low, high}):
                xs.append(x)
                ys.append(y)
        return Series(tuple(xs), tuple(ys), self.count)


class PassSeries:
    """One pass's steps as read so far; each refresh adds only the new ones.

    Keeps what the panels need and nothing that grows per refresh: the last
    step, running medians over steps 6-N (and over warm-up steps while the
    run has no others), and the two plots' min/max buckets.
    """

    def __init__(self, buckets: int = PLOT_BUCKETS):
        self.last = 0  # the newest step number
        self.count = 0
        self.last_loss: float | None = None
        self.loss_plot = MinMaxBuckets(buckets)
        self.time_plot = MinMaxBuckets(buckets)  # steps 6-N only, as the medians
        self._medians = stats.SteadyMedians()

    def extend(self, rows: list[tuple]) -> None:
        for step, loss, step_s, _tokens, _t in rows:
            if loss is not None and math.isfinite(loss):
                self.loss_plot.append(step, loss)
            if step > stats.WARMUP_STEPS:
                self.time_plot.append(step, step_s)
        if rows:
            self.last, self.last_loss = rows[-1][0], rows[-1][1]
            self.count += len(rows)
            self._medians.add([(step, step_s, tokens) for step, _, step_s, tokens, _ in rows])

    def medians(self) -> tuple[float | None, float | None]:
        """Median step time and tok/s over steps 6-N (all steps while there are no others)."""
        return self._medians.medians()


def overlay_series(curve: LossCurve, smoothing, buckets: int = 2 * PLOT_BUCKETS) -> Series:
    """``curve`` smoothed over every logged loss, then downsampled for the plot (smoothing
    after downsampling would average the buckets' extremes, not the losses)."""
    plot = MinMaxBuckets(buckets)
    for step, y in zip(curve.steps, smoothing.apply(curve.losses)):
        plot.append(step, y)
    return plot.series()
