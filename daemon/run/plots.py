"""A pass's plot series, downsampled as it grows: the TUI's loss and step-time plots.

``MinMaxBuckets`` keeps each bucket's minimum and maximum, so a plot has a
bounded number of points whatever the run's length and a spike survives.
``PassPlots`` feeds both plots from ``Store.step_series`` rows. Ingest keeps
each pass's plots as its steps arrive (``keep_plots``), and a finished run's
are sealed when it ends (``stats.seal`` stores ``PassPlots.state()``), so the
TUI's first read of a 1,000,000-step run, running or ended, is one row and the
steps stored since, not a million.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The step-time plot starts where the medians do, at the store's first steady step (6, after
# the five warm-up steps of stats.WARMUP_STEPS): taken from the store, not from daemon.stepmodel.stats,
# whose seal stores these plots, so the import points one way.
from daemon.store import STEADY_FIRST

#: Plot buckets: each keeps its minimum and maximum, so at most twice this many points.
PLOT_BUCKETS = 100
#: Steps read per query when a pass is first read (the rest follow in further chunks).
SERIES_CHUNK = 20_000
#: Ingest keeps a pass's plots again once this many steps were stored since they were
#: kept: a reader's first look reads at most about this many steps past them, and
#: ingest does not pay a read, a decode and a write of the plots every batch.
KEEP_PLOTS_EVERY = 2_000


@dataclass(frozen=True)
class Series:
    """A plot's points after downsampling, and how many raw points stand behind them."""

    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    points: int = 0


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

    def extend(self, xs: list, ys: list) -> None:
        """``append`` each point in order; the points that fill the newest bucket's room
        are taken at once (C's min, max and index: the first of equals, as ``append``)."""
        i, n = 0, len(xs)
        while i < n:
            bucket = self._buckets[-1] if self._buckets else None
            room = self.width - bucket[0] if bucket is not None else 0
            if room <= 1:  # a new bucket opens (and buckets may merge): one point
                self.append(xs[i], ys[i])
                i += 1
                continue
            j = min(n, i + room)
            part = ys[i:j]
            low, high = min(part), max(part)
            if low < bucket[1][1]:
                bucket[1] = (xs[i + part.index(low)], low)
            if high > bucket[2][1]:
                bucket[2] = (xs[i + part.index(high)], high)
            bucket[0] += j - i
            self.count += j - i
            i = j

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

    def state(self) -> dict:
        """Everything it holds, as JSON data (``from_state`` gives it back)."""
        return {"limit": self.limit, "width": self.width, "count": self.count,
                "buckets": self._buckets}

    @classmethod
    def from_state(cls, state: dict) -> MinMaxBuckets:
        out = cls(state["limit"])
        out.width, out.count = state["width"], state["count"]
        out._buckets = [[n, tuple(low), tuple(high)] for n, low, high in state["buckets"]]
        return out


class PassPlots:
    """One pass's two plots as read so far: finite losses, and step times of steps 6-N."""

    def __init__(self, buckets: int = PLOT_BUCKETS):
        self.last = 0  # the newest step number
        self.count = 0
        self.last_loss: float | None = None
        self.loss_plot = MinMaxBuckets(buckets)
        self.time_plot = MinMaxBuckets(buckets)  # steps 6-N only, as the medians

    def extend(self, rows: list[tuple]) -> None:
        """Add ``Store.step_series`` rows, in step order, after those already added."""
        finite = [(step, loss) for step, loss, _, _, _ in rows
                  if loss is not None and math.isfinite(loss)]
        self.loss_plot.extend([x for x, _ in finite], [y for _, y in finite])
        timed = [(step, step_s) for step, _, step_s, _, _ in rows if step >= STEADY_FIRST]
        self.time_plot.extend([x for x, _ in timed], [y for _, y in timed])
        if rows:
            self.last, self.last_loss = rows[-1][0], rows[-1][1]
            self.count += len(rows)

    def read(self, store, run_id: int, label: str) -> int:
        """Add the pass's steps after the last one added, in chunks (a long run's first read
        stays small in memory); how many were new."""
        new = 0
        while True:
            rows = store.step_series(run_id, label, after_step=self.last, limit=SERIES_CHUNK)
            self.extend(rows)
            new += len(rows)
            if len(rows) < SERIES_CHUNK:
                return new

    def state(self) -> dict:
        return {"last": self.last, "count": self.count, "last_loss": self.last_loss,
                "loss": self.loss_plot.state(), "time": self.time_plot.state()}

    def restore(self, state: dict) -> None:
        """Take the plots ``state`` gave (over the same buckets)."""
        self.last, self.count, self.last_loss = state["last"], state["count"], state["last_loss"]
        self.loss_plot = MinMaxBuckets.from_state(state["loss"])
        self.time_plot = MinMaxBuckets.from_state(state["time"])


def pass_plots(store, run_id: int, label: str, buckets: int = PLOT_BUCKETS) -> PassPlots:
    """The pass's plots over all its stored steps: the plots ingest kept (``keep_plots``)
    and the steps stored after them, or every step where none were kept."""
    plots = kept_plots(store, run_id, label, buckets)
    plots.read(store, run_id, label)
    if plots.count != store.step_counts(run_id).get(label, 0):
        # A step stored out of order, before the newest the plots held: they never
        # saw it (they read on from their newest). Read the pass whole.
        plots = PassPlots(buckets)
        plots.read(store, run_id, label)
    return plots


def kept_plots(store, run_id: int, label: str, buckets: int = PLOT_BUCKETS) -> PassPlots:
    """The plots ``keep_plots`` stored for the pass, as they were then; empty ones where
    none were kept (or for other buckets, or by an older rngdctl)."""
    plots = PassPlots(buckets)
    kept = store.pass_state(run_id, label, "plots")
    try:
        if kept is not None and kept[1]["loss"]["limit"] == buckets:
            plots.restore(kept[1])
    except (KeyError, TypeError, ValueError):
        plots = PassPlots(buckets)
    return plots


def keep_plots(store, run_id: int, labels, *, every: int = 0) -> None:
    """Bring the passes' kept plots up to their newest steps and store them (ingest, after
    new steps, with ``every=KEEP_PLOTS_EVERY``): a reader's first look at a running pass
    restores them and reads only the steps stored since, not the whole pass. A pass
    whose plots were kept fewer than ``every`` steps ago is left as it is."""
    counts = store.step_counts(run_id) if every else {}
    for label in labels:
        if every and counts.get(label, 0) - (store.pass_state_steps(run_id, label, "plots")
                                             or 0) < every:
            continue
        plots = pass_plots(store, run_id, label)
        store.set_pass_state(run_id, label, "plots", plots.state(), steps=plots.count)
